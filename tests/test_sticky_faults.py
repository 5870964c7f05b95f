"""A device fault poisons its process (docs/architecture.md, "A device fault poisons its process").

- the wording that says a process is poisoned, on both vendors, and what does not;
- the verdict rules on attempts that ran after a fault in their process (a table, and generated
  attempt sequences against an oracle);
- the verdicts rebuilt from what the plugin recorded on a real H100 hit by a device-side assert
  (tests/data/h100-sticky-fault/): a rerun in the poisoned process proves nothing, and the tests
  that merely ran after the fault are blamed on nobody;
- the same four runs through the plugin, serially and under xdist, on a stand-in runtime that
  poisons its process as the real one did (tests/data/sticky-fault-tree/gpu_runtime.py), in CUDA's
  and HIP's wording; and generated fault shapes (which tests fault, once or always, in which
  order, on how many workers) against an oracle.
"""

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from conftest import DATA, read_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_rocm.results.poisoning import first_faults, poisoned_before, sticky_fault
from pytest_rocm.results.verdicts import decide
from rocm_gate.cli import main as rocm_gate

H100 = DATA / "h100-sticky-fault"
TREE = DATA / "sticky-fault-tree"
GATHER = "test_fault.py::test_gather_with_device_side_index"


def failed(message: str, failure: str | None = None, **extra) -> dict:
    return {
        "nodeid": "t.py::t",
        "when": "call",
        "outcome": "failed",
        "message": message,
        "failure": failure
        if failure is not None
        else f"    def test():\n>       run()\nE       {message}",
        **extra,
    }


# --- the wording -----------------------------------------------------------------------------------

STICKY = [
    # torch 2.11+cu130 on an H100 (tests/data/h100-sticky-fault/)
    "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: unspecified launch failure",
    "RuntimeError: CUDA error: misaligned address",
    "RuntimeError: CUDA error: an illegal instruction was encountered",
    "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    # recent PyTorch on ROCm names the error; older prints the HIP runtime's text only
    "Search for `hipErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    "RuntimeError: HIP error: an illegal memory access was encountered",
    "RuntimeError: HIP error: unspecified launch failure",
    "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
    "Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address 0x7f2a. Reason: Page not present.",
    "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access",
    "numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS",
    # what a poisoned context often answers next (a fresh process decides: taking it for a fault
    # costs one, never a verdict)
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
    "RuntimeError: HIP error: unknown error",
    "NCCL error: unhandled cuda error, NCCL version 2.21.5 ... Cuda failure 'an illegal memory access was encountered'",
]
NOT_STICKY = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: CUDA error: out of memory",
    "RuntimeError: HIP error: invalid device ordinal",
    "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
    "AssertionError: misaligned address in the test's own buffer bookkeeping",
    "AssertionError: assert 3 == 4",
]


@pytest.mark.parametrize("message", STICKY)
def test_the_sticky_wording_of_both_vendors_poisons_the_process(message):
    fault = sticky_fault(failed(message))
    assert fault is not None and fault["name"] == "device_fault"
    assert fault["line"] in message or message in fault["line"]


@pytest.mark.parametrize("message", NOT_STICKY)
def test_other_errors_leave_the_process_clean(message):
    assert sticky_fault(failed(message)) is None


def test_only_the_error_raised_in_the_process_poisons_it():
    """What the test printed, a server's log, or the test's own source printed around the failure,
    is another process's or no error: only the failure's `E` lines and its message count."""
    text = "CUDA error: an illegal memory access was encountered"
    quiet = failed("AssertionError: the server answered 500")
    assert sticky_fault({**quiet, "stdout_tail": text, "log_tail": text}) is None
    source = f'    def test():\n>       assert "{text}" not in log\nE       AssertionError'
    assert sticky_fault(failed("AssertionError", failure=source)) is None
    assert sticky_fault({**failed(text), "crashed": True}) is None  # a dead process poisons nothing
    assert sticky_fault({**failed(text), "outcome": "passed"}) is None


