"""Records, the gate report, the manifest, JUnit properties and the summary, through pytester."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
from conftest import GAP, read_jsonl

from rocm_gate.cli import main as rocm_gate

SUITE = f"""
    import pytest

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture exploded")

    @pytest.mark.rocm_gate(group="attention")
    def test_pass():
        print("hello")

    @pytest.mark.rocm_gate(group="attention")
    def test_fail():
        print("some output before failing")
        assert 1 + 1 == 3

    @pytest.mark.rocm_gate(group="engine")
    def test_setup_error(broken):
        pass

    @pytest.mark.rocm_gate(group="engine", blocking=False)
    def test_skipped_in_body():
        pytest.skip("needs a tokenizer file")

    @pytest.mark.rocm_gate(group="api")
    @pytest.mark.xfail(reason="upstream bug")
    def test_xfail():
        assert False

    @pytest.mark.rocm_gate(group="api")
    @pytest.mark.rocm_known_gap(reason="no fp8", issue="{GAP}")
    def test_gap():
        pass

    @pytest.mark.rocm_gate(group="api")
    @pytest.mark.rocm_known_gap(reason="fixed already?", issue="{GAP}", mode="xfail")
    def test_gap_now_passes():
        pass

    @pytest.mark.rocm_gate(group="distributed_moe")
    @pytest.mark.hardware(sku="MI355X", gpus=8)
    def test_needs_mi355x():
        pass

    def test_plain():
        pass
