"""The state of the default branch on one SKU, per test, from history's main runs.

A main commit says one of four things about a test, from every main run of that commit on the SKU:
`pass`, `fail` (every run that ran it failed: regression or unconfirmed), `flaky` (a `flaky`
verdict, which is a fail and a pass within one run, or a pass and a fail in two runs of the same
commit), or nothing (infra, skipped, known gap, interrupted). Flaky is only ever judged on one
commit and one SKU: a test that failed on three commits and then passed is a regression that was
fixed, and a test that fails on every MI355X run and passes on every MI300X run is two states on two
SKUs, not a flake.

A test's state now is what its newest informative commit says. A failing test's streak runs back to
the oldest consecutive failing commit (`since`); the passing commit before it is `last_green`, and
the suspect range is every main commit after last_green up to and including `since` (from the commit
list given, else only the tested commits). Commits are ordered by the list given
(`git rev-list --first-parent`; a tested commit not on it never landed on main and is left out),
else by their first run's start time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime

from pytest_rocm.history import queries
from pytest_rocm.history.backends import Connection
from pytest_rocm.results.fingerprint import distinct
from pytest_rocm.schemas.artifacts import schema

TRUNK_SCHEMA = schema("trunk")
WINDOW = 30  # main commits of the SKU looked at
SUSPECTS_LIMIT = 200  # commits listed in one suspect range (the count is always given)
COMMITS_LIMIT = 5000
BREAKS_LIMIT = 5  # past streaks kept per test
FAILED = ("regression", "unconfirmed")
FULL_SHA = re.compile(r"[0-9a-f]{40}")


def _commit_outcome(verdicts: list[str]) -> str | None:
    fails = sum(v in FAILED for v in verdicts)
    passes = sum(v == "pass" for v in verdicts)
    if "flaky" in verdicts or (fails and passes):
        return "flaky"
    return "fail" if fails else "pass" if passes else None


def _seconds(first: str | None, last: str | None) -> float | None:
    try:
        return max(
            0.0, (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
        )
    except (TypeError, ValueError):
        return None


def main_runs(conn: Connection, sku: str) -> tuple[list[tuple], list[int]]:
    """((run id, tested commit, started, repository, default branch, event) of the SKU's main runs,
    oldest first; the ids of those left out because their commit is not a full SHA, which no
    commit list can place)."""
    rows = queries.main_runs(conn, sku)
    kept = [r for r in rows if FULL_SHA.fullmatch(r[1])]
    return kept, [r[0] for r in rows if not FULL_SHA.fullmatch(r[1])]


def build(
    conn: Connection,
    sku: str,
    window: int = WINDOW,
    commits: list[str] | None = None,
    generated: str | None = None,
    tracker_url: str | None = None,
) -> dict:
    """The `pytest-rocm/trunk/1` document of `sku`. `commits`: main's commits, oldest first
    (optional); `generated`: when it is made (default now: a trunk state has an age, and an old one
    excuses nothing, trunk/attribution.py: stale)."""
    if generated is None:
        import datetime as dt

        generated = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    runs, unplaced = main_runs(conn, sku)
    position = {sha: i for i, sha in enumerate(commits or [])}
    # a merge queue's candidate lands on main only if it passed: without main's commit list an
    # ejected candidate's failure would pass for main's
    runs = [r for r in runs if r[5] != "merge_group" or r[1] in position]
    first_run: dict[str, tuple] = {}
    for run in runs:
        first_run.setdefault(run[1], run)
    # with main's commit list, a tested commit not on it never landed on main (or the checkout is
    # stale): left out
    candidates = [sha for sha in first_run if not position or sha in position]
    ordered = sorted(
        candidates,
        key=lambda sha: (position.get(sha, 0), first_run[sha][2] or "", first_run[sha][0]),
    )
    tested = ordered[-window:]
    keep = set(tested)
    run_ids = [r[0] for r in runs if r[1] in keep]
    by_test = queries.results_of_tests_not_passing(conn, run_ids, (*FAILED, "flaky"))
    run_of = {r[0]: r for r in runs}
    newest = first_run[tested[-1]] if tested else None
    newest_started = max((run_of[i][2] or "" for i in run_ids), default=None) or None
    # when main's newest result became known (GitHub's completion of the window's newest run)
    newest_completed = max((run_of[i][6] or "" for i in run_ids), default=None) or None
    listed = _commit_list(tested, commits)
    tests = {}
    for name, rows in by_test.items():
        entry = _test_state(rows, tested, run_of, listed, newest_started)
        if entry is not None:
            tests[name] = entry
    green = queries.tests_run(conn, run_ids) - len(tests)
    return {
        "schema": TRUNK_SCHEMA,
        "sku": sku,
        "generated": generated,
        "window": window,
        "repository": newest[3] if newest else None,
        "default_branch": newest[4] if newest else None,
        "tracker_url": tracker_url,
        "main_runs": len(run_ids),
        "main_commits": len(tested),
        "newest": {"sha": newest[1], "started": newest_started, "completed": newest_completed}
        if newest
        else None,
        "commits": listed[-COMMITS_LIMIT:],
        "commits_from": "list" if commits else "tested commits",
        "tests": dict(sorted(tests.items())),
        "green": green,
        "left_out_runs": unplaced,
    }


def _commit_list(tested: list[str], commits: list[str] | None) -> list[str]:
    """Main's commits up to the newest tested one (at most COMMITS_LIMIT, so a PR's base older than
    the window is still placed): the list given, else only the tested commits."""
    if not commits or not tested:
        return list(tested)
    end = commits.index(tested[-1])
    return commits[max(0, end + 1 - COMMITS_LIMIT) : end + 1]


def _test_state(
    rows: list[tuple],
    tested: list[str],
    run_of: dict,
    listed: list[str],
    newest_started: str | None,
) -> dict | None:
    """The entry of one test (None: green throughout the window, never flaky)."""
    per_commit: dict[str, list[tuple]] = defaultdict(list)
    for run_id, verdict, fingerprint in rows:
        per_commit[run_of[run_id][1]].append((verdict, fingerprint, run_of[run_id][2]))
    series = [
        (sha, _commit_outcome([v for v, _, _ in per_commit[sha]]))
        for sha in tested
        if sha in per_commit
    ]
    # a commit with no row for this test either passed it (passes are stored too) or did not run it:
    # the rows above hold every result of the test in these runs, so a commit missing here did not
    # run it
    series = [(sha, outcome) for sha, outcome in series if outcome is not None]
    if not series:
        return None
    flaky = [sha for sha, outcome in series if outcome == "flaky"]
    decided = [(sha, o) for sha, o in series if o in ("pass", "fail")]
    flips = sum(1 for a, b in zip(decided, decided[1:]) if a[1] != b[1])
    state = {"fail": "failing", "pass": "passing", "flaky": "flaky"}[series[-1][1]]
    entry = {
        "state": state,
        "flaky_commits": flaky[-10:],
        "flaky_count": len(flaky),
        "flips": flips,
        "since": None,
        "last_green": None,
        "suspects": None,
        "suspect_count": None,
        "red_seconds": None,
        "fingerprints": [],
        "flaky_fingerprints": distinct(
            f or ""
            for sha in reversed(flaky)
            for v, f, _ in per_commit[sha]
            if v in FAILED + ("flaky",)
        )[:20],
        "last_failed": None,
    }
    failed_runs = [
        (v, f, started) for sha in per_commit for v, f, started in per_commit[sha] if v in FAILED
    ]
    if failed_runs:
        entry["last_failed"] = max((s or "" for _, _, s in failed_runs), default=None) or None
    if state == "failing":
        streak = []
        for sha, outcome in reversed(series):
            if outcome == "pass":
                entry["last_green"] = {
                    "sha": sha,
                    "started": min(s or "" for _, _, s in per_commit[sha]) or None,
                }
                break
            if outcome == "fail":
                streak.append(sha)
        since = streak[-1]
        since_started = (
            min((s or "" for v, _, s in per_commit[since] if v in FAILED), default="") or None
        )
        entry["since"] = {"sha": since, "started": since_started}
        entry["red_seconds"] = _seconds(since_started, newest_started)
        entry["fingerprints"] = distinct(
            f or "" for sha in streak for v, f, _ in per_commit[sha] if v in FAILED
        )[:20]
        if entry["last_green"] is not None:
            start = (
                listed.index(entry["last_green"]["sha"]) + 1
                if entry["last_green"]["sha"] in listed
                else None
            )
            end = listed.index(since) + 1 if since in listed else None
            if start is not None and end is not None and end >= start:
                entry["suspects"] = listed[start:end][:SUSPECTS_LIMIT]
                entry["suspect_count"] = end - start
    elif not flaky and flips == 0:
        return None
    entry["breaks"] = _breaks(series, per_commit)
    return entry


def _first_start(per_commit: dict, sha: str) -> str | None:
    """When the first run of a commit started."""
    return min(s or "" for _, _, s in per_commit[sha]) or None


def _breaks(series: list[tuple], per_commit: dict) -> list[dict]:
    """The streaks of failing commits in the window that a passing commit ended (main fixed them),
    oldest first, at most BREAKS_LIMIT: each one's first failing commit, the green commit before it
    (None at the window's start), the commit that fixed it and its fingerprints. A PR whose code is
    based inside one fails it the way main did: main's failure, not the PR's."""
    out: list[dict] = []
    green = streak = None
    for sha, outcome in series:
        if outcome == "fail":
            streak = streak or {"since": sha, "last_green": green, "shas": []}
            streak["shas"].append(sha)
        elif outcome == "pass":
            if streak is not None:
                out.append(
                    {
                        "since": {
                            "sha": streak["since"],
                            "started": _first_start(per_commit, streak["since"]),
                        },
                        "last_green": {"sha": streak["last_green"]}
                        if streak["last_green"]
                        else None,
                        "fixed": {"sha": sha, "started": _first_start(per_commit, sha)},
                        "fingerprints": distinct(
                            f or ""
                            for c in reversed(streak["shas"])
                            for v, f, _ in per_commit[c]
                            if v in FAILED
                        )[:20],
                    }
                )
            green, streak = sha, None
    return out[-BREAKS_LIMIT:]
