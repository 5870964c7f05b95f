"""Verdict integrity on small, ordinary run shapes: no false block, no hidden regression, no silent
success.

Each test reproduces a way a run used to end with the wrong verdict or conclusion (issue 9).
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import read_jsonl, read_report

from pytest_rocm.results.records import read_records

FLAKY_FIRST = """
    import pytest

    pytestmark = pytest.mark.rocm_gate(group="engine")

    def test_0_flaky(attempt):
        assert attempt > 0, "lost a race"

    def test_a():
        pass

    def test_b():
        pass
"""

# The attempt counter of tests/test_verdicts.py, shared by every process of a run.
from test_verdicts import CONFTEST  # noqa: E402

# --- 1. reruns whatever the shape of the run ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["-n", "2"],
        ["-n", "1"],
        ["-n", "4"],
        ["-n", "2", "--dist=loadscope"],
        ["-n", "2", "--dist=loadfile"],
        ["-n", "2", "--dist=worksteal"],
        [],
        ["-n", "2", "--rocm-scheduler=gpu"],
        ["-n", "4", "--rocm-scheduler=gpu"],
    ],
    ids=["n2", "n1", "n4", "loadscope", "loadfile", "worksteal", "no-xdist", "gpu-n2", "gpu-n4"],
)
def test_a_flake_among_three_gates_is_rerun_in_every_shape(pytester, run_gates, args):
    """3 blocking gates, the flaky one first: the workers have been told to stop before it fails."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_three=FLAKY_FIRST)
    result, report = run_gates(*args, platform="mi300x-2")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    flaky = report["tests"]["test_three.py::test_0_flaky"]
    assert [a["status"] for a in flaky["attempts"]] == ["failed", "passed"]
    assert flaky["verdict"] == "flaky"
    assert report["conclusion"] == "success" and report["complete"] is True


@pytest.mark.slow
def test_a_regression_that_prints_an_infra_signature_is_rerun_and_caught(pytester, run_gates):
    pytester.makepyfile(
        test_bug="""
        import pytest

        pytestmark = pytest.mark.rocm_gate(group="attention")

        def test_kernel_bug(gpus):
            print("Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x7f00.")
            assert False, "new kernel writes out of bounds"

        def test_fine():
            pass
    """
    )
    _, report = run_gates("-n", "2", "--rocm-health-probe=true", platform="mi300x-2")
    bug = report["tests"]["test_bug.py::test_kernel_bug"]
    assert len(bug["attempts"]) == 2 and bug["verdict"] == "regression"
    assert report["conclusion"] == "failure"


# --- 2. every attempt under the same timeout ------------------------------------------------------


def test_an_in_process_rerun_runs_under_the_timeout(pytester, run_gates):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_hang="""
        import time, pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_hangs(attempt):
            time.sleep(20)
    """
    )
    start = time.monotonic()
    _, report = run_gates("--timeout=2", "--rocm-health-probe=true", platform="mi300x-1")
    assert time.monotonic() - start < 15  # two attempts of 2 s, not one of 20
    hang = report["tests"]["test_hang.py::test_hangs"]
    assert [a["status"] for a in hang["attempts"]] == ["failed", "failed"]
    assert all(a["signature"]["name"] == "timeout" for a in hang["attempts"])
    assert hang["verdict"] == "regression"  # it hangs every time on a healthy device


# --- 3. a run that did not execute what it collected is never a success ---------------------------


def test_a_syntax_error_in_a_gate_file_fails_the_run(pytester, run_gates):
    pytester.makepyfile(
        test_ok="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_fine():
            pass
    """,
        test_broken="import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_x(:\n    pass\n",
    )
    result, report = run_gates("-n", "1")
    assert report["complete"] is False
    assert report["conclusion"] == "failure"
    assert report["collection_errors"][0]["nodeid"] == "test_broken.py"
    assert report["collection_errors"][0]["cause"] == "change"
    assert "test_broken.py: SyntaxError: invalid syntax" in report["conclusion_reason"]


def test_a_missing_package_of_the_runner_is_incomplete_not_a_regression(pytester, run_gates):
    pytester.makepyfile(
        test_ok="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_fine():
            pass
    """,
        test_needs="import no_such_package_here\n\ndef test_x():\n    pass\n",
    )
    _, report = run_gates("--continue-on-collection-errors")
    assert report["collection_errors"][0]["cause"] == "infra"
    assert "no_such_package_here" in report["collection_errors"][0]["detail"]
    assert report["conclusion"] == "incomplete"
    assert report["tests"]["test_ok.py::test_fine"]["status"] == "passed"


