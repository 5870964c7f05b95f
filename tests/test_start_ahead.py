"""Servers started ahead of need, through pytester as a suite runs them: the plan read from the
collected items, the next module's server launched while the current module's tests run, the
waiting that saves in the records, and the cases where nothing is started ahead.

The servers are a stub behind a server configuration whose `python` is a small interpreter stand-in:
it answers the plugin's "is vLLM installed" probe with the real interpreter and serves /health on the
port it is given after STUB_DELAY seconds (no vLLM, seconds per test).
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import STUB_HEALTH_SERVER, processes_with, read_jsonl, read_report

from pytest_rocm.plugin.internals import will_skip
from pytest_rocm.serving.plan import server_plan

# An interpreter stand-in: `-c CODE` runs the real one (the installed-package probe and the manifest's
# package listing), anything else (`-m vllm.entrypoints... --port N ...`) is the stub server.
INTERPRETER = """#!/bin/sh
if [ "$1" = "-c" ]; then exec {python} "$@"; fi
exec {python} {stub} "$@"
"""
STUB = (
    """
import http.server, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
print("stub starting", flush=True)
time.sleep(float(os.environ.get("STUB_DELAY", "0")))

"""
    + STUB_HEALTH_SERVER
)
MODULE = """
import time
import pytest

pytestmark = [pytest.mark.rocm_gate(group="engine"), pytest.mark.vllm_server(args=["--variant", "{name}"])]

@pytest.mark.parametrize("n", range(2))
def test_work(vllm_server, n):
    assert vllm_server.alive()
    time.sleep({work})  # the module's tests, while the next module's server starts
