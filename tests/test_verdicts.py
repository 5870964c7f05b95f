"""A fault campaign through pytester: every kind of failure ends with exactly the expected verdict,
and the run with exactly the expected conclusion, with and without xdist."""

import json

import pytest
from conftest import read_report
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_rocm.results.verdicts import (
    DEFAULT_SIGNATURES,
    build_signatures,
    decide,
    find_signature,
)

# 8 MI300X for ordinary tests and one MI325X that only the "unhealthy device" tests ask for, so a
# device marked unhealthy never disturbs the others' probes.
PROFILE = {
    "vendor": "amd",
    "gpus": [{"sku": "MI300X", "arch": "gfx942", "memory_gb": 192}] * 8
    + [{"sku": "MI325X", "arch": "gfx942", "memory_gb": 256}],
}

# The health probe of the simulated runner: a device is unhealthy once a test left
# `unhealthy-<index>`.
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
    # torch 2.11+cu130 on an H100 (tests/data/h100-sticky-fault/)
    "device_fault": "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "amdgpu_reset": "[ 8123.4] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!",
    # the kernel's RAS report (tests/data/samples/preflight/dmesg, ROCm/ROCm#4021), read from the
    # catalog node acceptance reads too (results/gpu_faults.toml)
    "amdgpu_fault": "[76914.152141] amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
    "collective_error": "NCCL WARN NET/IB : Got completion from peer with error 12",
    "no_space": "OSError: [Errno 28] No space left on device: '/root/.cache/vllm'",
    "server_not_healthy": "RuntimeError: vLLM server did not become healthy within 480 s",
    # vLLM's CPU worker (vllm/v1/worker/cpu_worker.py, determine_available_memory), as it formats
    # the line
    "machine_memory": "ValueError: Available memory on node 0 (0.80/23.47 GiB) on kv cache allocation is less than "
    "requested memory for kv (1.00 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, "
    "or reduce CPU memory used by other processes.",
    # requests (urllib3 2.x) when huggingface.co refuses the connection
    "network": "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
    'exceeded with url: /api/models/facebook/opt-125m (Caused by NewConnectionError("HTTPSConnection('
    "host='huggingface.co', port=443): Failed to establish a new connection: [Errno 111] Connection "
    'refused"))',
}

CAMPAIGN = """
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
"""

XDIST_ONLY = """
@pytest.mark.timeout(1, method="thread")
def test_hang_thread_method_once(attempt, gpus):
    if attempt == 0:
        time.sleep(30)

def test_worker_killed_134_once(attempt, gpus):
    if attempt == 0:
        os._exit(134)

def test_worker_crashes_every_time(gpus):
    os._exit(11)
"""

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
    pytester.runpytest_subprocess(
        "--rocm-platform=runner.json",
        "--rocm-report-dir=out",
        "--rocm-health-probe={python} probe.py",
        "-p",
        "no:cacheprovider",
        *args,
    )
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
        assert test["verdict_reason"].endswith(
            "the device passed its health probe and the rerun passed"
        )
        assert test["probes"][0]["ok"] is True
        assert test["attempts"][1]["gpus"] != test["attempts"][0]["gpus"]  # rerun on another device

    bug = tests["test_campaign.py::test_real_bug_like_hardware"]
    assert bug["attempts"][0]["signature"]["name"] == "memory_access_fault"
    assert (
        "reproduced on" in bug["verdict_reason"]
        and "after the device passed its health probe" in bug["verdict_reason"]
    )

    unhealthy = tests["test_campaign.py::test_fault_on_unhealthy_device"]
    assert unhealthy["probes"][0]["ok"] is False and unhealthy["probes"][0]["devices"] == [8]
    assert (
        "health probe then failed on device(s) 8: the runner is unhealthy"
        in unhealthy["verdict_reason"]
    )

    assert (
        tests["test_campaign.py::test_assertion"]["verdict_reason"]
        == "failed the same way on all 2 attempts"
    )
    assert tests["test_campaign.py::test_assertion"]["probes"] == []  # no signature: no probe
    assert tests["test_campaign.py::test_flaky_once"]["verdict_reason"].startswith(
        "failed without an infrastructure signature, then passed on attempt 2"
    )
    hang = tests["test_campaign.py::test_hang_once"]
    assert hang["attempts"][0]["signature"]["name"] == "timeout"
    # not blocking: not rerun
    assert len(tests["test_campaign.py::test_shadow_failure"]["attempts"]) == 1
    child = tests["test_campaign.py::test_child_killed_134_once"]
    assert child["attempts"][0]["signature"]["name"] == "kfd_hang_exit"

    if xdist:
        thread_hang = tests["test_campaign.py::test_hang_thread_method_once"]
        assert thread_hang["attempts"][0]["status"] == "crashed"
        assert thread_hang["attempts"][0]["signature"]["name"] == "timeout"
        assert thread_hang["verdict_reason"].startswith(
            "timeout: 'pytest-rocm: timed out after 1.0 s (a hang); stacks:"
        )
        killed = tests["test_campaign.py::test_worker_killed_134_once"]
        assert (
            killed["attempts"][0]["status"] == "crashed"
            and killed["attempts"][0]["exit_code"] == 134
        )
        assert killed["attempts"][0]["signature"]["name"] == "kfd_hang_exit"
        crashes = tests["test_campaign.py::test_worker_crashes_every_time"]
        assert [a["status"] for a in crashes["attempts"]] == ["crashed", "crashed"]

    assert report["conclusion"] == "failure"
    regressed = report["conclusion_reason"].split(": ", 1)[1].split(", ")
    assert sorted(regressed) == sorted(
        n
        for n, v in expected.items()
        if v == "regression" and n != "test_campaign.py::test_shadow_failure"
    )


