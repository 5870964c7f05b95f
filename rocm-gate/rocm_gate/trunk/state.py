"""The state of the default branch on one SKU, per test, from history's main runs.

A main commit says one of four things about a test, from every main run of that commit on the SKU
(history/flakes.py: `outcome`): `pass` (it passed, or xfailed: a test marked `xfail` that failed as
declared behaved as its code says, so a strict xfail's XPASS, a failure, has that commit as its last
green and a suspect range), `fail` (every run that ran it failed: regression or unconfirmed),
`flaky` (a `flaky` verdict, which is a fail and a pass within one run, or a pass and a fail in two
runs of the same commit), or nothing (infra, skipped, known gap, interrupted).

Flaky is judged on one SKU, by history/flakes.py's rule (the flaky list of the dashboard and the
tracker applies the same one): a flaky commit, or a test that fails on alternate commits with no
change to its code (three or more isolated one-commit failures of one failure shape, each after a
commit that did not fail it). A test that failed on three commits in a row and then passed is a
regression that was fixed; a break, its revert and its re-land are two streaks, not a flake; a test
that fails on every MI355X run and passes on every MI300X run is two states on two SKUs, not a flake.

A test's state now is what its newest informative commit says (an isolated failure the rule counts
as a flake says `flaky`). A failing test's streak runs back to the oldest consecutive failing commit
(`since`); the passing commit before it is `last_green`, and the suspect range is every main commit
after last_green up to and including `since` (from the commit list given, else only the tested
commits). Commits are ordered by the list given (`git rev-list --first-parent`; a tested commit not
on it never landed on main and is left out), else by their first run's start time.

A test's identity (a test id is its file, class, function and parameters):

- **Gone**: the roll call is the tests that the SKU's newest complete main runs ran (every complete
  main run of the newest commit in the window that has one: a result of any kind, a skip too). A
  test id the window's runs hold that the roll call lacks, with no result at or after that commit,
  is `gone` (renamed, moved or deleted): its state says so from the first commit with a complete
  run that lacked it (`gone`), never `failing` again, and the streak it was failing in ends there
  (`breaks`: a PR based before that commit runs the old id and fails it as main did). A roll call
  of no test says nothing. Main's runs are taken to run the whole suite: a main job that runs a
  part of it (a failed-tests rerun runs with the full run of its commit) would make the rest gone.
- **Moved**: a new id whose function name and parameters (`identity_key`) equal a gone id's, where
  the window holds each id of that name on commits of its own (the old ones before the new one,
  never both on one commit) and the roll call holds only the newest, continues the gone id's
  history: its `since`, `last_green` and suspects come from both (`moved_from`); the gone id's
  entry is the whole history's with `moved_to`, so a PR based before the move is judged against
  the test's failures under either id.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from pytest_rocm.results.fingerprint import distinct
from pytest_rocm.schemas.artifacts import schema
from rocm_gate.history import flakes, queries
from rocm_gate.history.backends import Connection
from rocm_gate.history.flakes import FAILED, flaky_commits

TRUNK_SCHEMA = schema("trunk")
WINDOW = 30  # main commits of the SKU looked at
SUSPECTS_LIMIT = 200  # commits listed in one suspect range (the count is always given)
COMMITS_LIMIT = 5000
BREAKS_LIMIT = 5  # past streaks kept per test
FULL_SHA = re.compile(r"[0-9a-f]{40}")


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
    in_window = [r for r in runs if r[1] in keep]
    run_ids = [r[0] for r in in_window]
    run_of = {r[0]: r for r in runs}
    newest = first_run[tested[-1]] if tested else None
    newest_started = max((run_of[i][2] or "" for i in run_ids), default=None) or None
    # when main's newest result became known (GitHub's completion of the window's newest run)
    newest_completed = max((run_of[i][6] or "" for i in run_ids), default=None) or None
    listed = _commit_list(tested, commits)
    names = queries.names_in_runs(conn, run_ids)
    facts = _Window(tested, run_of, listed, newest_started, *_roll_call(conn, tested, in_window))
    tests = _entries(conn, facts, run_ids, names)
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
        "green": len(names) - len(tests),
        "left_out_runs": unplaced,
    }


def _commit_list(tested: list[str], commits: list[str] | None) -> list[str]:
    """Main's commits up to the newest tested one (at most COMMITS_LIMIT, so a PR's base older than
    the window is still placed): the list given, else only the tested commits."""
    if not commits or not tested:
        return list(tested)
    end = commits.index(tested[-1])
    return commits[max(0, end + 1 - COMMITS_LIMIT) : end + 1]


@dataclass
class _Window:
    """What the entries of one trunk state are made from."""

    tested: list[str]  # the window's tested commits, oldest first
    run_of: dict  # run id -> its main_runs row
    listed: list[str]  # main's commits up to the newest tested one
    newest_started: str | None
    complete: list[int]  # positions in `tested` of the commits with a complete main run
    roll: set[str] | None  # the tests main's newest complete runs ran (None: no roll call)
    at: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.at = {sha: i for i, sha in enumerate(self.tested)}

    def positions(self, rows: list[tuple]) -> list[int]:
        return sorted({self.at[self.run_of[r[0]][1]] for r in rows})

    def started(self, sha: str) -> str | None:
        """When the first main run of a commit started."""
        return min((r[2] or "" for r in self.run_of.values() if r[1] == sha), default="") or None


def _roll_call(
    conn: Connection, tested: list[str], runs: list[tuple]
) -> tuple[list[int], set | None]:
    """(the positions of the window's commits with a complete main run; the tests that the complete
    runs of the newest of them ran, None where there is none, or they ran no test)."""
    at = {sha: i for i, sha in enumerate(tested)}
    complete = sorted({at[r[1]] for r in runs if r[7]})
    if not complete:
        return complete, None
    newest = tested[complete[-1]]
    roll = set(queries.names_in_runs(conn, [r[0] for r in runs if r[1] == newest and r[7]]))
    return complete, roll or None


def identity_key(nodeid: str) -> str:
    """A test's function name and parameters (its id without its file and class): a test moved to
    another file keeps it."""
    head, bracket, params = nodeid.partition("[")
    return head.rsplit("::", 1)[-1] + bracket + params


def _gone_since(name: str, rows: list[tuple], facts: _Window) -> dict | None:
    """The first commit with a complete main run that lacked the test, where it is gone (see the
    module docstring), else None."""
    if facts.roll is None or name in facts.roll:
        return None
    last = facts.positions(rows)[-1]
    after = next((i for i in facts.complete if i > last), None)
    if after is None:
        return None
    sha = facts.tested[after]
    return {"sha": sha, "started": facts.started(sha)}


def _chains(
    conn: Connection, facts: _Window, run_ids: list[int], names: list[str], failing: dict
) -> tuple[dict[str, list[str]], dict[str, list[tuple]]]:
    """(new id -> the gone ids it continues, oldest first; the rows of those ids not in `failing`)
    for the function names of the tests in `failing` (see the module docstring: Moved)."""
    if facts.roll is None:
        return {}, {}
    same: dict[str, list[str]] = defaultdict(list)
    for name in names:
        same[identity_key(name)].append(name)
    wanted = [
        ids
        for ids in same.values()
        if len(ids) > 1
        and any(i in failing for i in ids)
        and sum(i in facts.roll for i in ids) == 1
    ]
    fetched = queries.results_of_tests(
        conn, run_ids, [i for ids in wanted for i in ids if i not in failing]
    )
    chains = {}
    for ids in wanted:
        spans = sorted(
            (facts.positions({**failing, **fetched}[i]), i)
            for i in ids
            if i in failing or i in fetched
        )
        if len(spans) != len(ids) or spans[-1][1] not in facts.roll:
            continue
        if all(a[0][-1] < b[0][0] for a, b in zip(spans, spans[1:])):
            chains[spans[-1][1]] = [i for _, i in spans[:-1]]
    return chains, fetched


def _entries(conn: Connection, facts: _Window, run_ids: list[int], names: list[str]) -> dict:
    """test -> its entry, for the tests not green throughout the window, their identities followed
    (gone, moved)."""
    failing = queries.results_of_tests_not_passing(conn, run_ids, (*FAILED, "flaky"))
    chains, fetched = _chains(conn, facts, run_ids, names, failing)
    rows_of = {**failing, **fetched}
    history = {name: rows_of[name] for name in rows_of}
    moved_to = {}
    for new, olds in chains.items():
        history[new] = [row for i in [*olds, new] for row in rows_of[i]]
        for old in olds:
            history[old], moved_to[old] = history[new], new
    tests = {}
    for name in sorted(set(failing) | set(chains) | set(moved_to)):
        entry = _test_state(history[name], facts)
        if entry is None:
            continue
        if name in chains:
            entry["moved_from"] = chains[name]
        gone = _gone_since(name, rows_of[name], facts)
        tests[name] = entry if gone is None else _gone(entry, gone, moved_to.get(name), facts)
    return tests


def _gone(entry: dict, gone: dict, moved_to: str | None, facts: _Window) -> dict:
    """The entry of a gone test id: never failing again; a streak it was failing in when main
    stopped running it ends there (a PR based before that runs the id, and fails it as main did)."""
    out = {**entry, "state": "gone", "gone": gone, "moved_to": moved_to}
    green = (entry["last_green"] or {}).get("sha")
    if entry["state"] == "failing" and (green is None or facts.at[green] < facts.at[gone["sha"]]):
        ended = {
            "since": entry["since"],
            "last_green": {"sha": green} if green else None,
            "fixed": gone,
            "fingerprints": entry["fingerprints"],
            "ended": "gone",
        }
        out["breaks"] = [*entry["breaks"], ended][-BREAKS_LIMIT:]
    out.update(
        since=None,
        last_green=None,
        suspects=None,
        suspect_count=None,
        red_seconds=None,
        fingerprints=[],
    )
    return out


def _series(per_commit: dict, tested: list[str]) -> list[tuple[str, str]]:
    """(commit, what it says of the test) per informative commit, oldest first, an isolated failure
    history/flakes.py counts as a flake said as `flaky`."""
    said = [
        (sha, flakes.outcome((v, status) for v, _, _, status in per_commit[sha]))
        for sha in tested
        if sha in per_commit
    ]
    shown = flaky_commits(
        [(sha, o, [f for v, f, _, _ in per_commit[sha] if v in FAILED]) for sha, o in said]
    )
    # a commit with no row for this test either passed it (passes are stored too) or did not run
    # it: the rows hold every result of the test in these runs, so a commit missing did not run it
    return [(sha, "flaky" if sha in shown else o) for sha, o in said if o is not None]


def _test_state(rows: list[tuple], facts: _Window) -> dict | None:
    """The entry of one test (None: green throughout the window, never flaky)."""
    per_commit: dict[str, list[tuple]] = defaultdict(list)
    # a commit's runs in the order they started (their store ids differ from store to store: two
    # writers add them in any order), each one's result by what it says
    for run_id, verdict, fingerprint, status in sorted(
        rows, key=lambda r: (facts.run_of[r[0]][2] or "", r[1], r[2] or "", r[3] or "")
    ):
        run = facts.run_of[run_id]
        per_commit[run[1]].append((verdict, fingerprint, run[2], status))
    series = _series(per_commit, facts.tested)
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
            for v, f, _, _ in per_commit[sha]
            if v in FAILED + ("flaky",)
        )[:20],
        "last_failed": max(
            (s or "" for c in per_commit.values() for v, _, s, _ in c if v in FAILED), default=""
        )
        or None,
    }
    if state == "failing":
        _streak(entry, series, per_commit, facts)
    elif not flaky and flips == 0:
        return None
    entry["breaks"] = _breaks(series, per_commit)
    return entry


def _streak(entry: dict, series: list[tuple], per_commit: dict, facts: _Window) -> None:
    """A failing test's streak: since, last green, the suspects, time red, its fingerprints."""
    streak = []
    for sha, outcome in reversed(series):
        if outcome == "pass":
            entry["last_green"] = {"sha": sha, "started": _first_start(per_commit, sha)}
            break
        if outcome == "fail":
            streak.append(sha)
    since = streak[-1]
    since_started = (
        min((s or "" for v, _, s, _ in per_commit[since] if v in FAILED), default="") or None
    )
    entry["since"] = {"sha": since, "started": since_started}
    entry["red_seconds"] = _seconds(since_started, facts.newest_started)
    entry["fingerprints"] = distinct(
        f or "" for sha in streak for v, f, _, _ in per_commit[sha] if v in FAILED
    )[:20]
    listed = facts.listed
    if entry["last_green"] is not None:
        green = entry["last_green"]["sha"]
        start = listed.index(green) + 1 if green in listed else None
        end = listed.index(since) + 1 if since in listed else None
        if start is not None and end is not None and end >= start:
            entry["suspects"] = listed[start:end][:SUSPECTS_LIMIT]
            entry["suspect_count"] = end - start


def _first_start(per_commit: dict, sha: str) -> str | None:
    """When the first run of a commit started."""
    return min(s or "" for _, _, s, _ in per_commit[sha]) or None


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
                            for v, f, _, _ in per_commit[c]
                            if v in FAILED
                        )[:20],
                    }
                )
            green, streak = sha, None
    return out[-BREAKS_LIMIT:]
