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
from rocm_gate.trunk.judgement import FIXED, NEW, failure_class, moment, passing_class, place

# a trunk state older than this excuses nothing (`publish --trunk-max-age`)
MAX_AGE_HOURS = 48.0
# a trunk state dated later than the check by more than this (clocks differ a little) excuses nothing
FUTURE_SKEW_HOURS = 0.25


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
    if not max_age_hours == max_age_hours or max_age_hours < 0:  # NaN, or a negative age
        return f"the trunk state's maximum age {max_age_hours!r} is no number of hours"
    age = (now - made).total_seconds() / 3600
    if age < -FUTURE_SKEW_HOURS:
        return (
            f"the trunk state is dated {trunk['generated']}, after this check ({now.isoformat(timespec='seconds')}): "
            "knowledge from the future excuses nothing"
        )
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
    experiment_note: str = ""  # why the base experiment was not used, where it was not

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


def experiments(base_check: dict | None, base_sha: str | None) -> tuple[dict[str, dict], str]:
    """The failing tests' runs on the base (base-check.json: `tests`), where they ran on the base the
    code that ran is built on; and what to say where they did not (empty: nothing to say)."""
    if not base_check:
        return {}, ""
    ran_on = str(base_check.get("base_sha") or "")
    if not base_check.get("tests"):
        return {}, ""  # nothing was to be run on the base
    if not base_check.get("prepared"):
        return {}, f"the base experiment could not run: {base_check.get('why') or 'not prepared'}"
    if base_sha and ran_on != base_sha:
        return {}, (
            f"the base experiment ran on {ran_on[:12]}, not on the base {base_sha[:12]} GitHub names: "
            "not used"
        )
    return dict(base_check.get("tests") or {}), ""


def attribute(
    tests: dict[str, dict],
    provenance: dict,
    trunk: dict,
    parity: dict | None = None,
    base_date: dt.datetime | None = None,
    base_check: dict | None = None,
) -> Attribution:
    """Class every blocking failure of a run (`tests`: its gate report's tests) against `trunk`
    and the run's base experiment (`base_check`, its base-check.json). `base_date`: when the base
    commit was made (GitHub's), which places a base the trunk state's commit list does not hold."""
    commits = list(trunk.get("commits") or [])
    base = place(code_base(provenance or {}), commits, base_date)
    out = Attribution(base=base.sha)
    ran, out.experiment_note = experiments(base_check, base.sha)
    trunk_tests = trunk.get("tests") or {}
    for name in blocking_failures(tests):
        out.classes[name], out.reasons[name] = failure_class(
            fingerprint_of(tests[name]),
            trunk_tests.get(name),
            base,
            commits,
            tests[name].get("quarantine"),
            ran.get(name),
            (trunk.get("other_prs") or {}).get(name),
        )
        if name in (base_check or {}).get("tests", {}) and name not in ran:
            out.reasons[name] += f" ({out.experiment_note})"
        elif ran.get(name, {}).get("not_run"):
            out.reasons[name] += f" (the base experiment: {ran[name]['not_run']})"
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
