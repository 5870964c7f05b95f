"""A fault campaign through pytester: every kind of failure ends with exactly the expected verdict,
and the run with exactly the expected conclusion, with and without xdist."""

import json

import pytest
from conftest import read_report

from pytest_rocm.results.verdicts import DEFAULT_SIGNATURES, build_signatures, decide, find_signature

# 8 MI300X for ordinary tests and one MI325X that only the "unhealthy device" tests ask for, so a
# device marked unhealthy never disturbs the others' probes.
PROFILE = {"vendor": "amd", "gpus": [{"sku": "MI300X", "arch": "gfx942", "memory_gb": 192}] * 8
           + [{"sku": "MI325X", "arch": "gfx942", "memory_gb": 256}]}

# The health probe of the simulated runner: a device is unhealthy once a test left `unhealthy-<index>`.
PROBE = """
import os, sys
devices = [d for d in os.environ["PYTEST_ROCM_PROBE_DEVICES"].split(",") if d]
bad = [d for d in devices if os.path.exists(f"unhealthy-{d}")]
print(f"device(s) {','.join(bad)} failed the memory check" if bad else "healthy")
sys.exit(1 if bad else 0)
"""

CONFTEST = """
import glob
import pathlib
import pytest

@pytest.fixture
def attempt(request):
    # Which attempt of this test this is, counted in files shared by all processes of the run.
    folder = pathlib.Path("attempts")
    folder.mkdir(exist_ok=True)
    name = request.node.nodeid.replace("/", "_").replace(":", "_")
    number = len(list(folder.glob(glob.escape(name) + "-*")))
    (folder / f"{name}-{number}").touch()
    return number
"""

# signature name -> a line that real tools print for it
SIGNATURE_LINES = {
    "hsa_error": "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.",
    "hip_no_device": "RuntimeError: HIP error: hipErrorNoDevice",
    "hip_launch_failure": "HIP error: hipErrorLaunchFailure (unspecified launch failure)",
    "gpu_hang": "HW Exception by GPU node-2 (Agent handle: 0x55d1) reason :GPU Hang",
    "memory_access_fault": "Memory access fault by GPU node-3 (Agent handle: 0x5a2f) on address 0x7f2a. Reason: Unknown.",
    "amdgpu_reset": "[ 8123.4] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!",
    "collective_error": "NCCL WARN NET/IB : Got completion from peer with error 12",
    "no_space": "OSError: [Errno 28] No space left on device: '/root/.cache/vllm'",
    "server_not_healthy": "RuntimeError: vLLM server did not become healthy within 480 s",
    # vLLM's CPU worker (vllm/v1/worker/cpu_worker.py, determine_available_memory), as it formats the line
    "machine_memory": "ValueError: Available memory on node 0 (0.80/23.47 GiB) on kv cache allocation is less than "
                      "requested memory for kv (1.00 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, "
                      "or reduce CPU memory used by other processes.",
}

CAMPAIGN = '''
import os
import subprocess
import sys
import time
import pytest

pytestmark = [pytest.mark.rocm_gate(group="engine"), pytest.mark.hardware(sku="MI300X")]

@pytest.mark.parametrize("line", {lines!r}.values(), ids=list({lines!r}))
def test_infra_once(line, attempt, gpus):
    if attempt == 0:
        print(line)
        assert False, "the engine died"

def test_child_killed_134_once(attempt, gpus):
    code = subprocess.run([sys.executable, "-c", "import os; os._exit(134 if %d == 0 else 0)" % attempt]).returncode
    assert code == 0, f"engine child process exited with code {{code}}"

def test_real_bug_like_hardware(gpus):
    print("Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x7f00. Reason: Page not present.")
    assert False, "new kernel writes out of bounds"

@pytest.mark.hardware(sku="MI325X")
def test_fault_on_unhealthy_device(gpus):
    open(f"unhealthy-{{gpus[0]}}", "w").close()
    print("HW Exception by GPU node-9 reason :GPU Hang")
    assert False, "hang"

def test_assertion(gpus):
    assert 2 + 2 == 5

def test_flaky_once(attempt, gpus):
    assert attempt > 0, "lost a race"

@pytest.mark.timeout(1)
def test_hang_once(attempt, gpus):
    if attempt == 0:
        time.sleep(30)

@pytest.mark.rocm_gate(group="engine", blocking=False)
def test_shadow_failure():
    assert False, "not blocking"

def test_fine(gpus):
    assert len(gpus) == 1 and os.environ["HIP_VISIBLE_DEVICES"] == str(gpus[0])
'''