def test_a_process_stays_poisoned_from_its_first_fault():
    records = [
        {**failed("AssertionError"), "nodeid": "a", "worker": "gw0", "t": 1.0},
        {**failed("CUDA error: misaligned address"), "nodeid": "b", "worker": "gw0", "t": 2.0},
        {
            **failed("CUDA error: device-side assert triggered"),
            "nodeid": "c",
            "worker": "gw0",
            "t": 3.0,
        },
        {
            **failed("CUDA error: device-side assert triggered"),
            "nodeid": "d",
            "worker": "gw1",
            "t": 4.0,
        },
    ]
    faults = first_faults(records)
    assert {p: f["nodeid"] for p, f in faults.items()} == {"gw0": "b", "gw1": "d"}
    assert poisoned_before("gw0", 2.0, faults) is None  # b's own attempt started before its fault
    assert poisoned_before("gw0", 2.5, faults)["nodeid"] == "b"
    assert poisoned_before("rerun1", 9.0, faults) is None


# --- the rules -------------------------------------------------------------------------------------

FAULT = {"name": "device_fault", "line": "CUDA error: device-side assert triggered"}
AFTER_A = {"nodeid": "t.py::a", "process": "gw1", "line": FAULT["line"]}


def attempt(status, signature=None, after=None, gpus=(0,)):
    found = {"status": status, "signature": signature, "gpus": list(gpus)}
    if after is not None:
        found["after_fault"] = after
    return found


@pytest.mark.parametrize(
    "attempts,verdict,says",
    [
        # the faulting test: only a rerun in a clean process proves anything
        ([attempt("failed", FAULT), attempt("passed")], "infra", "the rerun passed"),
        ([attempt("failed", FAULT), attempt("failed", FAULT)], "regression", "reproduced"),
        (
            [attempt("failed", FAULT), attempt("failed", FAULT, after={**AFTER_A, "nodeid": "me"})],
            "unconfirmed",
            "which proves nothing",
        ),
        # a test that merely ran after the fault: collateral, never regression, never flaky
        ([attempt("failed", FAULT, after=AFTER_A)], "infra", "after t.py::a faulted"),
        (
            [attempt("failed", FAULT, after=AFTER_A), attempt("failed", FAULT, after=AFTER_A)],
            "infra",
            "collateral",
        ),
        ([attempt("failed", None, after=AFTER_A), attempt("passed")], "infra", "then passed"),
        # a collateral attempt, then the test's own failure in a clean process: judged on that
        (
            [attempt("failed", None, after=AFTER_A), attempt("failed"), attempt("failed")],
            "regression",
            "failed the same way",
        ),
    ],
)
def test_rules_after_a_device_fault(attempts, verdict, says):
    got, why = decide(attempts, [{"ok": True, "devices": [0]}])
    assert got == verdict and says in why, why


def oracle(attempts: list[dict], probe_ok: bool) -> str:
    """The verdict from the rules' definitions, written apart from `decide`: an attempt that failed
    after a fault in its process is no evidence; a test none of whose evidence failed is infra
    (collateral); otherwise a failure that came back is a regression unless the device failed its
    probe while it carried a signature."""
    evidence = [a for a in attempts if a["status"] == "passed" or "after_fault" not in a]
    if not evidence or evidence[0]["status"] == "passed":
        return "infra"
    signed = any(a["signature"] for a in evidence if a["status"] != "passed")
    if signed and not probe_ok:
        return "infra"
    if any(a["status"] == "passed" for a in evidence[1:]):
        return "infra" if signed else "flaky"
    if len(evidence) == 1:
        return "unconfirmed"
    return "regression"


attempts_strategy = st.lists(
    st.builds(
        attempt,
        st.sampled_from(["failed", "error", "crashed", "passed"]),
        st.sampled_from([None, FAULT]),
        st.sampled_from([None, AFTER_A]),
    ),
    min_size=1,
    max_size=4,
).filter(lambda found: found[0]["status"] != "passed")