@pytest.mark.slow
def test_infrastructure_only_run_is_neutral_and_names_what_to_rerun(pytester):
    source = CAMPAIGN.format(lines={"gpu_hang": SIGNATURE_LINES["gpu_hang"]})
    source = (
        source[: source.index("def test_real_bug_like_hardware")]
        + source[source.index("def test_flaky_once") :]
    )
    source = source.replace(
        "def test_shadow_failure():\n    assert False",
        "def test_shadow_failure():\n    assert True",
    )
    source = source.replace('@pytest.mark.hardware(sku="MI325X")\n', "")
    report = run_campaign(pytester, source, "-n", "2")
    verdicts = {n.split("::")[1]: t["verdict"] for n, t in report["tests"].items()}
    assert verdicts == {
        "test_infra_once[gpu_hang]": "infra",
        "test_child_killed_134_once": "infra",
        "test_flaky_once": "flaky",
        "test_hang_once": "infra",
        "test_shadow_failure": "pass",
        "test_fine": "pass",
    }
    assert report["conclusion"] == "neutral"
    reason = report["conclusion_reason"]
    assert reason.startswith("3 blocking gate(s) hit infrastructure faults on runner ")
    # every one passed on its rerun: nothing is left to rerun, and the rerun's healthy devices are
    # not suspects
    assert (
        "passed on their rerun: nothing to rerun" in reason
        and "test_campaign.py::test_child_killed_134_once" in reason
    )
    failed_on = {
        str(d)
        for t in report["tests"].values()
        if t["verdict"] == "infra"
        for a in t["attempts"]
        if a["status"] != "passed"
        for d in a["gpus"] or []
    }
    assert f"(devices {','.join(sorted(failed_on, key=lambda d: (len(d), d)))})" in reason


def test_flaky_only_run_succeeds(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_flaky="""
        import pytest

        @pytest.mark.rocm_gate(group="api")
        def test_flaky(attempt):
            assert attempt > 0

        @pytest.mark.rocm_gate(group="api")
        def test_ok():
            pass
    """
    )
    pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    report = read_report(pytester.path / "out")
    assert report["conclusion"] == "success"
    assert (
        report["conclusion_reason"] == "2 blocking gate(s) ran, none regressed (1 flaky, reported)"
    )
    assert report["groups"]["api"]["flaky"] == 1


