"""The questions asked of history, one function each, over portable SQL: the same statements run on
SQLite and on PostgreSQL (history/backends.py turns `?` into psycopg's `%s`), and give the same
answers there: every order is total (ties broken by id or name; NULLs never sorted, as the engines
place them differently), and text compares by its bytes on both (the store's text columns are
collated "C" on PostgreSQL). Runs are ordered by start time, then by the order they were added.

Suspects, flaky tests and known gaps read only runs no PR's code wrote (`TRUSTED`: a PR's artifact
is the PR author's to write, and a PR of old code says nothing of main), one SKU at a time.

- `suspects`: infrastructure faults that keep coming back. A test whose failures are `infra` in at least
  INFRA_MIN of its last WINDOW runs on a SKU is a suspected real bug when those faults happened on two or more
  runners or devices (an intermittent software fault, like an HSA exception that follows the test); when they
  all happened on one runner, or one device of it, the machine is the suspect (a drain candidate). Each names
  its SKU (the tracker of one SKU lists only its own).
- `flaky`: tests flaky on main by the one rule the trunk state applies (history/flakes.py: a pass and a fail
  on one commit and SKU, or isolated failures of one shape on alternate commits), within the SKU's last
  FLAKY_WINDOW tested commits, the trunk state's window: what excused a PR as flaky on main is listed. A test
  that fails on a streak of commits and passes on others changed (a regression, then its fix; a break, its
  revert and its re-land are two streaks), and one that fails on one SKU and passes on another differs by
  SKU: neither is flaky. A run with no commit recorded is a commit of its own; commits are in the order of
  their first run. With first and last seen, and tests that stopped being flaky (flaked only before the
  window).
- `known_gaps`: per gap, its issue, first seen and age, and per SKU it was seen on what that SKU's newest run
  of the test says: the gap is `closed` where that run has the test with no such gap (its marker was
  removed: a plain pass, or a failure or skip with no gap), `ready to close` where, on every SKU not closed,
  the test passed with the marker still on (an XPASS: the plugin applies a gap as an xfail or a skip), else
  `open`.
- `parity_trend`, `parity_now`: parity over time and the newest figure per SKU, from the runs that measured
  one: a run with no test results (a 0-test run), or a group with no test passing on the reference, has no
  parity figure.
- merge queues: a `merge_group` run is main's only where main's commit list (`landed`) holds its commit
  (an ejected candidate's failure is never main's): the windows above, `main_failures`, and the origin
  `runs`, `grid` and `test_runs` give a run (an ejected candidate is `other`).
- `accepted_stacks`: per SKU, the runs that concluded `success` and were complete, and what changed between
  consecutive ones.
"""

from __future__ import annotations

from collections import defaultdict

from rocm_gate.history import flakes
from rocm_gate.history.backends import Connection
from rocm_gate.history.flakes import flaky_commits, outcome, passed

WINDOW = 10
INFRA_MIN = 3
FLAKY_WINDOW = 30  # tested commits per SKU: the trunk state's window (trunk/state.py: WINDOW)
# the origins whose runs say something about the project's own code: main runs, and runs from no PR
# (a local nightly, another CI); the dashboard workflow stores every run that is not main's as `pr`
TRUSTED = ("main", "other")
FAILED = ("regression", "unconfirmed", "infra", "flaky")
STACK_FIELDS = ("rocm", "driver", "torch", "framework", "image")


def _order(alias: str = "", newest_first: bool = False) -> str:
    """ORDER BY terms for runs: start time, then the order they were added."""
    way = " DESC" if newest_first else ""
    return f"COALESCE({alias}started, ''){way}, {alias}id{way}"