@settings(max_examples=500, deadline=None)
@given(attempts_strategy, st.booleans())
def test_generated_attempts_agree_with_the_oracle(attempts, probe_ok):
    # a passing attempt is never "after a fault" (only failures are told apart)
    attempts = [
        {k: v for k, v in a.items() if k != "after_fault"} if a["status"] == "passed" else a
        for a in attempts
    ]
    verdict, _ = decide(attempts, [{"ok": probe_ok, "devices": [0], "detail": "probe"}])
    assert verdict == oracle(attempts, probe_ok)
    # a test that failed only after another's fault in its process is blamed on nobody
    if all("after_fault" in a for a in attempts if a["status"] != "passed"):
        assert verdict == "infra"


# --- what the plugin recorded on a real H100 -------------------------------------------------------


def rebuilt(folder: str, tmp_path) -> dict:
    """The gate report `rocm-gate verdict` makes today from that run's records."""
    out = tmp_path / folder
    assert rocm_gate(["verdict", str(H100 / folder), "--out", str(out)]) in (0, 1, 3)
    return read_report(out)


@pytest.mark.parametrize("folder", ["transient", "serial-transient", "regression"])
def test_the_h100_records_blame_no_test_for_a_rerun_in_the_poisoned_process(folder, tmp_path):
    """Recorded before this rule: every rerun ran in the process the fault had poisoned, and the
    plugin concluded failure with 2 to 5 regressions. Rebuilt, nothing is a regression or flaky:
    the faulting test is unconfirmed (no rerun in a fresh process), every test that failed after it
    in its process is infra naming it, and the run is incomplete, not failure."""
    report = rebuilt(folder, tmp_path)
    tests = report["tests"]
    verdicts = {nodeid: test["verdict"] for nodeid, test in tests.items()}
    assert "regression" not in verdicts.values() and "flaky" not in verdicts.values()
    assert verdicts[GATHER] == "unconfirmed"
    assert "which proves nothing" in tests[GATHER]["verdict_reason"]
    collateral = [n for n, t in tests.items() if t["verdict"] == "infra"]
    assert collateral and GATHER not in collateral
    for nodeid in collateral:
        assert f"after {GATHER} faulted in the same process" in tests[nodeid]["verdict_reason"]
    assert report["conclusion"] == "incomplete"
    assert GATHER in report["conclusion_reason"]
    (fault,) = report["device_faults"]
    assert fault["nodeid"] == GATHER and "device-side assert triggered" in fault["line"]


def test_the_h100_clean_run_still_succeeds(tmp_path):
    report = rebuilt("clean", tmp_path)
    assert report["conclusion"] == "success" and report["device_faults"] == []


# --- the plugin, on a stand-in runtime that poisons its process ------------------------------------


def run_trial(pytester, monkeypatch, mode: str, wording: str = "cuda", *args: str) -> dict:
    """The stand-in tree in pytester's folder, run through the plugin on a simulated runner with one
    GPU (an H100 for CUDA's wording, an MI300X for HIP's)."""
    shutil.copytree(TREE, pytester.path, dirs_exist_ok=True)
    monkeypatch.setenv("STANDIN_RUNTIME", "1")
    monkeypatch.setenv("STANDIN_WORDING", wording)
    monkeypatch.setenv("TRIAL_MODE", mode)
    monkeypatch.setenv("TRIAL_STATE", str(pytester.path / "state"))
    platform = "mi300x-1" if wording.startswith("hip") else "h100-1"
    result = pytester.runpytest_subprocess(
        f"--rocm-platform={platform}",
        "--rocm-report-dir=out",
        "--junitxml=junit.xml",
        "-p",
        "no:cacheprovider",
        *args,
    )
    assert "INTERNALERROR" not in result.stdout.str(), result.stdout.str()[-6000:]
    return read_report(pytester.path / "out")