"""


def suite(pytester, modules: dict[str, float], delay: float = 3, start_ahead: bool = True):
    """Test modules `name: seconds of work per test`, each with a server of its own that takes
    `delay` seconds to start."""
    stub = pytester.path / "stub_server.py"
    stub.write_text(STUB)
    interpreter = pytester.path / "python-stand-in"
    interpreter.write_text(INTERPRETER.format(python=sys.executable, stub=stub))
    interpreter.chmod(interpreter.stat().st_mode | stat.S_IXUSR)
    (pytester.path / "servers.toml").write_text(
        f'[vllm.cpu]\npython = "{interpreter.name}"\nstart_ahead = {str(start_ahead).lower()}\n'
        f'env = {{ STUB_DELAY = "{delay}" }}\n'
    )
    for name, work in modules.items():
        pytester.makepyfile(**{f"test_{name}": MODULE.format(name=name, work=work)})


def run(pytester, *args):
    report_dir = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        "--rocm-platform=cpu",
        f"--rocm-report-dir={report_dir}",
        "--rocm-server-config=servers.toml",
        f"--rocm-model={pytester.path}",  # the stub serves no weights: no tiny model is built
        "-p",
        "no:cacheprovider",
        *args,
    )
    servers = json.loads((report_dir / "manifest.json").read_text())["servers"]
    return result, read_report(report_dir), servers


def spans_of_tests(pytester) -> dict[str, tuple[float, float]]:
    """nodeid -> (start, end) wall times of each test, from the run's records (a record's `t` is
    when its phases ended)."""
    spans: dict[str, tuple[float, float]] = {}
    for path in (pytester.path / "out").glob("records-*.jsonl"):
        for record in read_jsonl(path):
            if record.get("when") and "t" in record:
                took = record.get("duration") or sum(record.get("durations") or ())
                start, end = record["t"] - took, record["t"]
                known = spans.get(record["nodeid"], (start, end))
                spans[record["nodeid"]] = (min(known[0], start), max(known[1], end))
    return spans


@pytest.mark.slow
def test_the_next_modules_server_starts_while_the_current_modules_tests_run(pytester):
    suite(pytester, {"a": 2, "b": 2, "c": 0})
    result, report, servers = run(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=6)
    assert report["conclusion"] == "success"
    by_module = {s["nodeid"]: s for s in servers}
    assert set(by_module) == {"test_a.py", "test_b.py", "test_c.py"}
    first, second, third = (by_module[f"test_{m}.py"] for m in "abc")
    assert not first["started_ahead"] and first["waited_s"] >= 3
    # the test that waited says so in its record (the duration store keeps it apart)
    [setup] = [
        r
        for path in (pytester.path / "out").glob("records-*.jsonl")
        for r in read_jsonl(path)
        if r.get("nodeid") == "test_a.py::test_work[0]" and r.get("when") == "setup"
    ]
    assert setup["server_wait_s"] >= 3 and setup["server_wait_s"] <= setup["duration"]
    # b's server was launched while a's tests ran, c's while b's did (how much of its start that saves
    # depends on the CPU time the tests leave it: all of it on a quiet machine)
    spans = spans_of_tests(pytester)
    for ahead, before in ((second, "test_a.py::test_work[1]"), (third, "test_b.py::test_work[1]")):
        assert ahead["started_ahead"] and ahead["launched_t"] < spans[before][1], servers
        assert ahead["waited_s"] <= ahead["healthy_after_s"]
    assert not [s for s in servers if s.get("unused")]


@pytest.mark.slow
def test_nothing_starts_ahead_when_asked_not_to_or_where_the_configuration_does_not_allow_it(
    pytester,
):
    suite(pytester, {"a": 0, "b": 0})
    result, _, servers = run(pytester, "-p", "no:xdist", "--rocm-no-start-ahead")
    result.assert_outcomes(passed=4)
    assert [s["started_ahead"] for s in servers] == [False, False]
    assert all(s["waited_s"] >= 3 for s in servers)
    assert [s["not_started_ahead"] for s in servers] == ["--rocm-no-start-ahead"] * 2
    suite(pytester, {"a": 0, "b": 0}, start_ahead=False)
    result, _, servers = run(pytester, "-p", "no:xdist")
    assert [s["started_ahead"] for s in servers] == [False, False]
    assert servers[1]["not_started_ahead"] == (
        "the server configuration does not start vllm servers ahead on this platform"
    )


@pytest.mark.slow
def test_with_several_xdist_workers_no_worker_starts_a_server_it_may_not_run(pytester):
    suite(pytester, {"a": 0, "b": 0})
    result, _, servers = run(pytester, "-n", "2")
    result.assert_outcomes(passed=4)
    assert [s["started_ahead"] for s in servers] == [False, False]
    assert {s["not_started_ahead"] for s in servers} <= {
        None,
        "this process runs only its share of the tests (xdist workers)",
    }


@pytest.mark.slow
def test_one_xdist_worker_runs_everything_and_starts_ahead(pytester):
    suite(pytester, {"a": 2, "b": 0})
    result, _, servers = run(pytester, "-n", "1")
    result.assert_outcomes(passed=4)
    assert sorted(s["started_ahead"] for s in servers) == [False, True]


@pytest.mark.slow
def test_a_server_started_ahead_that_no_test_asks_for_is_stopped_and_recorded(pytester):
    suite(pytester, {"a": 2, "b": 0})
    # b's tests are collected (so its server is in the plan) but deselected at run time
    pytester.makeconftest(
        """
        import pytest

        def pytest_runtest_setup(item):
            if item.nodeid.startswith("test_b.py"):
                pytest.skip("not today")
        """
    )
    result, report, servers = run(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=2, skipped=2)
    [unused] = [s for s in servers if s.get("unused")]
    # up by the end or not, as the machine allowed; when it was, not before its 3 s start
    assert unused["started_ahead"] and (unused["healthy_after_s"] or 3) >= 3
    port = unused["command"][unused["command"].index("--port") + 1]
    assert not processes_with(f"--port\0{port}\0"), "the unused server outlived the run"
    assert report["conclusion"] == "success"


def run_until_killed(pytester, signal_number, *args) -> tuple[int, dict[int, str]]:
    """Run the suite in a process of its own; once a's server serves and b's starts ahead, send it
    `signal_number` (None: let it end by itself). Its exit status, and the stub servers still
    running 20 s after it ended, each with its state."""
    stub = str(pytester.path / "stub_server.py")
    process = pytester.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "--rocm-platform=cpu",
            f"--rocm-report-dir={pytester.path / 'out'}",
            "--rocm-server-config=servers.toml",
            f"--rocm-model={pytester.path}",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while len(processes_with(stub)) < 2 and process.poll() is None:
            assert time.monotonic() < deadline, "the servers never started"
            time.sleep(0.1)
        if signal_number is not None:
            process.send_signal(signal_number)
        process.wait(timeout=120)
    finally:
        process.kill()
        process.wait()
    # A SIGKILL is handled when its process next runs: a server in the idle class waits for a CPU
    # for that too on a busy machine (seen once with two test runs on the 2 cores). One nobody
    # killed serves forever, so a grace tells the two apart.
    deadline = time.monotonic() + 20
    while (left := processes_with(stub)) and time.monotonic() < deadline:
        time.sleep(0.2)
    states = {pid: _state(pid) for pid in left}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return process.returncode, states


def _state(pid: int) -> str:
    """A process's state and pending signals, for the assertion's message."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "gone"
    return "; ".join(line for line in status if line.startswith(("State", "SigPnd", "ShdPnd")))


@pytest.mark.slow
def test_a_cancelled_job_sigterm_stops_every_server_and_the_report_says_interrupted(pytester):
    """A job's cancel or a pod's deletion sends SIGTERM: the run ends as Ctrl-C ends it, its servers
    (the one serving, the one started ahead) stopped, the report written. Uncaught, SIGTERM left
    both running (holding a GPU runner's devices for the next job) and no report."""
    suite(pytester, {"a": 20, "b": 0}, delay=1)
    status, left = run_until_killed(pytester, signal.SIGTERM, "-p", "no:xdist")
    assert status == pytest.ExitCode.INTERRUPTED and left == {}
    report = read_report(pytester.path / "out")
    assert report["conclusion"] != "success" and report["complete"] is False, report


