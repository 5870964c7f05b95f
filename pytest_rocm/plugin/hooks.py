"""The pytest hooks (entry point `rocm`): each is a line or two that calls the object whose job it
is.

Installed, the plugin is inert until a run asks for it (`activation`): a
`--rocm-*` option, a `rocm_*` ini setting, or a collected test with one of its
markers. At configure time each process gets the roles that apply to it: the one that
runs tests records (`Recorder`, fixtures); the one that sees every report
controls (`Controller`: reruns, crashes, the report). Without xdist one process
has both; under xdist the controller and its workers are different processes.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Sequence
from typing import Any

import pytest

from pytest_rocm.plugin import activation, default_branch, fresh, internals, rules
from pytest_rocm.plugin.collection import Annotator, junit_platform_properties
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.plugin.controller import Controller
from pytest_rocm.plugin.fixtures import (  # noqa: F401
    SERVICES,
    FixtureServices,
    accuracy_gate,
    golden,
    gpus,
    perf_gate,
    served_model,
    sglang_server,
    sglang_server_factory,
    tiny_model,
    vllm_server,
    vllm_server_factory,
)
from pytest_rocm.plugin.markers import MARKER_HELP
from pytest_rocm.plugin.options import add_options
from pytest_rocm.plugin.poisoned import PoisonedProcess
from pytest_rocm.plugin.recording import Recorder
from pytest_rocm.results.conclusion import INTERRUPTED
from pytest_rocm.results.reruns import SERVERS_PROPERTY
from pytest_rocm.results.summary import platform_title, terminal_lines

ANNOTATOR = pytest.StashKey[Annotator]()
# the key of a worker's `workeroutput` that says what a full disk cost its records
DISK_FULL_OUTPUT = "rocm_report_dir_full"
CONTROLLER = pytest.StashKey[Controller]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    activation.remember_options(parser)


# first, before any plugin's pytest_configure reads an option (cacheprovider's --lf, xdist's
# --collect-only, the session's -k and --deselect): under --rocm-rules, what the run compares,
# records and selects becomes the default branch's
@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    try:
        default_branch.applied(config)
    except rules.RulesError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKER_HELP.values():
        config.addinivalue_line("markers", text)
    context = RunContext(config)
    annotator = config.stash[ANNOTATOR] = Annotator(context)
    recorder = recording = None
    if not internals.is_controller(config):  # this process runs tests
        recorder = Recorder(context, annotator)
        services = config.stash[SERVICES] = FixtureServices(context, recorder)
        recording = RecordingHooks(recorder, services)
        config.pluginmanager.register(recording, "rocm-recording")
        if context.rerun_helper:  # its reports are replayed in the run's own process
            config.pluginmanager.register(fresh.ReportRelay(context), "rocm-report-relay")
    if not context.is_worker:  # this process sees every report
        controller = config.stash[CONTROLLER] = Controller(context, recorder)
        config.pluginmanager.register(ControllerHooks(controller), "rocm-controller")
        if recording is not None:  # no xdist: the recording hook passes each report on
            recording.controller = controller
        else:  # the xdist controller: its workers' reports
            config.pluginmanager.register(WorkerReportHooks(controller), "rocm-worker-reports")


def pytest_unconfigure(config: pytest.Config) -> None:
    for name in (
        "rocm-recording",
        "rocm-controller",
        "rocm-worker-reports",
        "rocm-poisoned",
        "rocm-report-relay",
    ):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.passed and report.result:
        annotator = collector.config.stash[ANNOTATOR]
        error = annotator.check_collected(report.result)
        if error:
            report.outcome = "failed"
            report.longrepr = f"pytest-rocm: invalid marker arguments:\n{error}"
            annotator.forget(report.result)  # a collection error, not tests the run dropped
            report.result = []
    return report


class RecordingHooks:
    """Hooks of the process that runs tests (registered per config, as pytest's own LogXML is).
    Where that process also sees every report (no xdist), it hands each report to the controller
    too: one hook call per phase, not two."""

    def __init__(self, recorder: Recorder, services: FixtureServices) -> None:
        self.recorder = recorder
        self.services = services
        self.controller: Controller | None = None  # where this process also sees every report
        self.session: pytest.Session | None = None
        self._items: dict[str, pytest.Item] | None = None  # nodeid -> item, once a test fails

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a whole module skipped as it was collected (pytest.importorskip)
            self.recorder.note_collection_skip(report)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.recorder.note_deselected(items)

    # before xdist tells the controller this worker's collection ended
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session = session
        self.recorder.record_collection(session.items)
        self.recorder.write_gpu_demands(session.items)

    # first: the servers' logs and the device fault join a failed report before any other plugin
    # (JUnit, the terminal, xdist's sending it to the controller) reads it
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if fresh.is_replayed(report):  # a fresh process's, recorded there
            return
        if report.outcome == "failed":
            self.attach_server_logs(report)
        if report.when == "call" and report.nodeid in self.recorder.servers:
            used = self.recorder.servers[report.nodeid]
            report.user_properties.append((SERVERS_PROPERTY, "; ".join(used)))
        poisoned = self.recorder.poisoned
        self.recorder.record_report(report)
        if poisoned is None and self.recorder.poisoned is not None:
            # this report's device fault poisoned the process: it runs no test after this one
            self.recorder.context.config.pluginmanager.register(
                PoisonedProcess(self.recorder), "rocm-poisoned"
            )
        if self.controller is not None:
            self.controller.on_report(report)

    # first: pytest's own call runs the test, and a failure ends the hook there
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        """The servers the test was given, kept for its call report (the controller reruns a
        failure that used one on a fresh server: results/reruns.py) and its record (`servers`).
        Read here, while the fixtures are set up: pytest-rerunfailures reports after teardown."""
        if sys.modules.get("pytest_rocm.serving.process") is None:  # no server in this process
            return
        used = self.services.servers_used(item)
        if used:
            self.recorder.servers[item.nodeid] = used
        else:
            self.recorder.servers.pop(item.nodeid, None)

    def _item(self, nodeid: str) -> pytest.Item | None:
        if self._items is None:
            self._items = {item.nodeid: item for item in self.session.items} if self.session else {}
        return self._items.get(nodeid)

    def attach_server_logs(self, report: pytest.TestReport) -> None:
        """The logs of the servers running here, in a failed report (here rather than in a
        `pytest_runtest_makereport` wrapper, which would cost every phase of every test a call)."""
        item = self._item(report.nodeid)
        if item is not None:
            self.services.attach_server_logs(item, report)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """pytest-timeout's thread method exits the process: record the hang (with stacks) and
        kill the servers first."""
        return (
            self.recorder.start_hang_timer(item, settings, self.services.kill_servers)
            if settings.method == "thread"
            else None
        )

    @pytest.hookimpl(tryfirst=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_first(self, session: pytest.Session) -> None:
        # first (pytest reads only pytest_-named methods, hence the specname): the servers' last
        # records (one started ahead that no test used) and the phases of a test the session
        # stopped in (a plain test's phases wait in memory for its teardown) reach the report
        session.config.stash[SERVICES].close()
        self.recorder.write_unwritten()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.recorder.close()
        # an xdist worker whose records met a full disk tells the controller (xdist sends
        # `workeroutput` after every sessionfinish hook): its report names it
        full = self.recorder.disk_full()
        if full is not None and hasattr(session.config, "workeroutput"):
            session.config.workeroutput[DISK_FULL_OUTPUT] = full


class WorkerReportHooks:
    """The xdist controller's view of its workers' reports (a process that runs tests passes them
    on from `RecordingHooks`)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not fresh.is_replayed(report):
            self.controller.on_report(report)


class ControllerHooks:
    """Hooks of the process that sees every report."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.controller.start()
        if self.controller.context.activation.asked:
            junit_platform_properties(session.config, self.controller.context.platform)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.controller.on_collect_report(report)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C, or `pytest.exit()` (pytest calls this hook for both): an exit with returncode 0
        left the session's status 0, and the test it stopped in read as crashed; an interrupted run
        says so first (results/conclusion.py: interruption), never a conclusion of its own."""
        if isinstance(excinfo.value, pytest.exit.Exception):
            self.controller.exited = f"pytest.exit() was called: {excinfo.value.msg}"
        else:
            self.controller.exited = f"{INTERRUPTED}: Ctrl-C ({type(excinfo.value).__name__})"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.controller.on_collected(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self.controller.on_collected(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return self.controller.make_scheduler(log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Hand each xdist worker the run's id and, in a run that asked, the platform detected here,
        so all processes agree (an unasked run detects nothing here; a worker whose marked tests
        need it detects it)."""
        context = self.controller.context
        if context.activation.asked:
            node.workerinput["rocm_platform"] = context.platform.to_dict()
        node.workerinput["rocm_session"] = context.session_id

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker ended: what a full disk cost its records, where it says."""
        full = (getattr(node, "workeroutput", None) or {}).get(DISK_FULL_OUTPUT)
        if full:
            self.controller.disk_full.append(str(full))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running `crashitem`; `report.node` is that worker."""
        self.controller.on_crash(crashitem, report)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        self.controller.run_queued_reruns(session)  # reruns no worker could take, after the pass
        context = self.controller.context
        # before pytest writes the JUnit file
        if context.activation.marked and not context.activation.asked:
            junit_platform_properties(session.config, context.platform)
        return result

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.controller.finish(session, exitstatus)

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        """Under `--rocm-rules`, each setting of this run the default branch's overrides, first
        thing (and again at the end): a maintainer's own terminal says what the check says."""
        return self._override_warnings() or None

    def _override_warnings(self) -> list[str]:
        context = self.controller.context
        if not context.activation.asked:
            return []
        return default_branch.override_warnings(context.config, context.settings.rules)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        controller = self.controller
        config = terminalreporter.config
        if not controller.context.activation.active:
            return
        for line in self._override_warnings():
            terminalreporter.write_line(line, yellow=True)
        # nothing ran: show the sorting
        if config.option.collectonly and controller.collected is not None:
            from pytest_rocm.catalog.tree import sort_tree, tree_lines  # only a listing sorts

            entries = config.stash[ANNOTATOR].tree_entries(controller.collected)
            failed = frozenset(
                nodeid for nodeid in controller.collection_errors if nodeid.endswith(".py")
            )
            terminalreporter.write_sep("=", "pytest-rocm: how the collected tests sort into groups")
            report = sort_tree(entries, controller.context.group_map, uncollected=failed)
            for line in tree_lines(report, map_details=False):
                terminalreporter.write_line(line)
            return
        if controller.gate_report is None:
            return
        terminalreporter.write_sep("=", platform_title(controller.gate_report))
        colors = {"success": "green", "failure": "red", "incomplete": "red"}
        for line, kind in terminal_lines(controller.gate_report):
            style = (
                {"bold": True, colors.get(controller.gate_report["conclusion"], "yellow"): True}
                if kind == "conclusion"
                else ({"yellow": True} if kind == "problem" else {})
            )
            terminalreporter.write_line(line, **style)
        terminalreporter.write_line(
            "reports: " + ", ".join(str(p) for p in controller.report_paths)
        )