"""


def run_suite(pytester, *args):
    """The suite once, without reruns (verdicts and reruns have tests of their own)."""
    pytester.makepyfile(test_suite=SUITE)
    return pytester.runpytest(
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--junitxml=out/junit.xml",
        "--rocm-reruns=0",
        "-p",
        "no:cacheprovider",
        *args,
    )


def load(pytester, name):
    return json.loads((pytester.path / "out" / name).read_text())


def test_gate_report_statuses_counts_and_conclusion(pytester):
    result = run_suite(pytester)
    result.assert_outcomes(passed=2, failed=1, errors=1, skipped=3, xfailed=1, xpassed=1)
    report = load(pytester, "gate-report.json")
    assert report["schema"] == "pytest-rocm/gate-report/1"
    status = {nodeid.split("::")[1]: t["status"] for nodeid, t in report["tests"].items()}
    assert status == {
        "test_pass": "passed",
        "test_fail": "failed",
        "test_setup_error": "error",
        "test_skipped_in_body": "skipped",
        "test_xfail": "xfailed",
        "test_gap": "known_gap",
        "test_gap_now_passes": "xpassed",
        "test_needs_mi355x": "not_applicable",
        "test_plain": "passed",
    }
    tests = {nodeid.split("::")[1]: t for nodeid, t in report["tests"].items()}
    assert "assert 1 + 1 == 3" in tests["test_fail"]["detail"]
    assert tests["test_setup_error"]["detail"].startswith("setup failed:")
    assert "fixture exploded" in tests["test_setup_error"]["detail"]
    assert tests["test_gap"]["known_gap"] == {"reason": "no fp8", "issue": GAP, "mode": "skip"}
    assert tests["test_gap_now_passes"]["detail"].startswith(
        "known gap now passes, remove its marker"
    )
    assert tests["test_needs_mi355x"]["detail"] == "needs 8 x MI355X, this runner has 8 x MI300X"
    assert tests["test_needs_mi355x"]["requires"]["sku"] == ["MI355X"]
    assert tests["test_plain"]["group"] is None

    assert report["groups"]["attention"] | {} == {
        **report["groups"]["attention"],
        "passed": 1,
        "failed": 1,
        "total": 2,
    }
    assert report["groups"]["api"]["known_gap"] == 1 and report["groups"]["api"]["xpassed"] == 1
    assert report["groups"]["distributed_moe"]["not_applicable"] == 1
    assert report["groups"]["ungrouped"]["passed"] == 1
    assert report["conclusion"] == "failure"
    assert report["conclusion_reason"].startswith("2 blocking gate(s) failed and were not rerun:")
    assert report["complete"] is True and report["incomplete_causes"] == []
    # --rocm-reruns=0: never confirmed, never "regression"
    assert tests["test_fail"]["verdict"] == "unconfirmed"
    assert (
        tests["test_fail"]["verdict_reason"]
        == "failed without an infrastructure signature; not rerun, so not confirmed"
    )
    assert tests["test_fail"]["message"] == "assert (1 + 1) == 3"
    assert tests["test_pass"]["verdict"] == "pass" and tests["test_gap"]["verdict"] == "known_gap"
    assert tests["test_needs_mi355x"]["verdict"] == "not_applicable"
    assert "test_suite.py::test_fail" in report["conclusion_reason"]
    assert "test_suite.py::test_setup_error" in report["conclusion_reason"]
    assert {(r["status"], r["reason"], r["count"]) for r in report["skip_reasons"]} == {
        ("skipped", "needs a tokenizer file", 1),
        ("xfailed", "upstream bug", 1),
        ("known_gap", f"no fp8 ({GAP})", 1),
        ("not_applicable", "needs 8 x MI355X, this runner has 8 x MI300X", 1),
    }


def test_records_one_line_per_plain_pass_else_one_per_phase_with_evidence(pytester):
    run_suite(pytester)
    out = pytester.path / "out"
    files = sorted(p.name for p in out.glob("records-*"))
    # the running slot is gone: the run ended, no test was running
    assert files == ["records-controller.jsonl"]
    lines = [r for r in read_jsonl(out / "records-controller.jsonl") if "kind" not in r]
    # one line for each plain pass (test_pass, test_plain); setup, call and teardown for the other
    # tests, except where setup skipped or failed (no call phase): test_gap and test_needs_mi355x
    # (skipped at setup), test_setup_error (failed at setup).
    assert len(lines) == 2 * 1 + 7 * 3 - 3
    phases = [(r["nodeid"].split("::")[1], r["when"], r["outcome"]) for r in lines]
    assert ("test_fail", "call", "failed") in phases
    assert ("test_gap", "setup", "skipped") in phases
    assert [p for p in phases if p[1] == "setup+call+teardown"] == [
        ("test_pass", "setup+call+teardown", "passed"),
        ("test_plain", "setup+call+teardown", "passed"),
    ]
    plain = next(r for r in lines if r["when"] == "setup+call+teardown")
    assert len(plain["durations"]) == 3 and "duration" not in plain
    assert plain["group"] == "attention" and plain["blocking"] is True
    # an xpass is no plain pass: its call says it was expected to fail; a failed call's plain setup
    # waited in memory and is written before it
    assert [p[1] for p in phases if p[0] == "test_gap_now_passes"] == ["setup", "call", "teardown"]
    assert [p[1] for p in phases if p[0] == "test_fail"] == ["setup", "call", "teardown"]
    assert all(r["schema"] == "pytest-rocm/record/3" and r["worker"] == "controller" for r in lines)
    failed = next(r for r in lines if r["outcome"] == "failed" and r["when"] == "call")
    assert "some output before failing" in failed["stdout_tail"]
    assert failed["group"] == "attention" and failed["blocking"] is True


def git(cwd, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    ).stdout.strip()


def test_manifest_records_the_head_and_the_merge_commit_that_ran_apart(pytester, monkeypatch):
    """A `pull_request` run tests the merge commit (GITHUB_SHA, refs/pull/N/merge) while its check
    belongs on the PR's head: the manifest takes both from the event and the checkout, never one
    from an environment variable."""
    root = pytester.path
    git(root, "init", "-q", "-b", "main")
    git(root, "commit", "-q", "--allow-empty", "-m", "base")
    base = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "-b", "pr")
    git(root, "commit", "-q", "--allow-empty", "-m", "the PR")
    head = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--no-ff", "-m", "Merge head into base", "pr")
    merge = git(root, "rev-parse", "HEAD")
    event = root / "event.json"
    event.write_text(
        json.dumps(
            {
                "action": "synchronize",
                "number": 12,
                "pull_request": {"number": 12, "head": {"sha": head}, "base": {"sha": base}},
                "repository": {"default_branch": "main"},
            }
        )
    )
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_SHA", merge)
    monkeypatch.setenv("GITHUB_REF", "refs/pull/12/merge")
    monkeypatch.setenv("PYTEST_ROCM_GIT_SHA", "b" * 40)  # under Actions the event decides, not this
    monkeypatch.setenv("RUNNER_NAME", "mi300x-runner-7")
    run_suite(pytester)
    manifest = load(pytester, "manifest.json")
    origin = manifest["provenance"]
    assert (origin["event"], origin["ref"], origin["pr"], origin["default_branch"]) == (
        "pull_request",
        "refs/pull/12/merge",
        12,
        "main",
    )
    assert (origin["head_sha"], origin["tested_sha"], origin["base_sha"]) == (head, merge, base)
    assert origin["expected_tested_sha"] == merge and origin["tested_from"] == "git"
    assert manifest["git_sha"] == merge and manifest["git_sha_from"].startswith(
        "git rev-parse HEAD"
    )


def test_manifest(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_ROCM_GIT_SHA", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("RUNNER_NAME", "mi300x-runner-7")
    run_suite(pytester)
    manifest = load(pytester, "manifest.json")
    assert manifest["schema"] == "pytest-rocm/manifest/1"
    # no checkout, no event: the CI's name
    assert manifest["git_sha"] == "0123456789abcdef0123456789abcdef01234567"
    assert manifest["git_sha_from"] == "PYTEST_ROCM_GIT_SHA"
    assert (
        manifest["provenance"]["event"] is None
        and manifest["provenance"]["head_sha"] == manifest["git_sha"]
    )
    assert manifest["runner"] == "mi300x-runner-7"
    assert manifest["platform"]["profile"] == "mi300x-8"
    assert manifest["platform"]["description"] == "8 x MI300X"
    assert manifest["packages"]["pytest"] == pytest.__version__
    assert manifest["started"] <= manifest["finished"]
    assert load(pytester, "gate-report.json")["manifest"] == manifest


def junit_properties(path):
    root = ET.parse(path).getroot()
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties") or []}
    cases = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in root.iter("testcase")
    }
    return suite, cases


def test_junit_properties(pytester):
    """By default each test case carries what parity reads, and the platform is written once per
    file."""
    run_suite(pytester)
    suite, props = junit_properties(pytester.path / "out/junit.xml")
    assert suite == {"rocm_sku": "MI300X", "rocm_arch": "gfx942", "rocm_platform": "mi300x-8"}
    assert props["test_pass"] == {"rocm_group": "attention", "rocm_blocking": "true"}
    # not blocking: nothing more to say
    assert props["test_skipped_in_body"] == {"rocm_group": "engine"}
    assert props["test_gap"]["rocm_known_gap"] == GAP
    assert props["test_needs_mi355x"] == {"rocm_group": "distributed_moe", "rocm_blocking": "true"}
    assert props["test_plain"] == {}  # no group: nothing added to tests we know nothing about


def test_junit_properties_in_full_and_under_xunit1(pytester):
    run_suite(pytester, "-o", "junit_family=xunit1", "--rocm-junit-properties=full")
    suite, props = junit_properties(pytester.path / "out/junit.xml")
    assert suite["rocm_sku"] == "MI300X"
    assert props["test_pass"] == {
        "rocm_group": "attention",
        "rocm_blocking": "true",
        "rocm_sku": "MI300X",
        "rocm_arch": "gfx942",
    }
    assert props["test_skipped_in_body"]["rocm_blocking"] == "false"
    assert props["test_needs_mi355x"]["rocm_requires"] == "8 x MI355X"


def test_junit_properties_setting_is_checked(pytester):
    pytester.makeini("[pytest]\nrocm_junit_properties = everything\n")
    pytester.makepyfile("def test_a(): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*rocm_junit_properties: 'everything' is not one of minimal, full*"]
    )


def test_terminal_summary_table_and_reasons(pytester):
    result = run_suite(pytester)
    result.stdout.fnmatch_lines(
        [
            "*pytest-rocm on mi300x-8, SIMULATED (8 x MI300X): the tests ran on this machine*",
            # issue 60: only the columns with something in them, after each group's gates
            "group *gates*blocking*passed*failed*error*skipped*xfail*xpass*known gaps*n/a*unconfirmed*total",
            "api *",
            "attention  * 2 * 2 * 1 * 1 * 0 * 0 * 0 * 0 * 0 * 0 * 1 * 2",
            "distributed_moe *",
            "engine *",
            "ungrouped *1*",
            "all *",
            "tests that did not run, by reason:",
        ]
    )
    for line in (
        f"    1  known_gap: no fp8 ({GAP})",
        "    1  not_applicable: needs 8 x MI355X, this runner has 8 x MI300X",
        "    1  skipped: needs a tokenizer file",
        "    1  xfailed: upstream bug",
    ):
        assert line in result.stdout.lines
    result.stdout.fnmatch_lines(
        ["conclusion: failure (2 blocking gate(s) failed and were not rerun: *"]
    )
    header = next(line for line in result.stdout.lines if line.startswith("group "))
    assert "crashed" not in header.split() and "regression" not in header.split(), header
    assert len(header) < 120, header


def test_no_report_dir_means_no_files_and_no_table(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--rocm-platform=mi300x-8")
    assert "pytest-rocm on" not in result.stdout.str()
    assert not list(pytester.path.glob("**/records-*.jsonl"))


@pytest.mark.parametrize(
    "body,conclusion,why",
    [
        (
            "@pytest.mark.rocm_gate(group='api')\ndef test_a(): pass\n"
            "@pytest.mark.rocm_gate(group='api', blocking=False)\ndef test_b(): assert 0\n",
            "success",
            "1 blocking gate(s) ran, none regressed",
        ),
        (
            "@pytest.mark.rocm_gate(group='api')\n@pytest.mark.hardware(sku='MI355X')\ndef test_a(): pass\n",
            "skipped",
            "no blocking gate ran on this runner (none collected, or none applicable here)",
        ),
        (
            "def test_a(): pass\n",
            "skipped",
            "no blocking gate ran on this runner (none collected, or none applicable here)",
        ),
        (
            "@pytest.mark.rocm_gate(group='api')\n"
            f"@pytest.mark.rocm_known_gap(reason='r', issue='{GAP}')\ndef test_a(): pass\n",
            "skipped",
            "no blocking gate ran on this runner (none collected, or none applicable here)",
        ),
    ],
)
def test_conclusions(pytester, body, conclusion, why):
    pytester.makepyfile("import pytest\n" + body)
    pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-report-dir=out", "--rocm-health-probe=true"
    )
    report = load(pytester, "gate-report.json")
    assert (report["conclusion"], report["conclusion_reason"]) == (conclusion, why)


@pytest.mark.parametrize("missing", ["test_typo.py", "test_gate.py::test_gone"])
def test_a_test_path_or_id_that_does_not_exist_is_an_incomplete_run(pytester, capsys, missing):
    """pytest refuses the whole run (exit 4, nothing ran): before, the report said `skipped`, no
    gate collected, and `complete: true` (a stale id from an earlier run's failures does this)."""
    pytester.makepyfile(
        test_gate="import pytest\n@pytest.mark.rocm_gate(group='api')\ndef test_a(): pass\n"
    )
    result = pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-report-dir=out", "test_gate.py::test_a", missing
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    report = load(pytester, "gate-report.json")
    assert report["conclusion"] == "incomplete" and report["complete"] is False
    assert report["incomplete_causes"][0].startswith("pytest stopped: a usage error")
    assert rocm_gate(["verdict", str(pytester.path / "out")]) == 3
    capsys.readouterr()


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_attempts_pytest_rerunfailures_makes_are_attempts(pytester, capsys, xdist):
    """pytest-rerunfailures (vLLM's tests use it) reports an attempt it runs again as `rerun`: its
    records were refused by the reader ('rerun' is no outcome), each such attempt read as a
    crash, the regression's message was the crash's, and a HIP fault that passed on the next
    attempt was `flaky`, its signature lost."""
    pytester.makepyfile(
        test_rr="""
        import pytest

        @pytest.mark.rocm_gate(group="engine", blocking=True)
        @pytest.mark.flaky(reruns=2)
        def test_always_fails():
            assert 0, "a real bug"

        @pytest.mark.rocm_gate(group="engine", blocking=True)
        @pytest.mark.flaky(reruns=2)
        def test_hip_then_pass(request):
            if request.node.execution_count == 1:
                raise RuntimeError("HIP error: hipErrorNoDevice: no ROCm-capable device is detected")
        """
    )
    result = pytester.runpytest(
        "-p", "rerunfailures", "--rocm-platform=mi300x-8", "--rocm-report-dir=out", *xdist
    )
    assert result.parseoutcomes() | {"seconds": 0} == {
        "passed": 1,
        "failed": 1,
        "rerun": 3,
        "seconds": 0,
    }
    report = load(pytester, "gate-report.json")
    assert report["record_problems"] == []
    bug, hip = (
        report["tests"]["test_rr.py::test_always_fails"],
        report["tests"]["test_rr.py::test_hip_then_pass"],
    )
    assert bug["verdict"] == "regression"
    assert bug["message"].startswith("AssertionError: a real bug")
    assert [a["status"] for a in bug["attempts"]] == ["failed"] * 3
    assert hip["verdict"] == "infra" and hip["verdict_reason"].startswith("hip_no_device")
    assert [a["status"] for a in hip["attempts"]] == ["failed", "passed"]
    assert report["conclusion"] == "failure"


def test_pytest_exit_in_a_test_stops_the_run_it_does_not_crash_the_test(pytester):
    """`pytest.exit(..., returncode=0)` inside a blocking gate: the session's status stayed 0, and
    the test it stopped in was recorded as crashed (the process died), blamed on the change."""
    pytester.makepyfile(
        test_e="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_a():
            pass

        @pytest.mark.rocm_gate(group="engine")
        def test_b():
            pytest.exit("bail out", returncode=0)

        @pytest.mark.rocm_gate(group="engine")
        def test_c():
            pass
    """
    )
    pytester.runpytest("--rocm-platform=mi300x-8", "--rocm-report-dir=out")
    report = load(pytester, "gate-report.json")
    assert report["conclusion"] == "incomplete"
    assert "pytest stopped early: pytest.exit() was called: bail out" in report["incomplete_causes"]
    assert report["tests"]["test_e.py::test_b"]["verdict"] == "interrupted"


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_module_skipped_at_collection_says_why_in_the_report(pytester, xdist):
    """`pytest.importorskip` of a package the runner lacks skips the whole module as it is
    collected: it was in no part of the gate report (nothing silent)."""
    pytester.makepyfile(
        test_s="import pytest\n@pytest.mark.rocm_gate(group='engine')\ndef test_a(): pass\n",
        test_mod="import pytest\npytest.importorskip('a_package_not_here')\n"
        "@pytest.mark.rocm_gate(group='engine')\ndef test_c(): pass\n",
    )
    result = pytester.runpytest("--rocm-platform=mi300x-8", "--rocm-report-dir=out", *xdist)
    report = load(pytester, "gate-report.json")
    [skipped] = [r for r in report["skip_reasons"] if "test_mod.py" in r["reason"]]
    assert skipped["count"] == 0 and "a_package_not_here" in skipped["reason"]
    assert "the whole module, at collection" in result.stdout.str()


def test_an_infrastructure_looking_failure_never_rerun_is_neither_blamed_nor_excused(pytester):
    """`--rocm-reruns 0` and a blocking gate that fails with a HIP fault's text: nothing reran it
    or probed its device, yet the run concluded `neutral` (excused as the runner's) on the text
    alone. A signature alone never decides: incomplete."""
    pytester.makepyfile(
        test_hip="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_hip():
            raise RuntimeError("HIP error: hipErrorNoDevice: no ROCm-capable device is detected")
    """
    )
    result = pytester.runpytest(
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--rocm-reruns=0",
        "--rocm-exit-by-conclusion",
    )
    report = load(pytester, "gate-report.json")
    assert report["tests"]["test_hip.py::test_hip"]["verdict"] == "unconfirmed"
    assert report["conclusion"] == "incomplete" and result.ret == 3
    assert (
        "failed with an infrastructure signature and were not rerun" in report["conclusion_reason"]
    )


def test_rebuilding_from_records_gives_the_same_file(pytester, capsys):
    run_suite(pytester)
    original = (pytester.path / "out/gate-report.json").read_bytes()
    # failure
    assert (
        rocm_gate(
            [
                "report",
                "--records",
                str(pytester.path / "out"),
                "--out",
                str(pytester.path / "again"),
            ]
        )
        == 1
    )
    assert (pytester.path / "again/gate-report.json").read_bytes() == original
    assert "conclusion: failure" in capsys.readouterr().out


def as_record_2(line: dict) -> list[dict]:
    """A record as record/2 wrote it: a plain pass's setup, then its call and teardown as one."""
    line = {**line, "schema": "pytest-rocm/record/2"}
    if line.get("when") != "setup+call+teardown":
        return [line]
    setup, call, teardown = line.pop("durations")
    return [
        {**line, "when": "setup", "duration": setup},
        {**line, "when": "call+teardown", "durations": [call, teardown]},
    ]


def as_record_1(line: dict) -> list[dict]:
    """A record as record/1 wrote it: a record per phase."""
    line = {**line, "schema": "pytest-rocm/record/1"}
    if line.get("when") != "setup+call+teardown":
        return [line]
    durations = line.pop("durations")
    return [
        {**line, "when": when, "duration": seconds}
        for when, seconds in zip(("setup", "call", "teardown"), durations, strict=True)
    ]


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "xdist"])
def test_the_same_report_from_a_runs_records_in_every_shape(pytester, capsys, xdist):
    """A plain pass is one record now; the report and the duration store read from the run's
    records as earlier versions wrote them (record/2: its setup, then its call and teardown in one;
    record/1: a record per phase) are the same."""
    from pytest_rocm.scheduling.durations import durations_from_records

    if xdist:  # records of two workers, interleaved in time
        pytester.makepyfile(test_suite=SUITE)
        pytester.runpytest_subprocess(
            "-n", "2", "--rocm-platform=mi300x-8", "--rocm-report-dir=out", "--rocm-reruns=0",
            "-p", "no:cacheprovider",
        )  # fmt: skip
    else:
        run_suite(pytester)
    out = pytester.path / "out"
    files = sorted(p.name for p in out.glob("records-*.jsonl"))
    records = {name: read_jsonl(out / name) for name in files}
    assert sum(r.get("when") == "setup+call+teardown" for rs in records.values() for r in rs) == 2
    original = (out / "gate-report.json").read_bytes()
    everything = [r for rs in records.values() for r in rs]
    for shape, convert in (("record-2", as_record_2), ("record-1", as_record_1)):
        old = pytester.path / shape
        old.mkdir()
        (old / "manifest.json").write_bytes((out / "manifest.json").read_bytes())
        expanded = []
        for name, lines in records.items():
            converted = [phase for r in lines for phase in convert(r)]
            (old / name).write_text("".join(json.dumps(r) + "\n" for r in converted))
            expanded += converted
        again = pytester.path / f"{shape}-report"
        assert rocm_gate(["report", "--records", str(old), "--out", str(again)]) == 1
        assert (again / "gate-report.json").read_bytes() == original, shape
        assert durations_from_records(expanded) == durations_from_records(everything), shape
    capsys.readouterr()