# what the h100-sticky-fault README's table says is true, per mode
EXPECTED = {"transient": "neutral", "regression": "failure", "clean": "success"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,wording,xdist",
    [
        ("transient", "cuda", True),  # transient/ of the H100 table
        ("transient", "cuda", False),  # serial-transient/
        ("regression", "cuda", True),  # regression/
        ("clean", "cuda", True),  # clean/
        ("regression", "cuda", False),
        ("transient", "hip", True),
        ("regression", "hip", False),
        ("transient", "hip-old", False),
        ("regression", "hip-old", True),
        ("regression", "cuda-old", True),
    ],
)
def test_the_h100_runs_conclude_what_is_true(pytester, monkeypatch, mode, wording, xdist):
    report = run_trial(pytester, monkeypatch, mode, wording, *(["-n", "2"] if xdist else []))
    tests = report["tests"]
    assert report["conclusion"] == EXPECTED[mode], report["conclusion_reason"]
    assert report["complete"], report["incomplete_causes"]
    others = {n: t["verdict"] for n, t in tests.items() if n != GATHER}
    assert set(others.values()) <= {"pass", "not_applicable"}, others
    gather = tests[GATHER]
    if mode == "clean":
        assert gather["verdict"] == "pass" and report["device_faults"] == []
        return
    # the fault's rerun ran in a fresh process of its own, never where it faulted (alone, or
    # behind the test that ran before it, to ask whether the fault was that test's)
    first, *reruns = gather["attempts"]
    assert reruns and all(a["worker"].startswith(("rerun", "pair")) for a in reruns)
    assert any(a["worker"].startswith("rerun") for a in reruns)
    assert first["worker"] in (("gw0", "gw1") if xdist else ("controller",))
    assert gather["verdict"] == ("regression" if mode == "regression" else "infra")
    if mode == "regression":
        assert report["conclusion_reason"] == f"1 blocking gate(s) regressed: {GATHER}"
    # the process it faulted in first, then any rerun it faulted in again
    faults = report["device_faults"]
    assert {f["nodeid"] for f in faults} == {GATHER}
    assert [f["process"] for f in faults] == [
        a["worker"] for a in gather["attempts"][: len(faults)]
    ]
    # every collected test ran to its end somewhere, and the JUnit file shows each of them
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    named = {
        f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"
        for case in junit.iter("testcase")
    }
    assert named == set(tests)


@pytest.mark.slow
def test_the_tests_a_poisoned_serial_process_did_not_run_continue_in_a_fresh_one(
    pytester, monkeypatch
):
    report = run_trial(pytester, monkeypatch, "regression")
    fault = report["device_faults"][0]
    assert fault["process"] == "controller"
    assert fault["moved"] == [
        "test_fault.py::test_after_the_fault_in_the_same_process",
        "test_fault.py::test_layer_norm_numerics",
        "test_gpu.py::test_sdpa_matches_math_reference",
        "test_gpu.py::test_needs_two_gpus",
        "test_gpu.py::test_needs_1000_gb",
        "test_gpu.py::test_visible_devices_pinned",
    ]
    workers = {report["tests"][n]["attempts"][0]["worker"] for n in fault["moved"]}
    assert len(workers) == 1 and workers.pop().startswith("fresh")


@pytest.mark.slow
def test_a_poisoned_worker_is_replaced_and_runs_nothing_more(pytester, monkeypatch):
    """The fault comes first on its worker, with six tests after it in the same module (--dist
    loadfile sends them all to it): none runs there; a fresh worker takes the poisoned one's place."""
    pytester.makepyfile(
        test_a_first="""
        import pytest
        import gpu_runtime

        pytestmark = pytest.mark.rocm_gate(group="engine")

        def test_a_fault(gpus):
            assert gpu_runtime.gather(out_of_range=True) == 8.0

        @pytest.mark.parametrize("i", range(6))
        def test_b_after(i, gpus):
            assert gpu_runtime.ones_sum(i) == i
        """
    )
    report = run_trial(pytester, monkeypatch, "clean", "cuda", "-n", "2", "--dist", "loadfile")
    tests = report["tests"]
    fault = next(
        f for f in report["device_faults"] if f["nodeid"] == "test_a_first.py::test_a_fault"
    )
    after = [n for n in tests if "test_b_after" in n]
    assert sorted(fault["moved"]) == sorted(after)
    for nodeid in after:
        assert tests[nodeid]["verdict"] == "pass"
        assert [a["worker"] for a in tests[nodeid]["attempts"]] != [fault["process"]]
    assert report["conclusion"] == "failure"
    assert tests["test_a_first.py::test_a_fault"]["verdict"] == "regression"


# --- generated fault shapes against an oracle ------------------------------------------------------