def test_a_marker_typo_with_continue_on_collection_errors_is_not_a_success(pytester, run_gates):
    pytester.makepyfile(
        test_gates="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_fine():
            pass

        @pytest.mark.rocm_gate(grup="api")
        def test_typo():
            pass
    """
    )
    _, report = run_gates("--continue-on-collection-errors")
    assert report["conclusion"] == "failure" and report["complete"] is False
    assert report["collection_errors"][0]["detail"].startswith(
        "test_gates.py::test_typo: @pytest.mark.rocm_gate: rocm_gate got an unexpected keyword argument 'grup'"
    )


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail=1"]])
def test_a_run_stopped_early_names_the_gates_that_never_ran(pytester, run_gates, stop):
    pytester.makepyfile(
        test_gates="""
        import pytest

        @pytest.mark.rocm_gate(group="api", blocking=False)
        def test_0_shadow():
            assert False

        @pytest.mark.rocm_gate(group="api")
        def test_1_gate():
            pass
    """
    )
    result, report = run_gates(*stop)
    assert report["complete"] is False
    assert report["never_ran"] == ["test_gates.py::test_1_gate"]
    assert report["conclusion"] == "incomplete"
    result.stdout.fnmatch_lines(
        [
            "run incomplete: *",
            "gates that never ran: test_gates.py::test_1_gate",
            "conclusion: incomplete *",
        ]
    )


def test_an_internal_error_is_incomplete(pytester, run_gates):
    pytester.makeconftest(
        "def pytest_runtest_logfinish(nodeid):\n    raise RuntimeError('plugin bug')\n"
    )
    pytester.makepyfile(
        test_gates="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_a():
            pass
    """
    )
    result, report = run_gates()
    assert "INTERNALERROR" in result.stdout.str()
    assert report["conclusion"] == "incomplete"
    assert any("INTERNALERROR" in cause for cause in report["incomplete_causes"])