def test_truncated_record_line_is_reported_and_the_rest_kept(pytester, capsys):
    run_suite(pytester)
    original_report = (pytester.path / "out/gate-report.json").read_text()
    records = pytester.path / "out/records-controller.jsonl"
    with records.open("a") as handle:
        handle.write('{"nodeid": "test_suite.py::test_half", "wh')  # a process died mid-line
    # the run concluded failure
    assert rocm_gate(["report", "--records", str(pytester.path / "out")]) == 1
    report = load(pytester, "gate-report.json")
    assert len(report["tests"]) == 9
    lines = len(records.read_text().splitlines())
    assert report["record_problems"] == [
        f"{records}:{lines}: truncated last line (the process died while writing it); skipped"
    ]
    assert report["tests"] == json.loads(original_report)["tests"]
    assert "record problem:" in capsys.readouterr().out


def test_report_command_on_a_folder_without_records(tmp_path, capsys):
    assert rocm_gate(["report", "--records", str(tmp_path)]) == 2
    assert "no records-*.jsonl files" in capsys.readouterr().err


def test_records_of_an_earlier_run_are_not_mixed_in(pytester):
    run_suite(pytester)
    pytester.makepyfile(test_suite="def test_only(): pass")
    pytester.runpytest(
        "--rocm-platform=mi300x-8", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    assert list(load(pytester, "gate-report.json")["tests"]) == ["test_suite.py::test_only"]


# --- a plain pass's line read without a JSON parser, the encoder's templates, the running slot ---

COMMON = '"schema": "pytest-rocm/record/3", "worker": "gw0"'
PLAIN = '"when":"setup+call+teardown","outcome":"passed","durations":[0.000100,0.020000,0.000300]'


@pytest.mark.parametrize(
    "line",
    [
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON}}}',
        f'{{"nodeid":"t.py::test_é[ü]",{PLAIN},"t":1.500000,{COMMON},"group":"api","gate":true}}',
        # escapes in the node id, a nested value, a key given twice, spaces, other numbers: parsed
        f'{{"nodeid":"t.py::test_a[\\"x\\\\y\\"]",{PLAIN},"t":1.500000,{COMMON}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.5,{COMMON},"requires":{{"gpus":2}}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON},"group":"a","group":"b"}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":2,{COMMON}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.5e9,{COMMON}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON}, "gate": false }}',
        # fields after the fixed ones that change them, or make no record: as json.loads says
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON},"t":"soon"}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON},"nodeid":"t.py::test_b"}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,"schema":"pytest-rocm/record/9"}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON}}}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN},"t":1.500000,{COMMON},}}',
        f'{{"nodeid":"t.py::test_a\x01",{PLAIN},"t":1.500000,{COMMON}}}',
        f'{{"nodeid":"t.py::test_a",{PLAIN.replace("0.000300", "-0.0")},"t":1.5,{COMMON}}}',
    ],
)
def test_a_plain_pass_read_without_a_parser_is_what_json_reads(tmp_path, line):
    """Each line shaped like a plain pass's, well formed or not, gives the record (or the problem)
    json.loads gives."""
    from pytest_rocm.results.records import read_records, record_problem

    (tmp_path / "records-gw0.jsonl").write_text(f"{line}\n{line}\n")
    loaded = read_records(tmp_path)
    try:
        expected = json.loads(line)
        problem = record_problem(expected)
    except json.JSONDecodeError as exc:
        expected, problem = None, f"not JSON ({exc.msg})"
    if problem is None:
        assert loaded.records == [expected, expected] and loaded.problems == []
        assert [list(r) for r in loaded.records] == [list(expected)] * 2  # the same key order
    else:
        assert loaded.records == []
        assert [p.split(": ", 1)[1] for p in loaded.problems] == [f"{problem}; skipped"] * 2


