"""Server lifecycle against a stub server process (no vLLM, seconds): health wait, exit before
healthy, health timeout, process-group teardown, pool sharing and least-recently-used eviction."""

import os
import re
import sys
import time
from pathlib import Path

import pytest
from conftest import STUB_HEALTH_SERVER

from pytest_rocm.hw.profiles import builtin
from pytest_rocm.results.verdicts import build_signatures, find_signature
from pytest_rocm.serving import pool as pool_module
from pytest_rocm.serving.ahead import POLL_S as AHEAD_POLL_S
from pytest_rocm.serving.ahead import AheadStarter
from pytest_rocm.serving.plan import Step
from pytest_rocm.serving.pool import ServedModel, ServerPool
from pytest_rocm.serving.process import Server, ServerStartError, free_port, memory_problem

DATA = Path(__file__).resolve().parent / "data" / "serving"

# A stand-in for an OpenAI-compatible server: it starts a child (an engine worker), then serves
# /health, or exits, or hangs, as its mode says.
STUB = (
    """
import http.server, os, subprocess, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
print("stub starting", flush=True)
time.sleep(float(os.environ.get("STUB_DELAY", "0")))  # a start that takes time
if os.environ.get("STUB_EXIT"):
    mode = "exit"
if mode == "exit":
    print("RuntimeError: engine core failed to start", flush=True)
    sys.exit(3)
if mode.startswith("replay="):  # print a real server's captured log, then exit as it did
    print(open(mode.removeprefix("replay="), encoding="utf-8").read(), flush=True)
    sys.exit(1)
if os.environ.get("STUB_BURN"):  # a helper that computes for that many CPU seconds, then ends
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + "
                    + os.environ["STUB_BURN"] + "\\nwhile time.process_time() < end: pass"])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(f"child {child.pid}", flush=True)
if mode == "hang":
    time.sleep(300)

"""
    + STUB_HEALTH_SERVER
)


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub_server.py"
    path.write_text(STUB)
    return path


def make_server(stub, tmp_path, mode: str) -> Server:
    port = free_port()
    return Server(
        kind="vllm",
        model="stub-model",
        served_name="stub",
        port=port,
        command=[sys.executable, str(stub), str(port), mode],
        env={},
        log_path=tmp_path / f"{mode}.log",
        devices=[],
    )


def child_pid(log, within_s: float = 20) -> int:
    """The pid of the child (its engine worker) the stub server logged, once it has."""
    deadline = time.monotonic() + within_s
    while True:
        for line in log.read_text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        if time.monotonic() > deadline:
            raise AssertionError("the stub never started its child")
        time.sleep(0.1)


def gone(pid: int, within_s: float = 5) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours still answers kill(0): reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_a_healthy_server_is_stopped_with_its_whole_process_group(stub, tmp_path):
    server = make_server(stub, tmp_path, "serve")
    server.start(health_timeout_s=30)
    assert server.alive() and server.started_s > 0
    worker = child_pid(server.log_path)
    server.stop(grace_s=2)
    assert not server.alive()
    assert gone(worker), "the engine worker outlived its server"
    assert "pytest-rocm: healthy after" in server.log_path.read_text()


def test_a_start_records_the_cpu_time_its_processes_took(stub, tmp_path, monkeypatch):
    # CPU time, not wall time: the same on a busy machine
    monkeypatch.setenv("STUB_BURN", "1.5")
    server = make_server(stub, tmp_path, "serve")
    server.start(health_timeout_s=60)
    try:
        # the helper ended before the server answered: its time counts through its parent
        assert 1.5 <= server.start_cpu_s < 1.5 + 10
    finally:
        server.stop(grace_s=2)


def test_a_server_that_exits_before_healthy_fails_with_its_log_and_the_infra_signature(
    stub, tmp_path
):
    server = make_server(stub, tmp_path, "exit")
    with pytest.raises(ServerStartError) as info:
        server.start(health_timeout_s=30)
    message = str(info.value)
    assert "vllm server exited with code 3 before becoming healthy" in message
    assert "engine core failed to start" in message  # the last lines of its log
    assert find_signature([message], build_signatures())["name"] == "server_not_healthy"


