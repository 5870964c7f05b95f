"""What a PR run's blocking failures mean against the state of main (its trunk state for the run's
SKU).

Each blocking failure (results/conclusion.py: blocking_failures) gets one class:

  new            blocks: main passes the test, or main fails it differently (another fingerprint), or the
                 code that ran does not contain main's failure (the PR's base is at or before the test's last
                 green main commit)
  pre_existing   does not block: main has failed the test the same way since `since`, and the code that ran
                 contains that commit (its base is at or after it), or may (its base is in the suspect range,
                 or newer than the trunk state's commits)
  flaky_on_main  does not block: the test passed and failed on one main commit of this SKU in the window,
                 failing there the way it fails here (the same fingerprint; a flaky test broken another way
                 is new)

The base of the code that ran: a merge commit (`pull_request`: tested differs from the head) was
made on the base SHA; a run of the head itself (a dispatch naming the PR's head) ran on the merge
base of head and main.

Main's failing tests that pass in this run are `fixed` (said in the check, never blocking anything).
A test that also fails on the CUDA reference of the run's parity report is marked, whatever its
class.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pytest_rocm.schemas.artifacts import blocking_failures
from pytest_rocm.trunk.fingerprint import among
from pytest_rocm.trunk.fingerprint import of_test as fingerprint_of

NEW, PRE_EXISTING, FLAKY_ON_MAIN = "new", "pre_existing", "flaky_on_main"
# a trunk state older than this excuses nothing (`publish --trunk-max-age`)
MAX_AGE_HOURS = 48.0


def stale(
    trunk: dict,
    now: dt.datetime,
    base_date: dt.datetime | None,
    max_age_hours: float = MAX_AGE_HOURS,
) -> str | None:
    """Why the trunk state may excuse nothing, or None: knowledge of main has an age. Older than
    `max_age_hours` (main may have been fixed, and broken otherwise, since), made before the
    commit the PR's code is based on (it cannot know main at that commit), or with no time at
    all."""
    made = _when(trunk.get("generated"))
    if made is None:
        return "the trunk state says not when it was made"
    age = (now - made).total_seconds() / 3600
    if age > max_age_hours:
        return f"the trunk state is {age:.0f} h old (made {trunk['generated']}), older than {max_age_hours:g} h"
    if base_date is not None and base_date > made:
        return (
            f"the trunk state was made {trunk['generated']}, before the commit this run's code is "
            f"based on ({base_date.isoformat(timespec='seconds')}): it cannot know main there"
        )
    return None


def _when(text) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@dataclass
class Attribution:
    classes: dict[str, str] = field(default_factory=dict)  # test -> class
    reasons: dict[str, str] = field(default_factory=dict)  # test -> why, in words
    fixed: list[str] = field(default_factory=list)  # main fails it, this run passes it
    on_cuda_too: set[str] = field(default_factory=set)  # fails on the CUDA reference as well
    base: str | None = None
    note: str = ""

    def not_blocking(self) -> list[str]:
        return sorted(n for n, c in self.classes.items() if c != NEW)

    def new(self) -> list[str]:
        return sorted(n for n, c in self.classes.items() if c == NEW)


def code_base(provenance: dict) -> str | None:
    """The main commit the code that ran was built on (see the module docstring)."""
    head, tested = provenance.get("head_sha"), provenance.get("tested_sha")
    if head and tested and head == tested:
        return provenance.get("merge_base") or provenance.get("base_sha")
    return provenance.get("base_sha") or provenance.get("merge_base")


def attribute(
    tests: dict[str, dict], provenance: dict, trunk: dict, parity: dict | None = None
) -> Attribution:
    """Class every blocking failure of a run (`tests`: its gate report's tests) against `trunk`."""
    base = code_base(provenance or {})
    out = Attribution(base=base)
    position = {sha: i for i, sha in enumerate(trunk.get("commits") or [])}
    trunk_tests = trunk.get("tests") or {}
    for name in blocking_failures(tests):
        out.classes[name], out.reasons[name] = _class_of(
            tests[name], trunk_tests.get(name), base, position
        )
    for name, entry in trunk_tests.items():
        if entry["state"] == "failing" and name in tests and tests[name]["verdict"] == "pass":
            out.fixed.append(name)
    reference = (parity or {}).get("tests") or {}
    out.on_cuda_too = {
        n
        for n in out.classes
        if isinstance(reference.get(n), dict)
        and reference[n].get("reference") not in (None, "passed")
    }
    if base is None:
        out.note = "the run names no base commit: a failure main already has counts as pre-existing only by its fingerprint"
    return out


def _class_of(
    test: dict, entry: dict | None, base: str | None, position: dict[str, int]
) -> tuple[str, str]:
    mine = fingerprint_of(test)
    if entry is not None and entry["state"] in ("passing", "flaky") and entry["flaky_count"]:
        if among(mine, entry.get("flaky_fingerprints")):
            last = (entry.get("flaky_commits") or ["unknown"])[-1]
            return FLAKY_ON_MAIN, (
                f"flaky on main, failing the same way: passed and failed on {entry['flaky_count']} "
                f"main commit(s), last {last[:12]}"
            )
        theirs = "; ".join(f or "(no message)" for f in entry.get("flaky_fingerprints", [])[:2])
        return (
            NEW,
            f"flaky on main, but this failure differs: main: {theirs}; here: {mine or '(no message)'}",
        )
    if entry is None or entry["state"] != "failing":
        return NEW, "main passes this test"
    since = entry["since"]["sha"]
    green = (entry.get("last_green") or {}).get("sha")
    if (
        base is not None
        and green in position
        and base in position
        and position[base] <= position[green]
    ):
        return NEW, (
            f"main fails this test since {since[:12]}, but this run's code is based on {base[:12]}, at or "
            f"before main's last green commit {green[:12]}: main's failure is not in the code that ran"
        )
    if not among(mine, entry["fingerprints"]):
        theirs = "; ".join(f or "(no message)" for f in entry["fingerprints"][:2])
        return (
            NEW,
            f"main fails this test since {since[:12]}, but differently: main: {theirs}; here: {mine or '(no message)'}",
        )
    where = (
        "based on it or later"
        if base in position and position[base] >= position.get(since, 1 << 30)
        else "based inside the suspect range"
        if base in position
        else "based on a commit the trunk state does not list (newer than its last main run, or older than "
        "its commit list)"
        if base
        else "no base named"
    )
    return PRE_EXISTING, f"pre-existing on main since {since[:12]}, the same failure ({where})"