SHAPE_TEST = """
import pytest
import gpu_runtime

@pytest.mark.rocm_gate(group="engine")
@pytest.mark.parametrize("kind", {kinds!r}, ids=[f"t{{i}}" for i in range({count})])
def test_case(kind, gpus, request):
    name = request.node.name
    faults = kind == "always" or (kind == "once" and gpu_runtime.first_time(name))
    assert gpu_runtime.gather(out_of_range=faults) == 8.0
"""


@pytest.mark.slow
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(st.sampled_from(["clean", "clean", "once", "always"]), min_size=1, max_size=7),
    workers=st.sampled_from([0, 1, 2]),
    wording=st.sampled_from(["cuda", "cuda-old", "hip", "hip-old"]),
)
def test_generated_fault_shapes_conclude_what_the_oracle_says(
    pytester, monkeypatch, kinds, workers, wording
):
    """Whatever the order, the workers and the wording: a fault that does not come back in a fresh
    process is never a regression, and exactly the tests whose fault comes back are named."""
    for path in pytester.path.iterdir():  # hypothesis reuses the folder across examples
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    pytester.makepyfile(test_shapes=SHAPE_TEST.format(kinds=kinds, count=len(kinds)))
    args = ["-n", str(workers)] if workers else []
    report = run_trial(pytester, monkeypatch, "clean", wording, *args)
    ids = [f"test_shapes.py::test_case[t{i}]" for i in range(len(kinds))]
    always = [n for n, kind in zip(ids, kinds) if kind == "always"]
    once = [n for n, kind in zip(ids, kinds) if kind == "once"]
    expected = "failure" if always else "neutral" if once else "success"
    assert report["conclusion"] == expected, report["conclusion_reason"]
    verdicts = {n: report["tests"][n]["verdict"] for n in ids}
    assert verdicts == {
        n: "regression" if n in always else "infra" if n in once else "pass" for n in ids
    }, json.dumps(report["device_faults"])
    if always:
        named = report["conclusion_reason"].split(": ", 1)[1].split(", ")
        assert sorted(named) == sorted(always)


# --- fault shapes an adversarial review found --------------------------------------------------------


def run_tree(pytester, monkeypatch, files: dict[str, str], *args: str, mode: str = "clean"):
    """The stand-in runtime and `files` in pytester's folder, run through the plugin on a simulated
    H100 (serially unless `args` say otherwise); (gate report, pytest's result)."""
    shutil.copy(TREE / "gpu_runtime.py", pytester.path)
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (pytester.path / name).write_text(text)
    monkeypatch.setenv("STANDIN_RUNTIME", "1")
    monkeypatch.setenv("TRIAL_MODE", mode)
    monkeypatch.setenv("TRIAL_STATE", str(pytester.path / "state"))
    result = pytester.runpytest_subprocess(
        "--rocm-platform=h100-1",
        "--rocm-report-dir=out",
        "--junitxml=junit.xml",
        "-p",
        "no:cacheprovider",
        *args,
    )
    assert "INTERNALERROR" not in result.stdout.str(), result.stdout.str()[-4000:]
    return read_report(pytester.path / "out"), result


ASYNC = """
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

def test_launches_without_waiting():
    gpu_runtime.launch_gather(out_of_range=gpu_runtime.fault_now("launch"))

def test_next():
    assert gpu_runtime.ones_sum(4) == 4

def test_last():
    assert gpu_runtime.ones_sum(2) == 2
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["regression", "transient"])
@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_fault_reported_at_the_next_tests_call_is_blamed_on_the_test_that_made_it(
    pytester, monkeypatch, mode, xdist
):
    """CUDA and HIP report a kernel's fault at a later call: the test that launched it passes, the
    next test fails. That test alone in a fresh process passes, so its fault read as infra and a real
    regression concluded `neutral`, naming an innocent test. The two run again together, in order, in a
    fresh process: the fault comes back there only if it is the first test's."""
    report, _ = run_tree(pytester, monkeypatch, {"test_async.py": ASYNC}, *xdist, mode=mode)
    tests = report["tests"]
    launcher, shown = "test_async.py::test_launches_without_waiting", "test_async.py::test_next"
    assert tests[shown]["verdict"] == "infra"
    assert tests["test_async.py::test_last"]["verdict"] == "pass"
    if mode == "regression":
        assert report["conclusion"] == "failure"
        assert report["conclusion_reason"] == f"1 blocking gate(s) regressed: {launcher}"
        assert tests[launcher]["verdict"] == "regression"
        assert f"surfaced in the next test, {shown}" in tests[launcher]["verdict_reason"]
        assert f"the fault is {launcher}'s" in tests[shown]["verdict_reason"]
    else:  # it did not come back: the machine's
        assert report["conclusion"] == "neutral" and tests[launcher]["verdict"] == "pass"


