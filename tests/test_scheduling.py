"""The GPU-aware scheduler (`--rocm-scheduler=gpu`), the duration store, and the simulation they
share."""

import json

import pytest
from conftest import read_jsonl, read_report

from pytest_rocm.scheduling.dispatch import SHUTDOWN, Dispatcher, Job
from pytest_rocm.scheduling.durations import (
    DurationStore,
    add_run,
    durations_from_records,
    server_starts_from_records,
)
from pytest_rocm.scheduling.simulate import (
    lower_bound,
    project_makespan,
    sglang_partition_makespan,
    xdist_load_makespan,
)
from pytest_rocm.scheduling.xdist_scheduler import with_server_starts

# --- the rule, on its own -------------------------------------------------------------------------


def test_every_idle_worker_gets_a_first_test_before_any_gets_a_second():
    jobs = [Job(i, f"t{i}", 1, 10.0) for i in range(10)]
    dispatcher = Dispatcher.longest_first(jobs, capacity=8)
    for worker in range(8):
        dispatcher.add_worker(worker)
    sent = dispatcher.fill(range(8))
    # 10 tests, 8 workers: two workers get a second test, the other six are told to stop (their test
    # then runs)
    assert (
        sorted(len([t for t in things if t != SHUTDOWN]) for things in sent.values())
        == [1] * 6 + [2] * 2
    )
    assert sum(SHUTDOWN in things for things in sent.values()) == 6


def test_an_idle_worker_waits_rather_than_start_a_test_whose_gpus_are_taken():
    jobs = [
        Job(0, "big", 8, 5.0),
        Job(1, "four", 4, 4.0),
        Job(2, "four2", 4, 3.0),
        Job(3, "one", 1, 1.0),
    ]
    dispatcher = Dispatcher.longest_first(jobs, capacity=8)
    for worker in range(4):
        dispatcher.add_worker(worker)
    sent = dispatcher.fill(range(4))
    heads = {w: things[0] for w, things in sent.items()}
    # the 8-GPU test first; nothing else fits beside it
    assert [job.nodeid for job in heads.values()] == ["big"]
    assert dispatcher.free == 0


def test_modules_go_longest_first_and_keep_their_tests_together_in_collection_order():
    """A module's fixtures (a served model) are set up again whenever a worker switches module:
    never split one."""
    jobs = [
        Job(0, "a.py::t1", 1, 1.0),
        Job(1, "a.py::t2", 1, 9.0),
        Job(2, "b.py::t1", 1, 20.0),
        Job(3, "c.py::t1", 1, 2.0),
        Job(4, "c.py::t2", 1, 2.0),
    ]
    order = [job.nodeid for job in Dispatcher.longest_first(jobs, capacity=8).pending]
    assert order == ["b.py::t1", "a.py::t1", "a.py::t2", "c.py::t1", "c.py::t2"]


def test_a_test_needing_more_gpus_than_the_runner_has_counts_as_the_whole_runner():
    dispatcher = Dispatcher.longest_first([Job(0, "huge", 16, 1.0)], capacity=8)
    assert dispatcher.pending[0].gpus == 8


def test_simulated_makespans_against_the_bound():
    jobs = [
        Job(i, f"t{i}", g, s)
        for i, (g, s) in enumerate(
            [
                (2, 16),
                (2, 12),
                (4, 10),
                (1, 8),
                (1, 8),
                (8, 6),
                (1, 4),
                (2, 4),
                (1, 12),
                (1, 2),
                (4, 6),
                (1, 6),
            ]
        )
    ]
    bound = lower_bound(jobs, 8)
    assert bound == pytest.approx(max(sum(j.gpus * j.seconds for j in jobs) / 8, 16))
    assert bound <= project_makespan(jobs, 8) <= 1.1 * bound
    assert xdist_load_makespan(jobs, 8) >= bound and sglang_partition_makespan(jobs, 8) >= bound


# --- the duration store ---------------------------------------------------------------------------


def test_duration_store_round_trip_and_fallbacks(tmp_path):
    store = DurationStore.load(tmp_path / "d.json")
    assert store.problem is None and store.expected("MI300X")("t.py::a") == 1.0
    store.add("MI300X", {"t.py::a": 10.0, "t.py::b": 30.0, "u.py::c": 2.0})
    store.add("MI300X", {"t.py::a": 12.0})
    store.save()
    expected = DurationStore.load(tmp_path / "d.json").expected("MI300X")
    assert expected("t.py::a") == 11.0  # the median of what was measured
    assert expected("t.py::new") == 20.5  # unseen: its file's median
    assert expected("v.py::new") == 11.0  # unseen file: the median of every measured test
    # another platform
    assert DurationStore.load(tmp_path / "d.json").expected("MI355X")("t.py::a") == 1.0


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"schema": "other"}', b"[]"])
def test_a_corrupt_duration_store_means_unknown_durations(tmp_path, content):
    (tmp_path / "d.json").write_bytes(content)
    store = DurationStore.load(tmp_path / "d.json")
    assert "durations are unknown this run" in store.problem
    assert store.expected("MI300X")("t.py::a") == 1.0