def test_the_gate_report_text_is_what_json_dumps_writes(pytester):
    """The controller's gate-report.json is json.dumps's text, byte for byte, whatever an entry
    holds (`rocm-gate verdict` writes json.dumps's)."""
    from pytest_rocm.results.report import _plain_pass, gate_report_json

    run_suite(pytester)
    report = load(pytester, "gate-report.json")
    tests = report["tests"]
    plain = _plain_pass({"group": "api", "blocking": True, "gate": True, "worker": "gw1"}, 0.25)
    tests["t.py::test_é"] = plain
    tests["t.py::test_none"] = _plain_pass({"worker": None}, 1e-07)
    tests["t.py::test_nan"] = _plain_pass({"worker": "gw0"}, float("nan"))
    changed = _plain_pass({"group": "api", "worker": "gw0"}, 0.5)
    changed["group"] = None  # as `summarise` fills a group from the map
    changed["attempts"][0]["gpus"] = [0]
    tests["t.py::test_changed"] = changed
    tests["t.py::test_quarantined"] = {
        **_plain_pass({"worker": "gw0"}, 0.5),
        "quarantine": {"reason": "r", "since": None, "sku": None},
    }
    tests["t.py::test_required"] = _plain_pass({"requires": {"gpus": 2}, "worker": "gw0"}, 0.5)
    tests["t.py::test_1.2345678901234567e-300"] = _plain_pass(
        {"group": "1.2345678901234567e-300"}, 1.0
    )
    assert gate_report_json(report) == json.dumps(report, ensure_ascii=False, separators=(",", ":"))
    assert (pytester.path / "out/gate-report.json").read_text() == gate_report_json(
        load(pytester, "gate-report.json")
    ) + "\n"