@pytest.mark.slow
def test_a_hang_ended_by_pytest_timeouts_thread_method_leaves_no_server_running(pytester):
    """The thread method ends the process without a teardown: the servers are killed first."""
    suite(pytester, {"a": 60, "b": 0}, delay=1)
    status, left = run_until_killed(
        pytester, None, "-p", "no:xdist", "--timeout=8", "--timeout-method=thread"
    )
    assert status != 0 and left == {}


def test_the_plan_follows_the_run_order_a_framework_parameter_variants_and_skips(pytester):
    """The suites' API module runs its tests once per framework (a module-scoped `framework`
    parameter whose `server` fixture picks the server at run time): one step per framework, in
    pytest's order. Declared variants are steps of their test, in order; a test skipped by its
    markers (or not run by its xfail) asks for nothing; a module with a test of the performance
    group measures speed."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="module", params=["vllm", "sglang"])
        def framework(request):
            return request.param

        @pytest.fixture(scope="module")
        def server(request, framework):
            return request.getfixturevalue(f"{framework}_server")
        """
    )
    pytester.makepyfile(
        test_api="def test_a(server): pass\ndef test_b(server): pass\n",
        test_perf=(
            "import pytest\n"
            "@pytest.mark.rocm_gate(group='performance')\n"
            "def test_speed(vllm_server, perf_gate): pass\n"
            "def test_other(vllm_server): pass\n"
        ),
        test_plain="def test_nothing(): pass\n",
        test_tiny=(
            "import pytest\n"
            "pytestmark = pytest.mark.vllm_server(tiny_model={'architecture': 'mixtral'})\n"
            "@pytest.mark.skip(reason='not today')\n"
            "def test_skipped(vllm_server, vllm_server_factory): pass\n"
            "@pytest.mark.vllm_server_variant(args=['--one'])\n"
            "@pytest.mark.vllm_server_variant(args=['--two'], env={'A': '1'})\n"
            "def test_moe(vllm_server, vllm_server_factory): pass\n"
            "@pytest.mark.skipif('True', reason='never')\n"
            "@pytest.mark.vllm_server_variant(args=['--three'])\n"
            "def test_never(vllm_server_factory): pass\n"
            "@pytest.mark.xfail(run=False, reason='hangs')\n"
            "@pytest.mark.vllm_server_variant(args=['--four'])\n"
            "def test_not_run(vllm_server_factory): pass\n"
        ),
    )
    items, rec = pytester.inline_genitems("--rocm-platform=cpu", "-p", "no:xdist")
    groups = {item.nodeid: "performance" for item in items if "speed" in item.nodeid}
    plan = server_plan(items, will_skip, groups.get)
    order = [item.nodeid for item in items]
    assert [(s.owner, s.kind, s.variant, s.measures_speed) for s in plan] == [
        ("test_api.py", "vllm", False, False),
        ("test_api.py", "sglang", False, False),
        ("test_perf.py", "vllm", False, True),
        ("test_tiny.py", "vllm", False, False),
        ("test_tiny.py::test_moe", "vllm", True, False),
        ("test_tiny.py::test_moe", "vllm", True, False),
    ]
    # each step at the first test that runs and asks for it
    assert [order[s.first] for s in plan] == [
        "test_api.py::test_a[vllm]",
        "test_api.py::test_a[sglang]",
        "test_perf.py::test_speed",
        "test_tiny.py::test_moe",
        "test_tiny.py::test_moe",
        "test_tiny.py::test_moe",
    ]
    assert plan[3].settings == {"tiny_model": {"architecture": "mixtral"}}
    assert [s.settings for s in plan[4:]] == [
        {"args": ["--one"]},
        {"args": ["--two"], "env": {"A": "1"}},
    ]


def windows(servers: list[dict]) -> list[tuple[float, float]]:
    """(launched, healthy) wall times of each server that became healthy."""
    return [
        (s["launched_t"], s["launched_t"] + s["healthy_after_s"])
        for s in servers
        if s.get("healthy_after_s") is not None
    ]