def runs(
    conn: Connection,
    limit: int | None = None,
    origin: str | None = None,
    landed: frozenset | None = None,
) -> list[dict]:
    """The newest runs first (of one origin: main, pr, other): id, time, SKU, runner, commit,
    conclusion, run time in seconds, where it comes from, and its links' parts (repository, GitHub
    run id). A merge queue's candidate is main's only where `landed` (main's commits) holds it,
    else `other` (an ejected candidate never landed)."""
    # main and other are told apart here (a merge queue's candidate), every other origin by SQL
    told_here = origin in ("main", "other")
    where = (
        "WHERE origin IN ('main', 'other') " if told_here else "WHERE origin = ? " if origin else ""
    )
    sql = (
        f"SELECT id, started, finished, vendor, sku, runner, git_sha, conclusion, complete, origin, repository, "
        f"gh_run_id, pr, reference, parity_overall, event FROM runs {where}ORDER BY {_order(newest_first=True)}"
    )
    cut = f" LIMIT {int(limit)}" if limit and not told_here else ""
    rows = conn.execute(sql + cut, (origin,) if origin and not told_here else ()).fetchall()
    out = []
    for r in rows:
        counted = r[9] != "main" or _counted(r[15], r[6], landed)
        if told_here and (r[9] if counted else "other") != origin:
            continue
        out.append(
            {
                "id": r[0],
                "started": r[1],
                "finished": r[2],
                "vendor": r[3],
                "sku": r[4],
                "runner": r[5],
                "git_sha": r[6],
                "conclusion": r[7],
                "complete": bool(r[8]),
                "seconds": seconds_between(r[1], r[2]),
                "origin": r[9] if counted else "other",
                "repository": r[10],
                "gh_run_id": r[11],
                "pr": r[12],
                "reference": r[13],
                "parity": r[14],
                "event": r[15],
            }
        )
    return out[:limit] if limit else out


def seconds_between(started: str | None, finished: str | None) -> float | None:
    """Seconds from one ISO time to another; None where either is missing or not a time."""
    from datetime import datetime

    try:
        return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    except (TypeError, ValueError):
        return None


def _counted(event: str | None, sha: str | None, landed: frozenset | None) -> bool:
    """Whether a run of history counts for the windows here: a merge queue's candidate only once
    main's commit list (`landed`) holds it (an ejected one's failures were never main's)."""
    return event != "merge_group" or (landed is not None and sha in landed)


def _history_by_test(
    conn, tests: set[str] | None = None, landed: frozenset | None = None
) -> dict[str, list[tuple]]:
    """test -> its results oldest first, in runs no PR's code wrote (`TRUSTED`; a merge queue's
    only where `landed`, main's commits, holds it): (run id, verdict, status, runner, devices,
    started, sku, commit, fingerprint, gap issue)."""
    names = dict(conn.execute("SELECT id, name FROM tests"))
    wanted = [i for i, n in names.items() if tests is None or n in tests]
    found: dict[str, list[tuple]] = defaultdict(list)
    for chunk in range(0, len(wanted), 500):  # bounded IN lists, for any engine
        ids = wanted[chunk : chunk + 500]
        sql = (
            "SELECT r.test_id, r.run_id, r.verdict, r.status, u.runner, r.devices, u.started, u.sku, u.git_sha, "
            f"r.fingerprint, r.gap_issue, u.event FROM results r JOIN runs u ON u.id = r.run_id WHERE r.test_id IN ({', '.join('?' for _ in ids)}) "
            f"AND u.origin IN ({', '.join('?' for _ in TRUSTED)}) ORDER BY r.test_id, {_order('u.')}"
        )
        for test_id, *rest, event in conn.execute(sql, [*ids, *TRUSTED]):
            if _counted(event, rest[7], landed):
                found[names[test_id]].append(tuple(rest))
    return found