def test_keyboard_interrupt_marks_the_running_test_interrupted(pytester, run_gates):
    pytester.makepyfile(
        test_gates="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_a():
            raise KeyboardInterrupt

        @pytest.mark.rocm_gate(group="api")
        def test_b():
            pass
    """
    )
    _, report = run_gates()
    test = report["tests"]["test_gates.py::test_a"]
    assert (test["status"], test["verdict"]) == ("interrupted", "interrupted")
    assert report["conclusion"] == "incomplete"
    assert report["never_ran"] == ["test_gates.py::test_a", "test_gates.py::test_b"]


# --- 4. the controller killed mid-run -------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_controller_leaves_an_incomplete_run_that_blames_nobody(pytester, capsys):
    from rocm_gate.cli import main as rocm_gate

    pytester.makepyfile(
        test_slow="""
        import time, pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.parametrize("i", range(4))
        def test_slow(i):
            time.sleep(0.2 if i < 2 else 60)
    """
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--rocm-platform=mi300x-2",
            "--rocm-report-dir=out",
            "-p",
            "no:cacheprovider",
        ],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    out = pytester.path / "out"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # both long tests have started (their running slots say so)
        started = {
            r["nodeid"]
            for r in read_records(out).records
            if r.get("when") == "setup" and r["nodeid"].endswith(("[2]", "[3]"))
        }
        if len(started) == 2:
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert rocm_gate(["verdict", "--records", str(out)]) == 3  # incomplete
    report = read_report(out)
    assert report["conclusion"] == "incomplete" and report["complete"] is False
    assert "the run did not finish" in report["incomplete_causes"][0]
    running = {n: t for n, t in report["tests"].items() if t["status"] != "passed"}
    assert running and all(
        t["status"] == "interrupted" and t["verdict"] == "interrupted" for t in running.values()
    )
    assert "conclusion: incomplete" in capsys.readouterr().out


@pytest.mark.parametrize("phase", ["call", "teardown"])
def test_a_run_killed_in_a_test_names_that_test_interrupted(pytester, capsys, phase):
    """SIGKILL of the only pytest process, in a test's body or its teardown: its plain setup was
    never a line of the records file, yet the verdict rebuilt from the folder names that test,
    interrupted, from the process's running slot; the tests before it passed, one record each."""
    from rocm_gate.cli import main as rocm_gate

    pytester.makepyfile(
        test_dies=f"""
        import os, signal, pytest

        @pytest.fixture
        def dies_at_teardown():
            yield
            if {phase!r} == "teardown":
                os.kill(os.getpid(), signal.SIGKILL)

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.parametrize("i", range(3))
        def test_before(i):
            pass

        @pytest.mark.rocm_gate(group="engine")
        def test_killed(dies_at_teardown):
            if {phase!r} == "call":
                os.kill(os.getpid(), signal.SIGKILL)

        @pytest.mark.rocm_gate(group="engine")
        def test_never_ran():
            pass
    """
    )
    result = pytester.runpytest_subprocess(
        "--rocm-platform=mi300x-2", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    assert result.ret == -signal.SIGKILL
    out = pytester.path / "out"
    lines = [r for r in read_jsonl(out / "records-controller.jsonl") if "kind" not in r]
    assert [(r["nodeid"].split("::")[1], r["when"]) for r in lines] == [
        (f"test_before[{i}]", "setup+call+teardown") for i in range(3)
    ]
    assert (out / "records-controller.running").is_file()
    assert rocm_gate(["verdict", str(out)]) == 3  # incomplete
    report = read_report(out)
    killed = report["tests"]["test_dies.py::test_killed"]
    assert (killed["status"], killed["verdict"], killed["group"]) == (
        "interrupted",
        "interrupted",
        "engine",
    )
    # (a plain call waits in memory for its teardown, as in record/2: the slot has the setup)
    assert killed["detail"] == "the run stopped while this test ran (recorded phases: setup)"
    assert killed["attempts"][0]["worker"] == "controller"
    assert [t["status"] for n, t in report["tests"].items() if "before" in n] == ["passed"] * 3
    assert "test_dies.py::test_never_ran" not in report["tests"]
    assert report["conclusion"] == "incomplete" and report["complete"] is False
    capsys.readouterr()


# --- 5. two runs, one report folder ---------------------------------------------------------------


@pytest.mark.slow
def test_a_second_run_on_a_busy_report_folder_is_refused(pytester):
    pytester.makepyfile(test_slow="import time\n\ndef test_slow():\n    time.sleep(5)\n")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-platform=cpu",
            "--rocm-report-dir=out",
            "-p",
            "no:cacheprovider",
        ],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while (
        not (pytester.path / "out/records-controller.jsonl").exists()
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    second = pytester.runpytest_subprocess(
        "--rocm-platform=cpu", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines(
        ["*--rocm-report-dir * is in use by run * (pid *); give this run its own folder*"]
    )
    assert first.wait(60) == 0
    report = read_report(pytester.path / "out")
    assert (
        list(report["tests"]) == ["test_slow.py::test_slow"] and report["conclusion"] == "skipped"
    )


# --- 6. the health probe is checked before any test runs ------------------------------------------


@pytest.mark.parametrize(
    "probe,why",
    [
        (
            "no-such-probe-command",
            "'no-such-probe-command' is not an executable file or a program on PATH",
        ),
        ("python -c 'unbalanced", "cannot split"),
        # empty is refused by name, never taken for "not given" (issue 63)
        ("", "argument --rocm-health-probe: empty; give a command"),
    ],
)
def test_a_misconfigured_probe_is_a_usage_error(pytester, probe, why):
    pytester.makepyfile(test_a="def test_a(): pass")
    result = pytester.runpytest_subprocess(
        "--rocm-platform=mi300x-1", f"--rocm-health-probe={probe}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert why in result.stderr.str()


def test_a_failing_probe_before_the_run_makes_it_neutral_naming_the_devices(pytester, run_gates):
    pytester.makepyfile(
        test_a="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_a():
            pass
    """
    )
    _, report = run_gates("--rocm-health-probe=false", platform="mi300x-2")
    assert report["preflight"]["ok"] is False and report["preflight"]["devices"] == [0, 1]
    assert report["conclusion"] == "neutral"
    assert "before any test ran on devices 0,1" in report["conclusion_reason"]


def test_the_probe_help_says_how_it_is_run(pytester):
    result = pytester.runpytest_subprocess("--help")
    assert "Split with shlex and run without a shell" in " ".join(result.stdout.str().split())


# --- 10. regression only when confirmed; 11. exit status follows the conclusion -------------------


def test_a_failure_nobody_reran_is_unconfirmed_and_counted_apart(pytester, run_gates):
    pytester.makepyfile(
        test_shadow="""
        import pytest

        @pytest.mark.rocm_gate(group="api", blocking=False)
        def test_shadow():
            assert False

        @pytest.mark.rocm_gate(group="api")
        def test_gate():
            pass
    """
    )
    result, report = run_gates()
    shadow = report["tests"]["test_shadow.py::test_shadow"]
    assert shadow["verdict"] == "unconfirmed"
    assert (
        report["groups"]["api"]["unconfirmed"] == 1 and report["groups"]["api"]["regression"] == 0
    )
    assert report["conclusion"] == "success"
    assert result.ret == 1  # pytest's own status: a test failed


@pytest.mark.parametrize(
    "body,status",
    [
        ("def test_a(): pass", 0),
        ("def test_a(): assert False", 1),
        ("def test_a(): raise KeyboardInterrupt", 3),
    ],
)
def test_pytest_exit_status_follows_the_conclusion_when_asked(pytester, body, status):
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.rocm_gate(group='api')\n" + body + "\n"
        "\n@pytest.mark.rocm_gate(group='api', blocking=False)\ndef test_shadow(): assert False\n"
    )
    result = pytester.runpytest_subprocess(
        "--rocm-platform=mi300x-1",
        "--rocm-report-dir=out",
        "--rocm-exit-by-conclusion",
        "--rocm-reruns=1",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == status


def test_rocm_gate_verdict_exits_by_conclusion(pytester, run_gates, capsys):
    from rocm_gate.cli import main as rocm_gate

    pytester.makepyfile(
        test_a="import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_a(): assert False\n"
    )
    run_gates()
    assert rocm_gate(["verdict", "--records", str(pytester.path / "out")]) == 1
    assert "conclusion: failure" in capsys.readouterr().out


# --- 9. grouping lost to the space form of --rocm-group-map ---------------------------------------


def test_a_group_map_that_matches_nothing_is_loud(pytester, run_gates):
    pytester.makefile(".toml", groups='[[rule]]\ngroup = "api"\npaths = ["tests/entrypoints/"]\n')
    pytester.makepyfile(test_plain="def test_a(): pass")
    result, report = run_gates("--rocm-group-map=groups.toml")
    assert any(
        "matched none of the 1 collected test(s)" in note for note in report["manifest"]["notes"]
    )
    result.stdout.fnmatch_lines(["*group map * matched none of the 1 collected test(s)*"])


def test_a_right_map_and_a_run_of_only_ungrouped_tests_is_no_problem(pytester, run_gates):
    """The map sorts a file of the tree; this run only selected a test it leaves ungrouped: no
    advice to fix it."""
    pytester.makefile(".toml", groups='[[rule]]\ngroup = "api"\npaths = ["tests/entrypoints/"]\n')
    pytester.mkpydir("tests")
    (pytester.path / "tests" / "entrypoints").mkdir()
    (pytester.path / "tests" / "entrypoints" / "test_api.py").write_text("def test_api(): pass\n")
    pytester.makepyfile(test_plain="def test_a(): pass")
    result, report = run_gates("--rocm-group-map=groups.toml", "test_plain.py")
    assert not any("group map" in note for note in report["manifest"]["notes"]), report["manifest"][
        "notes"
    ]
    assert "matched none" not in result.stdout.str()


# --- 8. stacked markers that disagree -------------------------------------------------------------


def test_stacked_known_gaps_that_disagree_are_a_collection_error(pytester):
    pytester.makepyfile(
        test_gap="""
        import pytest

        @pytest.mark.rocm_known_gap(reason="a", issue="https://github.com/o/r/issues/1")
        @pytest.mark.rocm_known_gap(reason="b", issue="https://github.com/o/r/issues/2")
        def test_x():
            pass
    """
    )
    result = pytester.runpytest_subprocess("--rocm-platform=mi300x-1")
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.rocm_known_gap is given twice on test_x with different arguments*"]
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_a_module_server_marker_on_a_test_or_class_is_a_collection_error(pytester):
    """The module's server reads the module's marker: one on a test or a class would be ignored."""
    pytester.makepyfile(
        test_server="""
        import pytest

        @pytest.mark.vllm_server(args=["--max-model-len", "512"])
        def test_x(vllm_server):
            pass
    """,
        test_class_server="""
        import pytest

        @pytest.mark.sglang_server(args=["--x"])
        class TestY:
            def test_y(self, sglang_server):
                pass
    """,
    )
    result = pytester.runpytest_subprocess("--rocm-platform=cpu")
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.vllm_server on test_x is not read*module's `pytestmark`*"
            "vllm_server_variant*"
        ]
    )
    result.stdout.fnmatch_lines(["*@pytest.mark.sglang_server on TestY is not read*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


# --- other defects --------------------------------------------------------------------------------


def test_gpus_fixture_beside_a_server_on_a_one_gpu_runner_does_not_wait(pytester):
    """A device the process's server holds is usable by a test in that process (it talks to the
    server)."""
    pytester.makepyfile(
        test_both="""
        from pytest_rocm.hw import allocation

        def test_both():
            held = allocation.allocate("s1", [0], 1, "amd")  # as the server pool holds it
            got = allocation.allocate("s1", [0], 1, "amd", wait_s=1, held_here=set(held.devices))
            assert got.devices == [0]
            got.release()
            held.release()
    """
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_records_that_lie_are_reported_not_counted(tmp_path, capsys):
    from rocm_gate.cli import main as rocm_gate

    good = {
        "schema": "pytest-rocm/record/1",
        "nodeid": "t.py::test_a",
        "worker": "gw0",
        "duration": 0.1,
    }
    lines = [
        dict(good, when=w, outcome="passed", t=i)
        for i, w in enumerate(("setup", "call", "teardown"))
    ]
    lines += [
        dict(good, nodeid="t.py::test_b", when="call", outcome="maybe", t=5),
        dict(good, nodeid="t.py::test_c", when="setup", t=6),
        dict(good, nodeid="t.py::test_d", when="setup", outcome="passed", t="soon"),
    ]
    (tmp_path / "records-gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rocm_gate(["verdict", "--records", str(tmp_path)])
    report = read_report(tmp_path)
    assert list(report["tests"]) == ["t.py::test_a"]
    problems = " ".join(report["record_problems"])
    assert (
        "'maybe'" in problems
        and "`outcome`" in problems
        and "`t` must be a finite number" in problems
    )


# --- 8. numbers that are never checked ------------------------------------------------------------


def test_a_baseline_file_diffed_against_itself_changes_nothing(capsys):
    from pathlib import Path

    from rocm_gate.cli import main as rocm_gate

    cpu = Path(__file__).resolve().parent.parent / "suites" / "baselines" / "cpu.toml"
    assert rocm_gate(["baselines", "diff", str(cpu), str(cpu), "--fail-on-loosened"]) == 0
    assert capsys.readouterr().out.strip() == "0 loosened, 0 tightened, 0 moved, 0 added, 0 removed"


def test_the_space_form_of_the_group_map_never_groups_nothing_silently(pytester):
    """As people type it, from the upstream tree, with the map in the plugin's checkout (which has
    an ini file):
    `pytest --rocm-group-map ../plugin/suites/upstream/vllm.toml tests/entrypoints`."""
    plugin, tree = pytester.mkdir("plugin"), pytester.mkdir("vllm")
    (plugin / "suites/upstream").mkdir(parents=True)
    (plugin / "suites/pytest.ini").write_text("[pytest]\n")
    (plugin / "suites/upstream/vllm.toml").write_text(
        '[[rule]]\ngroup = "api"\npaths = ["tests/entrypoints/"]\n'
    )
    (tree / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (tree / "tests/entrypoints").mkdir(parents=True)
    (tree / "tests/entrypoints/test_api.py").write_text("def test_a(): pass\n")
    args = ["--rocm-platform=cpu", "--rocm-report-dir=out", "-p", "no:cacheprovider"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        spaced = pytester.runpytest_subprocess(
            *args, "--rocm-group-map", "../plugin/suites/upstream/vllm.toml", "tests/entrypoints"
        )
        assert spaced.ret == pytest.ExitCode.USAGE_ERROR
        spaced.stderr.fnmatch_lines(
            [
                "*--rocm-group-map ../plugin/suites/upstream/vllm.toml: pytest takes this path "
                "for a test path too and chooses the rootdir */plugin/suites*"
                "write --rocm-group-map=../plugin/suites/upstream/vllm.toml with '='*"
            ]
        )
        joined = pytester.runpytest_subprocess(
            *args, "--rocm-group-map=../plugin/suites/upstream/vllm.toml", "tests/entrypoints"
        )
    assert joined.ret == 0
    assert (
        read_report(tree / "out")["tests"]["tests/entrypoints/test_api.py::test_a"]["group"]
        == "api"
    )


def test_a_report_folder_typed_with_a_space_never_moves_the_node_ids(pytester):
    """`--rocm-report-dir gate-out tests/` in a tree without an ini file: every run into the folder
    once it exists took it for a test path too, chose the rootdir above both, and prefixed every
    node id, so its baseline no longer matched and a passing accuracy gate failed as a
    regression."""
    tree = pytester.mkdir("tree")
    (tree / "tests").mkdir()
    (tree / "tests/test_acc.py").write_text(
        "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_a(): pass\n"
    )
    out = pytester.path / "gate-out"
    args = ["--rocm-platform=cpu", "-p", "no:cacheprovider", "--rocm-report-dir", str(out)]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        # the first run too: the folder it creates moves the rootdir of the next run, and at once
        # that of its own xdist workers, which parse the same command line once it exists (they
        # died refusing it, and the run concluded `skipped`, exit 5)
        for xdist in ([], ["-n", "2"]):
            refused = pytester.runpytest_subprocess(*args, "tests/", *xdist)
            assert refused.ret == pytest.ExitCode.USAGE_ERROR
            assert refused.stderr.lines[0].startswith(
                f"ERROR: --rocm-report-dir {out}: pytest takes this path for a test path too"
            )
            assert "Traceback" not in refused.stderr.str() + refused.stdout.str()
            assert not out.exists()  # a usage error concludes nothing: no report to mirror
        joined = pytester.runpytest_subprocess(*args[:-2], f"--rocm-report-dir={out}", "tests/")
        assert joined.ret == 0
        assert list(read_report(out)["tests"]) == ["tests/test_acc.py::test_a"]
        again = pytester.runpytest_subprocess(*args, "tests/")  # the folder exists now
    assert again.ret == pytest.ExitCode.USAGE_ERROR


def test_a_rerun_works_when_pytest_starts_outside_the_rootdir(pytester):
    """`pytest -c suites/pytest.ini suites -n 1` from the repository, as the main job runs: node ids
    are relative to suites/, and the last test's rerun (no worker left to take it: a subprocess)
    must still find it."""
    suite = pytester.mkdir("suite")
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_last.py").write_text(
        "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_bug():\n    assert 1 == 2, 'a real bug'\n"
    )
    pytester.runpytest_subprocess(
        "-c",
        "suite/pytest.ini",
        "suite",
        "-n",
        "1",
        "--rocm-platform=mi300x-1",
        "--rocm-report-dir=out",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    report = json.loads((pytester.path / "out/gate-report.json").read_text())
    bug = report["tests"]["test_last.py::test_bug"]
    assert len(bug["attempts"]) == 2 and bug["verdict"] == "regression", bug["verdict_reason"]


def test_collect_only_does_not_call_a_pattern_stale_when_its_file_failed_to_collect(pytester):
    """The hint's count must agree with `rocm-gate groups` on the tree, which sees the broken
    file."""
    pytester.makefile(
        ".toml",
        groups='[[rule]]\ngroup = "api"\npaths = ["test_api.py"]\n\n'
        '[[rule]]\ngroup = "engine"\npaths = ["test_engine.py", "test_gone.py"]\n',
    )
    pytester.makepyfile(
        test_api="def test_api(:\n    pass\n", test_engine="def test_engine(): pass\n"
    )
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        "--rocm-group-map=groups.toml",
        "--collect-only",
        "-p",
        "no:cacheprovider",
    )
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        ["all * 1 * 1 *", "files that failed to collect*(1):", "  test_api.py"]
    )
    assert "map: 1 pattern(s) match none of these tests" in out, out  # test_gone.py only


def test_verdict_refuses_a_folder_that_holds_two_runs_records(pytester, capsys):
    """Issue 49: a folder holding two runs' records concluded `success` although one run
    regressed (nothing checked the records were one run's). Two real runs, the second with a
    regression; a folder with the first run's files and one file of the second (renamed, or with
    its worker renamed too) is refused naming the file; the first run's own folder is judged."""
    import shutil

    from rocm_gate.cli import main as rocm_gate

    pytester.makepyfile(
        test_gate="""
        import os, pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.parametrize("i", range(4))
        def test_gate(i):
            assert not (os.environ.get("BREAK") and i == 3)
    """
    )
    for name, env in (("good", {}), ("bad", {"BREAK": "1"})):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",
                "2",
                "--rocm-platform=mi300x-2",
                f"--rocm-report-dir={name}",
                "-p",
                "no:cacheprovider",
            ],
            cwd=pytester.path,
            env={**os.environ, **env},
            capture_output=True,
            check=False,
        )
    good, bad = pytester.path / "good", pytester.path / "bad"
    assert rocm_gate(["verdict", str(good)]) == 0
    assert rocm_gate(["verdict", str(bad)]) == 1
    capsys.readouterr()
    renamed = pytester.path / "renamed"
    shutil.copytree(good, renamed)
    (renamed / "gate-report.json").unlink()
    shutil.copy(bad / "records-gw1.jsonl", renamed / "records-gw7.jsonl")
    assert rocm_gate(["verdict", str(renamed)]) == 2
    said = capsys.readouterr().err
    assert "these records are not one run's" in said and "records-gw7.jsonl" in said
    assert not (renamed / "gate-report.json").exists()
    relabelled = pytester.path / "relabelled"
    shutil.copytree(good, relabelled)
    text = (bad / "records-controller.jsonl").read_text().replace('"controller"', '"extra"')
    (relabelled / "records-extra.jsonl").write_text(text)
    assert rocm_gate(["verdict", str(relabelled)]) == 2
    assert "2 session records" in capsys.readouterr().err
    out_file = pytester.path / "a-file"
    out_file.write_text("")
    assert rocm_gate(["verdict", str(good), "--out", str(out_file)]) == 2
    assert "--out" in capsys.readouterr().err and out_file.read_text() == ""


@pytest.mark.parametrize(
    "files, started, finished, expected",
    [
        (
            {"records-gw0.jsonl": [{"worker": "gw0", "t": 10.0, "kind": "collection"}]},
            9.0,
            11.0,
            [],
        ),
        (
            {"records-gw0.jsonl": [{"worker": "gw1", "t": 10.0}]},
            None,
            None,
            ["holds the records of gw1"],
        ),
        (
            {
                "records-a.jsonl": [{"worker": "a", "kind": "session"}],
                "records-b.jsonl": [{"worker": "b", "kind": "session"}],
            },
            None,
            None,
            ["2 session records"],
        ),
        (
            {"records-gw0.jsonl": [{"worker": "gw0", "kind": "collection"}] * 2},
            None,
            None,
            ["2 collection records"],
        ),
        (
            {"records-gw0.jsonl": [{"worker": "gw0", "t": 100.0}]},
            200.0,
            300.0,
            ["before the manifest's start"],
        ),
        (
            {"records-gw0.jsonl": [{"worker": "gw0", "t": 400.0}]},
            200.0,
            300.0,
            ["after the manifest's finish"],
        ),
        (
            {"records-gw0.jsonl": [{"worker": "gw0", "t": 304.0}]},
            200.0,
            300.0,
            [],
        ),  # within the slack
    ],
)
def test_other_runs_table(files, started, finished, expected):
    from pytest_rocm.results.records import other_runs

    found = other_runs(files, started, finished)
    assert len(found) == len(expected) and all(e in f for f, e in zip(found, expected, strict=True))