def test_rebuilt_offline_verdicts_are_identical(pytester, capsys):
    from rocm_gate.cli import main as rocm_gate

    report = run_campaign(
        pytester, CAMPAIGN.format(lines={"no_space": SIGNATURE_LINES["no_space"]})
    )
    # failure
    assert (
        rocm_gate(["verdict", str(pytester.path / "out"), "--out", str(pytester.path / "again")])
        == 1
    )
    again = read_report(pytester.path / "again")
    assert again == report
    capsys.readouterr()
    # the older spelling still works, and says it is deprecated
    assert (
        rocm_gate(
            [
                "verdict",
                "--records",
                str(pytester.path / "out"),
                "--out",
                str(pytester.path / "old"),
            ]
        )
        == 1
    )
    assert read_report(pytester.path / "old") == report
    assert (
        "--records is deprecated; give the folder alone: rocm-gate verdict "
        in capsys.readouterr().err
    )


# --- the rules themselves -------------------------------------------------------------------------


def attempt(status, signature=None, gpus=(0,)):
    return {
        "status": status,
        "signature": {"name": signature, "line": "..."} if signature else None,
        "gpus": list(gpus),
    }


@pytest.mark.parametrize(
    "attempts,probes,verdict",
    [
        ([attempt("failed"), attempt("passed")], [], "flaky"),
        ([attempt("failed"), attempt("failed")], [], "regression"),
        ([attempt("failed")], [], "unconfirmed"),
        ([attempt("failed", "gpu_hang"), attempt("passed")], [{"ok": True}], "infra"),
        (
            [attempt("failed", "gpu_hang"), attempt("failed", "gpu_hang", (1,))],
            [{"ok": True}],
            "regression",
        ),
        (
            [attempt("failed", "gpu_hang"), attempt("failed", "gpu_hang", (1,))],
            [{"ok": False, "devices": [0]}],
            "infra",
        ),
        ([attempt("crashed", "worker_crashed")], [{"ok": True}], "unconfirmed"),
        ([attempt("crashed", "worker_crashed")], [{"ok": False, "devices": [0]}], "infra"),
    ],
)
def test_decision_rules(attempts, probes, verdict):
    assert decide(attempts, probes)[0] == verdict


def test_plain_assertion_is_never_infra():
    signatures = build_signatures()
    text = "E       AssertionError: assert 0.71 >= 0.75\nE        +  where 0.71 = accuracy"
    assert find_signature([text], signatures) is None


def test_every_default_signature_has_a_real_example():
    signatures = build_signatures()
    examples = {
        **SIGNATURE_LINES,
        "timeout": "Failed: Timeout (>1.0s) from pytest-timeout.",
        "kfd_hang_exit": "engine child process exited with code 134",
        "killed_by_signal": "worker exit code -9 (SIGKILL)",
        "worker_crashed": "worker 'gw0' crashed while running 'tests/test_x.py::test_y'",
    }
    assert set(examples) == set(DEFAULT_SIGNATURES)
    for name, line in examples.items():
        assert find_signature([line], signatures)["name"] == name, line


def test_configured_signatures(pytester):
    pytester.makeini(
        "[pytest]\nrocm_infra_signatures =\n    ib_link=mlx5_\\d+: link down\n    !no_space\n"
    )
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
    pytester.runpytest(
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--rocm-reruns=0",
        "--rocm-health-probe=true",
    )
    report = read_report(pytester.path / "out")
    verdicts = {
        n.split("::")[1]: (t["verdict"], (t["attempts"][0]["signature"] or {}).get("name"))
        for n, t in report["tests"].items()
    }
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
    pytester.makepyfile(
        test_hangs="""
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
    """
    )
    pytester.runpytest(
        "--rocm-platform=mi300x-1", "--rocm-report-dir=out", "--rocm-health-probe=true"
    )
    report = read_report(pytester.path / "out")
    hang = report["tests"]["test_hangs.py::test_hangs_once"]
    assert (
        hang["attempts"][0]["signature"]["line"]
        == "E           Failed: Timeout (>1.0s) from pytest-timeout."
    )
    assert hang["verdict"] == "infra"
    assert report["tests"]["test_hangs.py::test_own_timeout_wins"]["verdict"] == "pass"
    assert report["tests"]["test_hangs.py::test_default"]["verdict"] == "pass"


