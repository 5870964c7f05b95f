"""The questions asked of history, one function each, over portable SQL (PostgreSQL runs the same statements
with `%s` for `?`). Runs are ordered by start time, then by the order they were added.

- `suspects`: infrastructure faults that keep coming back. A test whose failures are `infra` in at least
  INFRA_MIN of its last WINDOW runs is a suspected real bug when those faults happened on two or more runners
  or devices (an intermittent software fault, like an HSA exception that follows the test); when they all
  happened on one runner, or one device of it, the machine is the suspect (a drain candidate).
- `flaky`: tests whose `flaky` verdicts, or whose pass rate between 0.2 and 0.8 (vLLM's AMD dashboard rule),
  in their last WINDOW runs make them unstable; with first and last seen, and tests that stopped being flaky
  (no flake in their last STABLE_AFTER runs).
- `known_gaps`: per gap, its issue, first seen and age; "ready to close" when its latest run passed.
- `accepted_stacks`: per SKU, the runs that concluded `success` and were complete, and what changed between
  consecutive ones.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

WINDOW = 10
INFRA_MIN = 3
STABLE_AFTER = 10
FAILED = ("regression", "unconfirmed", "infra", "flaky")
STACK_FIELDS = ("rocm", "driver", "torch", "framework", "image")


def _order(alias: str = "", newest_first: bool = False) -> str:
    """ORDER BY terms for runs: start time, then the order they were added."""
    way = " DESC" if newest_first else ""
    return f"COALESCE({alias}started, ''){way}, {alias}id{way}"


def runs(conn: sqlite3.Connection, limit: int | None = None) -> list[dict]:
    """The newest runs first: id, time, SKU, runner, commit, conclusion, run time in seconds."""
    sql = (f"SELECT id, started, finished, vendor, sku, runner, git_sha, conclusion, complete FROM runs "
           f"ORDER BY {_order(newest_first=True)}")
    rows = conn.execute(sql + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
    out = []
    for r in rows:
        out.append({"id": r[0], "started": r[1], "finished": r[2], "vendor": r[3], "sku": r[4], "runner": r[5],
                    "git_sha": r[6], "conclusion": r[7], "complete": bool(r[8]), "seconds": _seconds(r[1], r[2])})
    return out


def _seconds(started: str | None, finished: str | None) -> float | None:
    from datetime import datetime

    try:
        return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    except (TypeError, ValueError):
        return None


def _history_by_test(conn, tests: set[str] | None = None) -> dict[str, list[tuple]]:
    """test -> its results oldest first: (run id, verdict, status, runner, devices, started)."""
    names = dict(conn.execute("SELECT id, name FROM tests"))
    wanted = [i for i, n in names.items() if tests is None or n in tests]
    found: dict[str, list[tuple]] = defaultdict(list)
    for chunk in range(0, len(wanted), 500):  # bounded IN lists, for any engine
        ids = wanted[chunk:chunk + 500]
        sql = ("SELECT r.test_id, r.run_id, r.verdict, r.status, u.runner, r.devices, u.started FROM results r "
               f"JOIN runs u ON u.id = r.run_id WHERE r.test_id IN ({', '.join('?' for _ in ids)}) "
               f"ORDER BY r.test_id, {_order('u.')}")
        for test_id, *rest in conn.execute(sql, ids):
            found[names[test_id]].append(tuple(rest))
    return found


def _tests_with(conn, verdicts: tuple[str, ...]) -> set[str]:
    marks = ", ".join("?" for _ in verdicts)
    return {row[0] for row in conn.execute(
        f"SELECT DISTINCT t.name FROM results r JOIN tests t ON t.id = r.test_id WHERE r.verdict IN ({marks}) "
        "AND r.verdict <> 'pass'", verdicts)}


def suspects(conn: sqlite3.Connection, window: int = WINDOW, minimum: int = INFRA_MIN) -> list[dict]:
    out = []
    for test, rows in _history_by_test(conn, _tests_with(conn, ("infra",))).items():
        last = rows[-window:]
        infra = [r for r in last if r[1] == "infra"]
        if len(infra) < minimum:
            continue
        runners = sorted({r[3] or "unknown" for r in infra})
        places = sorted({(r[3] or "unknown", r[4] or "") for r in infra})
        if len(runners) >= 2:
            kind = "suspected real bug"
            why = (f"infra in {len(infra)} of its last {len(last)} runs, on {len(runners)} runners "
                   f"({', '.join(runners)}): the fault follows the test, not a machine")
        else:
            devices = sorted({p[1] for p in places})
            where = runners[0] + (f" device(s) {devices[0]}" if len(devices) == 1 and devices[0] else "")
            kind = "drain candidate"
            why = f"infra in {len(infra)} of its last {len(last)} runs, all on {where}: the machine is the suspect"
        out.append({"test": test, "kind": kind, "reason": why, "infra_runs": len(infra), "window": len(last),
                    "runners": runners, "last_seen": infra[-1][5]})
    return sorted(out, key=lambda s: (s["kind"] != "suspected real bug", -s["infra_runs"], s["test"]))


def flaky(conn: sqlite3.Connection, window: int = WINDOW, stable_after: int = STABLE_AFTER) -> dict[str, list[dict]]:
    """{"flaky": [...], "stopped": [...]}: unstable now, and tests that were flaky and have been stable since."""
    now, stopped = [], []
    candidates = _tests_with(conn, ("flaky", "regression", "unconfirmed"))
    for test, rows in _history_by_test(conn, candidates).items():
        ran = [r for r in rows if r[1] in ("pass",) + FAILED]
        if not ran:
            continue
        last = ran[-window:]
        flakes = [r for r in ran if r[1] == "flaky"]
        passed = sum(r[1] == "pass" for r in last) / len(last)
        unstable = any(r[1] == "flaky" for r in last) or (len(last) >= 5 and 0.2 <= passed <= 0.8)
        entry = {"test": test, "runs": len(last), "flaky_runs": sum(r[1] == "flaky" for r in last),
                 "pass_rate": round(passed, 3), "first_seen": flakes[0][5] if flakes else None,
                 "last_seen": flakes[-1][5] if flakes else None}
        if unstable:
            now.append(entry)
        elif flakes and all(r[1] == "pass" for r in ran[-stable_after:]) and len(ran) - ran.index(flakes[-1]) > stable_after:
            stopped.append(entry)
    key = (lambda e: (-e["flaky_runs"], e["pass_rate"], e["test"]))
    return {"flaky": sorted(now, key=key), "stopped": sorted(stopped, key=lambda e: e["test"])}


def known_gaps(conn: sqlite3.Connection) -> list[dict]:
    rows = conn.execute(
        "SELECT t.name, r.gap_issue, r.gap_reason, MIN(u.started), MAX(u.started), COUNT(*) FROM results r "
        "JOIN runs u ON u.id = r.run_id JOIN tests t ON t.id = r.test_id "
        "WHERE r.verdict <> 'pass' AND r.gap_issue IS NOT NULL GROUP BY t.name, r.gap_issue, r.gap_reason "
        "ORDER BY MIN(u.started), t.name").fetchall()
    latest = {test: rows_[-1] for test, rows_ in _history_by_test(conn, {r[0] for r in rows}).items()}
    out = []
    for test, issue, reason, first, last, count in rows:
        newest = latest.get(test)
        ready = bool(newest) and newest[2] in ("passed", "xpassed")
        out.append({"test": test, "issue": issue, "reason": reason, "first_seen": first, "last_seen": last,
                    "runs": count, "age_days": _days(first, last), "ready_to_close": ready})
    return out


def _days(first: str | None, last: str | None) -> float | None:
    seconds = _seconds(first, last)
    return round(seconds / 86400, 1) if seconds is not None else None


def accepted_stacks(conn: sqlite3.Connection) -> dict[str, list[dict]]:
    """SKU -> its accepted runs oldest first, each with the stack and `changed` (field: (before, after))."""
    out: dict[str, list[dict]] = defaultdict(list)
    sql = (f"SELECT id, sku, started, git_sha, {', '.join(STACK_FIELDS)} FROM runs "
           f"WHERE conclusion = 'success' AND complete = 1 ORDER BY sku, {_order()}")
    for row in conn.execute(sql):
        run_id, sku, started, sha, *values = row
        stack = dict(zip(STACK_FIELDS, values))
        previous = out[sku][-1]["stack"] if out[sku] else None
        changed = {k: (previous[k], v) for k, v in stack.items() if previous is not None and previous[k] != v}
        out[sku].append({"run": run_id, "started": started, "git_sha": sha, "stack": stack, "changed": changed})
    return dict(out)


def drift(conn: sqlite3.Connection) -> list[dict]:
    """Runs whose stack differs from their SKU's last accepted stack before them (what changed, and how it ended)."""
    accepted = accepted_stacks(conn)
    out = []
    sql = f"SELECT id, sku, started, conclusion, {', '.join(STACK_FIELDS)} FROM runs ORDER BY {_order()}"
    for run_id, sku, started, conclusion, *values in conn.execute(sql):
        before = [a for a in accepted.get(sku, []) if (a["started"] or "", a["run"]) < (started or "", run_id)]
        if not before:
            continue
        stack = dict(zip(STACK_FIELDS, values))
        changed = {k: (before[-1]["stack"][k], v) for k, v in stack.items() if before[-1]["stack"][k] != v}
        if changed:
            out.append({"run": run_id, "sku": sku, "started": started, "conclusion": conclusion, "changed": changed})
    return out


