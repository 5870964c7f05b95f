"""The shapes of main's history that main's state once judged wrong (issue 58), each a rule of the one
place that owns it, held to a table and, where it is a judgement, to generated cases against an
oracle written apart from the code:

- flaky across commits (history/flakes.py, applied by trunk/state.py and history/queries.py: flaky):
  isolated one-commit failures of one shape on alternate commits; a break, its revert and its re-land
  are two streaks, never flaky;
- a strict xfail's xfailed commits are its green: an XPASS on main has a last green and suspects;
- a test id main no longer runs is `gone`, never failing for ever; a test whose file moved continues
  the gone id's history;
- the history's questions: the flaky list and the trunk state agree, a known gap whose marker is
  gone is closed, a 0-test run has no parity, an ejected merge-queue candidate's failure is never
  main's on the dashboard.

The states here are built from the plugin's records through the real report builder and ingest
(tests/truth.py's helpers); tests/test_trunk.py's real plugin runs in a real git history hold the
same shapes end to end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import truth
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from rocm_gate.history import flakes, queries, store
from rocm_gate.trunk import judgement, quarantine, state

SHAPE = {"F": "AssertionError: timed out after {n} retries", "G": "KeyError: 'rope_scaling' {n}"}


def series(text: str) -> list[tuple[str, str | None, list[str]]]:
    """A commit series from letters: P pass, F and G failures of two shapes (their numbers change
    from commit to commit), X flaky (a pass and a fail), `-` nothing said (infra)."""
    out = []
    for i, letter in enumerate(text):
        said = {"P": "pass", "F": "fail", "G": "fail", "X": "flaky", "-": None}[letter]
        message = SHAPE[letter].format(n=i) if letter in SHAPE else None
        out.append((f"c{i}", said, [message] if message else []))
    return out


FLAKES = [
    # (what, the series, the commits that are flakes)
    ("alternate commits, one shape, three times between passes: flaky", "PFPFPFP", {1, 3, 5}),
    ("the newest commit's lone failure of that shape is a flake too", "PFPFPFPF", {1, 3, 5, 7}),
    ("so is the oldest one's", "FPFPFPFP", {0, 2, 4, 6}),
    ("two lone failures: not yet flaky", "PFPFP", set()),
    ("three, the newest one so far alone: flaky", "PFPFPF", {1, 3, 5}),
    ("three, the oldest with no commit before it: not yet", "FPFPFP", set()),
    ("a break, its revert and its re-land: two streaks", "PFFFPPFFF", set()),
    ("a break, its revert and its re-land, each seen on one commit: two, not flaky", "PFPPFP", set()),
    ("streaks of two between passes are breaks", "PFFPFFPFFP", set()),
    ("a pass and a fail on one commit", "PPXPP", {"c2"}),
    ("a flaky commit separates lone failures as a pass does", "PFXFXFP", {1, 2, 3, 4, 5}),
    ("infra says nothing: the commits around it are neighbours", "PF-PF-PF-P", {1, 4, 7}),
    ("three lone failures of two shapes: no shape three times", "PFPGPFP", set()),
    ("one shape three times, another once: only that shape", "PFPGPFPFP", {1, 5, 7}),
    ("two failures of two shapes side by side are a streak", "PFGPFPFP", set()),
]  # fmt: skip


@pytest.mark.parametrize("text,expected", [f[1:] for f in FLAKES], ids=[f[0] for f in FLAKES])
def test_what_is_flaky_on_main(text, expected):
    wanted = {e if isinstance(e, str) else f"c{e}" for e in expected}
    assert flakes.flaky_commits(series(text)) == wanted


def oracle_flakes(text: str) -> set[str]:
    """Issue 58's rule read off the letters, written apart from history/flakes.py: drop what said
    nothing, then a lone failure is a failing letter with no failing letter beside it; a shape
    with three lone failures that have a letter before them makes all its lone failures flakes;
    every X is a flake."""
    kept = [(i, c) for i, c in enumerate(text) if c != "-"]
    letters = "".join(c for _, c in kept)
    out = {f"c{i}" for i, c in kept if c == "X"}
    for shape in "FG":
        lone = [m.start() for m in re.finditer(rf"(?<![FG]){shape}(?![FG])", letters)]
        inside = [p for p in lone if p > 0]
        if len(inside) >= 3:
            out |= {f"c{kept[p][0]}" for p in lone}
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="PFGX-", max_size=14))
def test_the_flake_rule_agrees_with_its_oracle(text):
    assert flakes.flaky_commits(series(text)) == oracle_flakes(text)


OUTCOMES = [
    # (what, (verdict, status) of each result on one commit, what the commit says)
    ("a pass", [("pass", "passed")], "pass"),
    ("an xfail that failed as declared is its code's pass", [("skipped", "xfailed")], "pass"),
    ("a strict xfail's XPASS is a failure", [("regression", "failed")], "fail"),
    ("xfailed on one run, XPASS on another: flaky", [("skipped", "xfailed"), ("regression", "failed")], "flaky"),
    ("a loose xfail's XPASS passes", [("pass", "xpassed")], "pass"),
    ("a skip says nothing", [("skipped", "skipped")], None),
    ("a known gap says nothing", [("known_gap", "known_gap")], None),
    ("infra says nothing", [("infra", "failed")], None),
    ("infra beside a failure: a failure", [("infra", "failed"), ("unconfirmed", "failed")], "fail"),
    ("a flaky verdict", [("flaky", "passed")], "flaky"),
]  # fmt: skip


@pytest.mark.parametrize("results,said", [o[1:] for o in OUTCOMES], ids=[o[0] for o in OUTCOMES])
def test_what_a_main_commit_says(results, said):
    assert flakes.outcome(results) == said


# main's state from records --------------------------------------------------------------------

A = "tests/test_engine.py::test_engine_0"
B = "tests/test_api.py::test_api_0"
OLD, NEW = "tests/v1/test_moved.py::test_moved[a|b]", "tests/entry/test_moved.py::test_moved[a|b]"
ACCURACY = "AssertionError: gsm8k accuracy {:.3f} below 0.700"


def attempts(cell: str, i: int) -> list[truth.Attempt] | None:
    """A test's attempts in one run, from a letter: P passes, F fails (both attempts, its count
    changing from run to run), A fails with an accuracy (a break), x xfails as declared, S fails as
    a strict xfail's XPASS, `-` not run."""
    if cell == "-":
        return None
    message = {
        "F": f"AssertionError: engine step timed out after {i + 3} retries",
        "A": ACCURACY.format(0.41 + i / 1000),
        "S": truth.XPASS,
    }.get(cell)
    if message is not None:
        return [truth.Attempt(message), truth.Attempt(message)]
    return [truth.Attempt(None, xfail=cell == "x")]


