"""GPU allocation: exclusive across processes, all or nothing, released when the holder dies."""

import json
import subprocess
import sys
import uuid

import pytest
from conftest import read_jsonl

from pytest_rocm.hw.allocation import AllocationTimeout, allocate


@pytest.fixture
def session_id():
    return "test-" + uuid.uuid4().hex[:8]


def test_all_or_nothing_in_one_process(session_id):
    first = allocate(session_id, [0, 1, 2], 2, "amd")
    assert first.devices == [0, 1] and first.env == {"HIP_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(AllocationTimeout, match=r"could not get 2 of devices \[0, 1, 2\]"):
        allocate(session_id, [0, 1, 2], 2, "amd", wait_s=0.3)
    third = allocate(session_id, [0, 1, 2], 1, "amd", wait_s=0.3)  # the failed attempt held nothing
    assert third.devices == [2]
    first.release()
    third.release()
    assert allocate(session_id, [0, 1, 2], 3, "nvidia").env == {"CUDA_VISIBLE_DEVICES": "0,1,2"}


def test_avoided_devices_come_last(session_id):
    assert allocate(session_id, [0, 1, 2, 3], 2, "amd", avoid={0, 1}).devices == [2, 3]
    only = allocate(session_id + "b", [0], 1, "amd", avoid={0})
    assert only.devices == [0] and only.reused_avoided


def test_more_than_the_runner_has(session_id):
    with pytest.raises(AllocationTimeout, match="needs 4 devices, the runner has 2"):
        allocate(session_id, [0, 1], 4, "amd")


def test_a_dead_holder_releases_its_devices(session_id):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pytest_rocm.hw.allocation import allocate; "
                f"a = allocate({session_id!r}, [0, 1], 2, 'amd'); print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AllocationTimeout):
            allocate(session_id, [0, 1], 1, "amd", wait_s=0.3)
        holder.kill()  # SIGKILL: no cleanup runs, the kernel drops its flock locks
        holder.wait()
        assert allocate(session_id, [0, 1], 2, "amd", wait_s=0.5).devices == [0, 1]
    finally:
        holder.kill()


ALLOCATING_SUITE = """
import json, os, subprocess, sys, time
import pytest

@pytest.mark.rocm_gate(group="distributed_moe")
@pytest.mark.hardware(gpus=4)
@pytest.mark.parametrize("i", range(6))
def test_four_gpus(i, gpus):
    seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ['HIP_VISIBLE_DEVICES'])"],
                          capture_output=True, text=True).stdout.strip()
    start = time.monotonic()
    time.sleep(0.3)
    with open(f"alloc-{i}.json", "w") as handle:
        json.dump({"gpus": gpus, "seen": seen, "start": start, "end": time.monotonic()}, handle)

@pytest.mark.rocm_gate(group="distributed_moe")
@pytest.mark.hardware(gpus=2)
@pytest.mark.parametrize("i", range(6))
def test_two_gpus(i, gpus):
    start = time.monotonic()
    time.sleep(0.2)
    with open(f"alloc2-{i}.json", "w") as handle:
        json.dump({"gpus": gpus, "start": start, "end": time.monotonic()}, handle)

def test_env_restored():
    assert "HIP_VISIBLE_DEVICES" not in os.environ
"""


@pytest.mark.slow
def test_workers_never_share_a_device_and_never_deadlock(pytester, monkeypatch):
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile(test_alloc=ALLOCATING_SUITE)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-platform=mi300x-6",
        "--rocm-report-dir=out",
        "-p",
        "no:cacheprovider",
        "--timeout=60",
    )
    result.assert_outcomes(passed=13)
    runs = [json.loads(p.read_text()) for p in pytester.path.glob("alloc*.json")]
    assert len(runs) == 12
    for run in runs:
        if "seen" in run:
            assert run["seen"] == ",".join(map(str, run["gpus"]))  # what a subprocess sees
            assert len(run["gpus"]) == 4
    overlapping = 0
    for a in runs:
        for b in runs:
            # ran at the same time
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:
                overlapping += 1
                assert not set(a["gpus"]) & set(b["gpus"]), (a, b)
    assert overlapping, (
        "no two tests ran at the same time: the test proves nothing about exclusivity"
    )
    records = [r for p in (pytester.path / "out").glob("records-gw*.jsonl") for r in read_jsonl(p)]
    setups = [r for r in records if r.get("when") == "setup" and "test_four_gpus" in r["nodeid"]]
    assert all(len(r["gpus"]) == 4 for r in setups)


def test_gpus_on_a_machine_without_gpus(pytester):
    pytester.makepyfile("""
        def test_x(gpus):
            assert gpus == []
    """)
    pytester.runpytest("--rocm-platform=cpu").assert_outcomes(passed=1)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_file_where_the_lock_folder_goes_is_a_usage_error_naming_it(
    pytester, monkeypatch, workers
):
    """`$TMPDIR/pytest-rocm-locks` left as a file (a stray `touch`, another tool's name): no
    INTERNALERROR, the path and the fix."""
    temporary = pytester.path / "tmp"
    temporary.mkdir()
    (temporary / "pytest-rocm-locks").write_text("")
    monkeypatch.setenv("TMPDIR", str(temporary))
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        def test_x(gpus):
            assert gpus
    """
    )
    result = pytester.runpytest_subprocess(
        "--rocm-platform=mi300x-2", "-p", "no:cacheprovider", *workers
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: pytest-rocm: {temporary}/pytest-rocm-locks is a file, not a folder; "
            f"* Remove it (rm {temporary}/pytest-rocm-locks) or give the run another temporary "
            "folder (TMPDIR=/some/folder pytest ...)"
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