def test_durations_from_records_take_the_first_attempt():
    records = [
        {"nodeid": "t.py::a", "when": w, "duration": d}
        for w, d in [
            ("setup", 1.0),
            ("call", 5.0),
            ("teardown", 0.5),
            ("setup", 0.1),
            ("call", 0.2),
            ("teardown", 0.1),
        ]
    ]
    records[0]["gpu_wait_s"] = 0.75  # held by other tests: not its own time
    records.append({"nodeid": "t.py::b", "when": "setup", "duration": 1.0, "crashed": True})
    assert durations_from_records(records) == {"t.py::a": 5.75}


# --- the real scheduler under xdist, on a simulated 8-GPU runner ----------------------------------

SLEEPERS = """
    import time
    import pytest

    CASES = [("a", 2, 0.8), ("b", 2, 0.6), ("c", 4, 0.5), ("d", 1, 0.4), ("e", 1, 0.4), ("f", 8, 0.3), ("g", 1, 0.2),
             ("h", 2, 0.2), ("i", 1, 0.6), ("j", 1, 0.1), ("k", 4, 0.3), ("l", 1, 0.3), ("huge", 16, 0.1)]

    @pytest.mark.rocm_gate(group="engine")
    @pytest.mark.parametrize("seconds", [pytest.param(s, id=n, marks=pytest.mark.hardware(gpus=g))
                                         for n, g, s in CASES])
    def test_sleep(seconds, gpus):
        time.sleep(seconds)
"""


def gpu_intervals_by_id(folder):
    """node id -> (start, end, devices) of each test's call phase, from the records."""
    records = [
        r for path in folder.glob("records-*.jsonl") for r in read_jsonl(path) if "kind" not in r
    ]
    calls = {r["nodeid"]: r for r in records if r["when"] == "call"}
    setups = {r["nodeid"]: r for r in records if r["when"] == "setup"}
    return {
        n: (calls[n]["t"] - calls[n]["duration"], calls[n]["t"], setups[n].get("gpus", []))
        for n in calls
    }


def gpu_intervals(folder):
    return list(gpu_intervals_by_id(folder).values())


@pytest.mark.slow
def test_packs_under_the_gpu_capacity_and_learns_durations(pytester):
    pytester.makepyfile(test_sleep=SLEEPERS)
    args = (
        "-n",
        "8",
        "--rocm-scheduler=gpu",
        "--rocm-platform=mi300x-8",
        "--rocm-durations=durations.json",
        "-p",
        "no:cacheprovider",
    )
    for run in ("first", "second"):
        result = pytester.runpytest_subprocess(*args, f"--rocm-report-dir={run}")
        # `huge` needs 16 GPUs: not applicable here, never waits
        result.assert_outcomes(passed=12, skipped=1)
        intervals = gpu_intervals(pytester.path / run)
        # at no moment more GPUs in use than the runner has, nor one used twice
        for start, _, _ in intervals:
            busy = [devices for s, e, devices in intervals if s <= start < e]
            in_use = [d for devices in busy for d in devices]
            assert len(in_use) <= 8 and len(in_use) == len(set(in_use))
        assert read_report(pytester.path / run)["conclusion"] == "success"
    store = json.loads((pytester.path / "durations.json").read_text())
    # a sample per run
    assert len(store["platforms"]["MI300X"]["test_sleep.py::test_sleep[a]"]) == 2
    # Known durations (the second run): longest first, so `a` (the longest) starts in the first
    # wave, and the 8-GPU test `f` (short) cannot start before it ends.
    starts = {
        n.split("[")[1][:-1]: s
        for n, (s, _, _) in gpu_intervals_by_id(pytester.path / "second").items()
    }
    ends = {
        n.split("[")[1][:-1]: e
        for n, (_, e, _) in gpu_intervals_by_id(pytester.path / "second").items()
    }
    assert starts["a"] < starts["f"] and ends["a"] <= starts["f"]


@pytest.mark.slow
def test_a_worker_crash_under_the_gpu_scheduler_is_recorded_and_the_rest_runs(pytester):
    pytester.makepyfile(
        test_crash="""
        import os
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.parametrize("i", range(5))
        def test_fine(i, gpus):
            pass

        @pytest.mark.rocm_gate(group="engine")
        def test_dies(gpus):
            os._exit(1)
    """
    )
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-scheduler=gpu",
        "--rocm-platform=mi300x-2",
        "--rocm-report-dir=out",
        "--rocm-reruns=0",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=5, failed=1)
    report = read_report(pytester.path / "out")
    assert report["tests"]["test_crash.py::test_dies"]["status"] == "crashed"
    assert report["complete"] is True


