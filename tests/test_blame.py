"""Blame by experiment (`rocm-gate blame`, rocm-gate/rocm_gate/blame/), for real: a small repository whose
base passes the gate test a PR breaks, a test that fails on both, a test new in the PR (a new file,
and a new function in an old file) and a test that fails on the base only sometimes; a PR run of the
plugin under a pull_request event on GitHub's merge commit; then the base experiment on it, as the
gate workflow runs it. And base-check.json through the strict loader of publish.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, processes_with

from pytest_rocm.schemas.artifacts import schema_error
from rocm_gate.blame import base as base_
from rocm_gate.blame import processes
from rocm_gate.github.artifacts import ArtifactError, read_results

GATE, BOTH, SOMETIMES = (
    f"test_suite.py::{n}" for n in ("test_gate", "test_both", "test_sometimes")
)
NEW_FILE, NEW_FUNCTION = "test_new.py::test_fresh", "test_suite.py::test_added"
HEADER = """
import os
import pathlib
import time

import pytest

from lib import compute

pytestmark = pytest.mark.rocm_gate(group="engine")


def test_gate():
    time.sleep(float(os.environ.get("BLAME_SLEEP", "0")))  # the budget's test makes it long
    assert compute() == 4, f"compute() gave {compute()}"


def test_both():
    raise AssertionError("greedy output diverged at token 17 (main is broken)")


def test_fine():
    pass
"""
BASE_SUITE = (
    HEADER
    + '''

def test_sometimes():
    """Fails on the base every other call: a counter outside the tree."""
    path = pathlib.Path(os.environ["BLAME_COUNTER"])
    calls = int(path.read_text()) if path.exists() else 0
    path.write_text(str(calls + 1))
    assert calls % 2 == 1, "lost a race with the scheduler"
'''
)
PR_SUITE = (
    HEADER
    + """

def test_sometimes():
    assert False, "the PR made the race certain"


def test_added():
    assert compute() == 4
"""
)
PR_NEW_FILE = """
import pytest

pytestmark = pytest.mark.rocm_gate(group="engine")