XDIST_ONLY = '''
@pytest.mark.timeout(1, method="thread")
def test_hang_thread_method_once(attempt, gpus):
    if attempt == 0:
        time.sleep(30)

def test_worker_killed_134_once(attempt, gpus):
    if attempt == 0:
        os._exit(134)

def test_worker_crashes_every_time(gpus):
    os._exit(11)
'''

EXPECTED = {
    **{f"test_campaign.py::test_infra_once[{name}]": "infra" for name in SIGNATURE_LINES},
    "test_campaign.py::test_child_killed_134_once": "infra",
    "test_campaign.py::test_real_bug_like_hardware": "regression",
    "test_campaign.py::test_fault_on_unhealthy_device": "infra",
    "test_campaign.py::test_assertion": "regression",
    "test_campaign.py::test_flaky_once": "flaky",
    "test_campaign.py::test_hang_once": "infra",
    "test_campaign.py::test_shadow_failure": "unconfirmed",  # not blocking: never rerun, never confirmed
    "test_campaign.py::test_fine": "pass",
}
EXPECTED_XDIST = {
    "test_campaign.py::test_hang_thread_method_once": "infra",
    "test_campaign.py::test_worker_killed_134_once": "infra",
    "test_campaign.py::test_worker_crashes_every_time": "regression",
}


def run_campaign(pytester, source, *args):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_campaign=source)
    (pytester.path / "probe.py").write_text(PROBE)
    (pytester.path / "runner.json").write_text(json.dumps(PROFILE))
    pytester.runpytest_subprocess("--rocm-platform=runner.json", "--rocm-report-dir=out",
                                  "--rocm-health-probe={python} probe.py", "-p", "no:cacheprovider", *args)
    return read_report(pytester.path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [False, True], ids=["single-process", "xdist-n2"])
def test_fault_campaign(pytester, xdist):
    source = CAMPAIGN.format(lines=SIGNATURE_LINES) + (XDIST_ONLY if xdist else "")
    report = run_campaign(pytester, source, *(["-n", "2"] if xdist else []))
    expected = {**EXPECTED, **(EXPECTED_XDIST if xdist else {})}
    verdicts = {nodeid: test["verdict"] for nodeid, test in report["tests"].items()}
    assert verdicts == expected
    tests = report["tests"]

    for name in SIGNATURE_LINES:
        test = tests[f"test_campaign.py::test_infra_once[{name}]"]
        assert [a["status"] for a in test["attempts"]] == ["failed", "passed"]
        assert test["attempts"][0]["signature"]["name"] == name
        assert test["verdict_reason"].endswith("the device passed its health probe and the rerun passed")
        assert test["probes"][0]["ok"] is True
        assert test["attempts"][1]["gpus"] != test["attempts"][0]["gpus"]  # rerun on another device

    bug = tests["test_campaign.py::test_real_bug_like_hardware"]
    assert bug["attempts"][0]["signature"]["name"] == "memory_access_fault"
    assert "reproduced on" in bug["verdict_reason"] and "after the device passed its health probe" in bug["verdict_reason"]

    unhealthy = tests["test_campaign.py::test_fault_on_unhealthy_device"]
    assert unhealthy["probes"][0]["ok"] is False and unhealthy["probes"][0]["devices"] == [8]
    assert "health probe then failed on device(s) 8: the runner is unhealthy" in unhealthy["verdict_reason"]

    assert tests["test_campaign.py::test_assertion"]["verdict_reason"] == "failed the same way on all 2 attempts"
    assert tests["test_campaign.py::test_assertion"]["probes"] == []  # no signature: no probe
    assert tests["test_campaign.py::test_flaky_once"]["verdict_reason"].startswith(
        "failed without an infrastructure signature, then passed on attempt 1")
    hang = tests["test_campaign.py::test_hang_once"]
    assert hang["attempts"][0]["signature"]["name"] == "timeout"
    assert len(tests["test_campaign.py::test_shadow_failure"]["attempts"]) == 1  # not blocking: not rerun
    child = tests["test_campaign.py::test_child_killed_134_once"]
    assert child["attempts"][0]["signature"]["name"] == "kfd_hang_exit"

    if xdist:
        thread_hang = tests["test_campaign.py::test_hang_thread_method_once"]
        assert thread_hang["attempts"][0]["status"] == "crashed"
        assert thread_hang["attempts"][0]["signature"]["name"] == "timeout"
        assert thread_hang["verdict_reason"].startswith("timeout: 'pytest-rocm: timed out after 1.0 s (a hang); stacks:")
        killed = tests["test_campaign.py::test_worker_killed_134_once"]
        assert killed["attempts"][0]["status"] == "crashed" and killed["attempts"][0]["exit_code"] == 134
        assert killed["attempts"][0]["signature"]["name"] == "kfd_hang_exit"
        crashes = tests["test_campaign.py::test_worker_crashes_every_time"]
        assert [a["status"] for a in crashes["attempts"]] == ["crashed", "crashed"]

    assert report["conclusion"] == "failure"
    regressed = report["conclusion_reason"].split(": ", 1)[1].split(", ")
    assert sorted(regressed) == sorted(n for n, v in expected.items()
                                       if v == "regression" and n != "test_campaign.py::test_shadow_failure")