def test_sglang_refusing_to_start_because_the_machine_took_its_memory_names_the_machine(
    stub, tmp_path
):
    """SGLang's own log of a start where another process took 3.5 GB at its memory baseline
    (captured here: tests/data/serving/README.md): the failure says whose memory it was, and its
    signature is the machine's."""
    log = DATA / "sglang-kv-budget-memory-taken.log"
    server = make_server(stub, tmp_path, f"replay={log}")
    with pytest.raises(ServerStartError) as info:
        server.start(health_timeout_s=30)
    message = str(info.value)
    assert (
        "server exited with code 1 before becoming healthy: memory the machine's other processes took"
        in message
    )
    assert "not the change's" in message and "--mem-fraction-static=0.05" in message
    # SGLang measured 21.25 GB free before loading weights of 0 GB, and 17.1% of it was gone: 3.63
    # GB
    assert "3.63 GB more were gone" in message, message.splitlines()[0]
    assert find_signature([message], build_signatures())["name"] == "machine_memory"


def test_a_kv_budget_that_the_weights_themselves_exhaust_is_not_called_the_machines():
    log = (DATA / "sglang-kv-budget-memory-taken.log").read_text()
    # the same refusal, had the weights taken what was gone (a model or change too large for the
    # budget)
    weights = log.replace(
        "avail mem=17.63 GB, mem usage=-0.01 GB", "avail mem=17.63 GB, mem usage=3.60 GB"
    )
    problem = memory_problem(weights)
    assert problem.startswith("the loaded weights (3.60 GB") and "machine" not in problem
    assert find_signature([problem], build_signatures()) is None
    assert memory_problem("RuntimeError: engine core failed to start") is None


def test_a_server_that_never_becomes_healthy_is_killed_with_its_workers(stub, tmp_path):
    server = make_server(stub, tmp_path, "hang")
    start = time.monotonic()
    with pytest.raises(ServerStartError, match=r"did not become healthy within 2 s"):
        server.start(health_timeout_s=2)
    assert time.monotonic() - start < 20
    assert not server.alive()
    assert gone(child_pid(server.log_path))


def stub_pool(
    stub, tmp_path, max_alive: int, config: str | None = None, on_start=None
) -> ServerPool:
    def command(kind, model, name, port, args, python):
        return [sys.executable, str(stub), str(port), "serve", *args]

    config_path = None
    if config is not None:
        config_path = tmp_path / "servers.toml"
        config_path.write_text(config)
    return ServerPool(
        session_id="lifecycle",
        platform=builtin("cpu"),
        platform_keys=["cpu"],
        config_path=config_path,
        on_start=on_start,
        log_dir=tmp_path / "servers",
        max_alive=max_alive,
        command=command,
    )


def test_the_pool_shares_a_server_and_evicts_the_least_recently_used_idle_one(stub, tmp_path):
    pool = stub_pool(stub, tmp_path, max_alive=1)
    model = ServedModel(path="stub-model", name="stub")
    try:
        first = pool.get("vllm", model, ["--variant", "a"])
        again = pool.get("vllm", model, ["--variant", "a"])
        assert again is first  # same settings: the same process
        # both held: over the limit, nothing stopped
        other = pool.get("vllm", model, ["--variant", "b"])
        assert other is not first and first.alive() and other.alive()
        pool.release(first)
        pool.release(again)  # `first` is idle now: the oldest idle server goes to keep one alive
        assert not first.alive() and other.alive()
        pool.release(other)
        third = pool.get("vllm", model, ["--variant", "c"])  # `other` idle: stopped to make room
        assert not other.alive() and third.alive()
    finally:
        pool.close()
    assert pool.alive() == []


AHEAD = "[vllm.cpu]\nstart_ahead = true\n"


def test_a_server_started_ahead_is_the_one_get_returns_and_only_the_rest_of_its_start_is_waited(
    stub, tmp_path
):
    starts = []
    pool = stub_pool(stub, tmp_path, 1, AHEAD, on_start=lambda s, error: starts.append((s, error)))
    model = ServedModel(path="stub-model", name="stub")
    try:
        current = pool.get("vllm", model, ["--variant", "a"])
        assert pool.start_ahead("vllm", model, ["--variant", "b"], {"STUB_DELAY": "2"}) is None
        [(ahead, _)] = pool.ahead.values()
        assert ahead.alive() and current.alive()  # both: the current one serves on meanwhile
        time.sleep(3)  # the tests of the current module
        pool.release(current)
        server = pool.get("vllm", model, ["--variant", "b"], {"STUB_DELAY": "2"})
        assert server is ahead and server.ahead and not pool.ahead
        # only the rest of its start: the 3 s it had ahead were not waited (exactly so whatever the
        # machine's load: a busy machine makes the whole start, and so the rest, longer)
        assert server.started_s >= 2 and server.waited_s <= server.started_s - 3, (
            server.started_s,
            server.waited_s,
        )
        assert not current.alive()  # max_alive 1: the idle one made room
        assert [(s.ahead, error) for s, error in starts] == [(False, None), (True, None)]
        # what is running or starting is not started again
        assert pool.start_ahead("vllm", model, ["--variant", "b"], {"STUB_DELAY": "2"}) is None
        assert not pool.ahead
    finally:
        pool.close()
    assert pool.ahead_unused == []