def test_the_running_slot_names_the_test_until_its_record_is_written(tmp_path):
    """What a process killed in a test's body leaves: its running slot, with the setup record the
    reader takes for a line of its file; once the test's record is written the slot says nothing
    more, and a normal end removes it."""
    from pytest_rocm.results.records import (
        RecordWriter,
        last_attempt_records,
        read_records,
        running_path,
    )

    writer = RecordWriter(tmp_path, "gw3")
    nodeid = '"t.py::test_ü[\\"]"'  # as JSON
    spec = ',"group":"api","blocking":true,"gate":true'
    writer.set_running(nodeid, spec, 0.0123456, 1700000000.25)
    setup = {
        "nodeid": 't.py::test_ü["]',
        "when": "setup",
        "outcome": "passed",
        "duration": 0.012346,
        "t": 1700000000.25,
        "schema": "pytest-rocm/record/3",
        "worker": "gw3",
        "group": "api",
        "blocking": True,
        "gate": True,
    }
    assert read_records(tmp_path).records == [setup]
    assert last_attempt_records(writer.path, setup["nodeid"]) == [setup]
    writer.write_plain_pass(nodeid, 0.0123456, 1.0, 0.5, 1700000000.25, spec)
    assert [r["when"] for r in read_records(tmp_path).records] == ["setup+call+teardown"]
    # a longer one grows the slot; the next test's replaces it
    writer.set_running('"' + "x" * 10000 + '"', "", 0.5, 1700000002.0)
    assert [r["nodeid"] for r in read_records(tmp_path).records][-1] == "x" * 10000
    slot = running_path(writer.path)
    data = bytearray(slot.read_bytes())
    data[0] = 0  # killed while naming a test: no record, never half of one
    slot.write_bytes(bytes(data))
    assert [r["when"] for r in read_records(tmp_path).records] == ["setup+call+teardown"]
    writer.close()
    assert not slot.exists()