XFAIL = """
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

@pytest.mark.xfail(reason="known bad index kernel")
def test_known_bad_kernel():
    gpu_runtime.gather(out_of_range=True)

def test_after():
    assert gpu_runtime.ones_sum(3) == 3
"""


@pytest.mark.slow
def test_an_xfail_that_faulted_poisons_its_process_too(pytester, monkeypatch):
    report, _ = run_tree(pytester, monkeypatch, {"test_x.py": XFAIL})
    assert report["conclusion"] == "success", report["conclusion_reason"]
    assert report["tests"]["test_x.py::test_after"]["attempts"][0]["worker"].startswith("fresh")
    (fault,) = report["device_faults"]
    assert fault["nodeid"] == "test_x.py::test_known_bad_kernel"


RERUNFAILURES = """
import pytest
import gpu_runtime

@pytest.mark.rocm_gate(group="engine")
def test_fault():
    assert gpu_runtime.gather(out_of_range=True) == 8.0

@pytest.mark.rocm_gate(group="engine")
def test_after():
    assert gpu_runtime.ones_sum(3) == 3

@pytest.mark.rocm_gate(group="engine")
@pytest.mark.hardware(gpus=2)
def test_not_applicable_here(gpus):
    pass
"""


@pytest.mark.slow
def test_pytest_rerunfailures_reruns_in_the_poisoned_process_and_a_fresh_one_decides(
    pytester, monkeypatch
):
    """pytest-rerunfailures reruns in the same process: its attempts there prove nothing, and they
    used up the reruns (the fault stayed unconfirmed, the run incomplete)."""
    report, _ = run_tree(
        pytester,
        monkeypatch,
        {"test_rrf.py": RERUNFAILURES},
        "-p",
        "rerunfailures",
        "--reruns",
        "1",
    )
    fault = report["tests"]["test_rrf.py::test_fault"]
    assert fault["verdict"] == "regression", fault["verdict_reason"]
    assert fault["attempts"][-1]["worker"].startswith("rerun")
    # a test skipped as not applicable under rerunfailures is no crash (its reports come after its
    # teardown ran: the records are ordered by when each phase ended)
    assert report["tests"]["test_rrf.py::test_not_applicable_here"]["verdict"] == "not_applicable"
    assert report["conclusion_reason"] == "1 blocking gate(s) regressed: test_rrf.py::test_fault"


DIES = """
import os
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

def test_fault():
    assert gpu_runtime.gather(out_of_range=gpu_runtime.fault_now("fault")) == 8.0

def test_dies():
    os._exit(3)

def test_last():
    assert gpu_runtime.ones_sum(3) == 3
"""


@pytest.mark.slow
def test_a_moved_test_that_kills_its_fresh_process_still_shows(pytester, monkeypatch):
    report, result = run_tree(pytester, monkeypatch, {"test_d.py": DIES}, mode="transient")
    dies = report["tests"]["test_d.py::test_dies"]
    assert [a["status"] for a in dies["attempts"]] == ["crashed", "crashed"]
    assert report["tests"]["test_d.py::test_last"]["verdict"] == "pass"
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    [case] = [c for c in junit.iter("testcase") if c.get("name") == "test_dies"]
    assert case.find("error") is not None or case.find("failure") is not None
    result.stdout.fnmatch_lines(["*test_d.py::test_dies*"])


EVERY_TEST_FAULTS = """
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

@pytest.fixture(autouse=True)
def device_buffers():
    gpu_runtime.gather(out_of_range=True)

@pytest.mark.parametrize("i", range(12))
def test_each(i):
    pass
"""


