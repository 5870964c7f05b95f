"""A run's blocking failures against the state of main (its trunk state for the run's SKU): the
classes (trunk/judgement.py decides each), what main fails that passes here, whether the trunk state
may be used at all (`stale`), and the commit the code that ran is based on (`code_base`).

The base of the code that ran: a merge commit (`pull_request`: tested differs from the head) was
made on the base SHA; a run of the head itself (a dispatch naming the PR's head) ran on the merge
base of head and main.

A test that also fails on the CUDA reference of the run's parity report is marked, whatever its
class.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pytest_rocm.results.fingerprint import of_test as fingerprint_of
from pytest_rocm.schemas.artifacts import blocking_failures
from pytest_rocm.trunk.judgement import FIXED, NEW, failure_class, moment, passing_class, place

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
    made = moment(trunk.get("generated"))
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


@dataclass
class Attribution:
    classes: dict[str, str] = field(default_factory=dict)  # blocking failure -> class
    reasons: dict[str, str] = field(default_factory=dict)  # blocking failure -> why, in words
    fixed: list[str] = field(
        default_factory=list
    )  # main fails it, this run's code has the break, it passes
    not_fixed: dict[str, str] = field(
        default_factory=dict
    )  # main fails it, passes here: why not fixed
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
    tests: dict[str, dict],
    provenance: dict,
    trunk: dict,
    parity: dict | None = None,
    base_date: dt.datetime | None = None,
) -> Attribution:
    """Class every blocking failure of a run (`tests`: its gate report's tests) against `trunk`.
    `base_date`: when the base commit was made (GitHub's), which places a base the trunk state's
    commit list does not hold."""
    commits = list(trunk.get("commits") or [])
    base = place(code_base(provenance or {}), commits, base_date)
    out = Attribution(base=base.sha)
    trunk_tests = trunk.get("tests") or {}
    for name in blocking_failures(tests):
        out.classes[name], out.reasons[name] = failure_class(
            fingerprint_of(tests[name]),
            trunk_tests.get(name),
            base,
            commits,
            tests[name].get("quarantine"),
        )
    for name, entry in trunk_tests.items():
        if entry["state"] == "failing" and name in tests and tests[name]["verdict"] == "pass":
            kind, why = passing_class(entry, base, commits)
            if kind == FIXED:
                out.fixed.append(name)
            else:
                out.not_fixed[name] = why
    reference = (parity or {}).get("tests") or {}
    out.on_cuda_too = {
        n
        for n in out.classes
        if isinstance(reference.get(n), dict)
        and reference[n].get("reference") not in (None, "passed")
    }
    if base.sha is None:
        out.note = "the run names no base commit: a failure main already has counts as pre-existing only by its fingerprint"
    return out