@pytest.mark.parametrize(
    "line,message",
    [("engine=soon", "is not `group=seconds`"), ("enginee=5", "unknown group 'enginee'")],
)
def test_bad_timeout_configuration(pytester, line, message):
    pytester.makeini(f"[pytest]\nrocm_timeouts =\n    {line}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


@pytest.mark.slow
def test_rerun_of_a_last_test_runs_after_the_workers_stop(pytester):
    """With two tests on two workers xdist stops both workers at once: the rerun runs in a
    subprocess of the controller's (never in the controller itself, which a crashing test would take
    down)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_last="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt, gpus):
            assert attempt > 0

        @pytest.mark.rocm_gate(group="engine")
        def test_fine(gpus):
            pass
    """
    )
    pytester.runpytest_subprocess(
        "-n", "2", "--rocm-platform=mi300x-8", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    report = read_report(pytester.path / "out")
    flaky = report["tests"]["test_last.py::test_flaky"]
    assert flaky["verdict"] == "flaky"
    assert [a["worker"] for a in flaky["attempts"]] in (["gw0", "rerun1"], ["gw1", "rerun1"])
    assert flaky["attempts"][1]["gpus"] != flaky["attempts"][0]["gpus"]
    assert report["conclusion"] == "success"


@pytest.mark.slow
def test_a_rerun_subprocess_repeats_the_run_options_but_not_xdist_nor_the_selection(pytester):
    """The last test of a worker fails once: its rerun runs in a subprocess with the run's own
    options (the timeout, the ini overrides), without xdist, and with only that test selected."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_a="""
        import json, pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt, request):
            with open(f"seen-{attempt}.json", "w") as out:
                json.dump({"timeout": request.config.getoption("timeout"),
                           "reruns": request.config.getini("rocm_reruns"),
                           "workers": request.config.getoption("numprocesses"),
                           "items": len(request.session.items)}, out)
            assert attempt > 0
    """
    )
    pytester.runpytest_subprocess(
        "-n",
        "2",
        "--dist=load",
        "--timeout=5",
        "-o",
        "rocm_reruns=2",
        "--rocm-platform=mi300x-2",
        "--rocm-report-dir",
        "out",
        "--junitxml=j.xml",
        "-p",
        "no:cacheprovider",
        "test_a.py",
    )
    first, rerun = (json.loads((pytester.path / f"seen-{n}.json").read_text()) for n in (0, 1))
    assert first == {"timeout": 5.0, "reruns": "2", "workers": None, "items": 1}  # an xdist worker
    assert rerun == {"timeout": 5.0, "reruns": "2", "workers": 0, "items": 1}
    report = read_report(pytester.path / "out")
    assert report["tests"]["test_a.py::test_flaky"]["verdict"] == "flaky"


@pytest.mark.slow
def test_a_rerun_that_cannot_start_is_said_not_mistaken_for_a_crash(pytester):
    """If the rerun subprocess cannot even start the test, the run says so; no crashed attempt is
    invented."""
    pytester.makepyfile(
        test_last="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_flaky(attempt):
            import os
            os.remove(__file__)
            assert attempt > 0

        @pytest.mark.rocm_gate(group="engine")
        def test_fine():
            pass
    """
    )
    # The checkout changes under the run: the test file is gone when the rerun starts.
    (pytester.path / "conftest.py").write_text(CONFTEST)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--rocm-platform=mi300x-8", "--rocm-report-dir=out", "-p", "no:cacheprovider"
    )
    report = read_report(pytester.path / "out")
    flaky = report["tests"]["test_last.py::test_flaky"]
    assert [a["status"] for a in flaky["attempts"]] == ["failed"]
    assert flaky["verdict"] == "unconfirmed"  # not rerun: it stands on its one attempt, unconfirmed
    assert any(
        "could not rerun test_last.py::test_flaky: pytest exited 4" in n
        for n in report["manifest"]["notes"]
    )
    result.stdout.fnmatch_lines(
        ["*pytest-rocm: could not rerun test_last.py::test_flaky: pytest exited 4*"]
    )


