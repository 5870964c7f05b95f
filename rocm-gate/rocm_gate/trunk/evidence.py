"""Evidence from other PRs: a failure that several unrelated PRs show the same way, before any main run
did, is likely main's (a break landed, and main has not run since).

The rule (`from_other_prs`, a pure function of what the store holds of PR runs, as GitHub placed them):
a blocking failure of this run is shown by other PRs when at least PRS PRs (by where their head came
from, GitHub's `OWNER/REPO:BRANCH`, never this one) on at least BASES different bases failed the same
test the same way (results/fingerprint.py: `among`); it is main's likely only where the break can be in
main at this run's base: the oldest of those bases is on main's commit list, this run's base is at or
after it, no PR run based at or after it passed the test, and main has no run of its own at or after
it (a main run there decides, as main's state). In the replay of vLLM's history (issue 57), counting
it as main's with 3 PRs removed most remaining false blocks and hid no true regression; with 2 it hid
2.

It is never final: the class is `seen_on_other_prs`, named on the check as provisional until main's
own run or the base experiment settles it (trunk/judgement.py), and the sweep judges the check again
when main's result comes.
"""

from __future__ import annotations

from pytest_rocm.results.fingerprint import among

__all__ = ["BASES", "PRS", "from_other_prs"]

PRS = 3  # other PRs that must show the failure
BASES = 2  # of those, on at least this many different bases
FAILED = ("regression", "unconfirmed")


def from_other_prs(
    failures: dict[str, str],
    rows: dict[str, list[tuple]],
    mine: str | None,
    base: str | None,
    commits: list[str],
    main_tested: list[str],
) -> dict[str, dict]:
    """test -> the evidence (`prs`, `bases`, `since`: the oldest of those bases, `fingerprints`)
    for each of `failures` (test -> this run's fingerprint) that other PRs show as main's likely
    (see the module docstring). `rows`: test -> (head ref, base, verdict, fingerprint) of PR runs
    (history/queries.py: pr_results); `mine`: this run's head ref; `commits`: main's commits,
    oldest first; `main_tested`: main's tested commits in the window."""
    position = {sha: i for i, sha in enumerate(commits)}
    at = position.get(base or "")
    out = {}
    for name, fingerprint in failures.items():
        shown = [
            (ref, pr_base, theirs)
            for ref, pr_base, verdict, theirs in rows.get(name, ())
            if ref and ref != mine and verdict in FAILED and among(fingerprint, [theirs or ""])
        ]
        refs = {ref for ref, _, _ in shown}
        bases = {b for _, b, _ in shown if b in position}
        if len(refs) < PRS or len(bases) < BASES or at is None:
            continue
        oldest = min(position[b] for b in bases)
        passed_since = any(
            verdict == "pass" and position.get(pr_base or "", -1) >= oldest
            for _, pr_base, verdict, _ in rows.get(name, ())
        )
        main_since = any(position.get(sha, -1) >= oldest for sha in main_tested)
        if at < oldest or passed_since or main_since:
            continue
        out[name] = {
            "prs": len(refs),
            "bases": len(bases),
            "since": commits[oldest],
            "fingerprints": sorted({t or "" for _, _, t in shown})[:5],
        }
    return out
