"""Trunk-aware verdicts from real plugin runs: main runs (push events on the default branch) of a
small repository's commits, PR runs (pull_request events) on top of them, `rocm-gate history trunk`
and `rocm-gate publish --trunk` as the workflows call them; and the replay of vLLM's real main
history (benchmarks/trunk_replay.py) at a small size, which must meet the issue's goals.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import trunk_replay as replay  # noqa: E402  (the harness that runs the plugin under a GitHub event)

ENGINE, API, MOE, ATTENTION = (
    f"test_suite.py::{n}" for n in ("test_engine_0", "test_api_1", "test_moe_0", "test_attention_3")
)


def rocm_gate(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def world(broken=None, flaky=None) -> dict:
    return {"broken": broken or {}, "flaky": flaky or {}, "infra": [], "jitter": 3}


def broken_engine(logprob: float, token: int = 17) -> dict:
    """Main's break of the engine: greedy decoding diverges at the same token on every run, with a
    logprob that jitters by a little from run to run (one failure, results/fingerprint.py); a
    divergence at another token is another failure."""
    return {
        "test_engine_0": f"output of test_engine_0 diverged at token {token} (logprob {logprob:.3f})"
    }


def push(commits, index, w, platform="mi300x-1") -> replay.Run:
    return replay.Run(
        f"main-{platform}-{index}",
        w,
        "push",
        {
            "after": commits[index],
            "before": commits[index - 1] if index else "0" * 40,
            "repository": {"default_branch": "main"},
        },
        {
            "GITHUB_REF": "refs/heads/main",
            "GITHUB_SHA": commits[index],
            "GITHUB_RUN_ID": str(index),
        },
        platform=platform,
    )


def pull(number, base_sha, w) -> replay.Run:
    return replay.Run(
        f"pr-{number}",
        w,
        "pull_request",
        {
            "pull_request": {
                "number": number,
                "head": {"sha": replay.fake_sha("head", number)},
                "base": {"sha": base_sha},
            },
            "repository": {"default_branch": "main"},
        },
        {"GITHUB_REF": f"refs/pull/{number}/merge", "GITHUB_SHA": replay.fake_sha("merge", number)},
    )


@pytest.fixture(scope="module")
def trunk(tmp_path_factory):
    """Main: 8 real commits; tested at c0, c2, c4, c6 on MI300X. test_engine_0 breaks at c3 (untested), the
    flaky test flakes at c2, test_moe_0 fails at c2 and c4 and is fixed by c6 (a regression, not a
    flake); on MI355X test_attention_3 always fails (an SKU difference, not a flake). Then five
    PRs."""
    root = tmp_path_factory.mktemp("trunk")
    repo = root / "upstream"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    for i in range(8):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
    commits = subprocess.run(
        [*git, "rev-list", "--reverse", "main"], capture_output=True, text=True
    ).stdout.split()
    moe = {"test_moe_0": "moe routing off by 3"}
    mains = [
        push(commits, 0, world()),
        push(commits, 2, world(moe, {"test_api_1": "attempt"})),
        push(commits, 4, world({**moe, **broken_engine(-0.41)})),
        push(commits, 6, world(broken_engine(-0.43))),
    ]
    sku_diff = {"test_attention_3": "fp8 kernel missing"}
    mains += [
        push(commits, 2, world(sku_diff), "mi355x-1"),
        push(commits, 6, world(sku_diff), "mi355x-1"),
    ]
    prs = {
        "clean": pull(1, commits[6], world(broken_engine(-0.42))),
        "new": pull(
            2,
            commits[6],
            world({**broken_engine(-0.40), "test_attention_0": "KeyError: 'rope_scaling'"}),
        ),
        "differently": pull(3, commits[6], world({"test_engine_0": "KeyError: 'rope_scaling'"})),
        "before_break": pull(4, commits[2], world(broken_engine(-0.44))),
        "fixes": pull(5, commits[6], world()),
    }
    for run in mains + list(prs.values()):
        replay.execute(run, root)
    db = root / "history.db"
    added = rocm_gate("history", "add", "--db", db, *[r.folder for r in mains + list(prs.values())])
    assert added.returncode == 0, added.stderr
    out = root / "trunk.json"
    made = rocm_gate(
        "history",
        "trunk",
        "--db",
        db,
        "--sku",
        "MI300X",
        "--repo",
        repo,
        "--out",
        out,
        "--tracker-url",
        "https://github.com/o/r/issues/9",
    )
    assert made.returncode == 0, made.stderr
    return {
        "root": root,
        "db": db,
        "commits": commits,
        "prs": prs,
        "trunk": out,
        "state": json.loads(out.read_text()),
    }


def publish(run: replay.Run, *extra) -> tuple[subprocess.CompletedProcess, dict]:
    head = run.payload["pull_request"]["head"]["sha"]
    done = rocm_gate("publish", run.folder, "--sha", head, "--dry-run", "--allow-simulated", *extra)
    return done, (json.loads(done.stdout) if done.stdout.startswith("{") else {})


def test_trunk_state_names_since_last_green_and_the_suspect_commits(trunk):
    state, commits = trunk["state"], trunk["commits"]
    engine = state["tests"][ENGINE]
    assert engine["state"] == "failing"
    assert engine["since"]["sha"] == commits[4] and engine["last_green"]["sha"] == commits[2]
    # the untested c3 is in the range, from the checkout's history
    assert engine["suspects"] == [commits[3], commits[4]] and engine["suspect_count"] == 2
    # the two runs' logprobs (-0.41, -0.43) jitter: one failure, listed once (the newest run's)
    assert engine["fingerprints"] == [
        "AssertionError: output of test_engine_0 diverged at token 17 (logprob -0.430)"
    ]
    assert state["main_runs"] == 4 and state["newest"]["sha"] == commits[6]
    assert state["tests"][MOE]["state"] == "passing" and state["tests"][MOE]["flips"] == 2
    # PR runs never enter main's state: PR 2's new failure is not in it
    assert "test_suite.py::test_attention_0" not in state["tests"]


def test_flaky_means_pass_and_fail_on_one_commit_and_sku(trunk):
    found = json.loads(rocm_gate("history", "suspects", "--db", trunk["db"], "--json").stdout)
    # not the fixed regression, not the MI355X-only failure
    assert [f["test"] for f in found["flaky"]] == [API]
    assert (
        trunk["state"]["tests"][API]["flaky_count"] == 1
        and not trunk["state"]["tests"][MOE]["flaky_count"]
    )
    mi355x = rocm_gate(
        "history",
        "trunk",
        "--db",
        trunk["db"],
        "--sku",
        "MI355X",
        "--out",
        trunk["root"] / "t.json",
    )
    assert mi355x.returncode == 0, mi355x.stderr
    other = json.loads((trunk["root"] / "t.json").read_text())
    assert (
        other["tests"][ATTENTION]["state"] == "failing"
        and not other["tests"][ATTENTION]["flaky_count"]
    )
    assert other["tests"][ATTENTION]["last_green"] is None  # red since before its window


def test_a_pr_is_not_blocked_by_a_failure_already_on_main(trunk):
    alone = publish(trunk["prs"]["clean"])[1]
    assert alone["conclusion"] == "failure"
    done, check = publish(trunk["prs"]["clean"], "--trunk", trunk["trunk"])
    assert done.returncode == 0, done.stderr
    # neutral against main's state; these results are simulated, and a simulated run never passes a
    # check
    assert check["conclusion"] == "action_required"
    summary = check["output"]["summary"]
    assert "none new: already failing, flaky or quarantined on main" in summary
    assert (
        "Pre-existing on main (not blocking) (1)" in summary and trunk["commits"][4][:12] in summary
    )
    assert "https://github.com/o/r/issues/9" in summary
    assert summary.index("Pre-existing on main") < summary.index("Parity with CUDA")
    assert all(a["annotation_level"] == "warning" for a in check["output"].get("annotations", []))


def test_on_a_detected_platform_a_pr_with_only_main_failures_is_neutral(trunk):
    from rocm_gate.github import artifacts, checks

    results = artifacts.read_results(trunk["prs"]["clean"].folder)
    results.manifest["platform"].pop("profile")  # as a run on detected hardware records it
    state = json.loads(trunk["trunk"].read_text())
    assert checks.build(results, "rocm-gate / MI300X-1").conclusion == "failure"
    assert checks.build(results, "rocm-gate / MI300X-1", trunk=state).conclusion == "neutral"
    new = artifacts.read_results(trunk["prs"]["new"].folder)
    new.manifest["platform"].pop("profile")
    assert checks.build(new, "rocm-gate / MI300X-1", trunk=state).conclusion == "failure"


def test_a_trunk_state_too_old_or_older_than_the_base_excuses_nothing(trunk):
    """Knowledge of main has an age: main may have been fixed (and broken otherwise) since. A trunk
    state two weeks old, or made before the commit the PR's code is based on, judged a PR's failure
    pre-existing."""
    import datetime as dt

    from rocm_gate.github import artifacts, checks

    results = artifacts.read_results(trunk["prs"]["clean"].folder)
    results.manifest["platform"].pop("profile")
    state = json.loads(trunk["trunk"].read_text())
    made = dt.datetime.fromisoformat(state["generated"])
    assert checks.build(results, "rocm-gate / MI300X-1", trunk=state).conclusion == "neutral"
    old = {**state, "generated": (made - dt.timedelta(days=14)).isoformat()}
    stale = checks.build(results, "rocm-gate / MI300X-1", trunk=old)
    assert stale.conclusion == "failure"
    assert (
        "older than 48 h" in stale.summary and "not used; every failure is judged" in stale.summary
    )
    assert (
        checks.build(results, "rocm-gate / MI300X-1", trunk=old, trunk_max_age_h=400).conclusion
        == "neutral"
    )
    later_base = checks.build(
        results, "rocm-gate / MI300X-1", trunk=state, base_date=made + dt.timedelta(hours=1)
    )
    assert later_base.conclusion == "failure" and "cannot know main there" in later_base.summary
    untimed = {k: v for k, v in state.items() if k != "generated"}
    assert checks.build(results, "rocm-gate / MI300X-1", trunk=untimed).conclusion == "failure"


def test_a_new_regression_still_blocks_and_is_listed_apart(trunk):
    check = publish(trunk["prs"]["new"], "--trunk", trunk["trunk"])[1]
    assert check["conclusion"] == "failure"
    summary = check["output"]["summary"]
    assert "Regressions (blocking): new in this PR (1)" in summary and "test_attention_0" in summary
    assert "Pre-existing on main (not blocking) (1)" in summary
    assert check["output"]["title"].endswith(" 1 regression(s)")  # after SIMULATED:


def test_a_different_failure_of_a_test_main_fails_still_blocks(trunk):
    check = publish(trunk["prs"]["differently"], "--trunk", trunk["trunk"])[1]
    assert check["conclusion"] == "failure"
    assert "but differently" in check["output"]["summary"]


def test_a_pr_based_before_main_broke_is_blocked_by_the_same_failure(trunk):
    # its base (c2) is main's last green commit for the test: main's failure is not in the code that
    # ran
    check = publish(trunk["prs"]["before_break"], "--trunk", trunk["trunk"])[1]
    assert check["conclusion"] == "failure"
    assert "at or before main's last green commit" in check["output"]["summary"]


def test_a_fix_of_main_is_said(trunk):
    check = publish(trunk["prs"]["fixes"], "--trunk", trunk["trunk"])[1]
    assert "Fixed by this PR (failing on main, passing here) (1)" in check["output"]["summary"]
    assert check["conclusion"] == "action_required"  # simulated results never pass


def test_a_trunk_state_of_another_sku_is_not_used_and_says_so(trunk, tmp_path):
    other = tmp_path / "t.json"
    assert (
        rocm_gate(
            "history", "trunk", "--db", trunk["db"], "--sku", "MI355X", "--out", other
        ).returncode
        == 0
    )
    check = publish(trunk["prs"]["clean"], "--trunk", other)[1]
    assert check["conclusion"] == "failure" and "not used" in check["output"]["summary"]


@pytest.mark.parametrize("content", ["{", '{"schema": "pytest-rocm/trunk/1"}', "[1]"])
def test_a_bad_trunk_file_is_refused_naming_it(trunk, tmp_path, content):
    bad = tmp_path / "trunk.json"
    bad.write_text(content)
    done, _ = publish(trunk["prs"]["clean"], "--trunk", bad)
    assert done.returncode == 2 and str(bad) in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("window", ["0", "-3", "x"])
def test_a_window_below_one_is_a_usage_error(trunk, window):
    done = rocm_gate("history", "suspects", "--db", trunk["db"], "--window", window)
    assert done.returncode == 2 and "--window" in done.stderr and "Traceback" not in done.stderr


def test_a_damaged_store_is_named_not_a_traceback(trunk, tmp_path):
    damaged = tmp_path / "damaged.db"
    raw = bytearray(trunk["db"].read_bytes())
    raw[4096 * 2 : 4096 * 6] = b"\xff" * (4096 * 4)  # pages of the tables, not the header
    damaged.write_bytes(bytes(raw))
    for args in (["suspects"], ["trunk", "--sku", "MI300X", "--out", tmp_path / "t.json"]):
        done = rocm_gate("history", args[0], "--db", damaged, *args[1:])
        assert done.returncode == 2, done.stdout
        assert str(damaged) in done.stderr and "Traceback" not in done.stderr


def test_control_characters_in_test_ids_are_escaped_in_terminal_output(trunk, tmp_path):
    import shutil

    folder = tmp_path / "crafted"
    shutil.copytree(trunk["prs"]["clean"].folder, folder)
    report = json.loads((folder / "gate-report.json").read_text())
    evil = "test_suite.py::test_x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J"
    report["tests"][evil] = {**report["tests"][API], "verdict": "flaky", "status": "passed"}
    (folder / "gate-report.json").write_text(json.dumps(report))
    db = tmp_path / "h.db"
    # a run no PR wrote (suspects read no PR's runs): the name still comes from the results
    assert rocm_gate("history", "add", "--db", db, "--origin", "other", folder).returncode == 0
    shown = rocm_gate("history", "suspects", "--db", db)
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\u001b]52" in shown.stdout


def test_a_known_gap_that_now_passes_is_said_in_the_check(trunk, tmp_path):
    import shutil

    folder = tmp_path / "gap"
    shutil.copytree(trunk["prs"]["fixes"].folder, folder)
    report = json.loads((folder / "gate-report.json").read_text())
    report["tests"][ATTENTION]["known_gap"] = {
        "reason": "fp8",
        "issue": "https://github.com/o/r/issues/5",
        "mode": "xfail",
    }
    report["tests"][ATTENTION]["status"] = "xpassed"
    (folder / "gate-report.json").write_text(json.dumps(report))
    run = replay.Run("gap", {}, "pull_request", trunk["prs"]["fixes"].payload, {}, folder=folder)
    summary = publish(run)[1]["output"]["summary"]
    assert "Known gaps that now pass (remove the marker, close the issue) (1)" in summary
    assert "issues/5" in summary


def test_results_added_as_pr_runs_never_make_main_state_whatever_they_claim(trunk, tmp_path):
    # a fork's results folder can claim a push on main in its manifest: the dashboard workflow adds
    # every run GitHub does not list as main with --origin pr
    main_folders = sorted(trunk["root"].glob("main-mi300x-1-*/results"))
    db = tmp_path / "h.db"
    assert rocm_gate("history", "add", "--db", db, "--origin", "pr", *main_folders).returncode == 0
    done = rocm_gate(
        "history", "trunk", "--db", db, "--sku", "MI300X", "--out", tmp_path / "t.json"
    )
    assert "no main runs of MI300X" in done.stderr
    assert json.loads((tmp_path / "t.json").read_text())["main_runs"] == 0


def test_no_main_runs_of_the_sku_is_said(trunk, tmp_path):
    done = rocm_gate(
        "history", "trunk", "--db", trunk["db"], "--sku", "MI325X", "--out", tmp_path / "t.json"
    )
    assert done.returncode == 0 and "no main runs of MI325X" in done.stderr
    assert json.loads((tmp_path / "t.json").read_text())["tests"] == {}


def test_quarantine_adds_main_failures_red_too_long_and_lifts_green_ones(trunk, tmp_path):
    file = tmp_path / "quarantine.json"
    done = rocm_gate(
        "history",
        "quarantine",
        "--db",
        trunk["db"],
        "--sku",
        "MI300X",
        "--file",
        file,
        "--after-hours",
        "0",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(file.read_text())
    assert [(e["test"], e["sku"], e["since"]) for e in document["tests"]] == [
        (ENGINE, "MI300X", trunk["commits"][4])
    ]
    assert "added: " + ENGINE in done.stdout
    # again: nothing new; a day's threshold adds nothing to a fresh file
    assert (
        "0 added, 0 lifted"
        in rocm_gate(
            "history",
            "quarantine",
            "--db",
            trunk["db"],
            "--sku",
            "MI300X",
            "--file",
            file,
            "--after-hours",
            "0",
        ).stdout
    )
    fresh = tmp_path / "fresh.json"
    assert (
        "0 quarantined"
        in rocm_gate(
            "history",
            "quarantine",
            "--db",
            trunk["db"],
            "--sku",
            "MI300X",
            "--file",
            fresh,
            "--after-hours",
            "24",
        ).stdout
    )
    # test_moe_0 failed at c2 and c4 and passed at c6: lifted after one green main run, not after
    # two
    for lift, kept in (("2", True), ("1", False)):
        document["tests"].append(
            {"test": MOE, "sku": "MI300X", "since": trunk["commits"][2], "reason": "by hand"}
        )
        file.write_text(json.dumps(document))
        done = rocm_gate(
            "history",
            "quarantine",
            "--db",
            trunk["db"],
            "--sku",
            "MI300X",
            "--file",
            file,
            "--lift-after",
            lift,
            "--after-hours",
            "0",
        )
        document = json.loads(file.read_text())
        assert (MOE in [e["test"] for e in document["tests"]]) is kept, done.stdout
        assert ("lifted: " + MOE in done.stdout) is not kept


def test_a_quarantined_test_runs_never_blocks_and_is_reported(trunk, tmp_path):
    file = tmp_path / "quarantine.json"
    assert (
        rocm_gate(
            "history",
            "quarantine",
            "--db",
            trunk["db"],
            "--sku",
            "MI300X",
            "--file",
            file,
            "--after-hours",
            "0",
        ).returncode
        == 0
    )
    run = pull(7, trunk["commits"][6], world(broken_engine(-0.41)))
    run.args = (f"--rocm-quarantine={file}",)
    replay.execute(run, tmp_path)
    report = json.loads((run.folder / "gate-report.json").read_text())
    engine = report["tests"][ENGINE]
    # it ran (and failed); not blocking, so not rerun either
    assert (
        engine["verdict"] == "unconfirmed"
        and engine["blocking"] is False
        and engine["status"] == "failed"
    )
    assert engine["quarantine"]["since"] == trunk["commits"][4]
    assert report["conclusion"] == "success"
    check = publish(run)[1]
    assert "Quarantined (ran, never blocks) (1)" in check["output"]["summary"]
    # the entry carries the fingerprints it was entered with: a failure of another kind is the PR's,
    # rerun as a blocking gate and blocking
    differently = pull(
        10, trunk["commits"][6], world({"test_engine_0": "KeyError: 'rope_scaling'"})
    )
    differently.args = (f"--rocm-quarantine={file}",)
    replay.execute(differently, tmp_path)
    report = json.loads((differently.folder / "gate-report.json").read_text())
    engine = report["tests"][ENGINE]
    assert engine["quarantine"]["fingerprints"] and engine["quarantine"]["excused"] is False
    assert engine["verdict"] == "regression" and engine["blocking"] is True
    assert [a["status"] for a in engine["attempts"]] == ["failed", "failed"]
    assert report["conclusion"] == "failure"
    check = publish(differently)[1]
    assert "Quarantined (ran, never blocks)" not in check["output"]["summary"]
    assert "Regressions (blocking) (1)" in check["output"]["summary"]
    # on another SKU the entry does not apply
    other = pull(8, trunk["commits"][6], world(broken_engine(-0.41)))
    other.args, other.platform = (f"--rocm-quarantine={file}",), "mi355x-1"
    replay.execute(other, tmp_path)
    assert json.loads((other.folder / "gate-report.json").read_text())["conclusion"] == "failure"


@pytest.mark.parametrize(
    "content", ["{", '{"schema": "pytest-rocm/quarantine/1", "tests": [{"test": 3}]}']
)
def test_a_bad_quarantine_file_stops_the_run_naming_it(tmp_path, content):
    file = tmp_path / "q.json"
    file.write_text(content)
    run = pull(9, "a" * 40, world())
    run.args = (f"--rocm-quarantine={file}",)
    with pytest.raises(SystemExit, match="no gate report"):
        replay.execute(run, tmp_path)


@pytest.mark.slow
def test_the_replay_of_vllm_main_meets_the_goals(tmp_path):
    figures = tmp_path / "replay.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "trunk_replay.py"),
            "--commits",
            "160",
            "--every",
            "4",
            "--prs",
            "16",
            "--json",
            figures,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(figures.read_text())
    assert out["breaks_seen_on_main"] >= 1 and out["prs_with_own_regression"] >= 1
    live = out["wirings"]["live"]
    # main's state as deployed: no clean PR is blocked by what a completed main run had shown, at
    # its publish or after, and every PR's own regression is blocked
    assert live["blocked_known"] == 0 and live["never_lifted"] == 0, live
    assert live["own_blocked"] == out["prs_with_own_regression"]
    assert out["wirings"]["alone"]["own_blocked"] == out["prs_with_own_regression"]
    assert out["suspect_range_contains_culprit"] == out["breaks_seen_on_main"]
    assert out["flaky_flagged"] == out["flaky_truth"]


@pytest.fixture
def github():
    from github_api import FakeGitHub

    with FakeGitHub(token="ghs_trackertoken") as server:
        yield server
        assert server.errors == [], "the fake sent a response GitHub's description does not allow"


def tracker(github, *args):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ROCM_GATE_"))}
    environ.update(
        GITHUB_API_URL=github.url,
        ROCM_GATE_PACE="0",
        GITHUB_REPOSITORY="vllm-project/vllm",
        GITHUB_TOKEN="ghs_trackertoken",
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "tracker", *map(str, args)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr and "ghs_trackertoken" not in done.stdout + done.stderr
    return done


def test_the_tracker_keeps_one_issue_per_sku_and_writes_only_changes(trunk, github, tmp_path):
    mi355x = tmp_path / "trunk-MI355X.json"
    assert (
        rocm_gate(
            "history", "trunk", "--db", trunk["db"], "--sku", "MI355X", "--out", mi355x
        ).returncode
        == 0
    )
    first = tracker(
        github,
        "--trunk",
        trunk["trunk"],
        "--trunk",
        mi355x,
        "--framework",
        "vllm",
        "--db",
        trunk["db"],
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.count(" created ") == 2
    issues = sorted(github.issues.values(), key=lambda i: i["number"])
    mi300x = issues[0]
    assert mi300x["labels"] == ["rocm-gate-tracker"] and mi300x["title"].startswith(
        "rocm-gate: main on MI300X (vllm): 1 failing"
    )
    body = mi300x["body"]
    # suspects
    assert ENGINE in body and trunk["commits"][4][:12] in body and trunk["commits"][3][:12] in body
    assert "Flaky on main (1)" in body and API in body
    # quiet ones collapsed
    assert "<details><summary>Green again (1)</summary>" in body and MOE in body
    writes = [entry for entry in github.log if entry[0] in ("POST", "PATCH")]
    again = tracker(
        github,
        "--trunk",
        trunk["trunk"],
        "--trunk",
        mi355x,
        "--framework",
        "vllm",
        "--db",
        trunk["db"],
    )
    assert again.stdout.count(" unchanged") == 2
    # nothing written
    assert [entry for entry in github.log if entry[0] in ("POST", "PATCH")] == writes
    # another framework is another issue; an edited issue is written back
    github.issues[mi300x["number"]]["body"] += "edited by hand"
    third = tracker(github, "--trunk", trunk["trunk"], "--framework", "vllm")
    assert f"issue #{mi300x['number']} updated" in third.stdout
    assert "edited by hand" not in github.issues[mi300x["number"]]["body"]
    assert " created " in tracker(github, "--trunk", trunk["trunk"], "--framework", "sglang").stdout
    assert len(github.issues) == 3


def test_a_tracker_create_that_timed_out_is_not_sent_twice(trunk, github):
    from rocm_gate.github import api
    from rocm_gate.github import tracker as tracking

    state = json.loads(trunk["trunk"].read_text())
    client = api.Client(
        api.connect(github.url, token="ghs_trackertoken", read_timeout=0.3),
        "vllm-project/vllm",
        settle_s=1.0,
        pace_s=0.0,
    )
    github.late_s = 0.3
    github.script_for = [("post", "/repos/vllm-project/vllm/issues", "late")]
    done = tracking.keep(client, state, "vllm")
    assert len(github.issues) == 1 and done.number in github.issues


def test_the_tracker_never_takes_over_an_issue_someone_else_opened(trunk, github):
    """Anyone may open an issue with the tracker's label and marker line: it is not the tracker's
    to rewrite (or to fill with links and mentions of its choosing)."""
    from rocm_gate.github import tracker as tracking

    github.issues[500] = {
        "repo": "vllm-project/vllm",
        "number": 500,
        "title": "look-alike",
        "body": tracking.marker("MI300X", "vllm") + "\nmine",
        "state": "open",
        "labels": ["rocm-gate-tracker"],
        "user": "mallory",
        "app": None,
        "updated_at": "2026-12-01T00:00:00Z",
    }
    done = tracker(github, "--trunk", trunk["trunk"], "--framework", "vllm")
    assert done.returncode == 0 and " created " in done.stdout, done.stdout + done.stderr
    assert github.issues[500]["body"].endswith("mine") and len(github.issues) == 2


def test_a_tracker_create_that_fails_twice_is_tried_again_not_a_traceback(trunk, github):
    github.script_for = [("post", "/repos/vllm-project/vllm/issues", "502")] * 2
    done = tracker(github, "--trunk", trunk["trunk"], "--framework", "vllm", "--settle", "0")
    assert done.returncode == 0 and " created " in done.stdout, done.stderr
    assert len(github.issues) == 1
    github.issues.clear()
    github.script_for = [("post", "/repos/vllm-project/vllm/issues", "502")] * 10
    given_up = tracker(
        github, "--trunk", trunk["trunk"], "--framework", "vllm", "--settle", "0", "--attempts", "2"
    )
    assert given_up.returncode == 4 and "Traceback" not in given_up.stderr
    assert "no clear answer from GitHub after 2 attempts" in given_up.stderr


def test_the_tracker_body_is_cut_at_a_lines_end(trunk):
    """Cut at GitHub's 65,536 characters inside a code span, the rest of a test name's line (a link,
    an @mention) rendered live."""
    from rocm_gate.github import tracker as tracking

    state = json.loads(trunk["trunk"].read_text())
    engine = state["tests"][ENGINE]
    state["tests"] = {
        f"test_suite.py::test_{i}[{'x' * 300} @evil https://evil.example]": engine
        for i in range(400)
    }
    _, body = tracking.render(state, "vllm")
    assert len(body) <= tracking.BODY_LIMIT and body.endswith("(cut at GitHub's limit)\n")
    kept = body.rsplit("\n\n...", 1)[0]
    assert kept.splitlines()[-1].endswith("|")  # the last row is whole


def test_a_bad_trunk_file_for_the_tracker_is_named(github, tmp_path):
    bad = tmp_path / "trunk.json"
    bad.write_text('{"schema": "pytest-rocm/trunk/1"}')
    done = tracker(github, "--trunk", bad, "--framework", "vllm")
    assert done.returncode == 2 and str(bad) in done.stderr and not github.issues


def test_the_dashboard_shows_trunk_health_a_page_per_test_and_main_apart(trunk, tmp_path):
    site = tmp_path / "site"
    done = rocm_gate("dashboard", "--db", trunk["db"], "--out", site)
    assert done.returncode == 0, done.stderr
    page = (site / "trunk.html").read_text()
    # engine is red on MI300X at c2 (test_moe_0), c4 and c6 (test_engine_0): three runs; green last
    # at c0
    assert (
        f"<td>MI300X</td><td>engine</td><td>red</td><td>3</td><td>{trunk['commits'][0][:12]} "
        in page
    )
    engine_page = (
        site / f"test-{__import__('hashlib').sha256(ENGINE.encode()).hexdigest()[:16]}.html"
    )
    assert engine_page.is_file() and engine_page.name in page
    runs = engine_page.read_text()
    assert f"https://github.com/vllm-project/vllm/commit/{trunk['commits'][4]}" in runs
    assert "https://github.com/vllm-project/vllm/actions/runs/4" in runs and "pr #1" in runs
    grid = (site / "grid.html").read_text()
    assert 'id="grid-main"' in grid and 'id="grid-pr"' in grid
    assert grid.index('id="grid-main"') < grid.index('id="grid-pr"')


def test_a_huge_failing_run_makes_a_capped_grid(trunk, tmp_path):
    import shutil

    folder = tmp_path / "huge"
    shutil.copytree(trunk["prs"]["new"].folder, folder)
    report = json.loads((folder / "gate-report.json").read_text())
    entry = report["tests"][ENGINE]
    report["tests"] = {
        f"tests/test_big.py::test_{i}": {**entry, "group": "engine"} for i in range(10000)
    }
    (folder / "gate-report.json").write_text(json.dumps(report))
    db = tmp_path / "h.db"
    assert rocm_gate("history", "add", "--db", db, folder).returncode == 0
    site = tmp_path / "site"
    assert rocm_gate("dashboard", "--db", db, "--out", site).returncode == 0
    grid = (site / "grid.html").read_text()
    assert "and 9950 more" in grid and len(grid) < 200_000


def test_a_store_of_schema_version_1_is_migrated_and_its_runs_are_not_main(trunk, tmp_path):
    from rocm_gate.history import queries, store

    old = tmp_path / "v1.db"
    conn = sqlite3.connect(old, isolation_level=None)
    for statement in store.MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute("UPDATE schema_version SET version = 1")
    conn.execute(
        "INSERT INTO runs (digest, source, started, vendor, sku, git_sha, conclusion, complete) "
        "VALUES ('d', 's', '2026-01-01T00:00:00+00:00', 'amd', 'MI300X', ?, 'success', 1)",
        ("a" * 40,),
    )
    conn.close()
    migrated = store.connect(old)
    assert store.version(migrated) == store.VERSION == 5
    assert [r["origin"] for r in queries.runs(migrated)] == ["other"]
    # schema 3: a run's identity is its origin with its report's digest (or its GitHub run)
    assert [r[0] for r in migrated.execute("SELECT digest FROM runs")] == ["other:d"]
    store.ingest(migrated, trunk["prs"]["clean"].folder)  # a new run lands with its origin
    assert sorted(r["origin"] for r in queries.runs(migrated)) == ["other", "pr"]


class PersonalTokenGitHub:
    """GitHub's issues as a personal token of user `octo` sees them: `/user` names the token's own
    user, and the issues it opens carry that user and no App."""

    app_id = None
    attempts = 3

    def __init__(self, issues=()):
        self.issues = list(issues)
        self.created = 0

    def get(self, path, params=None, *, ok_missing=False):
        assert path == "/user"
        return {"login": "octo", "type": "User"}

    def paged(self, path, key, params=None):
        return list(self.issues)

    def write(self, method, path, body):
        assert method == "POST"
        self.created += 1
        issue = {
            "number": 100 + len(self.issues),
            "title": body["title"],
            "body": body["body"],
            "state": "open",
            "user": {"login": "octo", "type": "User"},
            "performed_via_github_app": None,
            "html_url": "https://github.com/o/r/issues/1",
        }
        self.issues.append(issue)
        return issue

    def write_again(self, method, path, body):
        raise AssertionError("nothing changed: nothing is written")


def test_the_tracker_finds_its_issue_made_with_a_personal_token(trunk):
    """Issue 63: with the personal token its --help allows, the tracker recognised only its App's or
    Actions' issues, and opened a new issue on every run. Another user's look-alike is still not
    its own."""
    from rocm_gate.github import tracker as tracking

    state = json.loads(trunk["trunk"].read_text())
    lookalike = {
        "number": 7,
        "title": "look-alike",
        "body": tracking.marker("MI300X", "vllm") + "\nmine",
        "state": "open",
        "user": {"login": "mallory", "type": "User"},
        "performed_via_github_app": None,
    }
    github = PersonalTokenGitHub([lookalike])
    first = tracking.keep(github, state, "vllm")
    second = tracking.keep(github, state, "vllm")
    assert (first.action, second.action) == ("created", "unchanged")
    assert first.number == second.number != 7 and github.created == 1


def test_an_installation_token_has_no_user_of_its_own():
    from rocm_gate.github import tracker as tracking
    from rocm_gate.github.api import PublishError

    class ActionsToken(PersonalTokenGitHub):
        def get(self, path, params=None, *, ok_missing=False):
            raise PublishError(
                "GitHub refused GET /user: Resource not accessible by integration", refused=True
            )

    assert tracking.token_user(ActionsToken()) is None
    assert tracking.token_user(PersonalTokenGitHub()) == "octo"
