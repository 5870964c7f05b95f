"""Servers started ahead of need, through pytester as a suite runs them: the plan read from the
collected items, the next module's server launched while the current module's tests run, the
waiting that saves in the records, and the cases where nothing is started ahead.

The servers are a stub behind a server configuration whose `python` is a small interpreter stand-in:
it answers the plugin's "is vLLM installed" probe with the real interpreter and serves /health on the
port it is given after STUB_DELAY seconds (no vLLM, seconds per test).
"""

import json
import stat
import sys

import pytest
from conftest import STUB_HEALTH_SERVER, processes_with, read_report

from pytest_rocm.serving.plan import next_step, server_plan

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
    # b's server started during a's 4 s of tests, c's during b's: only the first start is waited for
    for ahead in (second, third):
        assert ahead["started_ahead"] and ahead["healthy_after_s"] >= 3
        assert ahead["waited_s"] < 1, servers
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
    assert [s["not_started_ahead"] for s in servers] == [None, "--rocm-no-start-ahead"]
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
    assert unused["started_ahead"] and unused["healthy_after_s"] is None
    port = unused["command"][unused["command"].index("--port") + 1]
    assert not processes_with(f"--port\0{port}\0"), "the unused server outlived the run"
    assert report["conclusion"] == "success"


def test_the_plan_follows_the_run_order_a_framework_parameter_and_says_who_measures_speed(pytester):
    """The suites' API module runs its tests once per framework (a module-scoped `framework`
    parameter whose `server` fixture picks the server at run time): one step per framework, in
    pytest's order; a module with perf_gate is marked so nothing starts beside it."""
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
        test_perf="def test_speed(vllm_server, perf_gate): pass\ndef test_other(vllm_server): pass\n",
        test_plain="def test_nothing(): pass\n",
        test_tiny=(
            "import pytest\n"
            "pytestmark = pytest.mark.vllm_server(tiny_model={'architecture': 'mixtral'})\n"
            "def test_moe(vllm_server): pass\n"
        ),
    )
    items, _ = pytester.inline_genitems("--rocm-platform=cpu", "-p", "no:xdist")
    plan = server_plan(items)
    assert [(s.module, s.kind, s.measures_speed) for s in plan] == [
        ("test_api.py", "vllm", False),
        ("test_api.py", "sglang", False),
        ("test_perf.py", "vllm", True),
        ("test_tiny.py", "vllm", False),
    ]
    assert plan[-1].settings == {"tiny_model": {"architecture": "mixtral"}}
    assert next_step(plan, "test_api.py", "sglang") is plan[2]
    assert next_step(plan, "test_tiny.py", "vllm") is None


@pytest.mark.slow
def test_nothing_starts_beside_a_module_that_measures_speed(pytester):
    suite(pytester, {"b": 0})
    pytester.makepyfile(
        test_a="""
        import pytest

        pytestmark = pytest.mark.rocm_gate(group="performance")

        def test_speed(vllm_server, perf_gate):
            assert vllm_server.alive()
        """
    )
    result, _, servers = run(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=3)
    by_module = {s["nodeid"]: s for s in servers}
    assert not by_module["test_b.py"]["started_ahead"]
    assert by_module["test_b.py"]["not_started_ahead"] == "test_a.py measures speed (perf_gate)"