@pytest.mark.slow
def test_a_fault_in_every_processs_first_test_stops_after_a_few_processes(pytester, monkeypatch):
    """A fixture every test shares faults each time: each test became the first of two new
    processes. After a few in a row the rest are left unrun, the run says why and is incomplete."""
    report, _ = run_tree(pytester, monkeypatch, {"test_all.py": EVERY_TEST_FAULTS})
    assert report["conclusion"] == "failure" and not report["complete"]
    note = next(n for n in report["manifest"]["notes"] if "in a row" in n)
    assert "fresh processes in a row" in note and "not run" in note
    helpers = {a["worker"] for t in report["tests"].values() for a in t["attempts"]}
    assert len(helpers) <= 13, sorted(helpers)


CHAINED = """
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

def deep(n):
    return gpu_runtime.gather(out_of_range=True) if n == 0 else deep(n - 1) + 0

def test_model_forward():
    try:
        deep(60)
    except RuntimeError as exc:
        raise ValueError("model forward failed") from exc

def test_after():
    assert gpu_runtime.ones_sum(3) == 3
"""


@pytest.mark.slow
def test_a_fault_deep_in_a_chained_exception_is_seen(pytester, monkeypatch):
    """The cause's lines are past the head of the failure a record keeps (4,000 characters) and the
    message is the last exception's: the fault went unseen, the next test took the blame."""
    report, _ = run_tree(pytester, monkeypatch, {"test_c.py": CHAINED})
    assert [f["nodeid"] for f in report["device_faults"]][:1] == ["test_c.py::test_model_forward"]
    assert report["tests"]["test_c.py::test_after"]["verdict"] == "pass"
    assert (
        report["conclusion_reason"] == "1 blocking gate(s) regressed: test_c.py::test_model_forward"
    )


HANDED_OVER = """
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

def test_a_flaky():
    assert not gpu_runtime.first_time("flaky")

def test_b_fault():
    assert gpu_runtime.gather(out_of_range=gpu_runtime.first_time("fault")) == 8.0

def test_c():
    assert gpu_runtime.ones_sum(1) == 1
"""


@pytest.mark.slow
def test_a_rerun_handed_to_a_worker_a_fault_then_poisoned_runs_once(pytester, monkeypatch):
    """One worker: test_a fails, its rerun is handed to that worker behind test_b, whose fault
    poisons it. The rerun is not run twice after the pass (as a rerun, and again as a moved
    test); the only further run of test_a is the pair that asks whether test_b's fault was
    test_a's (test_a ran right before it), and the JUnit file shows test_a once."""
    report, _ = run_tree(pytester, monkeypatch, {"test_h.py": HANDED_OVER}, "-n", "1")
    flaky = report["tests"]["test_h.py::test_a_flaky"]
    statuses = [a["status"] for a in flaky["attempts"]]
    assert statuses[:2] == ["failed", "passed"], flaky["attempts"]
    assert len(statuses) <= 3, flaky["attempts"]
    assert flaky["verdict"] == "flaky"
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    assert [c.get("name") for c in junit.iter("testcase")].count("test_a_flaky") == 1


LOGS_AROUND_A_FAULT = """
import logging
import pytest
import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine")

def test_a_logs():
    logging.getLogger("suite").warning("written before the fault")

def test_b_fault():
    assert gpu_runtime.gather(out_of_range=True) == 8.0

def test_c():
    assert gpu_runtime.ones_sum(1) == 1
"""


@pytest.mark.slow
def test_a_fresh_process_does_not_start_the_log_file_again(pytester, monkeypatch):
    """A serial run goes on in a fresh process after a fault; the file --log-file names is the
    main process's, opened once: the fresh process does not get the option and truncate it."""
    report, _ = run_tree(
        pytester, monkeypatch, {"test_l.py": LOGS_AROUND_A_FAULT}, "--log-file=run.log"
    )
    assert report["tests"]["test_l.py::test_c"]["verdict"] == "pass"
    assert "written before the fault" in (pytester.path / "run.log").read_text()
