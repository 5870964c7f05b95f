"""Flaky on main, one SKU at a time: the one rule that the trunk state (trunk/state.py, what a PR is
excused for as flaky on main: `flaky_count`, `flaky_fingerprints`) and history's flaky list
(history/queries.py: `flaky`, what the dashboard and the tracker show) both apply.

What one main commit says of a test (`outcome`), from every result of the test on that commit and
SKU:

- `pass`: a result passed, or xfailed (an `xfail` test that failed as declared behaved as its code
  says: a strict xfail's XPASS, a failure, has that commit as its last green);
- `fail`: every result that ran it failed (regression or unconfirmed);
- `flaky`: a `flaky` verdict (a fail and a pass within one run), or a pass and a fail on the commit;
- nothing (None): infra, skipped, known gap, not applicable, interrupted.

Which commits are flakes (`flaky_commits`), over the commits that said something, oldest first:

- every `flaky` commit;
- isolated failures, where a test fails on alternate commits with no change to its code: a failing
  commit whose neighbours (the commits before and after it that said something) did not fail. Once
  ISOLATED_MIN of them after a commit that did not fail (a pass or a flake), of one failure shape (the
  fingerprint with its numbers set aside: results/fingerprint.py, `shape`), are in the series, each
  separated from the next by passes, every isolated failure of that shape is a flake: the newest
  commit's counts (it failed once more the way it flaked; if the next commit fails too, the two are a
  streak and it counts no more), the oldest commit's does not (it may end a streak before the window)
  until the shape is flaky.

A real break is a streak: main fails the test on the commits after the culprit until the fix. A
break, its revert and its re-land are two streaks, and a break main tested once while it lasted is
one isolated failure: neither is flaky. The rule's limit: three breaks of one test that main each saw
on a single commit after a pass, failing the same way (a break, its revert, its re-land, its revert
and its re-land again, main testing each once), read as a flake: nothing in the results tells them
apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pytest_rocm.results.fingerprint import shape

FAILED = ("regression", "unconfirmed")
ISOLATED_MIN = 3  # isolated failures of one shape, each after a commit that did not fail


def passed(verdict: str, status: str | None) -> bool:
    """Whether a result is a pass of the test's code: a pass, or an xfail (failed as declared)."""
    return verdict == "pass" or status == "xfailed"


def outcome(results: Iterable[tuple[str, str | None]]) -> str | None:
    """What a commit says of a test from its results there, each (verdict, status)."""
    fails = passes = 0
    flaky = False
    for verdict, status in results:
        fails += verdict in FAILED
        passes += passed(verdict, status)
        flaky = flaky or verdict == "flaky"
    if flaky or (fails and passes):
        return "flaky"
    return "fail" if fails else "pass" if passes else None


def flaky_commits(series: Sequence[tuple[str, str | None, Sequence[str | None]]]) -> set[str]:
    """The commits of `series` that show a flake. `series`: (commit, its outcome, the fingerprints
    of its failures) per commit, oldest first (commits that said nothing are skipped)."""
    said = [(commit, said, fingerprints) for commit, said, fingerprints in series if said]
    out = {commit for commit, said_here, _ in said if said_here == "flaky"}
    isolated: list[tuple[str, set[str], bool]] = []
    for i, (commit, said_here, fingerprints) in enumerate(said):
        if said_here != "fail":
            continue
        before = said[i - 1][1] if i else None
        after = said[i + 1][1] if i + 1 < len(said) else None
        if "fail" in (before, after):
            continue
        shapes = {shape(f) for f in fingerprints} or {""}
        isolated.append((commit, shapes, before is not None))
    counts = Counter(s for _, shapes, after_one in isolated if after_one for s in shapes)
    flaky_shapes = {s for s, n in counts.items() if n >= ISOLATED_MIN}
    out |= {commit for commit, shapes, _ in isolated if shapes & flaky_shapes}
    return out