def parity_trend(conn: sqlite3.Connection) -> list[dict]:
    """Per run with a parity report: SKU, group, parity, both passing / passing on CUDA, merge-blocking."""
    sql = ("SELECT u.id, u.started, u.sku, p.grp, p.parity, p.both_passing, p.reference_passing, p.blocking, p.gaps "
           f"FROM parity p JOIN runs u ON u.id = p.run_id ORDER BY {_order('u.')}, p.grp")
    keys = ("run", "started", "sku", "group", "parity", "both_passing", "reference_passing", "blocking", "gaps")
    return [dict(zip(keys, row)) for row in conn.execute(sql)]


def grid(conn: sqlite3.Connection, limit: int = 30) -> dict:
    """The newest `limit` runs x groups: per cell the worst verdict and the counts, with the failing tests."""
    recent = runs(conn, limit)
    ids = [r["id"] for r in recent]
    cells: dict[tuple[int, str], dict] = {}
    if ids:
        marks = ", ".join("?" for _ in ids)
        for run_id, group, verdict, count in conn.execute(
                f"SELECT r.run_id, COALESCE(t.grp, 'ungrouped'), r.verdict, COUNT(*) FROM results r "
                f"JOIN tests t ON t.id = r.test_id WHERE r.run_id IN ({marks}) "
                "GROUP BY r.run_id, COALESCE(t.grp, 'ungrouped'), r.verdict", ids):
            cell = cells.setdefault((run_id, group), {"counts": {}, "failing": []})
            cell["counts"][verdict] = count
        for run_id, group, test, verdict in conn.execute(
                f"SELECT r.run_id, COALESCE(t.grp, 'ungrouped'), t.name, r.verdict FROM results r "
                f"JOIN tests t ON t.id = r.test_id WHERE r.run_id IN ({marks}) "
                f"AND r.verdict IN ({', '.join('?' for _ in FAILED)}) ORDER BY t.name", [*ids, *FAILED]):
            cells[(run_id, group)]["failing"].append({"test": test, "verdict": verdict})
    for cell in cells.values():
        cell["worst"] = next((v for v in ("regression", "unconfirmed", "infra", "flaky", "pass") if v in cell["counts"]),
                             "other")
    groups = sorted({g for _, g in cells})
    return {"runs": recent, "groups": groups, "cells": cells}