def _by_sku(rows: list[tuple]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        out[row[6]].append(row)
    return dict(sorted(out.items()))


def _tests_with(conn, verdicts: tuple[str, ...]) -> set[str]:
    marks = ", ".join("?" for _ in verdicts)
    return {
        row[0]
        for row in conn.execute(
            f"SELECT DISTINCT t.name FROM results r JOIN tests t ON t.id = r.test_id WHERE r.verdict IN ({marks}) "
            "AND r.verdict <> 'pass'",
            verdicts,
        )
    }


def suspects(
    conn: Connection,
    window: int = WINDOW,
    minimum: int = INFRA_MIN,
    landed: frozenset | None = None,
) -> list[dict]:
    """Per test and SKU, over that SKU's last `window` runs of the test (none a PR's)."""
    out = []
    for test, all_rows in _history_by_test(conn, _tests_with(conn, ("infra",)), landed).items():
        for sku, rows in _by_sku(all_rows).items():
            last = rows[-window:]
            infra = [r for r in last if r[1] == "infra"]
            if len(infra) < minimum:
                continue
            runners = sorted({r[3] or "unknown" for r in infra})
            places = sorted({(r[3] or "unknown", r[4] or "") for r in infra})
            if len(runners) >= 2:
                kind = "suspected real bug"
                why = (
                    f"infra in {len(infra)} of its last {len(last)} {sku} runs, on {len(runners)} runners "
                    f"({', '.join(runners)}): the fault follows the test, not a machine"
                )
            else:
                devices = sorted({p[1] for p in places})
                where = runners[0] + (
                    f" device(s) {devices[0]}" if len(devices) == 1 and devices[0] else ""
                )
                kind = "drain candidate"
                why = f"infra in {len(infra)} of its last {len(last)} {sku} runs, all on {where}: the machine is the suspect"
            out.append(
                {
                    "test": test,
                    "sku": sku,
                    "kind": kind,
                    "reason": why,
                    "infra_runs": len(infra),
                    "window": len(last),
                    "runners": runners,
                    "last_seen": infra[-1][5],
                }
            )
    return sorted(
        out,
        key=lambda s: (s["kind"] != "suspected real bug", -s["infra_runs"], s["test"], s["sku"]),
    )


def flaky(
    conn: Connection, window: int = FLAKY_WINDOW, landed: frozenset | None = None
) -> dict[str, list[dict]]:
    """{"flaky": [...], "stopped": [...]}: per test, the SKUs it flaked on in that SKU's last
    `window` tested commits (the trunk state's window and rule, history/flakes.py: a test a PR was
    excused for as flaky on main is listed here), and tests that flaked before those commits on
    every SKU they flaked on and not since. Runs of a PR's code are not read."""
    now, stopped = [], []
    candidates = _tests_with(conn, ("flaky", "regression", "unconfirmed"))
    for test, all_rows in _history_by_test(conn, candidates, landed).items():
        ran_all = [r for r in all_rows if r[1] in ("pass",) + FAILED or r[2] == "xfailed"]
        if not ran_all:
            continue
        recent_flakes, older_flakes, looked_at = [], [], []
        for ran in _by_sku(ran_all).values():
            commits = list(dict.fromkeys(_commit_of(r) for r in ran))
            inside = set(commits[-window:])
            last = [r for r in ran if _commit_of(r) in inside]
            looked_at += last
            recent = _flaky_runs(last)
            recent_flakes += [r for r in last if r[0] in recent]
            older = _flaky_runs(ran)
            older_flakes += [r for r in ran if r[0] in older and _commit_of(r) not in inside]
        flakes = sorted(recent_flakes + older_flakes, key=lambda r: (r[5] or "", r[0]))
        entry = {
            "test": test,
            "runs": len(looked_at),
            "flaky_runs": len(recent_flakes),
            "pass_rate": round(sum(passed(r[1], r[2]) for r in looked_at) / len(looked_at), 3),
            "skus": sorted({r[6] for r in recent_flakes}),
            "first_seen": flakes[0][5] if flakes else None,
            "last_seen": flakes[-1][5] if flakes else None,
        }
        if recent_flakes:
            now.append(entry)
        elif older_flakes:
            stopped.append({**entry, "skus": sorted({r[6] for r in older_flakes})})

    def key(entry):
        return -entry["flaky_runs"], entry["pass_rate"], entry["test"]

    return {"flaky": sorted(now, key=key), "stopped": sorted(stopped, key=lambda e: e["test"])}


def _commit_of(row: tuple) -> str:
    """A history row's commit (a run with no commit recorded is a commit of its own)."""
    return row[7] or f"run {row[0]}"


def _flaky_runs(rows: list[tuple]) -> set[int]:
    """The runs that show a flake, by history/flakes.py's rule over the commits of `rows` (one
    SKU's, oldest first): their failures (a `flaky` verdict, a regression or an unconfirmed
    failure) on a commit the rule counts as a flake."""
    by_commit: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        by_commit[_commit_of(row)].append(row)
    series = [
        (
            commit,
            outcome((r[1], r[2]) for r in same),
            [r[8] for r in same if r[1] in flakes.FAILED],
        )
        for commit, same in by_commit.items()
    ]
    shown = flaky_commits(series)
    return {
        r[0]
        for commit in shown
        for r in by_commit[commit]
        if r[1] == "flaky" or r[1] in flakes.FAILED
    }


def known_gaps(conn: Connection, landed: frozenset | None = None) -> list[dict]:
    """Per gap, from runs no PR's code wrote: a PR of old code that fails it says nothing of main."""
    marks = ", ".join("?" for _ in TRUSTED)
    rows = conn.execute(
        "SELECT t.name, r.gap_issue, r.gap_reason, MIN(u.started), MAX(u.started), COUNT(*) FROM results r "
        "JOIN runs u ON u.id = r.run_id JOIN tests t ON t.id = r.test_id "
        f"WHERE r.verdict <> 'pass' AND r.gap_issue IS NOT NULL AND u.origin IN ({marks}) "
        "AND (u.event IS NULL OR u.event <> 'merge_group') "
        "GROUP BY t.name, r.gap_issue, r.gap_reason "
        "ORDER BY COALESCE(MIN(u.started), ''), t.name, r.gap_issue, COALESCE(r.gap_reason, '')",
        TRUSTED,
    ).fetchall()
    history = _history_by_test(conn, {r[0] for r in rows}, landed)
    out = []
    for test, issue, reason, first, last, count in rows:
        results = history.get(test, [])
        # the SKUs the gap was seen on, and each one's newest result of the test
        seen_on = sorted({r[6] for r in results if r[1] == "known_gap"} or {r[6] for r in results})
        newest = {
            sku: [r for r in results if r[6] == sku][-1]
            for sku in seen_on
            if any(r[6] == sku for r in results)
        }
        # the newest run has the test with no such gap: its marker was removed (a pass keeps no
        # gap in the store; with the marker on, which the plugin applies as an xfail or a skip, it
        # passes as an XPASS)
        closed = sorted(
            sku
            for sku, r in newest.items()
            if (r[2] != "xpassed" if r[1] == "pass" else r[9] != issue)
        )
        passing = sorted(sku for sku, r in newest.items() if r[1] == "pass" and r[2] == "xpassed")
        failing = sorted(set(newest) - set(passing) - set(closed))
        status = (
            "closed"
            if newest and len(closed) == len(newest)
            else "ready to close"
            if newest and not failing
            else "open"
        )
        out.append(
            {
                "test": test,
                "issue": issue,
                "reason": reason,
                "first_seen": first,
                "last_seen": last,
                "runs": count,
                "age_days": _days(first, last),
                "skus": seen_on,
                "passing_on": passing,
                "still_failing_on": failing,
                "closed_on": closed,
                "status": status,
                "ready_to_close": status == "ready to close",
                "closed": status == "closed",
            }
        )
    return out


def _days(first: str | None, last: str | None) -> float | None:
    seconds = seconds_between(first, last)
    return round(seconds / 86400, 1) if seconds is not None else None


def accepted_stacks(conn: Connection) -> dict[str, list[dict]]:
    """SKU -> its accepted runs oldest first, each with the stack and `changed` (field: (before,
    after))."""
    out: dict[str, list[dict]] = defaultdict(list)
    sql = (
        f"SELECT id, sku, started, git_sha, {', '.join(STACK_FIELDS)} FROM runs "
        f"WHERE conclusion = 'success' AND complete = 1 ORDER BY sku, {_order()}"
    )
    for row in conn.execute(sql):
        run_id, sku, started, sha, *values = row
        stack = dict(zip(STACK_FIELDS, values))
        previous = out[sku][-1]["stack"] if out[sku] else None
        changed = {
            k: (previous[k], v)
            for k, v in stack.items()
            if previous is not None and previous[k] != v
        }
        out[sku].append(
            {"run": run_id, "started": started, "git_sha": sha, "stack": stack, "changed": changed}
        )
    return dict(out)


def drift(conn: Connection) -> list[dict]:
    """Runs not accepted whose stack differs from their SKU's last accepted stack before them (what
    changed, and how it ended). An accepted run's own change is in `accepted_stacks`, not here."""
    accepted = accepted_stacks(conn)
    out = []
    sql = (
        f"SELECT id, sku, started, conclusion, {', '.join(STACK_FIELDS)} FROM runs "
        f"WHERE NOT (conclusion = 'success' AND complete = 1) ORDER BY {_order()}"
    )
    for run_id, sku, started, conclusion, *values in conn.execute(sql):
        before = [
            a
            for a in accepted.get(sku, [])
            if (a["started"] or "", a["run"]) < (started or "", run_id)
        ]
        if not before:
            continue
        stack = dict(zip(STACK_FIELDS, values))
        changed = {
            k: (before[-1]["stack"][k], v) for k, v in stack.items() if before[-1]["stack"][k] != v
        }
        if changed:
            out.append(
                {
                    "run": run_id,
                    "sku": sku,
                    "started": started,
                    "conclusion": conclusion,
                    "changed": changed,
                }
            )
    return out


# a run that measured parity: it holds test results (a 0-test run measured nothing, whatever its
# parity report says: every test passing on the reference then "fails" on ROCm)
_MEASURED = "EXISTS (SELECT 1 FROM results x WHERE x.run_id = u.id)"


def parity_trend(conn: Connection) -> list[dict]:
    """Per run with a parity report that measured one (it holds test results), per group with a
    test passing on the reference: SKU, group, parity, both passing / passing on CUDA,
    merge-blocking."""
    sql = (
        "SELECT u.id, u.started, u.sku, p.grp, p.parity, p.both_passing, p.reference_passing, p.blocking, p.gaps, "
        f"COALESCE(u.reference, 'reference (unnamed)') FROM parity p JOIN runs u ON u.id = p.run_id "
        f"WHERE p.reference_passing > 0 AND {_MEASURED} ORDER BY {_order('u.')}, p.grp"
    )
    keys = (
        "run",
        "started",
        "sku",
        "group",
        "parity",
        "both_passing",
        "reference_passing",
        "blocking",
        "gaps",
        "reference",
    )
    return [dict(zip(keys, row)) for row in conn.execute(sql)]


def parity_now(conn: Connection, landed: frozenset | None = None) -> dict[str, dict]:
    """SKU -> its newest run with a parity figure (`runs`' fields): a main run's (a merge queue's
    where `landed` holds it), else, where the SKU has none, any run's. A run with no test results,
    or whose report has no test passing on the reference, has no figure (`parity_trend`)."""
    rows = conn.execute(
        "SELECT u.id FROM runs u WHERE u.parity_overall IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM parity p WHERE p.run_id = u.id AND p.reference_passing > 0) "
        f"AND {_MEASURED} ORDER BY {_order('u.')}"
    ).fetchall()
    measured = {run_id for (run_id,) in rows}
    out: dict[str, dict] = {}
    for run in reversed(runs(conn, landed=landed)):  # oldest first: the newest wins
        if run["id"] not in measured:
            continue
        held = out.get(run["sku"])
        if held is None or run["origin"] == "main" or held["origin"] != "main":
            out[run["sku"]] = run
    return dict(sorted(out.items()))


def grid(
    conn: Connection, limit: int = 30, origin: str | None = None, landed: frozenset | None = None
) -> dict:
    """The newest `limit` runs (of one origin; a merge queue's candidate is main's only where
    `landed` holds it) x groups: per cell the worst verdict and the counts, with the failing
    tests."""
    recent = runs(conn, limit, origin, landed)
    ids = [r["id"] for r in recent]
    cells: dict[tuple[int, str], dict] = {}
    if ids:
        marks = ", ".join("?" for _ in ids)
        for run_id, group, verdict, count in conn.execute(
            f"SELECT r.run_id, COALESCE(t.grp, 'ungrouped'), r.verdict, COUNT(*) FROM results r "
            f"JOIN tests t ON t.id = r.test_id WHERE r.run_id IN ({marks}) "
            "GROUP BY r.run_id, COALESCE(t.grp, 'ungrouped'), r.verdict ORDER BY 1, 2, 3",
            ids,
        ):
            cell = cells.setdefault((run_id, group), {"counts": {}, "failing": []})
            cell["counts"][verdict] = count
        for run_id, group, test, verdict in conn.execute(
            f"SELECT r.run_id, COALESCE(t.grp, 'ungrouped'), t.name, r.verdict FROM results r "
            f"JOIN tests t ON t.id = r.test_id WHERE r.run_id IN ({marks}) "
            f"AND r.verdict IN ({', '.join('?' for _ in FAILED)}) ORDER BY t.name",
            [*ids, *FAILED],
        ):
            cells[(run_id, group)]["failing"].append({"test": test, "verdict": verdict})
    for cell in cells.values():
        cell["worst"] = next(
            (
                v
                for v in ("regression", "unconfirmed", "infra", "flaky", "pass")
                if v in cell["counts"]
            ),
            "other",
        )
    groups = sorted({g for _, g in cells})
    return {"runs": recent, "groups": groups, "cells": cells}


def group_health_rows(conn: Connection, landed: frozenset | None = None) -> list[tuple]:
    """Per main run and group, oldest first: (run id, SKU, started, commit, group, blocking gates
    that failed, quarantined gates that failed), over the gates that block or a quarantine holds
    (trunk/health.py makes trunk health of them); a merge queue's run only where `landed` holds
    it."""
    failed = "r.verdict IN ('regression', 'unconfirmed')"
    rows = conn.execute(
        "SELECT u.id, u.sku, u.started, u.git_sha, COALESCE(t.grp, 'ungrouped'), "
        f"SUM(CASE WHEN {failed} AND r.blocking = 1 THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {failed} AND r.blocking = 0 AND r.quarantined = 1 THEN 1 ELSE 0 END), u.event FROM results r "
        "JOIN runs u ON u.id = r.run_id JOIN tests t ON t.id = r.test_id WHERE u.origin = 'main' "
        "AND (r.blocking = 1 OR r.quarantined = 1) "
        f"GROUP BY u.id, u.sku, u.started, u.git_sha, COALESCE(t.grp, 'ungrouped'), u.event ORDER BY {_order('u.')}, 5"
    ).fetchall()
    return [row[:7] for row in rows if _counted(row[7], row[3], landed)]


def main_runs(conn: Connection, sku: str) -> list[tuple]:
    """(run id, tested commit, started, repository, default branch, event, completed, complete) of
    the SKU's main runs that name their commit, oldest first (trunk/state.py); `completed`: when
    GitHub says the run completed, else when its manifest says it finished; `complete`: 1 where
    the run ran every test it collected."""
    return conn.execute(
        "SELECT id, git_sha, started, repository, default_branch, event, COALESCE(completed, finished), "
        "complete FROM runs WHERE origin = 'main' "
        "AND sku = ? AND git_sha IS NOT NULL ORDER BY COALESCE(started, ''), id",
        (sku,),
    ).fetchall()


def results_of_tests_not_passing(
    conn: Connection, run_ids: list[int], verdicts: tuple[str, ...]
) -> dict[str, list[tuple]]:
    """test -> (run id, verdict, fingerprint, status) in the runs, for the tests with one of
    `verdicts` in at least one of them."""
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    test_ids = [
        row[0]
        for row in conn.execute(
            f"SELECT DISTINCT test_id FROM results WHERE verdict IN ({', '.join('?' for _ in verdicts)}) "
            f"AND run_id IN ({marks}) ORDER BY test_id",
            [*verdicts, *run_ids],
        )
    ]
    return _results_of(conn, run_ids, "r.test_id", test_ids)


def results_of_tests(
    conn: Connection, run_ids: list[int], names: list[str]
) -> dict[str, list[tuple]]:
    """test -> (run id, verdict, fingerprint, status) in the runs, for the tests named (those the
    runs hold results of)."""
    if not run_ids:
        return {}
    return _results_of(conn, run_ids, "t.name", sorted(set(names)))


def _results_of(conn, run_ids: list[int], column: str, keys: list) -> dict[str, list[tuple]]:
    """test -> (run id, verdict, fingerprint, status) in the runs, for the tests whose `column` is
    one of `keys` (bounded IN lists, for any engine)."""
    found: dict[str, list[tuple]] = defaultdict(list)
    marks = ", ".join("?" for _ in run_ids)
    for chunk in range(0, len(keys), 500):
        part = keys[chunk : chunk + 500]
        for name, run_id, verdict, fingerprint, status in conn.execute(
            "SELECT t.name, r.run_id, r.verdict, r.fingerprint, r.status FROM results r "
            f"JOIN tests t ON t.id = r.test_id WHERE {column} IN ({', '.join('?' for _ in part)}) "
            f"AND r.run_id IN ({marks}) ORDER BY t.name, r.run_id",
            [*part, *run_ids],
        ):
            found[name].append((run_id, verdict, fingerprint, status))
    return dict(found)


def names_in_runs(conn: Connection, run_ids: list[int]) -> list[str]:
    """The names of the tests the runs hold results of (any verdict: a skipped test ran), sorted."""
    if not run_ids:
        return []
    marks = ", ".join("?" for _ in run_ids)
    return [
        name
        for (name,) in conn.execute(
            f"SELECT DISTINCT t.name FROM results r JOIN tests t ON t.id = r.test_id "
            f"WHERE r.run_id IN ({marks}) ORDER BY t.name",
            run_ids,
        )
    ]


def tests_run(conn: Connection, run_ids: list[int]) -> int:
    """How many distinct tests the runs hold results of."""
    if not run_ids:
        return 0
    marks = ", ".join("?" for _ in run_ids)
    return conn.execute(
        f"SELECT COUNT(DISTINCT test_id) FROM results WHERE run_id IN ({marks})", run_ids
    ).fetchone()[0]


def newest_main_verdicts(conn: Connection, test: str, sku: str, count: int) -> list[str]:
    """The test's verdicts in its newest `count` informative main runs on the SKU (pass, regression,
    unconfirmed, flaky; an xfail that failed as declared is a pass: history/flakes.py), newest
    first."""
    rows = conn.execute(
        "SELECT CASE WHEN r.status = 'xfailed' THEN 'pass' ELSE r.verdict END FROM results r "
        "JOIN runs u ON u.id = r.run_id JOIN tests t ON t.id = r.test_id "
        "WHERE t.name = ? AND u.origin = 'main' AND u.sku = ? AND (r.verdict IN ('pass', 'regression', "
        "'unconfirmed', 'flaky') OR r.status = 'xfailed') "
        "ORDER BY COALESCE(u.started, '') DESC, u.id DESC LIMIT ?",
        (test, sku, count),
    ).fetchall()
    return [v for (v,) in rows]


def _not_main(conn, landed: frozenset | None) -> tuple[str, list]:
    """A condition on runs `u` (and its parameters) that leaves out the merge queue's candidates
    main's commit list does not hold (all of them without the list): their failures were never
    main's."""
    if landed is None:
        return "(u.event IS NULL OR u.event <> 'merge_group')", []
    ejected = [
        run_id
        for run_id, sha in conn.execute(
            "SELECT id, git_sha FROM runs WHERE origin = 'main' AND event = 'merge_group' ORDER BY id"
        )
        if sha not in landed
    ]
    if not ejected:
        return "1 = 1", []
    return f"u.id NOT IN ({', '.join('?' for _ in ejected)})", ejected


def main_failures(conn: Connection, limit: int = 300, landed: frozenset | None = None) -> list[str]:
    """Tests that failed (regression or unconfirmed) or were flaky in a main run (a merge queue's
    only where `landed`, main's commits, holds it), most recent first."""
    counted, params = _not_main(conn, landed)
    rows = conn.execute(
        "SELECT t.name, MAX(COALESCE(u.started, '')) FROM results r JOIN runs u ON u.id = r.run_id JOIN tests t "
        "ON t.id = r.test_id WHERE u.origin = 'main' AND r.verdict IN ('regression', 'unconfirmed', 'flaky') "
        f"AND {counted} GROUP BY t.name ORDER BY MAX(COALESCE(u.started, '')) DESC, t.name LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [name for name, _ in rows]


def test_runs(
    conn: Connection, test: str, limit: int = 200, landed: frozenset | None = None
) -> list[dict]:
    """One test's runs across SKUs and commits, newest first (a merge queue's candidate is main's
    only where `landed` holds it, else `other`: `runs`)."""
    rows = [
        (
            *row[:4],
            row[4] if row[4] != "main" or _counted(row[12], row[3], landed) else "other",
            *row[5:12],
        )
        for row in conn.execute(
            "SELECT u.id, u.started, u.sku, u.git_sha, u.origin, u.pr, u.repository, u.gh_run_id, u.runner, "
            "r.verdict, r.status, r.fingerprint, u.event FROM results r JOIN runs u ON u.id = r.run_id "
            f"JOIN tests t ON t.id = r.test_id WHERE t.name = ? ORDER BY {_order('u.', newest_first=True)} LIMIT ?",
            (test, limit),
        )
    ]
    keys = (
        "run",
        "started",
        "sku",
        "git_sha",
        "origin",
        "pr",
        "repository",
        "gh_run_id",
        "runner",
        "verdict",
        "status",
        "fingerprint",
    )
    return [dict(zip(keys, row)) for row in rows]


def pr_results(conn: Connection, sku: str, tests: list[str], since: str) -> dict[str, list[tuple]]:
    """test -> (where its head came from, base, verdict, fingerprint) of each PR run of the SKU that
    GitHub's facts place (`head_ref`, stored by a publish or a sync) and that completed at `since`
    or later, for the blocking gates `tests`: what other PRs showed of them (trunk/evidence.py)."""
    found: dict[str, list[tuple]] = defaultdict(list)
    for start in range(0, len(tests), 500):
        chunk = tests[start : start + 500]
        rows = conn.execute(
            "SELECT t.name, u.head_ref, u.base_sha, r.verdict, r.fingerprint FROM results r "
            "JOIN runs u ON u.id = r.run_id JOIN tests t ON t.id = r.test_id "
            f"WHERE t.name IN ({', '.join('?' for _ in chunk)}) AND u.origin = 'pr' AND u.sku = ? "
            "AND u.head_ref IS NOT NULL AND COALESCE(u.completed, u.started, '') >= ? "
            "AND r.blocking = 1 ORDER BY t.name, u.id",
            [*chunk, sku, since],
        ).fetchall()
        for name, *rest in rows:
            found[name].append(tuple(rest))
    return dict(found)