def test_a_server_started_ahead_and_never_asked_for_is_stopped_and_counted(stub, tmp_path):
    pool = stub_pool(stub, tmp_path, 1, AHEAD)
    model = ServedModel(path="stub-model", name="stub")
    assert pool.start_ahead("vllm", model, ["--variant", "b"]) is None
    [(ahead, _)] = pool.ahead.values()
    worker = child_pid(ahead.log_path)
    pool.close()
    assert pool.ahead_unused == [ahead] and not ahead.alive() and gone(worker)


def test_a_start_that_fails_ahead_fails_on_the_test_that_asks_for_it(stub, tmp_path):
    starts = []
    pool = stub_pool(stub, tmp_path, 1, AHEAD, on_start=lambda s, error: starts.append(error))
    model = ServedModel(path="stub-model", name="stub")
    try:
        assert pool.start_ahead("vllm", model, [], {"STUB_EXIT": "1"}) is None
        time.sleep(1)  # it has exited by now: nothing is said until a test asks for it
        assert starts == []
        with pytest.raises(ServerStartError, match="exited with code 3 before becoming healthy"):
            pool.get("vllm", model, [], {"STUB_EXIT": "1"})
        assert len(starts) == 1 and "exited with code 3" in starts[0]
        assert pool.ahead == {} and pool.servers == {}
    finally:
        pool.close()


def test_a_start_ahead_held_back_longer_than_the_health_timeout_still_gets_it_once_asked_for(
    stub, tmp_path
):
    """A start ahead runs on what CPU time the tests leave it, or stands still while speed is
    measured: the health timeout counts from when a test asks for it, not from its launch (a
    server that needs 2 s failed at once after 5 s stopped, and the runner was blamed)."""
    pool = stub_pool(stub, tmp_path, 1, AHEAD + "health_timeout_s = 4\n")
    model = ServedModel(path="stub-model", name="stub")
    try:
        assert pool.start_ahead("vllm", model, [], {"STUB_DELAY": "2"}) is None
        pool.pause_ahead(True)
        time.sleep(5)  # a speed test, longer than the whole health timeout
        pool.pause_ahead(False)
        server = pool.get("vllm", model, [], {"STUB_DELAY": "2"})
        assert server.ahead and server.alive() and server.waited_s < 4
    finally:
        pool.close()


def test_a_server_started_ahead_that_died_once_up_is_started_again_and_its_end_recorded(
    stub, tmp_path
):
    starts = []
    pool = stub_pool(stub, tmp_path, 1, AHEAD, on_start=lambda s, error: starts.append(error))
    model = ServedModel(path="stub-model", name="stub")
    try:
        assert pool.start_ahead("vllm", model) is None
        [(ahead, _)] = pool.ahead.values()
        deadline = time.monotonic() + 30
        while ahead.ready_at is None and time.monotonic() < deadline:
            pool.poll_ahead()  # what the thread starting servers ahead does
            time.sleep(0.1)
        assert ahead.ready_at is not None, "the stub never answered /health"
        ahead.process.kill()  # the machine took its memory back, say
        ahead.process.wait()
        server = pool.get("vllm", model)
        assert server is not ahead and server.alive() and not server.ahead
        assert starts == [None]  # the new one started; nothing failed
        assert pool.ahead_unused == [ahead]
        assert ahead.lost == "exited with code -9 after it was up, before a test asked for it"
    finally:
        pool.close()


def test_where_nothing_starts_ahead_no_tiny_model_is_built_ahead_either(stub, tmp_path):
    """A build ahead takes the CPU the tests use, at normal priority: only for a server that will
    start ahead (GPU runners' configurations start none ahead)."""
    pool = stub_pool(stub, tmp_path, 1)  # no configuration: nothing starts ahead
    asked = []

    def settings_for(step, build):
        asked.append(build)
        return ServedModel(path="stub-model", name="stub"), [], {}

    starter = AheadStarter(pool, [Step(kind="vllm", owner="test_b.py", first=1)], settings_for)
    try:
        time.sleep(3 * AHEAD_POLL_S)  # the thread's rounds
    finally:
        starter.close()
        pool.close()
    assert asked and True not in asked, asked
    assert "does not start vllm servers ahead" in starter.why_not[0]