def test_the_gpu_scheduler_refuses_dist_modes_it_cannot_serve(pytester):
    pytester.makepyfile("def test_a(): pass\n")
    result = pytester.runpytest(
        "-n", "2", "--dist=loadscope", "--rocm-scheduler=gpu", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rocm-scheduler=gpu*cannot be combined with --dist loadscope*"])


@pytest.mark.slow
def test_a_corrupt_store_is_said_and_the_run_goes_on(pytester):
    pytester.makepyfile("import pytest\n@pytest.mark.rocm_gate(group='api')\ndef test_a(): pass\n")
    (pytester.path / "durations.json").write_text("{broken")
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-scheduler=gpu",
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--rocm-durations=durations.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*duration store*durations.json is unreadable*durations are unknown this run*"]
    )
    assert (
        json.loads((pytester.path / "durations.json").read_text())["schema"]
        == "pytest-rocm/durations/2"
    )


def test_server_starts_are_kept_apart_from_test_time_and_counted_into_a_modules_first_test(
    tmp_path,
):
    """A module's first test waited 300 s for its server: the store keeps 12 s for the test and
    300 s for the module's start, and the scheduler plans the module as 300 s plus its tests."""
    records = [
        {"kind": "server", "nodeid": "t/test_m.py", "healthy_after_s": 280.0},
        {"kind": "server", "nodeid": "t/test_m.py::test_b", "healthy_after_s": 20.0},
        {"kind": "server", "nodeid": "", "healthy_after_s": None, "unused": True},
        {
            "nodeid": "t/test_m.py::test_a",
            "when": "setup",
            "outcome": "passed",
            "duration": 290.0,
            "server_wait_s": 280.0,
        },
        {"nodeid": "t/test_m.py::test_a", "when": "call", "outcome": "passed", "duration": 2.0},
        {"nodeid": "t/test_m.py::test_a", "when": "teardown", "outcome": "passed", "duration": 0.0},
        {"nodeid": "t/test_m.py::test_b", "when": "setup", "outcome": "passed", "duration": 0.0},
        {
            "nodeid": "t/test_m.py::test_b",
            "when": "call",
            "outcome": "passed",
            "duration": 25.0,
            "server_wait_s": 20.0,
        },
        {"nodeid": "t/test_m.py::test_b", "when": "teardown", "outcome": "passed", "duration": 0.0},
    ]
    path = tmp_path / "durations.json"
    add_run(path, "MI300X", durations_from_records(records), server_starts_from_records(records))
    store = DurationStore.load(path)
    assert store.problem is None
    assert store.platforms == {
        "MI300X": {"t/test_m.py::test_a": [12.0], "t/test_m.py::test_b": [5.0]}
    }
    assert store.server_starts == {"MI300X": {"t/test_m.py": [300.0]}}
    expected, starts = store.expected("MI300X"), store.module_starts("MI300X")
    assert with_server_starts(
        ["t/test_m.py::test_a", "t/test_m.py::test_b", "t/test_n.py::test_c"], expected, starts
    ) == [
        ("t/test_m.py::test_a", 312.0),
        ("t/test_m.py::test_b", 5.0),
        ("t/test_n.py::test_c", 8.5),
    ]
    # a store of the earlier version (no server starts) still reads
    path.write_text(
        json.dumps({"schema": "pytest-rocm/durations/1", "platforms": {"X": {"a": [1]}}})
    )
    old = DurationStore.load(path)
    assert old.problem is None and old.platforms == {"X": {"a": [1.0]}} and old.server_starts == {}


@pytest.mark.slow
def test_workers_that_collect_different_tests_fail_the_run_saying_so(pytester):
    pytester.makepyfile("""
        import os
        import pytest

        @pytest.mark.rocm_gate(group="engine")
        @pytest.mark.parametrize("worker", [os.environ.get("PYTEST_XDIST_WORKER", "none")])
        def test_differs(worker):
            pass
    """)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--rocm-scheduler=gpu",
        "--rocm-platform=mi300x-8",
        "--rocm-report-dir=out",
        "--rocm-exit-by-conclusion",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret != 0
    # either order
    result.stdout.fnmatch_lines(["*Different tests were collected between gw? and gw?*"])
    assert read_report(pytester.path / "out")["conclusion"] in ("failure", "incomplete")


def test_two_runs_ending_at_once_both_reach_the_duration_store(tmp_path):
    """Each run adds its durations under a lock: neither run's samples are lost to the other's
    write."""
    import threading

    from pytest_rocm.scheduling.durations import add_run

    path = tmp_path / "durations.json"
    runs = [
        threading.Thread(target=add_run, args=(path, "MI300X", {f"t.py::run{i}": float(i)}))
        for i in range(8)
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert sorted(DurationStore.load(path).platforms["MI300X"]) == [
        f"t.py::run{i}" for i in range(8)
    ]