@pytest.mark.slow
def test_infrastructure_only_run_is_neutral_and_names_what_to_rerun(pytester):
    source = CAMPAIGN.format(lines={"gpu_hang": SIGNATURE_LINES["gpu_hang"]})
    source = source[:source.index("def test_real_bug_like_hardware")] + source[source.index("def test_flaky_once"):]
    source = source.replace("def test_shadow_failure():\n    assert False", "def test_shadow_failure():\n    assert True")
    source = source.replace('@pytest.mark.hardware(sku="MI325X")\n', "")
    report = run_campaign(pytester, source, "-n", "2")
    verdicts = {n.split("::")[1]: t["verdict"] for n, t in report["tests"].items()}
    assert verdicts == {"test_infra_once[gpu_hang]": "infra", "test_child_killed_134_once": "infra",
                        "test_flaky_once": "flaky", "test_hang_once": "infra", "test_shadow_failure": "pass",
                        "test_fine": "pass"}
    assert report["conclusion"] == "neutral"
    reason = report["conclusion_reason"]
    assert reason.startswith("3 blocking gate(s) hit infrastructure faults on runner ")
    # every one passed on its rerun: nothing is left to rerun, and the rerun's healthy devices are not suspects
    assert "passed on their rerun: nothing to rerun" in reason and "test_campaign.py::test_child_killed_134_once" in reason
    failed_on = {str(d) for t in report["tests"].values() if t["verdict"] == "infra"
                 for a in t["attempts"] if a["status"] != "passed" for d in a["gpus"] or []}
    assert f"(devices {','.join(sorted(failed_on, key=lambda d: (len(d), d)))})" in reason