@pytest.mark.slow
def test_nothing_starts_while_speed_is_measured(pytester):
    """The speed test runs first, as the suites order it. The server started ahead beside its own
    start (b's, slower) is stopped where it is while the test measures, nothing else is launched
    meanwhile, and afterwards it goes on: b's tests run on it."""
    suite(pytester, {"c": 0}, delay=1)
    pytester.makepyfile(
        test_a="""
        import json, os, signal, time
        import pytest

        pytestmark = pytest.mark.rocm_gate(group="performance")

        def states(mine):
            found = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
                    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
                    status = dict(
                        line.split(":", 1) for line in open(f"/proc/{pid}/status")
                    )
                except OSError:
                    continue
                # SIGSTOP sent, not handled yet: a start in the idle class waits for a CPU to
                # handle it on a busy machine, and runs none of its own code meanwhile
                pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
                if state != "T" and pending & (1 << (signal.SIGSTOP - 1)):
                    state = "stopping"
                # this run's stub servers (other tests may run theirs meanwhile)
                if b"--port" in args and os.path.abspath("stub_server.py").encode() in args:
                    port = args[args.index(b"--port") + 1].decode()
                    if port != mine:
                        found[port] = state
            return found

        def test_speed(vllm_server, perf_gate):
            began = time.time()
            during = states(str(vllm_server.port))
            time.sleep(2)  # what it measures
            with open("measured.json", "w") as out:
                json.dump({"window": [began, time.time()], "others": during}, out)
        """,
        test_b="""
        import pytest

        pytestmark = [
            pytest.mark.rocm_gate(group="engine"),
            pytest.mark.vllm_server(args=["--variant", "b"], env={"STUB_DELAY": "6"}),
        ]

        def test_on_b(vllm_server):
            assert vllm_server.alive()
        """,
    )
    result, _, servers = run(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=4)
    measured = json.loads((pytester.path / "measured.json").read_text())
    began, ended = measured["window"]
    by_module = {s["nodeid"]: s for s in servers}
    b = by_module["test_b.py"]
    assert b["started_ahead"] and b["launched_t"] < began, servers
    # b's start was under way when the speed test began, and stood still (T: stopped; or its stop
    # pending, on a machine too busy to hand an idle-class process the CPU to handle it) throughout
    port = b["command"][b["command"].index("--port") + 1]
    assert measured["others"] in ({port: "T"}, {port: "stopping"})
    # nothing was launched while it measured
    assert all(not began <= s["launched_t"] <= ended for s in servers), servers
    assert by_module["test_c.py"]["launched_t"] >= ended


@pytest.mark.slow
def test_declared_variants_start_ahead_and_an_undeclared_one_says_why_not(pytester):
    suite(pytester, {"a": 1}, delay=2)
    pytester.makepyfile(
        test_b="""
        import time
        import pytest

        pytestmark = pytest.mark.rocm_gate(group="engine")

        @pytest.mark.vllm_server_variant(args=["--declared"])
        def test_declared(vllm_server_factory):
            time.sleep(3)  # the next one starts meanwhile
            assert vllm_server_factory(args=["--declared"]).alive()

        @pytest.mark.vllm_server_variant(args=["--declared", "2"], env={"X": "1"})
        def test_declared_too(vllm_server_factory):
            assert vllm_server_factory(args=["--declared", "2"], env={"X": "1"}).alive()

        def test_undeclared(vllm_server_factory):
            assert vllm_server_factory(args=["--undeclared"]).alive()
        """
    )
    result, report, servers = run(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=5)
    by_test = {s["nodeid"]: s for s in servers}
    spans = spans_of_tests(pytester)
    for name in ("test_declared", "test_declared_too"):
        declared = by_test[f"test_b.py::{name}"]
        # launched before its test began
        assert declared["started_ahead"], servers
        assert declared["launched_t"] < spans[f"test_b.py::{name}"][0], servers
    undeclared = by_test["test_b.py::test_undeclared"]
    assert not undeclared["started_ahead"] and undeclared["waited_s"] >= 2
    assert undeclared["not_started_ahead"] == (
        "not declared: no @pytest.mark.vllm_server_variant on test_b.py::test_undeclared has "
        "these settings"
    )
    assert not [s for s in servers if s.get("unused")]


@pytest.mark.slow
def test_servers_start_ahead_on_the_cores_the_tests_do_not_hold(pytester):
    """On one core nothing starts beside a running test's server except one ahead at a time: at no
    moment are two servers starting while a test runs; a server a test waits for counts."""
    suite(pytester, {"a": 2, "b": 2, "c": 2, "d": 0}, delay=2)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # the pytest run below inherits one core
    try:
        result, _, servers = run(pytester, "-p", "no:xdist")
    finally:
        os.sched_setaffinity(0, allowed)
    result.assert_outcomes(passed=8)
    spans = windows(servers)
    assert len(spans) == 4
    for launched, _ in spans:
        # the records give healthy_after_s to a tenth of a second
        starting = sum(1 for start, healthy in spans if start <= launched < healthy - 0.1)
        assert starting <= 1, spans
    # a's is started on demand; b's during a's tests (the later ones as soon as the one before is
    # up, so whether they are ahead depends on the CPU time the tests leave them)
    assert [s["started_ahead"] for s in servers][:2] == [False, True]
