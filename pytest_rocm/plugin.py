"""pytest hooks only; each one calls into `pytest_rocm.session` (registered as the `rocm` plugin)."""

from __future__ import annotations

import argparse

import pytest

from pytest_rocm.markers import MARKER_HELP
from pytest_rocm.session import RocmRun
from pytest_rocm.summary import group_table, reason_lines

RUN = pytest.StashKey[RocmRun]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rocm", "pytest-rocm: ROCm gates, hardware pinning and reports")
    group.addoption("--rocm-platform", default=None, metavar="NAME|FILE",
                    help="simulate a platform: a built-in profile (cpu, mi300x-8, h100-8, ...) or a JSON file; "
                         "default: $PYTEST_ROCM_PLATFORM, else detect the real one")
    group.addoption("--rocm-report-dir", default=None, metavar="DIR",
                    help="write per-process records, gate-report.json and manifest.json here")
    group.addoption("--rocm-group-map", default=None, metavar="TOML",
                    help="map of test path patterns to groups for tests without rocm_gate (overrides the ini option)")
    parser.addini("rocm_report_dir", "default for --rocm-report-dir", default="")
    parser.addini("rocm_group_map", "TOML file mapping test path patterns to groups (relative to the ini file)",
                  default="")
    parser.addini("rocm_groups", "extra group names allowed besides the built-in ones", type="linelist", default=[])
    group.addoption("--rocm-reruns", type=int, default=None, metavar="N",
                    help="attempts after a failed blocking gate's first one (default 1; ini rocm_reruns)")
    group.addoption("--rocm-health-probe", default=None, metavar="CMD",
                    help="command run on the failed attempt's devices after an infrastructure-looking failure; "
                         "exit 0 means healthy (default: python -m pytest_rocm.probe; {python} is this Python)")
    group.addoption("--rocm-baselines", action="append", default=None, metavar="PATH",
                    help="baseline TOML file or folder for accuracy/performance gates (repeatable; ini rocm_baselines)")
    group.addoption("--rocm-propose-baselines", default=None, metavar="FILE",
                    help="write a proposed baseline entry for every measured metric (baseline files are never changed)")
    group.addoption("--rocm-golden", default=None, metavar="DIR",
                    help="compare golden outputs (token ids, top-k logprobs) with those recorded in DIR")
    group.addoption("--rocm-rerun-helper", default=None, help=argparse.SUPPRESS)  # set by the controller only
    group.addoption("--rocm-golden-record", default=None, metavar="DIR",
                    help="record golden outputs into DIR (on the reference platform) instead of comparing")
    parser.addini("rocm_baselines", "baseline TOML files or folders (relative to the ini file)", type="linelist",
                  default=[])
    parser.addini("rocm_golden_dir", "default for --rocm-golden (relative to the ini file)", default="")
    parser.addini("rocm_reruns", "default for --rocm-reruns", default="")
    parser.addini("rocm_health_probe", "default for --rocm-health-probe", default="")
    parser.addini("rocm_infra_signatures", "extra infrastructure signatures, `name=regex` per line; `!name` drops "
                  "a built-in one", type="linelist", default=[])
    group.addoption("--rocm-model", default=None, metavar="PATH",
                    help="serve these weights in the suites' servers (GPU runners); default: the tiny model built here")
    group.addoption("--rocm-model-name", default=None, metavar="NAME",
                    help="the served model name for --rocm-model (default: its folder name)")
    group.addoption("--rocm-model-vllm-args", default="", metavar="ARGS",
                    help="vLLM arguments that serving --rocm-model needs (e.g. '--tool-call-parser llama3_json')")
    group.addoption("--rocm-model-dir", default=None, metavar="DIR",
                    help="folder of real model weights by Hugging Face name, for the real-model accuracy configs "
                         "($PYTEST_ROCM_MODEL_DIR)")
    group.addoption("--rocm-model-cache", default=None, metavar="DIR",
                    help="where tiny models are built once (ini rocm_model_cache; $PYTEST_ROCM_MODEL_CACHE; "
                         "default ~/.cache/pytest-rocm/models)")
    group.addoption("--rocm-tiny-model-seed", type=int, default=0, metavar="N",
                    help="weight seed of the tiny model (golden outputs are recorded with 0)")
    group.addoption("--rocm-server-config", default=None, metavar="TOML",
                    help="server arguments and environment per platform (ini rocm_server_config)")
    parser.addini("rocm_model_cache", "default for --rocm-model-cache (relative to the ini file)", default="")
    parser.addini("rocm_server_config", "default for --rocm-server-config (relative to the ini file)", default="")
    parser.addini("rocm_timeouts", "per-group timeouts in seconds for gate tests, `group=seconds` per line "
                  "(and `default=seconds`), applied through pytest-timeout", type="linelist", default=[])


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKER_HELP.values():
        config.addinivalue_line("markers", text)
    config.stash[RUN] = RocmRun(config)
    config.pluginmanager.register(RecordingHooks(config.stash[RUN]), "rocm-recording")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if report.passed and report.result:
        error = collector.config.stash[RUN].check_collected(report.result)
        if error:
            report.outcome = "failed"
            report.longrepr = f"pytest-rocm: invalid marker arguments:\n{error}"
            report.result = []
    return report