def test_flaky_only_run_succeeds(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_flaky="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_flaky(attempt):
            assert attempt > 0

        @pytest.mark.rocm_gate(group="api")
        def test_ok():
            pass
    """)
    pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-report-dir=out", "-p", "no:cacheprovider")
    report = read_report(pytester.path / "out")
    assert report["conclusion"] == "success"
    assert report["conclusion_reason"] == "2 blocking gate(s) ran, none regressed (1 flaky, reported)"
    assert report["groups"]["api"]["flaky"] == 1


def test_rebuilt_offline_verdicts_are_identical(pytester, capsys):
    from pytest_rocm.cli import main as rocm_gate

    report = run_campaign(pytester, CAMPAIGN.format(lines={"no_space": SIGNATURE_LINES["no_space"]}))
    assert rocm_gate(["verdict", "--records", str(pytester.path / "out"), "--out", str(pytester.path / "again")]) == 1  # failure
    again = read_report(pytester.path / "again")
    assert again == report


# --- the rules themselves -------------------------------------------------------------------------

def attempt(status, signature=None, gpus=(0,)):
    return {"status": status, "signature": {"name": signature, "line": "..."} if signature else None,
            "gpus": list(gpus)}


@pytest.mark.parametrize("attempts,probes,verdict", [
    ([attempt("failed"), attempt("passed")], [], "flaky"),
    ([attempt("failed"), attempt("failed")], [], "regression"),
    ([attempt("failed")], [], "unconfirmed"),
    ([attempt("failed", "gpu_hang"), attempt("passed")], [{"ok": True}], "infra"),
    ([attempt("failed", "gpu_hang"), attempt("failed", "gpu_hang", (1,))], [{"ok": True}], "regression"),
    ([attempt("failed", "gpu_hang"), attempt("failed", "gpu_hang", (1,))], [{"ok": False, "devices": [0]}], "infra"),
    ([attempt("crashed", "worker_crashed")], [{"ok": True}], "unconfirmed"),
    ([attempt("crashed", "worker_crashed")], [{"ok": False, "devices": [0]}], "infra"),
])
def test_decision_rules(attempts, probes, verdict):
    assert decide(attempts, probes)[0] == verdict


def test_plain_assertion_is_never_infra():
    signatures = build_signatures()
    text = "E       AssertionError: assert 0.71 >= 0.75\nE        +  where 0.71 = accuracy"
    assert find_signature([text], signatures) is None


def test_every_default_signature_has_a_real_example():
    signatures = build_signatures()
    examples = {**SIGNATURE_LINES, "timeout": "Failed: Timeout (>1.0s) from pytest-timeout.",
                "kfd_hang_exit": "engine child process exited with code 134",
                "killed_by_signal": "worker exit code -9 (SIGKILL)",
                "worker_crashed": "worker 'gw0' crashed while running 'tests/test_x.py::test_y'"}
    assert set(examples) == set(DEFAULT_SIGNATURES)
    for name, line in examples.items():
        assert find_signature([line], signatures)["name"] == name, line


def test_configured_signatures(pytester):
    pytester.makeini("[pytest]\nrocm_infra_signatures =\n    ib_link=mlx5_\\d+: link down\n    !no_space\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.rocm_gate(group="distributed_moe")
        def test_link():
            print("mlx5_3: link down")
            assert False

        @pytest.mark.rocm_gate(group="distributed_moe")
        def test_disk():
            print("No space left on device")
            assert False
    """)
    pytester.runpytest("--rocm-platform=mi300x-8", "--rocm-report-dir=out", "--rocm-reruns=0",
                       "--rocm-health-probe=true")
    report = read_report(pytester.path / "out")
    verdicts = {n.split("::")[1]: (t["verdict"], (t["attempts"][0]["signature"] or {}).get("name"))
                for n, t in report["tests"].items()}
    # --rocm-reruns=0: neither is confirmed; the configured signature is found, the dropped one is not.
    assert verdicts == {"test_link": ("unconfirmed", "ib_link"), "test_disk": ("unconfirmed", None)}