def main_history(tmp_path, plans: dict[str, str], complete: str = "") -> tuple:
    """A store with one main run per commit (oldest first) and main's commit list: `plans` maps a
    test id to its letters per commit (`attempts`); `complete`: per commit, `n` where its run did not
    complete."""
    length = len(next(iter(plans.values())))
    commits = [f"{i + 1:040x}" for i in range(length)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    conn = store.connect(tmp_path / "history.db")
    for i, sha in enumerate(commits):
        plan = {t: a for t, letters in plans.items() if (a := attempts(letters[i], i)) is not None}
        folder = tmp_path / f"main-{i}"
        folder.mkdir()
        prov = truth._event(folder, "push", {"after": sha, "before": "0" * 40, "repository": {"full_name": truth.REPO, "default_branch": "main"}}, "refs/heads/main", sha, i + 1)  # fmt: skip
        manifest = truth._manifest("MI300X", "node-1", prov, truth.Clock(length).at(i))
        truth._write(folder, truth._records(plan, {}, 1.0e9 + 100 * i), manifest)
        if complete[i : i + 1] == "n":
            report = json.loads((folder / "gate-report.json").read_text())
            report.update(
                complete=False,
                incomplete_causes=["the runner went away"],
                conclusion="incomplete",
            )
            (folder / "gate-report.json").write_text(json.dumps(report))
        store.ingest(conn, folder, "manifest", str(i + 1), sha)
    return conn, commits


def trunk_of(conn, commits) -> dict:
    return state.build(conn, "MI300X", commits=commits, generated="2099-01-01T00:00:00+00:00")


def test_a_test_failing_on_alternate_commits_is_flaky_and_listed(tmp_path):
    conn, commits = main_history(tmp_path, {A: "PFPFPFPF", B: "PPPPPPPP"})
    entry = trunk_of(conn, commits)["tests"][A]
    assert entry["state"] == "flaky" and entry["flaky_count"] == 4
    assert entry["flaky_commits"] == [commits[i] for i in (1, 3, 5, 7)]
    assert entry["since"] is None and entry["breaks"] == []
    # what excuses a PR as flaky on main: the flake's shape, whatever its count
    kind, _ = judgement.failure_class(
        "AssertionError: engine step timed out after 99 retries",
        entry,
        judgement.place(commits[6], commits),
        commits,
    )
    assert kind == judgement.FLAKY_ON_MAIN
    listed = queries.flaky(conn, landed=frozenset(commits))["flaky"]
    assert [(f["test"], f["skus"], f["flaky_runs"]) for f in listed] == [(A, ["MI300X"], 4)]


def test_a_break_its_revert_and_its_re_land_are_not_flaky(tmp_path):
    conn, commits = main_history(tmp_path, {A: "PAAPPAAA", B: "PPPPPPPP"})
    entry = trunk_of(conn, commits)["tests"][A]
    assert entry["state"] == "failing" and entry["flaky_count"] == 0
    assert entry["since"]["sha"] == commits[5] and entry["last_green"]["sha"] == commits[4]
    assert [b["since"]["sha"] for b in entry["breaks"]] == [commits[1]]
    assert queries.flaky(conn, landed=frozenset(commits))["flaky"] == []
    # a PR based inside the earlier episode fails it as main did then
    kind, why = judgement.failure_class(
        entry["fingerprints"][0], entry, judgement.place(commits[2], commits), commits
    )
    assert kind == judgement.PRE_EXISTING, why


def test_a_two_commit_streak_after_lone_failures_is_failing(tmp_path):
    """Flaky or not, main fails it on the two newest commits: a streak, its current failure."""
    conn, commits = main_history(tmp_path, {A: "PFPFPFPFF", B: "PPPPPPPPP"})
    entry = trunk_of(conn, commits)["tests"][A]
    assert entry["state"] == "failing" and entry["flaky_count"] == 3
    assert (entry["since"]["sha"], entry["last_green"]["sha"]) == (commits[7], commits[6])


def test_a_strict_xfails_xfailed_commits_are_its_green(tmp_path):
    """xfail(strict=True): xfailed until c3, an XPASS (a failure) from c4 on: its last green is
    c3 and the suspects are c4 (a commit the list has between tested ones too)."""
    conn, commits = main_history(tmp_path, {A: "xxx-xSSS", B: "PPPPPPPP"})
    entry = trunk_of(conn, commits)["tests"][A]
    assert entry["state"] == "failing"
    assert entry["since"]["sha"] == commits[5] and entry["last_green"]["sha"] == commits[4]
    assert entry["suspects"] == [commits[5]] and entry["fingerprints"] == [truth.XPASS]
    # the quarantine reads the xfailed runs as passes: three lift it
    conn2, commits2 = main_history(tmp_path / "again", {A: "SSxxx", B: "PPPPP"})
    held = {"schema": quarantine.QUARANTINE_SCHEMA, "updated": None, "tests": [
        {"test": A, "sku": "MI300X", "since": commits2[0], "quarantined": "x", "fingerprints": [], "reason": "r"}]}  # fmt: skip
    _, _, lifted = quarantine.update(conn2, held, trunk_of(conn2, commits2), lift_after=3)
    assert lifted == [A]


IDENTITY = [
    # (what, the plans, incomplete runs, the expected (test -> (state, since, last green)))
    ("a deleted test failing when it went: gone from the first run without it, never failing",
     {A: "PAAA---", B: "PPPPPPP"}, "",
     {A: ("gone", None, None)}),
    ("a test moved to another file continues its history: since and last green from both ids",
     {OLD: "PPAA---", NEW: "----AAA", B: "PPPPPPP"}, "",
     {OLD: ("gone", None, None), NEW: ("failing", 2, 1)}),
    ("moved at the commit that broke it: the old id's last pass is the last green",
     {OLD: "PPP----", NEW: "---AAAA", B: "PPPPPPP"}, "",
     {NEW: ("failing", 3, 2)}),
    ("moved, then fixed: the new id passes, the old one is gone",
     {OLD: "PAA----", NEW: "---AAPP", B: "PPPPPPP"}, "",
     {OLD: ("gone", None, None), NEW: ("passing", None, None)}),
    ("the newest run did not complete: a test it lacks is not gone (yet)",
     {A: "PAAAAA-", B: "PPPPPPP"}, "------n",
     {A: ("failing", 1, 0)}),
    ("the same function in two files at once is two tests, not a move",
     {OLD: "PAAAAA-", NEW: "PPPPPPP", B: "PPPPPPP"}, "",
     {OLD: ("gone", None, None), NEW: (None, None, None)}),
]  # fmt: skip


@pytest.mark.parametrize(
    "plans,complete,expected", [i[1:] for i in IDENTITY], ids=[i[0] for i in IDENTITY]
)
def test_a_test_id_main_no_longer_runs_is_gone(tmp_path, plans, complete, expected):
    conn, commits = main_history(tmp_path, plans, complete)
    doc = trunk_of(conn, commits)
    for test, (kind, since, green) in expected.items():
        entry = doc["tests"].get(test)
        assert (entry or {}).get("state") == kind, (test, entry)
        if kind == "failing":
            assert entry["since"]["sha"] == commits[since]
            assert (entry["last_green"] or {}).get("sha") == commits[green]
            assert entry["suspects"] == commits[green + 1 : since + 1]


def test_a_gone_id_ends_its_streak_where_main_stopped_running_it(tmp_path):
    """Deleted at c4 while failing since c1: a PR based before c4 runs it and fails it as main did
    (pre-existing); one based at c4 or later has no such test, and one that brings it back fails on
    its own (new). The tracker says it is gone, the quarantine lifts it."""
    conn, commits = main_history(tmp_path, {A: "PAAA---", B: "PPPPPPP"})
    doc = trunk_of(conn, commits)
    entry = doc["tests"][A]
    assert entry["gone"]["sha"] == commits[4] and entry["moved_to"] is None
    assert (
        entry["breaks"][-1]["ended"] == "gone" and entry["breaks"][-1]["fixed"]["sha"] == commits[4]
    )
    fingerprint = ACCURACY.format(0.412)
    for base, kind in ((2, judgement.PRE_EXISTING), (5, judgement.NEW), (0, judgement.NEW)):
        got, why = judgement.failure_class(fingerprint, entry, judgement.place(commits[base], commits), commits)  # fmt: skip
        assert got == kind, (base, why)
    from rocm_gate.github import tracker

    assert "Gone from main's runs (1)" in tracker.render(doc, "vllm")[1]
    held = {"schema": quarantine.QUARANTINE_SCHEMA, "updated": None, "tests": [
        {"test": A, "sku": "MI300X", "since": commits[1], "quarantined": "x", "fingerprints": [], "reason": "r"}]}  # fmt: skip
    assert quarantine.update(conn, held, doc)[2] == [A]


def test_a_moved_test_is_judged_under_either_id(tmp_path):
    """Moved at c4, broken since c2: a PR based at c3 runs the old id, one based at c5 the new one;
    each fails as main does (pre-existing); based at c1, before the break, it is the PR's."""
    conn, commits = main_history(tmp_path, {OLD: "PPAA---", NEW: "----AAA", B: "PPPPPPP"})
    doc = trunk_of(conn, commits)
    assert doc["tests"][NEW]["moved_from"] == [OLD] and doc["tests"][OLD]["moved_to"] == NEW
    fingerprint = ACCURACY.format(0.413)
    for test, base, kind in ((OLD, 3, judgement.PRE_EXISTING), (NEW, 5, judgement.PRE_EXISTING), (OLD, 1, judgement.NEW)):  # fmt: skip
        got, why = judgement.failure_class(
            fingerprint, doc["tests"][test], judgement.place(commits[base], commits), commits
        )
        assert got == kind, (test, base, why)


def test_a_run_of_no_test_makes_nothing_gone(tmp_path):
    """The newest complete main run ran no test at all (its collection found none): it says
    nothing of which tests main runs, so main's failure stays failing."""
    conn, commits = main_history(tmp_path, {A: "PAAA", B: "PPPP"})
    folder = tmp_path / "empty"
    folder.mkdir()
    sha = f"{99:040x}"
    prov = truth._event(folder, "push", {"after": sha, "before": "0" * 40, "repository": {"full_name": truth.REPO, "default_branch": "main"}}, "refs/heads/main", sha, 99)  # fmt: skip
    truth._write(folder, truth._records({}, {}, 2.0e9), truth._manifest("MI300X", "node-1", prov, truth.Clock(1).at(1)))  # fmt: skip
    assert json.loads((folder / "gate-report.json").read_text())["complete"]
    store.ingest(conn, folder, "manifest", "99", sha)
    doc = trunk_of(conn, [*commits, sha])
    assert doc["newest"]["sha"] == sha and doc["tests"][A]["state"] == "failing"


# history's questions ----------------------------------------------------------------------------


def _run(tmp_path, name: str, sha: str, plan: dict, event: str = "push", run_id: int = 1):
    """One main run's results folder (a push, or a merge queue's candidate of `sha`)."""
    folder = tmp_path / name
    folder.mkdir()
    repository = {"full_name": truth.REPO, "default_branch": "main"}
    if event == "merge_group":
        queue = f"refs/heads/gh-readonly-queue/main/pr-{run_id}-{'0' * 40}"
        group = {"head_sha": sha, "head_ref": queue, "base_sha": "0" * 40, "base_ref": "refs/heads/main"}  # fmt: skip
        prov = truth._event(folder, "merge_group", {"merge_group": group, "repository": repository}, queue, sha, run_id)  # fmt: skip
    else:
        prov = truth._event(folder, "push", {"after": sha, "before": "0" * 40, "repository": repository}, "refs/heads/main", sha, run_id)  # fmt: skip
    manifest = truth._manifest("MI300X", "node-1", prov, truth.Clock(4).at(run_id))
    truth._write(folder, truth._records(plan, {}, 1.0e9 + 100 * run_id), manifest)
    return folder


def test_a_run_of_no_test_has_no_parity_figure(tmp_path):
    """A main run that ran no test, compared with a reference whose tests pass, has a parity report
    of 0%: it measured nothing, and is neither the newest figure nor a point of the trend."""
    from rocm_gate import cli
    from rocm_gate.dashboard import data, site

    passing = {A: [truth.Attempt(None)], B: [truth.Attempt(None)]}
    measured = _run(tmp_path, "measured", f"{1:040x}", passing, run_id=1)
    empty = _run(tmp_path, "empty", f"{2:040x}", {}, run_id=2)
    for folder in (measured, empty):
        reference = measured / "gate-report.json"
        args = ["parity", "--reference", str(reference), "--candidate", str(folder / "gate-report.json"), "--out", str(folder)]  # fmt: skip
        assert cli.main(args) == 0
    assert json.loads((empty / "parity.json").read_text())["overall"]["parity"] == 0.0
    conn = store.connect(tmp_path / "history.db")
    for n, folder in enumerate((measured, empty), 1):
        store.ingest(conn, folder, "manifest", str(n), f"{n:040x}")
    now = queries.parity_now(conn)
    assert now["MI300X"]["git_sha"] == f"{1:040x}" and now["MI300X"]["parity"] == 1.0
    assert {row["run"] for row in queries.parity_trend(conn)} == {now["MI300X"]["id"]}
    page = site.pages(data.read(conn))["index.html"]
    assert "100.0%" in page and not re.search(r"(?<![\d.])0\.0%", page)


def test_an_ejected_candidates_failure_is_never_mains_on_the_dashboard(tmp_path):
    """A merge queue's candidate that never landed failed A: the dashboard's lists of main's
    failures, A's page and the main grid leave it out (it is `other`'s); once main's commit list
    holds its commit, it is main's."""
    from rocm_gate.dashboard import site

    landed = [f"{1:040x}", f"{3:040x}"]
    ejected = f"{2:040x}"
    failing = {A: [truth.Attempt("AssertionError: only the candidate"), truth.Attempt("AssertionError: only the candidate")], B: [truth.Attempt(None)]}  # fmt: skip
    passing = {A: [truth.Attempt(None)], B: [truth.Attempt(None)]}
    conn = store.connect(tmp_path / "history.db")
    runs = [("c1", landed[0], passing, "push"), ("q", ejected, failing, "merge_group"), ("c3", landed[1], passing, "push")]  # fmt: skip
    for n, (name, sha, plan, event) in enumerate(runs, 1):
        store.ingest(conn, _run(tmp_path, name, sha, plan, event, n), "manifest", str(n), sha)
    main = frozenset(landed)
    assert queries.main_failures(conn, landed=main) == queries.main_failures(conn) == []
    assert queries.main_failures(conn, landed=main | {ejected}) == [A]
    assert [r["origin"] for r in queries.test_runs(conn, A, landed=main)] == ["main", "other", "main"]  # fmt: skip
    assert [r["git_sha"] for r in queries.runs(conn, origin="main", landed=main)] == landed[::-1]
    assert [r["git_sha"] for r in queries.runs(conn, origin="other", landed=main)] == [ejected]
    assert [r["git_sha"] for r in queries.grid(conn, 40, "main", main)["runs"]] == landed[::-1]
    site.build(conn, tmp_path / "site", main)
    assert A not in (tmp_path / "site" / "trunk.html").read_text()
    assert not (tmp_path / "site" / site.test_page_name(A)).exists()


def test_the_flaky_list_and_the_trunk_state_agree_on_generated_histories(tmp_path):
    """Per test and commit, from letters drawn at random: what the trunk state counts as flaky on
    main (its flaky commits) is what the flaky list lists, on one rule."""
    import random

    rng = random.Random(58)
    for attempt in range(12):
        letters = "".join(rng.choice("PPFFx") for _ in range(rng.randint(3, 9)))
        plans = {A: letters.replace("x", "P"), B: "P" * len(letters)}
        conn, commits = main_history(tmp_path / str(attempt), plans)
        entry = trunk_of(conn, commits)["tests"].get(A)
        listed = [f["test"] for f in queries.flaky(conn, landed=frozenset(commits))["flaky"]]
        expected = oracle_flakes(letters.replace("x", "P"))
        assert bool(entry and entry["flaky_count"]) == bool(expected) == (A in listed), letters
        if entry:
            assert set(entry["flaky_commits"]) == {commits[int(c[1:])] for c in expected}


# real plugin runs in a real git history ---------------------------------------------------------

ENGINE = """
import os
import pytest

pytestmark = pytest.mark.rocm_gate(group="engine")

def test_stable():
    pass

def test_alternates():
    # no change to its code: whether it loses the race is the run's
    assert os.environ["LOSES_RACE"] != "1", "engine step timed out after %s retries" % os.environ["RETRIES"]
"""
FP8 = """
import pytest
from kernel import FP8

pytestmark = pytest.mark.rocm_gate(group="attention")

@pytest.mark.xfail(strict=True, reason="fp8 kv cache not supported on ROCm yet")
def test_fp8():
    assert FP8
"""
MOVED_TEST = """
import pytest
from kernel import BROKEN

pytestmark = pytest.mark.rocm_gate(group="api")

@pytest.mark.parametrize("a,b", [("x", "y")])
def test_moved(a, b):
    assert not BROKEN, "gsm8k accuracy 0.412 below 0.700"
"""


def _commit(git: list[str], repo, files: dict[str, str | None], message: str) -> str:
    for path, text in files.items():
        target = repo / path
        if text is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", message], check=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def _push_run(repo, sha: str, index: int, out, loses_race: bool):
    event = out.parent / f"event-{index}.json"
    event.write_text(json.dumps({"after": sha, "before": "0" * 40, "ref": "refs/heads/main", "repository": {"full_name": "vllm-project/vllm", "default_branch": "main"}}))  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{repo}",
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REF": "refs/heads/main",
        "GITHUB_SHA": sha,
        "GITHUB_REPOSITORY": "vllm-project/vllm",
        "GITHUB_RUN_ID": str(index + 1),
        "LOSES_RACE": "1" if loses_race else "0",
        "RETRIES": str(3 + index),
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-platform=mi300x-1",
            f"--rocm-report-dir={out}",
            "-p",
            "no:cacheprovider",
            "-q",
            "tests",
        ],  # fmt: skip
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out / "gate-report.json").is_file(), done.stdout + done.stderr


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A repository's main: c0 adds the tests; the engine's test loses its race on c1, c3 and c6
    (no change to it); c2 breaks test_moved; c3 fixes what the strict xfail declared (it XPASSes
    from then on); c5 moves test_moved's file; c6, c7 change nothing the tests see. Each commit is
    tested by a push run, c4 only by no run (its suspects are found on the commit list)."""
    root = tmp_path_factory.mktemp("upstream-history")
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    kernel = "FP8 = {}\nBROKEN = {}\n"
    changes = [
        {"kernel.py": kernel.format(False, False), "tests/test_engine.py": ENGINE, "tests/test_fp8.py": FP8, "tests/v1/test_old.py": MOVED_TEST},
        {"README": "c1"},
        {"kernel.py": kernel.format(False, True)},
        {"kernel.py": kernel.format(True, True)},
        {"README": "c4"},
        {"tests/v1/test_old.py": None, "tests/entry/test_old.py": MOVED_TEST},
        {"README": "c6"},
        {"README": "c7"},
    ]  # fmt: skip
    commits, folders = [], []
    for i, files in enumerate(changes):
        commits.append(_commit(git, repo, files, f"c{i}"))
        if i == 4:
            continue
        out = root / f"main-{i}"
        _push_run(repo, commits[-1], i, out, loses_race=i in (1, 3, 6))
        folders.append(out)
    db = root / "history.db"
    added = rocm_gate("history", "add", "--db", db, *folders)
    assert added.returncode == 0, added.stderr
    out = root / "trunk.json"
    made = rocm_gate("history", "trunk", "--db", db, "--sku", "MI300X", "--repo", repo, "--out", out)  # fmt: skip
    assert made.returncode == 0, made.stderr
    found = rocm_gate("history", "suspects", "--db", db, "--json")
    return {
        "commits": commits,
        "state": json.loads(out.read_text()),
        "said": made.stdout,
        "flaky": json.loads(found.stdout)["flaky"],
    }


def rocm_gate(*args):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.slow
def test_real_runs_a_test_failing_on_alternate_commits_is_flaky(upstream):
    entry = upstream["state"]["tests"]["tests/test_engine.py::test_alternates"]
    c = upstream["commits"]
    assert entry["state"] == "passing" and entry["flaky_commits"] == [c[1], c[3], c[6]]
    assert entry["flaky_fingerprints"] and entry["since"] is None
    assert [f["test"] for f in upstream["flaky"]] == ["tests/test_engine.py::test_alternates"]


@pytest.mark.slow
def test_real_runs_a_strict_xpass_has_a_last_green_and_suspects(upstream):
    entry = upstream["state"]["tests"]["tests/test_fp8.py::test_fp8"]
    c = upstream["commits"]
    assert entry["state"] == "failing" and entry["fingerprints"][0].startswith("[XPASS(strict)]")
    assert (entry["since"]["sha"], entry["last_green"]["sha"]) == (c[3], c[2])
    assert entry["suspects"] == [c[3]]


@pytest.mark.slow
def test_real_runs_a_moved_test_continues_and_its_old_id_is_gone(upstream):
    tests, c = upstream["state"]["tests"], upstream["commits"]
    old, new = "tests/v1/test_old.py::test_moved[x-y]", "tests/entry/test_old.py::test_moved[x-y]"
    assert tests[new]["state"] == "failing" and tests[new]["moved_from"] == [old]
    assert (tests[new]["since"]["sha"], tests[new]["last_green"]["sha"]) == (c[2], c[1])
    assert tests[new]["suspects"] == [c[2]]
    assert tests[old]["state"] == "gone" and tests[old]["moved_to"] == new
    assert tests[old]["gone"]["sha"] == c[5]
    assert "1 gone from main's runs" in upstream["said"]