def test_a_closed_pool_starts_nothing_ahead(stub, tmp_path):
    """The thread that starts servers ahead may still be building a model when the run ends: what
    it launched then, nobody would stop."""
    pool = stub_pool(stub, tmp_path, 1, AHEAD)
    pool.close()
    model = ServedModel(path="stub-model", name="stub")
    assert pool.start_ahead("vllm", model) == "the run was ending"
    assert pool.ahead == {} and pool.servers == {}


def test_start_ahead_says_why_it_did_not(stub, tmp_path, monkeypatch):
    model = ServedModel(path="stub-model", name="stub")
    pool = stub_pool(stub, tmp_path, 1)  # no configuration: nothing starts ahead
    assert "does not start vllm servers ahead" in pool.start_ahead(
        "vllm", model, ["--variant", "b"]
    )
    pool = stub_pool(stub, tmp_path, 1, AHEAD)
    try:
        assert pool.start_ahead("vllm", model, ["--variant", "b"], {"STUB_DELAY": "5"}) is None
        assert (
            pool.start_ahead("vllm", model, ["--variant", "c"])
            == "1 server(s) starting already (at most 1 at once)"
        )
        # two at once where that is allowed; then none, as long as both start
        assert pool.start_ahead("vllm", model, ["--variant", "c"], starting_at_most=2) is None
        assert pool.starting_count() == 2
        assert "2 server(s) starting already" in pool.start_ahead(
            "vllm", model, ["--variant", "d"], starting_at_most=2
        )
        pool.stop_ahead(keep=lambda key: False)  # none starting any more
        # the machine's memory: a server that would leave less than the reserve free is not started
        monkeypatch.setattr(pool_module, "AHEAD_RESERVE_SHARE", 1.0)
        why = pool.start_ahead("vllm", model, ["--variant", "c"])
        assert re.fullmatch(
            r"[\d.]+ GiB free, less 4\.0 GiB for another server, would leave under 100% of the "
            r"machine's [\d.]+ GiB",
            why,
        ), why
        assert pool.ahead == {}
    finally:
        pool.close()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="the idle scheduling class is Linux's")
def test_a_server_started_ahead_runs_when_idle_and_at_normal_priority_once_asked_for(
    stub, tmp_path
):
    """Ahead, it takes only CPU time nothing else wants, and so does its engine worker; the test that
    asks for it puts every process of it back in the normal class (root may; others keep it idle)."""
    pool = stub_pool(stub, tmp_path, 1, AHEAD)
    model = ServedModel(path="stub-model", name="stub")
    try:
        assert pool.start_ahead("vllm", model, ["--variant", "b"]) is None
        [(ahead, _)] = pool.ahead.values()
        worker = child_pid(ahead.log_path)
        assert os.sched_getscheduler(ahead.process.pid) == os.SCHED_IDLE
        assert os.sched_getscheduler(worker) == os.SCHED_IDLE  # a child inherits it
        server = pool.get("vllm", model, ["--variant", "b"])
        assert server is ahead
        expected = os.SCHED_OTHER if os.geteuid() == 0 else os.SCHED_IDLE
        assert os.sched_getscheduler(server.process.pid) == expected
        assert os.sched_getscheduler(worker) == expected
        started = pool.get("vllm", model, ["--variant", "c"])  # on demand: never in the idle class
        assert os.sched_getscheduler(started.process.pid) == os.SCHED_OTHER
    finally:
        pool.close()


def test_an_idle_server_a_later_test_asks_for_is_kept_while_memory_allows(
    stub, tmp_path, monkeypatch
):
    pool = stub_pool(stub, tmp_path, 1, AHEAD)
    model = ServedModel(path="stub-model", name="stub")
    wanted_later = pool.key("vllm", model, ["--variant", "a"], {})
    pool.asked_for_later = lambda key: key == wanted_later
    try:
        first = pool.get("vllm", model, ["--variant", "a"])
        pool.release(first)
        second = pool.get("vllm", model, ["--variant", "b"])  # max_alive 1, but `a` comes again
        assert first.alive() and second.alive()
        pool.release(second)  # `b` is not asked for again: it goes, `a` stays
        assert not second.alive() and first.alive()
        third = pool.get("vllm", model, ["--variant", "c"])
        assert first.alive()
        pool.release(third)
        # no memory to spare: the least recently used idle one goes, wanted later or not
        monkeypatch.setattr(pool_module, "AHEAD_RESERVE_SHARE", 1.0)
        fourth = pool.get("vllm", model, ["--variant", "d"])
        assert not first.alive() and not third.alive() and fourth.alive()
    finally:
        pool.close()
