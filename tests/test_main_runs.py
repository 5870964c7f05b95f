"""What counts as main's, and what main's state says: GitHub's real event payloads (a schedule
names no repository; a merge queue names its base), history's guard on the commit GitHub lists, a
trunk state that always loads (runs without a full SHA left out, long failures kept), and a parity
reference named with its commit, date and SKU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import truth
from conftest import REPO

from pytest_rocm.results.manifest import origin_kind
from rocm_gate.history import queries, store


def rocm_gate(*args):
    return subprocess.run(
        [sys.executable, "-m", "rocm_gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


SHA, PREVIOUS = "a" * 40, "b" * 40
REPOSITORY = {"full_name": truth.REPO, "default_branch": "main"}
EVENTS = [
    # (what, event, payload, GITHUB_REF, origin)
    ("push to main", "push", {"after": SHA, "before": PREVIOUS, "repository": REPOSITORY}, "refs/heads/main", "main"),
    ("push to a branch", "push", {"after": SHA, "before": PREVIOUS, "repository": REPOSITORY}, "refs/heads/dev", "other"),
    ("nightly schedule (no repository in the payload)", "schedule", {"schedule": "0 6 * * *", "workflow": ".github/workflows/g.yml"}, "refs/heads/main", "main"),
    ("dispatch on main, no commit named", "workflow_dispatch", {"inputs": {}, "ref": "refs/heads/main", "repository": REPOSITORY}, "refs/heads/main", "main"),
    ("dispatch naming a fork's commit", "workflow_dispatch", {"inputs": {"sha": "c" * 40}, "ref": "refs/heads/main", "repository": REPOSITORY}, "refs/heads/main", "other"),
    ("dispatch naming a PR", "workflow_dispatch", {"inputs": {"sha": "c" * 40, "pr": "7"}, "ref": "refs/heads/main", "repository": REPOSITORY}, "refs/heads/main", "pr"),
    ("merge queue of main", "merge_group", {"merge_group": {"head_sha": SHA, "base_sha": PREVIOUS, "base_ref": "refs/heads/main", "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-x"}, "repository": REPOSITORY}, "refs/heads/gh-readonly-queue/main/pr-7-x", "main"),
    ("merge queue of a release branch", "merge_group", {"merge_group": {"head_sha": SHA, "base_sha": PREVIOUS, "base_ref": "refs/heads/release", "head_ref": "refs/heads/gh-readonly-queue/release/pr-7-x"}, "repository": REPOSITORY}, "refs/heads/gh-readonly-queue/release/pr-7-x", "other"),
    ("pull request", "pull_request", {"pull_request": {"number": 7, "head": {"sha": SHA}, "base": {"sha": PREVIOUS}}, "repository": REPOSITORY}, "refs/pull/7/merge", "pr"),
]  # fmt: skip


@pytest.mark.parametrize(
    "event,payload,ref,origin", [e[1:] for e in EVENTS], ids=[e[0] for e in EVENTS]
)
def test_main_runs_are_told_by_the_events_real_payloads(tmp_path, event, payload, ref, origin):
    prov = truth._event(tmp_path, event, payload, ref, SHA, 1)
    assert origin_kind(prov) == origin, prov


def _one_run(tmp_path, name: str, prov: dict, plan: dict, sku: str = "MI300X"):
    folder = tmp_path / name
    manifest = truth._manifest(sku, "node-1", prov, truth.Clock(2).at(1))
    truth._write(folder, truth._records(plan, {}, 1.0e9), manifest)
    return folder


def _main(tmp_path, name: str, sha: str):
    folder = tmp_path / f"event-{name}"
    folder.mkdir()
    return truth._event(
        folder,
        "push",
        {"after": sha, "before": PREVIOUS, "repository": REPOSITORY},
        "refs/heads/main",
        sha,
        1,
    )


def test_a_main_run_that_tested_another_commit_than_github_lists_is_not_main(tmp_path):
    prov = _main(tmp_path, "a", SHA)
    folder = _one_run(tmp_path, "run", prov, {t: [truth.Attempt(None)] for t in truth.TESTS})
    db = tmp_path / "h.db"
    assert rocm_gate("history", "add", "--db", db, "--sha", "d" * 40, folder).returncode == 0
    assert (
        rocm_gate("history", "add", "--db", db, "--run", "5", "--sha", SHA, folder).returncode == 0
    )
    conn = store.connect(db)
    assert sorted(o for (o,) in conn.execute("SELECT origin FROM runs")) == ["main", "pr"]
    bad = rocm_gate("history", "add", "--db", db, "--sha", "abc", folder)
    assert bad.returncode == 2 and "full 40-hex" in bad.stderr


def test_the_trunk_state_always_loads(tmp_path):
    """A main run whose commit is no full SHA is left out, said on stderr; a failure message of a
    thousand characters is kept (the schema allowed 400, and `publish --trunk` refused the file)."""
    long = "AssertionError: " + "x" * 2000
    folders = []
    for i, sha in enumerate(["e" * 40, "f" * 40]):
        prov = _main(tmp_path, str(i), sha)
        plan = {t: [truth.Attempt(None)] for t in truth.TESTS}
        plan[truth.TESTS[0]] = [truth.Attempt(long), truth.Attempt(long)]
        folders.append(_one_run(tmp_path, f"run{i}", prov, plan))
    report = json.loads((folders[1] / "gate-report.json").read_text())
    report["manifest"]["git_sha"] = "abc1234"  # as a checkout without git history recorded it
    (folders[1] / "gate-report.json").write_text(json.dumps(report))
    manifest = json.loads((folders[1] / "manifest.json").read_text())
    manifest["git_sha"] = "abc1234"
    (folders[1] / "manifest.json").write_text(json.dumps(manifest))
    db = tmp_path / "h.db"
    for n, folder in enumerate(folders):
        assert rocm_gate("history", "add", "--db", db, "--run", str(n + 1), folder).returncode == 0
    out = tmp_path / "trunk.json"
    done = rocm_gate("history", "trunk", "--db", db, "--sku", "MI300X", "--out", out)
    assert done.returncode == 0, done.stderr
    assert "1 main run(s) of MI300X left out" in done.stderr and "full 40-hex" in done.stderr
    loaded = rocm_gate("publish", folders[0], "--sha", "e" * 40, "--dry-run", "--trunk", out)
    assert "--trunk" not in loaded.stderr, loaded.stderr
    state = json.loads(out.read_text())
    assert len(state["tests"][truth.TESTS[0]]["fingerprints"][0]) == 1000


GAP = {"reason": "fp8", "issue": "https://github.com/o/r/issues/5", "mode": "xfail"}


def _gap_records(outcome: str, t0: float) -> list[dict]:
    """One run's records, TESTS[0] as the plugin records it: under its known gap's xfail marker
    (`xfailed`: failed as declared; `xpassed`: passed, the marker still on), or with the marker
    removed (`passed`, `failed`: no gap)."""
    records = truth._records({t: [truth.Attempt(None)] for t in truth.TESTS}, {}, t0)
    [plain] = [r for r in records if r.get("nodeid") == truth.TESTS[0]]
    if outcome == "passed":
        return records
    records.remove(plain)
    spec = {k: plain[k] for k in ("schema", "group", "blocking", "gate", "worker")}
    if outcome != "failed":
        spec["known_gap"] = GAP
    call = {"outcome": "skipped", "wasxfail": "known gap: fp8"}
    if outcome == "xpassed":
        call = {"outcome": "passed", "wasxfail": "known gap: fp8"}
    elif outcome == "failed":
        call = {"outcome": "failed", "message": "AssertionError: fp8", "failure": "E  fp8"}
    t, node = plain["t"], plain["nodeid"]
    return records + [
        {**spec, "nodeid": node, "when": "setup", "outcome": "passed", "duration": 0.001, "t": t},
        {**spec, "nodeid": node, "when": "call", "duration": 0.001, "t": t + 0.001, **call},
        {**spec, "nodeid": node, "when": "teardown", "outcome": "passed", "duration": 0.001, "t": t + 0.002},
    ]  # fmt: skip


GAP_RUNS = [
    # (what, the runs in order: (origin, outcome), status, passing on, closed on)
    ("it passes with its marker on: ready to close; a PR of old code failing it says nothing",
     [("main", "xfailed"), ("main", "xpassed"), ("pr", "xfailed")], "ready to close", ["MI300X"], []),
    ("still failing as declared: open", [("main", "xpassed"), ("main", "xfailed")], "open", [], []),
    ("its marker removed, the test passes: closed, not ready to close",
     [("main", "xfailed"), ("main", "passed")], "closed", [], ["MI300X"]),
    ("its marker removed, the test fails: closed (a failure of its own now)",
     [("main", "xfailed"), ("main", "failed")], "closed", [], ["MI300X"]),
    ("its marker removed only on a PR's run: still open", [("main", "xfailed"), ("pr", "passed")],
     "open", [], []),
]  # fmt: skip


@pytest.mark.parametrize(
    "runs,status,passing,closed", [g[1:] for g in GAP_RUNS], ids=[g[0] for g in GAP_RUNS]
)
def test_a_known_gap_is_open_ready_to_close_or_closed_by_main_runs_only(
    tmp_path, runs, status, passing, closed
):
    """A gap whose test passes on main with its marker still on is ready to close; one whose newest
    main run has the test with no such gap (its marker removed) is closed, said apart; a PR run of
    old code does not take either back (its code is not main's)."""
    db = store.connect(tmp_path / "h.db")
    for n, (origin, outcome) in enumerate(runs):
        folder = tmp_path / f"r{n}"
        prov = _main(tmp_path, str(n), f"{n + 1:040x}")
        manifest = truth._manifest("MI300X", "node-1", prov, truth.Clock(4).at(n))
        truth._write(folder, _gap_records(outcome, 1.0e9 + n), manifest)
        store.ingest(db, folder, "manifest" if origin == "main" else "pr", str(n + 1))
    [found] = queries.known_gaps(db)
    assert (found["status"], found["passing_on"], found["closed_on"]) == (status, passing, closed)
    assert found["ready_to_close"] == (status == "ready to close")
    assert found["closed"] == (status == "closed")


def test_a_parity_reference_is_named_with_its_commit_date_and_sku(tmp_path):
    prov = _main(tmp_path, "ref", "1" * 40)
    plan = {t: [truth.Attempt(None)] for t in truth.TESTS}
    reference = _one_run(tmp_path, "cuda", prov, plan, sku="H100")
    candidate = _one_run(tmp_path, "rocm", _main(tmp_path, "c", "2" * 40), plan)
    out = tmp_path / "parity"
    done = rocm_gate(
        "parity", "--reference", reference / "gate-report.json", "--candidate",
        candidate / "gate-report.json", "--out", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    side = json.loads((out / "parity.json").read_text())["inputs"]["reference"]
    assert (side["commit"], side["sku"]) == ("1" * 40, "H100") and side["date"]
    assert f"CUDA (H100, commit {'1' * 12}, " in (out / "parity.md").read_text()
    # given on the command line, it wins (a JUnit file names no commit)
    again = rocm_gate(
        "parity", "--reference", reference / "gate-report.json", "--candidate",
        candidate / "gate-report.json", "--out", out, "--reference-commit", "9" * 40,
    )  # fmt: skip
    assert again.returncode == 0
    assert (
        json.loads((out / "parity.json").read_text())["inputs"]["reference"]["commit"] == "9" * 40
    )