# --- network faults: a remote host's, never the test's own server's -------------------------------

# Real requests through the real libraries; only the network is arranged: huggingface.co resolves to
# a closed port of this machine (the connection is refused there) or does not resolve, and httpx's
# transport answers 503.
NETWORK_SUITE = """
import http.server
import socket
import threading

import httpx
import httpx2
import pytest
import requests
from huggingface_hub.utils import hf_raise_for_status

pytestmark = pytest.mark.rocm_gate(group="engine")
HUB = "https://huggingface.co/api/models/facebook/opt-125m"


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def hub_refuses(monkeypatch):
    port, real = closed_port(), socket.getaddrinfo
    def resolve(host, *args, **kwargs):
        return real("127.0.0.1", port, *args[1:], **kwargs) if host == "huggingface.co" else real(host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", resolve)


@pytest.fixture
def no_dns(monkeypatch):
    def resolve(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def answer_503(request):
    return httpx.Response(503, request=request)


def test_hub_refuses_once(attempt, hub_refuses):
    if attempt == 0:
        requests.get(HUB, timeout=5)


def test_hub_does_not_resolve_once(attempt, no_dns):
    if attempt == 0:
        requests.get(HUB, timeout=5)


def test_hub_answers_503_once(attempt):
    if attempt == 0:
        httpx.Client(transport=httpx.MockTransport(answer_503)).get(HUB).raise_for_status()


def test_huggingface_hub_answers_503_once(attempt):
    if attempt == 0:
        client = httpx2.Client(transport=httpx2.MockTransport(lambda request: httpx2.Response(503, request=request)))
        hf_raise_for_status(client.get(HUB))


def test_own_server_refuses_once(attempt):
    if attempt == 0:
        requests.get(f"http://127.0.0.1:{closed_port()}/v1/models", timeout=5)


def test_own_server_answers_500():
    class Broken(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(500)
            self.end_headers()
    server = http.server.HTTPServer(("localhost", 0), Broken)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:
        requests.get(f"http://localhost:{server.server_port}/v1/completions", timeout=5).raise_for_status()
    finally:
        server.server_close()


def test_own_server_answers_503_once(attempt):
    if attempt == 0:
        httpx.Client(transport=httpx.MockTransport(answer_503)).get("http://localhost:8000/health").raise_for_status()
"""