def test_bad_signature_configuration_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nrocm_infra_signatures =\n    broken=(unclosed\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*rocm_infra_signatures: broken: bad regex*"])


def test_per_group_timeouts_from_configuration(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nrocm_timeouts =\n    engine=1\n    default=30\n")
    pytester.makepyfile(test_hangs="""
        import time
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_hangs_once(attempt):
            if attempt == 0:
                time.sleep(20)

        @pytest.mark.rocm_gate(group="api")
        @pytest.mark.timeout(5)
        def test_own_timeout_wins(request):
            assert request.node.get_closest_marker("timeout").args == (5,)

        @pytest.mark.rocm_gate(group="api")
        def test_default(request):
            assert request.node.get_closest_marker("timeout").args == (30.0,)
    """)
    pytester.runpytest("--rocm-platform=mi300x-1", "--rocm-report-dir=out", "--rocm-health-probe=true")
    report = read_report(pytester.path / "out")
    hang = report["tests"]["test_hangs.py::test_hangs_once"]
    assert hang["attempts"][0]["signature"]["line"] == "E           Failed: Timeout (>1.0s) from pytest-timeout."
    assert hang["verdict"] == "infra"
    assert report["tests"]["test_hangs.py::test_own_timeout_wins"]["verdict"] == "pass"
    assert report["tests"]["test_hangs.py::test_default"]["verdict"] == "pass"


@pytest.mark.parametrize("line,message", [("engine=soon", "is not `group=seconds`"),
                                          ("enginee=5", "unknown group 'enginee'")])
def test_bad_timeout_configuration(pytester, line, message):
    pytester.makeini(f"[pytest]\nrocm_timeouts =\n    {line}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


@pytest.mark.slow
def test_rerun_of_a_last_test_runs_after_the_workers_stop(pytester):
    """With two tests on two workers xdist stops both workers at once: the rerun runs in a subprocess
    of the controller's (never in the controller itself, which a crashing test would take down)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_last="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt, gpus):
            assert attempt > 0

        @pytest.mark.rocm_gate(group="engine")
        def test_fine(gpus):
            pass
    """)
    pytester.runpytest_subprocess("-n", "2", "--rocm-platform=mi300x-8", "--rocm-report-dir=out",
                                  "-p", "no:cacheprovider")
    report = read_report(pytester.path / "out")
    flaky = report["tests"]["test_last.py::test_flaky"]
    assert flaky["verdict"] == "flaky"
    assert [a["worker"] for a in flaky["attempts"]] in (["gw0", "rerun1"], ["gw1", "rerun1"])
    assert flaky["attempts"][1]["gpus"] != flaky["attempts"][0]["gpus"]
    assert report["conclusion"] == "success"


@pytest.mark.slow
def test_a_rerun_subprocess_repeats_the_run_options_but_not_xdist_nor_the_selection(pytester):
    """The last test of a worker fails once: its rerun runs in a subprocess with the run's own options
    (the timeout, the ini overrides), without xdist, and with only that test selected."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a="""
        import json, pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt, request):
            with open(f"seen-{attempt}.json", "w") as out:
                json.dump({"timeout": request.config.getoption("timeout"),
                           "reruns": request.config.getini("rocm_reruns"),
                           "workers": request.config.getoption("numprocesses"),
                           "items": len(request.session.items)}, out)
            assert attempt > 0
    """)
    pytester.runpytest_subprocess("-n", "2", "--dist=load", "--timeout=5", "-o", "rocm_reruns=2",
                                  "--rocm-platform=mi300x-2", "--rocm-report-dir", "out", "--junitxml=j.xml",
                                  "-p", "no:cacheprovider", "test_a.py")
    first, rerun = (json.loads((pytester.path / f"seen-{n}.json").read_text()) for n in (0, 1))
    assert first == {"timeout": 5.0, "reruns": "2", "workers": None, "items": 1}  # an xdist worker
    assert rerun == {"timeout": 5.0, "reruns": "2", "workers": 0, "items": 1}
    report = read_report(pytester.path / "out")
    assert report["tests"]["test_a.py::test_flaky"]["verdict"] == "flaky"


@pytest.mark.slow
def test_a_rerun_that_cannot_start_is_said_not_mistaken_for_a_crash(pytester):
    """If the rerun subprocess cannot even start the test, the run says so; no crashed attempt is invented."""
    pytester.makepyfile(test_last="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt):
            import os
            os.remove(__file__)
            assert attempt > 0

        @pytest.mark.rocm_gate(group="engine")
        def test_fine():
            pass
    """)
    # The checkout changes under the run: the test file is gone when the rerun starts.
    (pytester.path / "conftest.py").write_text(CONFTEST)
    result = pytester.runpytest_subprocess("-n", "2", "--rocm-platform=mi300x-8", "--rocm-report-dir=out",
                                           "-p", "no:cacheprovider")
    report = read_report(pytester.path / "out")
    flaky = report["tests"]["test_last.py::test_flaky"]
    assert [a["status"] for a in flaky["attempts"]] == ["failed"]
    assert flaky["verdict"] == "unconfirmed"  # not rerun: it stands on its one attempt, unconfirmed
    assert any("could not rerun test_last.py::test_flaky: pytest exited 4" in n for n in report["manifest"]["notes"])
    result.stdout.fnmatch_lines(["*pytest-rocm: could not rerun test_last.py::test_flaky: pytest exited 4*"])
