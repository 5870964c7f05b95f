"""Quarantine with a lifecycle: main failures left red too long stop blocking, and come back by
themselves.

The quarantine file (`pytest-rocm/quarantine/1`, JSON, kept on the default branch) lists tests per
SKU. The plugin reads it at run start (`--rocm-quarantine FILE`): a listed test still runs on that
SKU, never blocks, and its report entry and the check say it is quarantined and why.
`rocm-gate history quarantine` keeps the file:

- a test failing on main (trunk/state.py) for at least AFTER hours on the SKU is added, with the commit it has
  failed since and its fingerprints;
- an entry is lifted once the test's newest LIFT_AFTER main runs on the SKU all passed it, or once main no
  longer runs it (the trunk state says `gone`: renamed, moved or deleted; a moved test's new id is
  added by the same rule as any other);
- everything else is kept as it was (a run that did not run the test neither adds nor lifts it).

Entries without a SKU apply on every SKU (a person may add one by hand; the command never lifts
those).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pytest_rocm.schemas.artifacts import schema
from rocm_gate.history import queries
from rocm_gate.history.backends import Connection

QUARANTINE_SCHEMA = schema("quarantine")
AFTER_HOURS = 72.0
LIFT_AFTER = 3


def empty() -> dict:
    return {"schema": QUARANTINE_SCHEMA, "updated": None, "tests": []}


def _green_streak(conn: Connection, test: str, sku: str, count: int) -> bool:
    """Whether the test's newest `count` informative main runs on the SKU all passed it."""
    verdicts = queries.newest_main_verdicts(conn, test, sku, count)
    return len(verdicts) == count and all(v == "pass" for v in verdicts)


def update(
    conn: Connection,
    document: dict,
    trunk: dict,
    after_hours: float = AFTER_HOURS,
    lift_after: int = LIFT_AFTER,
    now: str | None = None,
) -> tuple[dict, list[str], list[str]]:
    """(the new document, tests added, tests lifted) for the trunk state's SKU."""
    sku = trunk["sku"]
    now = now or datetime.now(UTC).isoformat(timespec="seconds")
    kept, lifted = [], []
    gone = {name for name, state in trunk["tests"].items() if state["state"] == "gone"}
    for entry in document["tests"]:
        if entry.get("sku") == sku and (
            entry["test"] in gone or _green_streak(conn, entry["test"], sku, lift_after)
        ):
            lifted.append(entry["test"])
        else:
            kept.append(entry)
    listed = {(e["test"], e.get("sku")) for e in kept}
    added = []
    for name, state in trunk["tests"].items():
        red = state.get("red_seconds")
        if (
            state["state"] != "failing"
            or red is None
            or red < after_hours * 3600
            or (name, sku) in listed
        ):
            continue
        since = state["since"]["sha"]
        kept.append(
            {
                "test": name,
                "sku": sku,
                "since": since,
                "quarantined": now,
                "fingerprints": state["fingerprints"][:5],
                "reason": f"red on main ({sku}) for {red / 3600:.1f} h since {since[:12]}, past {after_hours:g} h; "
                f"lifted after {lift_after} green main runs",
            }
        )
        added.append(name)
    kept.sort(key=lambda e: (e["test"], e.get("sku") or ""))
    return (
        {
            "schema": QUARANTINE_SCHEMA,
            "updated": now,
            "after_hours": after_hours,
            "lift_after": lift_after,
            "tests": kept,
        },
        added,
        lifted,
    )