def test_network_faults_on_the_way_to_a_remote_host_are_infra_and_the_tests_own_server_is_not(
    pytester,
):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_network=NETWORK_SUITE)
    pytester.runpytest_subprocess(
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    tests = read_report(pytester.path / "out")["tests"]
    found = {
        n.split("::")[1]: (t["verdict"], (t["attempts"][0].get("signature") or {}).get("name"))
        for n, t in tests.items()
    }
    assert found == {
        "test_hub_refuses_once": ("infra", "network"),
        "test_hub_does_not_resolve_once": ("infra", "network"),
        "test_hub_answers_503_once": ("infra", "network"),
        "test_huggingface_hub_answers_503_once": ("infra", "network"),
        # this machine's server: its failure is the change's until a rerun passes, and then only a
        # flake
        "test_own_server_refuses_once": ("flaky", None),
        "test_own_server_answers_500": ("regression", None),
        "test_own_server_answers_503_once": ("flaky", None),
    }
    line = tests["test_network.py::test_hub_refuses_once"]["attempts"][0]["signature"]["line"]
    assert (
        "host='huggingface.co', port=443): Max retries exceeded" in line
        and "[Errno 111] Connection" in line
    )


# --- collection errors: the change's, or the run's ------------------------------------------------


def _collection_errors(report) -> dict[str, tuple[str, str]]:
    return {e["nodeid"]: (e["cause"], e["detail"]) for e in report["collection_errors"]}


def test_a_missing_module_of_the_project_under_test_is_a_defect_of_the_change(run_gates, pytester):
    pytester.makepyfile(
        **{
            "vllm/__init__.py": "",
            "vllm/engine.py": "VERSION = 1\n",
            "test_ok.py": "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_fine():\n"
            "    pass\n",
            "test_renamed.py": "from vllm.engine import VERSION\nfrom vllm.renamed import thing\n",
        }
    )
    _, report = run_gates("--continue-on-collection-errors")
    cause, detail = _collection_errors(report)["test_renamed.py"]
    assert cause == "change" and "No module named 'vllm.renamed'" in detail
    assert report["conclusion"] == "failure"
    assert (
        "test_renamed.py: ModuleNotFoundError: No module named 'vllm.renamed'"
        in report["conclusion_reason"]
    )


def test_what_the_runner_lacks_is_a_set_up_problem_naming_it_and_the_fix(run_gates, pytester):
    import importlib.util

    if importlib.util.find_spec("pytest_asyncio") is not None:
        pytest.skip("pytest_asyncio is installed here: its absence cannot be shown")
    pytester.makepyfile(
        **{
            # a plain source checkout: vllm/ without its compiled extensions, found before any
            # installed vLLM
            "vllm/__init__.py": "",
            "vllm/_custom_ops.py": "import vllm._C\n",
            "test_ok.py": "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_fine():\n    pass\n",
            "test_ops.py": "from vllm import _custom_ops\n",
            "test_async.py": "import pytest_asyncio\n",
            "test_hub.py": "import socket\nimport requests\n\n"
            "def _no_dns(*args, **kwargs):\n"
            "    raise socket.gaierror(socket.EAI_AGAIN, 'Temporary failure in name resolution')\n\n"
            "socket.getaddrinfo = _no_dns\n"
            "requests.get('https://huggingface.co/api/models/facebook/opt-125m', timeout=5)\n",
        }
    )
    _, report = run_gates("--continue-on-collection-errors")
    errors = _collection_errors(report)
    assert {n: c for n, (c, _) in errors.items()} == {
        "test_ops.py": "infra",
        "test_async.py": "infra",
        "test_hub.py": "infra",
    }
    assert errors["test_ops.py"][1].startswith(
        "set-up problem: vLLM was imported without its compiled extensions "
        "(`No module named 'vllm._C'`)"
    )
    assert (
        "a plain checkout's vllm/ folder shadows the installed package" in errors["test_ops.py"][1]
    )
    assert "pip install -e ." in errors["test_ops.py"][1]
    assert errors["test_async.py"][1] == (
        "set-up problem: the test requirement 'pytest_asyncio' is not installed on this runner (`No module named "
        "'pytest_asyncio'`): install the project's test requirements in the job's image (vLLM: `pip install -r "
        "requirements/test/rocm.txt` on ROCm, `requirements/test/cuda.txt` on CUDA, the versions they pin)"
    )
    assert errors["test_hub.py"][1].startswith("infrastructure: network: ")
    assert report["conclusion"] == "incomplete"
    assert report["tests"]["test_ok.py::test_fine"]["status"] == "passed"


def test_the_project_package_missing_altogether_is_a_set_up_problem(run_gates, pytester):
    # A runner without vLLM: this one may have it installed, so its import system is made to find
    # none, with the error Python's own import raises then.
    pytester.makeconftest("""
        import sys

        class NoVllm:
            def find_spec(self, name, path=None, target=None):
                if name == "vllm":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NoVllm())
    """)
    pytester.makepyfile(
        test_ok="import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_fine():\n    pass\n",
        test_llm="from vllm import LLM\n",
    )
    _, report = run_gates("--continue-on-collection-errors")
    cause, detail = _collection_errors(report)["test_llm.py"]
    assert (cause, detail) == (
        "infra",
        "set-up problem: vLLM is not installed on this runner (`No module named "
        "'vllm'`): install vLLM in the job's image before the tests run",
    )
    assert report["conclusion"] == "incomplete"


# vLLM's way: parametrizing over a set, whose order follows each process's hash seed
SET_ORDERED = """
import pytest

MODELS = {"facebook/opt-125m", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B", "google/gemma-3-1b-it",
          "microsoft/phi-2", "mistralai/Mistral-7B-v0.1", "ibm-granite/granite-3.0-2b", "THUDM/glm-4-9b"}

@pytest.mark.rocm_gate(group="api")
@pytest.mark.parametrize("model", MODELS)
def test_model(model):
    pass
"""


@pytest.mark.slow
def test_workers_that_order_a_set_differently_make_an_incomplete_run_naming_the_file_and_the_hash_seed(
    run_gates, pytester, monkeypatch
):
    # each worker draws its own seed, as in vLLM's CI
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    pytester.makepyfile(
        test_models=SET_ORDERED,
        test_other="import pytest\n\n@pytest.mark.rocm_gate(group='api')\n"
        "def test_fine():\n    pass\n",
    )
    _, report = run_gates("-n", "2")
    assert report["conclusion"] == "incomplete", report["conclusion_reason"]
    [(nodeid, (cause, detail))] = _collection_errors(report).items()
    assert cause == "infra" and nodeid.startswith("gw")
    assert detail.startswith("run problem: the xdist workers (gw")
    assert "test id(s) differ or stand in another order, in test_models.py;" in detail
    assert "test_other.py" not in detail
    assert "set PYTHONHASHSEED=0" in detail
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # the fix
    _, fixed = run_gates("-n", "2")
    assert fixed["conclusion"] == "success" and fixed["collection_errors"] == []


def test_a_cut_xdist_difference_still_names_the_files_it_shows(tmp_path, capsys):
    """The controller keeps the last 2,000 characters of a collection error: a long difference loses
    its head."""
    from xdist.report import report_collection_diff

    from rocm_gate.cli import main as rocm_gate

    first = [
        f"tests/models/test_generate.py::test_model[{name}-{n}]"
        for n in range(30)
        for name in ("a", "b")
    ]
    second = [
        f"tests/models/test_generate.py::test_model[{name}-{n}]"
        for n in range(30)
        for name in ("b", "a")
    ]
    first += ["tests/lora/test_lora.py::test_adapter[x-y]"]
    second += ["tests/lora/test_lora.py::test_adapter[y-x]"]
    text = report_collection_diff(first, second, "gw0", "gw3")
    assert len(text) > 2000
    record = {
        "schema": "pytest-rocm/record/1",
        "worker": "controller",
        "kind": "session",
        "nodeid": "",
        "t": 2.0,
        "exitstatus": 1,
        "stopped": None,
        "collected": None,
        "collection_errors": [{"nodeid": "gw3", "text": text[-2000:]}],
    }
    (tmp_path / "records-controller.jsonl").write_text(json.dumps(record) + "\n")
    assert rocm_gate(["verdict", str(tmp_path)]) == 3  # incomplete
    detail = read_report(tmp_path)["collection_errors"][0]["detail"]
    assert (
        "in tests/models/test_generate.py, tests/lora/test_lora.py (the start of xdist's list was cut)"
        in detail
    )
    assert "PYTHONHASHSEED=0" in detail
    assert "PYTHONHASHSEED=0" in capsys.readouterr().out  # the printed conclusion says it too


# --- a warm server proves nothing (issue 50) -------------------------------------------------------


def on(status, server=None, worker="gw0"):
    found = {"status": status, "signature": None, "gpus": [0], "worker": worker}
    if server:
        found["servers"] = [server]
    return found


@pytest.mark.parametrize(
    "attempts, verdict",
    [
        # failed on a server, passed on that same warm server: no fresh rerun, nothing proven
        ([on("failed", "S1"), on("passed", "S1")], "unconfirmed"),
        # passed on a fresh server: a flake
        ([on("failed", "S1"), on("passed", "S2", "rerun1")], "flaky"),
        # the fresh server failed it too: the warm pass does not make it flaky
        ([on("failed", "S1"), on("passed", "S1"), on("failed", "S2", "rerun1")], "regression"),
        # a pass that names no server, in the process whose server failed it
        ([on("failed", "S1"), on("passed")], "unconfirmed"),
        ([on("failed", "S1"), on("passed", worker="rerun1")], "flaky"),
        # no server at all: the rules as before
        ([on("failed"), on("passed")], "flaky"),
    ],
)
def test_a_pass_on_the_server_that_failed_it_proves_nothing(attempts, verdict):
    from pytest_rocm.results.verdicts import warm_passes

    got, why = decide(attempts, [])
    assert got == verdict, why
    if warm_passes(attempts):
        assert "which proves nothing: only a fresh server does" in why


def _warm_oracle(attempts: list[dict]) -> str:
    """The verdict from the rules' words, written apart from `decide` (no signatures): a pass on a
    server an earlier attempt failed on (or, naming none, in a process where one did) is no pass;
    then a later pass is flaky, a later failure regression, nothing later unconfirmed."""
    kept, servers_failed, workers_failed = [], set(), set()
    for attempt in attempts:
        named = set(attempt.get("servers", []))
        if attempt["status"] == "passed":
            if (
                named
                and named <= servers_failed
                or not named
                and attempt["worker"] in workers_failed
            ):
                continue
        else:
            servers_failed |= named
            if named:
                workers_failed.add(attempt["worker"])
        kept.append(attempt)
    later = kept[1:]
    if any(a["status"] == "passed" for a in later):
        return "flaky"
    return "regression" if later else "unconfirmed"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["passed", "failed"]),
            st.sampled_from([None, "S1", "S2", "S3"]),
            st.sampled_from(["gw0", "gw1", "rerun1"]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_warm_passes_against_an_oracle(rows):
    attempts = [on("failed", rows[0][1], rows[0][2])] + [on(*row) for row in rows[1:]]
    assert decide(attempts, [])[0] == _warm_oracle(attempts)


# A server of this process (a stand-in: its state is how many requests it served) that goes wrong
# on its third request, as a prefix-cache block that goes stale on its third reuse does. A test
# sends three requests: on a fresh server the third fails it; a warm one is past its third.
WARM_SERVER = """
import time
import pytest
from pathlib import Path
from pytest_rocm.serving.process import Server

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    made = Server(kind="vllm", model="tiny", served_name="tiny", port=8000, command=[], env={},
                  log_path=tmp_path_factory.mktemp("log") / "server.log", devices=[])
    made.served, made.launched_t = 0, time.time()
    return made

def ask(server):
    server.served += 1
    return "stale" if server.served == 3 else "ok"

@pytest.mark.rocm_gate(group="engine")
def test_prefix_cache(server):
    assert [ask(server) for _ in range(3)] == ["ok"] * 3
"""


@pytest.mark.parametrize("args", [[], ["-n", "2"], ["-p", "rerunfailures", "--reruns", "1"]])
def test_a_failure_on_a_server_is_rerun_on_a_fresh_one_and_a_warm_pass_is_no_flake(
    pytester, run_gates, args
):
    """Issue 50: a failure that depended on a warm server's state was rerun on that server, which
    had moved past it, passed, and was `flaky`: the run concluded `success`. The rerun goes to a
    fresh process, which starts a fresh server; there the fault comes back: `regression`. Under
    pytest-rerunfailures (a rerun in the same process, on the warm server) the pass proves nothing.
    The report says which server each attempt used."""
    pytester.makepyfile(test_served=WARM_SERVER)
    result, report = run_gates(*args)
    test = report["tests"]["test_served.py::test_prefix_cache"]
    servers = [a.get("servers") for a in test["attempts"]]
    assert len(servers) == 2 and all(servers), test["attempts"]
    if "--reruns" in args:
        assert servers[0] == servers[1]  # the same warm server, where it passed
        assert test["status"] == "passed" and test["verdict"] == "unconfirmed"
        assert "only a fresh server does" in test["verdict_reason"]
    else:
        assert servers[0] != servers[1] and test["attempts"][1]["worker"].startswith("rerun")
        assert test["status"] == "failed" and test["verdict"] == "regression"
    assert report["conclusion"] == "failure"