def test_fresh():
    assert False, "new in the PR, and failing"
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def rocm_gate(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def make_repository(root: Path) -> dict:
    """main with the base commit, a PR branch that breaks test_gate and adds two tests, and GitHub's
    merge commit of the PR into main (parents: the base, then the PR's head), checked out."""
    repo = root / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "lib.py").write_text("def compute():\n    return 4\n")
    (repo / "test_suite.py").write_text(BASE_SUITE)
    (repo / "pytest.ini").write_text("[pytest]\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "lib.py").write_text("def compute():\n    return 5\n")
    (repo / "test_suite.py").write_text(PR_SUITE)
    (repo / "test_new.py").write_text(PR_NEW_FILE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the PR")
    head = git(repo, "rev-parse", "HEAD")
    # main moves on after the PR branched (the merge is a real two-parent commit)
    git(repo, "checkout", "-q", "main")
    (repo / "README").write_text("main moved on\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main moves on")
    main = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach", main)
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge the PR into main", head)
    merge = git(repo, "rev-parse", "HEAD")
    return {"repo": repo, "base": main, "first_base": base, "head": head, "merge": merge}


def pr_run(world: dict, root: Path) -> Path:
    """The gates on the merge commit, under the pull_request event, as the gate job runs them."""
    event = root / "event.json"
    event.write_text(
        json.dumps(
            {
                "pull_request": {
                    "number": 7,
                    "head": {"sha": world["head"]},
                    "base": {"sha": world["base"]},
                },
                "repository": {"default_branch": "main"},
            }
        )
    )
    out = root / "out"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_SHA": world["merge"],
        "GITHUB_REF": "refs/pull/7/merge",
        "BLAME_COUNTER": str(root / "pr-counter"),
    }
    env.pop("PYTEST_ROCM_PLATFORM", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-platform=mi300x-1",
            f"--rocm-report-dir={out}",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=world["repo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out / "gate-report.json").is_file()
    return out


@pytest.fixture(scope="module")
def pr(tmp_path_factory):
    root = tmp_path_factory.mktemp("blame")
    world = make_repository(root)
    world["results"] = pr_run(world, root)
    world["report"] = json.loads((world["results"] / "gate-report.json").read_text())
    return world


def results_copy(pr, tmp_path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(pr["results"], copy)
    return copy


def blame(
    pr, results, *options, env=None, passthrough=()
) -> tuple[subprocess.CompletedProcess, dict]:
    done = rocm_gate(
        "blame",
        "--results",
        results,
        "--checkout",
        pr["repo"],
        *options,
        "--",
        "--rocm-platform=mi300x-1",
        *passthrough,
        env=env,
    )
    path = results / "base-check.json"
    return done, (json.loads(path.read_text()) if path.is_file() else {})


def worktrees(repo: Path) -> list[str]:
    return [
        line.split(" ", 1)[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def test_the_pr_run_blocks_on_five_failures(pr):
    blocking = sorted(
        n for n, t in pr["report"]["tests"].items() if t["verdict"] in ("regression", "unconfirmed")
    )
    assert blocking == sorted([GATE, BOTH, SOMETIMES, NEW_FILE, NEW_FUNCTION])
    assert pr["report"]["tests"]["test_suite.py::test_fine"]["verdict"] == "pass"


def test_each_failure_on_the_base_passes_fails_is_absent_or_mixed(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    done, check = blame(pr, results, env={"BLAME_COUNTER": str(tmp_path / "counter")})
    assert done.returncode == 0, done.stderr
    assert schema_error(check, "base-check") is None
    assert check["schema"] == "pytest-rocm/base-check/1"
    assert check["base_sha"] == pr["base"]  # the merge commit's first parent, found alone
    assert check["tested_sha"] == pr["merge"]
    assert "first parent" in check["base_from"]
    assert check["prepared"] is True and check["why"] is None
    assert check["attempts_per_test"] == 2 and check["pytest_args"] == ["--rocm-platform=mi300x-1"]
    tests = check["tests"]
    assert list(tests) == sorted(tests)  # a stable order
    assert {n: t["on_base"] for n, t in tests.items()} == {
        GATE: "passes",  # the PR's own break
        BOTH: "fails",  # main's
        SOMETIMES: "mixed",  # flaky on the base
        NEW_FILE: "absent",  # a file the base lacks
        NEW_FUNCTION: "absent",  # a test the base's file lacks: pytest's "not found", then a probe
    }
    assert [a["outcome"] for a in tests[GATE]["attempts"]] == ["passed", "passed"]
    assert [a["outcome"] for a in tests[SOMETIMES]["attempts"]] == ["failed", "passed"]
    assert [a["outcome"] for a in tests[NEW_FILE]["attempts"]] == ["absent"]
    assert all(t["not_run"] is None for t in tests.values())
    # the base fails test_both the way the PR does: the same fingerprint
    from pytest_rocm.results.fingerprint import of_test

    pr_fingerprint = of_test(pr["report"]["tests"][BOTH])
    assert [a["fingerprint"] for a in tests[BOTH]["attempts"]] == [pr_fingerprint] * 2
    assert "main is broken" in pr_fingerprint
    assert tests[GATE]["attempts"][0]["fingerprint"] is None
    # the work tree is gone, and git no longer lists it
    assert worktrees(pr["repo"]) == [str(pr["repo"])]
    assert "passes on the base" in done.stdout
    # publish reads it through the strict loader
    assert read_results(results).base_check == check


@pytest.mark.slow
def test_under_the_gates_rules_their_reruns_run_inside_each_attempt(pr, tmp_path):
    """The gate workflow passes `--rocm-rules`: the default branch's rules (one rerun here) apply
    to the base's attempts too; a test its attempt's process judged flaky failed and passed there."""
    results = results_copy(pr, tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "pytest.ini").write_text("[pytest]\nrocm_reruns = 1\n")
    done, check = blame(
        pr,
        results,
        env={"BLAME_COUNTER": str(tmp_path / "counter")},
        # as the gates run: pytest's exit status is the conclusion's, not pytest's usage error
        passthrough=[f"--rocm-rules={rules}", "--rocm-exit-by-conclusion"],
    )
    assert done.returncode == 0, done.stderr
    assert check["pytest_args"] == [
        "--rocm-platform=mi300x-1",
        f"--rocm-rules={rules}",
        "--rocm-exit-by-conclusion",
    ]
    assert check["tests"][NEW_FUNCTION]["on_base"] == "absent"  # found by the probe all the same
    sometimes = check["tests"][SOMETIMES]
    assert [(a["outcome"], a["verdict"]) for a in sometimes["attempts"]] == [
        ("failed", "flaky")
    ] * 2
    assert sometimes["on_base"] == "mixed"
    assert [a["verdict"] for a in check["tests"][BOTH]["attempts"]] == ["regression"] * 2
    assert check["tests"][GATE]["on_base"] == "passes"
    assert "failed then passed" in done.stdout


@pytest.mark.slow
def test_a_tiny_budget_names_what_did_not_run(pr, tmp_path):
    """The first attempt is stopped at the budget's end, its process group with it; the second
    never starts, and every test says so."""
    results = results_copy(pr, tmp_path)
    done, check = blame(
        pr,
        results,
        "--budget-minutes",
        # 30 s: the work tree, pytest's usage error and probe (a few seconds, more on a loaded
        # machine), then an attempt that sleeps past the budget
        "0.5",
        "--worktree",
        tmp_path / "base-tree",
        env={"BLAME_COUNTER": str(tmp_path / "counter"), "BLAME_SLEEP": "120"},
    )
    assert done.returncode == 0, done.stderr
    assert schema_error(check, "base-check") is None
    assert check["prepared"] is True and check["budget_s"] == 30
    assert check["used_s"] < 30 + processes.GRACE_S + 5  # the budget, and a stopped group's grace
    tests = check["tests"]
    for nodeid in (GATE, BOTH, SOMETIMES):
        assert (
            tests[nodeid]["not_run"]
            == "over budget: attempt 1 of 2 was stopped at the budget's end"
        )
        assert len(tests[nodeid]["attempts"]) <= 1
    assert tests[GATE]["attempts"][0]["outcome"] == "interrupted"
    assert tests[GATE]["on_base"] == "unknown"
    assert tests[NEW_FILE] == {
        "attempts": [{"outcome": "absent", "fingerprint": None, "seconds": 0.0, "verdict": None}],
        "not_run": None,
        "on_base": "absent",
    }
    assert processes_with(str(tmp_path / "base-tree")) == []  # nothing of the attempt is left
    assert not (tmp_path / "base-tree").exists()
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


@pytest.mark.slow
def test_a_cancelled_job_keeps_what_ran_and_removes_the_work_tree(pr, tmp_path):
    """SIGTERM (a job's cancel) during an attempt: the attempt's process group is stopped,
    base-check.json says what did not run, the work tree is removed, and the exit is 143."""
    results = results_copy(pr, tmp_path)
    tree = tmp_path / "base-tree"
    command = [sys.executable, "-m", "rocm_gate.cli", "blame", "--results", str(results)]
    command += [
        "--checkout",
        str(pr["repo"]),
        "--worktree",
        str(tree),
        "--",
        "--rocm-platform=mi300x-1",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "BLAME_SLEEP": "120"}
    env["BLAME_COUNTER"] = str(tmp_path / "counter")
    blame_process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not processes_with(str(tree)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(str(tree))  # a pytest process runs in the base's work tree
        time.sleep(3)  # past the usage error and the probe: the attempt sleeps in test_gate
        blame_process.terminate()
        out, err = blame_process.communicate(timeout=60)
    finally:
        if blame_process.poll() is None:
            blame_process.kill()
    assert blame_process.returncode == 143, err
    assert "interrupted" in err and "Traceback" not in err
    check = json.loads((results / "base-check.json").read_text())
    assert schema_error(check, "base-check") is None
    assert check["prepared"] is True
    assert check["tests"][GATE]["not_run"].startswith("interrupted")
    assert check["tests"][NEW_FILE]["on_base"] == "absent"
    assert processes_with(str(tree)) == []
    assert not tree.exists() and worktrees(pr["repo"]) == [str(pr["repo"])]


def test_an_option_the_bases_pytest_refuses_leaves_it_not_prepared_and_says_why(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    done, check = blame(pr, results, passthrough=["--no-such-option"])
    assert done.returncode == 0, done.stderr
    assert check["prepared"] is False
    assert check["why"].startswith("pytest refused the command line on the base (a usage error)")
    assert "--no-such-option" in check["why"]
    assert all(t["attempts"] == [] for n, t in check["tests"].items() if n != NEW_FILE)
    assert {t["not_run"] for n, t in check["tests"].items() if n != NEW_FILE} == {
        f"not prepared: {check['why']}"
    }
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


def test_an_install_that_fails_leaves_the_base_not_prepared_and_says_why(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    done, check = blame(
        pr, results, "--install", "echo building the base; echo 'error: no compiler' >&2; exit 3"
    )
    assert done.returncode == 0, done.stderr
    assert schema_error(check, "base-check") is None
    assert check["prepared"] is False
    assert check["install"]["exit"] == 3
    assert "error: no compiler" in check["install"]["tail"]
    assert "install failed (exit status 3)" in check["why"] and "no compiler" in check["why"]
    assert all(t["attempts"] == [] for t in check["tests"].values())
    assert all(t["not_run"].startswith("not prepared") for t in check["tests"].values())
    assert {t["on_base"] for t in check["tests"].values()} == {"unknown"}
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


@pytest.mark.slow
def test_an_install_past_the_budget_is_stopped_with_its_process_group(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    marker = tmp_path / "child-survived"
    done, check = blame(
        pr,
        results,
        "--budget-minutes",
        "0.1",  # 6 s: the work tree (a second, more on a loaded machine), then the install
        "--install",
        f"(sleep 10; touch {marker}) & sleep 60",
    )
    assert done.returncode == 0, done.stderr
    assert check["prepared"] is False and check["install"]["exit"] is None
    assert "did not finish within the budget" in check["why"]
    assert check["used_s"] < 6 + processes.GRACE_S + 5
    time.sleep(11)  # the install started before blame ended: a surviving child has touched by now
    assert not marker.exists()  # the install's background child was stopped with it
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


def test_the_merge_commits_first_parent_is_the_base(pr):
    tested, found = base_.choose_base(pr["repo"], None)
    assert (tested, found.sha, found.missing) == (pr["merge"], pr["base"], None)
    # a PR stacked on another PR's branch: the merge's first parent is that branch's head
    _, given = base_.choose_base(pr["repo"], pr["first_base"][:12])
    assert given.sha == pr["first_base"] and "--base" in given.chosen


def test_a_checkout_that_is_not_a_merge_commit_has_no_base(tmp_path):
    repo = tmp_path / "plain"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    _, found = base_.choose_base(repo, None)
    assert found.sha is None and "not a merge commit" in found.missing


@pytest.mark.parametrize("bad", ["f" * 40, "--upload-pack=x", "not a sha"])
def test_a_bad_base_is_bad_input(pr, tmp_path, bad):
    results = results_copy(pr, tmp_path)
    done, check = blame(pr, results, "--base", bad)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--base" in done.stderr and "Traceback" not in done.stderr
    assert check == {}


def test_a_results_folder_without_a_gate_report_is_bad_input(pr, tmp_path):
    (tmp_path / "empty").mkdir()
    done, _ = blame(pr, tmp_path / "empty")
    assert done.returncode == 2
    assert "no gate-report.json" in done.stderr and "Traceback" not in done.stderr


def test_nothing_to_do_writes_an_empty_check_and_says_so(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    report = json.loads((results / "gate-report.json").read_text())
    for test in report["tests"].values():
        test["verdict"], test["status"] = "pass", "passed"
    (results / "gate-report.json").write_text(json.dumps(report))
    done, check = blame(pr, results)
    assert done.returncode == 0, done.stderr
    assert check["tests"] == {} and check["prepared"] is False
    assert check["why"] == "no blocking failures: nothing to run on the base"
    assert "nothing to run on the base" in done.stdout
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


def _valid_check() -> dict:
    return {
        "schema": "pytest-rocm/base-check/1",
        "base_sha": "a" * 40,
        "base_from": "given",
        "tested_sha": "b" * 40,
        "prepared": True,
        "why": None,
        "install": None,
        "budget_s": 1800,
        "used_s": 12.5,
        "attempts_per_test": 2,
        "pytest_args": [],
        "tests": {
            GATE: {
                "attempts": [{"outcome": "passed", "fingerprint": None, "seconds": 0.1}],
                "not_run": "over budget",
                "on_base": "passes",
            }
        },
    }


def _hostile(check: dict, how: str) -> str:
    if how == "wrong type":
        check["tests"][GATE]["attempts"] = "passed"
    elif how == "huge string":
        check["tests"][GATE]["attempts"][0]["fingerprint"] = "x" * 100_000
    elif how == "unknown outcome":
        check["tests"][GATE]["attempts"][0]["outcome"] = "passed-ish"
    elif how == "base is no SHA":
        check["base_sha"] = "main; rm -rf /"
    elif how == "extra field":
        check["tests"][GATE]["verdict_of_main"] = "pre-existing"
    elif how == "NaN":
        return json.dumps(check).replace('"used_s": 12.5', '"used_s": NaN')
    elif how == "huge node id":
        check["tests"]["t" * 5000] = check["tests"].pop(GATE)
    return json.dumps(check)


@pytest.mark.parametrize(
    "how",
    [
        "wrong type",
        "huge string",
        "unknown outcome",
        "base is no SHA",
        "extra field",
        "NaN",
        "huge node id",
    ],
)
def test_a_hostile_base_check_is_refused_by_name(pr, tmp_path, how):
    results = results_copy(pr, tmp_path)
    (results / "base-check.json").write_text(json.dumps(_valid_check()))
    assert read_results(results).base_check == _valid_check()
    (results / "base-check.json").write_text(_hostile(_valid_check(), how))
    with pytest.raises(ArtifactError) as refused:
        read_results(results)
    assert "base-check.json" in str(refused.value)


def test_results_without_a_base_check_read_as_before(pr, tmp_path):
    results = results_copy(pr, tmp_path)
    assert read_results(results).base_check is None


def test_attempts_that_ran_another_build_than_the_bases_prove_nothing(pr, tmp_path, monkeypatch):
    """No install (or one that did not take) leaves the PR's build in the job's environment: the
    base's attempt then reports a stack mismatch, and the base is not prepared."""
    from rocm_gate.blame import Plan, attempts, run

    def imported_the_prs_build(self, nodeids, number):
        report = {"stack_mismatch": "vllm was imported from /w/pr, not the checkout /tmp/base"}
        return 0, report, False

    monkeypatch.setattr(attempts.Attempts, "_process", imported_the_prs_build)
    results = results_copy(pr, tmp_path)
    made = run(Plan(results=results, checkout=pr["repo"], say=lambda line: None))
    assert made["prepared"] is False
    assert made["why"].startswith("the tests on the base did not run the base's build: vllm")
    assert made["tests"][GATE] == {
        "attempts": [],
        "not_run": f"not prepared: {made['why']}",
        "on_base": "unknown",
    }
    assert made["tests"][NEW_FILE]["on_base"] == "absent"
    assert worktrees(pr["repo"]) == [str(pr["repo"])]


def test_the_gate_workflow_runs_it_after_the_gates_for_pull_requests_only():
    import yaml

    workflow = yaml.safe_load((REPO / ".github/workflows/rocm-gate.yml").read_text())
    given = workflow[True]["workflow_call"]["inputs"]["base-check-minutes"]
    assert (given["type"], given["default"]) == ("number", 30)
    steps = workflow["jobs"]["gate"]["steps"]
    names = [s.get("name", "") for s in steps]
    gates = names.index("run the gates")
    [at] = [i for i, s in enumerate(steps) if "rocm-gate blame" in s.get("run", "")]
    assert gates < at < next(i for i, n in enumerate(names) if n.startswith("upload the results"))
    step = steps[at]
    assert step["continue-on-error"] is True and step["working-directory"] == "pr"
    assert "steps.gates.outcome == 'success'" in step["if"] and steps[gates]["id"] == "gates"
    assert "github.event_name == 'pull_request'" in step["if"]
    assert "inputs.base-check-minutes > 0" in step["if"]
    assert "${{" not in step["run"]  # through env:, as zizmor requires
    assert step["env"]["INSTALL"] == "${{ inputs.install }}"
    assert '--rocm-rules="$GITHUB_WORKSPACE/rules"' in steps[gates]["run"]
    assert '-- --rocm-rules="$GITHUB_WORKSPACE/rules"' in step["run"]
    # the merge commit's first parent (the base) comes with the checkout
    [checkout] = [s for s in steps if (s.get("with") or {}).get("path") == "pr"]
    assert checkout["with"]["fetch-depth"] == 2