class RecordingHooks:
    """Hooks that get no `config` argument, registered per config (as pytest's own LogXML is)."""

    def __init__(self, run: RocmRun):
        self.run = run

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.run.start(distributing=session.config.pluginmanager.has_plugin("dsession"))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.run.record_report(report)
        self.run.plan(report)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand each worker the platform detected here, so all processes agree."""
    run = node.config.stash[RUN]
    node.workerinput["rocm_platform"] = run.platform.to_dict()
    node.workerinput["rocm_session"] = run.session_id


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report, sched) -> None:
    """xdist controller: a worker died while running `crashitem`; `report.node` is that worker."""
    report.node.config.stash[RUN].record_crash(crashitem, report, sched)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings):
    """pytest-timeout's thread method exits the process: record the hang (with stacks) first."""
    if settings.method == "thread":
        return item.config.stash[RUN].start_hang_timer(item, settings)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    result = yield
    session.config.stash[RUN].run_queued_reruns(session)  # reruns no xdist worker could take, after the pass
    return result


@pytest.fixture
def accuracy_gate(request):
    """`accuracy_gate.check(metric, value)` against the platform's baseline."""
    return request.config.stash[RUN].accuracy_gate(request)


@pytest.fixture
def perf_gate(request):
    """`perf_gate.check(metric, samples)`: fails only when every sample is past the baseline's threshold."""
    return request.config.stash[RUN].perf_gate(request)


@pytest.fixture
def golden(request):
    """`golden.check(name, token_ids, logprobs)`: record, or compare with vLLM's check_logprobs_close rule."""
    return request.config.stash[RUN].golden(request)


@pytest.fixture
def gpus(request) -> list[int]:
    """Device indices for this test alone (its `hardware(gpus=N)`, else 1), exported to subprocesses."""
    return request.config.stash[RUN].allocate_gpus(request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if report.failed:
        item.config.stash[RUN].attach_server_logs(item, report)
    return report


@pytest.fixture(scope="session")
def served_model(request):
    """The model the suites serve: `.path`, `.name` (the served model name), `.vllm_args`."""
    return request.config.stash[RUN].serving.served_model()


@pytest.fixture
def vllm_server_factory(request):
    """`vllm_server_factory(args=[...], env={...}, model=None)`: a running vLLM server with these extra settings
    (and another model than `served_model`, given as a `pytest_rocm.server_pool.ServedModel`) for this test;
    shared with any other fixture that asks for the same ones while it runs."""
    serving = request.config.stash[RUN].serving
    return lambda args=(), env=None, model=None: serving.server(request, "vllm", args, env, model)


@pytest.fixture(scope="module")
def vllm_server(request):
    """The real vLLM OpenAI-compatible server for this module (its `vllm_server` marker adds arguments);
    held for the module, so servers that tests start beside it never stop it."""
    marker = request.node.get_closest_marker("vllm_server")
    return request.config.stash[RUN].serving.server(request, "vllm", **(marker.kwargs if marker else {}))


@pytest.fixture(scope="module")
def sglang_server(request):
    """The real SGLang server for this module; skipped, saying why, where SGLang is not installed."""
    serving = request.config.stash[RUN].serving
    marker = request.node.get_closest_marker("sglang_server")
    return serving.server(request, "sglang", **(marker.kwargs if marker else {}))


def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[RUN].finish()


def pytest_unconfigure(config: pytest.Config) -> None:
    hooks = config.pluginmanager.get_plugin("rocm-recording")
    if hooks is not None:
        config.pluginmanager.unregister(hooks)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    run = config.stash[RUN]
    report = run.gate_report
    if report is None:
        return
    platform = run.platform
    terminalreporter.write_sep("=", f"pytest-rocm on {platform.profile or 'this runner'}: {platform.describe()}")
    for line in group_table(report["groups"]):
        terminalreporter.write_line(line)
    if report["skip_reasons"]:
        terminalreporter.write_line("")
        terminalreporter.write_line("tests that did not run, by reason:")
        for line in reason_lines(report["skip_reasons"]):
            terminalreporter.write_line(line)
    for problem in report["record_problems"]:
        terminalreporter.write_line(f"record problem: {problem}", yellow=True)
    for note in run.notes:
        terminalreporter.write_line(f"pytest-rocm: {note}", yellow=True)
    terminalreporter.write_line("")
    color = {"success": "green", "failure": "red"}.get(report["conclusion"], "yellow")
    terminalreporter.write_line(f"conclusion: {report['conclusion']} ({report['conclusion_reason']})",
                                **{color: True, "bold": True})
    terminalreporter.write_line("reports: " + ", ".join(str(p) for p in run.report_paths))