SERVER_LOGS_CONFTEST = """
    import pytest
    from pytest_rocm.plugin.fixtures import SERVICES
    from pytest_rocm.serving.process import LOG_SECTION

    class Provider:  # the servers this process runs, as the plugin's provider reports them
        def log_sections(self):
            return [(f"{LOG_SECTION} (vllm on port 1)", "servers/vllm-1.log", "KV cache ready")]

        def diagnoses(self):
            return ["the log names a missing kernel"]

        def close(self):
            pass

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        services = config.stash.get(SERVICES, None)
        if services is not None:  # a process that runs tests
            services._provider = Provider()
"""


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "xdist"])
def test_a_failed_phase_carries_the_servers_logs_everywhere(pytester, xdist):
    """The servers' logs join a failed report before the record, JUnit, the terminal and xdist's
    controller read it; a test that passes carries none."""
    pytester.makeconftest(SERVER_LOGS_CONFTEST)
    pytester.makepyfile(
        test_logs="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_fails():
            assert False

        @pytest.mark.rocm_gate(group="api")
        def test_passes():
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        *(["-n", "2"] if xdist else []),
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--junitxml=out/junit.xml",
        "--rocm-reruns=0",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*pytest-rocm server log (vllm on port 1)*", "KV cache ready"])
    records = [r for p in (pytester.path / "out").glob("records-*.jsonl") for r in read_jsonl(p)]
    failed = [r for r in records if r.get("outcome") == "failed"]
    assert [r["log_tail"] for r in failed] == ["KV cache ready"]
    assert failed[0]["failure"].startswith("pytest-rocm: the log names a missing kernel")
    assert not any("log_tail" in r for r in records if r.get("outcome") == "passed")
    _, cases = junit_properties(pytester.path / "out/junit.xml")
    assert cases["test_fails"]["rocm_server_log"] == "servers/vllm-1.log"
    assert "rocm_server_log" not in cases["test_passes"]


def test_a_plain_pass_record_reads_back_as_json_reads_it(tmp_path_factory):
    """A plain pass's line (results/records.py, `plain_pass_line`): whatever node id, numbers and
    test fields the writer is given, the reader's record is the one json.loads makes of the line,
    and no line is lost."""
    from json.encoder import encode_basestring

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pytest_rocm.results.records import RecordWriter, read_records

    seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
    plain = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
    fields = st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda k: k not in ("schema", "worker")),
        st.one_of(plain, st.lists(plain, max_size=2)),
        max_size=3,
    )

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(
        st.lists(
            st.tuples(st.text(max_size=30), seconds, seconds, seconds, seconds, fields),
            min_size=1,
            max_size=4,
        )
    )
    def round_trip(tests):
        folder = tmp_path_factory.mktemp("records")
        writer = RecordWriter(folder, "gw0")
        for nodeid, setup, call, teardown, t, extra in tests:
            encoded = "".join(f",{encode_basestring(k)}:{json.dumps(v)}" for k, v in extra.items())
            writer.write_plain_pass(encode_basestring(nodeid), setup, call, teardown, t, encoded)
        writer.close()
        lines = (folder / "records-gw0.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
        loaded = read_records(folder)
        assert loaded.problems == []
        assert loaded.records == [json.loads(line) for line in lines]

    round_trip()
