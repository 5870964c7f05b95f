"""The fixtures users write: `gpus`, `accuracy_gate`, `perf_gate`, `golden`, and the server
fixtures.

Each fixture gets what it needs from `FixtureServices` (one per process that
runs tests): the run's context for settings and platform, and the recorder for
the devices and measurements that go into the records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_rocm.gates.checks import AccuracyGate, GateContext, PerfGate
    from pytest_rocm.gates.golden import GoldenGate
    from pytest_rocm.serving.pool import ServedModel
    from pytest_rocm.serving.provider import ServerProvider

from pytest_rocm.plugin import internals
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.plugin.recording import Recorder

SERVICES = pytest.StashKey["FixtureServices"]()


class FixtureServices:
    def __init__(self, context: RunContext, recorder: Recorder) -> None:
        self.context = context
        self.recorder = recorder
        self._provider: ServerProvider | None = (
            None  # pytest_rocm.serving.provider.ServerProvider, made when a test first asks for a server
        )

    # -- devices -----------------------------------------------------------------------------------
    def allocate_gpus(self, request: pytest.FixtureRequest) -> list[int]:
        """Exclusive devices for this test, visible to its subprocesses. Devices the run's servers
        hold are shared with the test (a server and the test that talks to it run on the same
        GPUs)."""
        from pytest_rocm.hw import allocation

        item = request.node
        spec = self.recorder.annotator.specs.get(item.nodeid)
        platform = self.context.platform
        wanted = spec.hardware.gpus if spec and spec.hardware else (1 if platform.gpus else 0)
        pool = [
            gpu.index
            for gpu in platform.gpus
            if spec is None or spec.hardware is None or spec.hardware.accepts(gpu)
        ]
        held_by_servers: set[int] = (
            self._provider.held_devices() if self._provider is not None else set()
        )
        try:
            got = allocation.allocate(
                self.context.session_id,
                pool,
                wanted,
                platform.vendor,
                allocation.read_avoid(self.context.session_id, item.nodeid),
                held_here=held_by_servers,
            )
        except allocation.AllocationTimeout as exc:
            pytest.fail(f"gpus: {exc}", pytrace=False)
        saved = {name: os.environ.get(name) for name in got.env}
        os.environ.update(got.env)

        def release() -> None:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            got.release()

        request.addfinalizer(release)
        self.recorder.allocations[item.nodeid] = got.devices
        self.recorder.gpu_waits[item.nodeid] = round(got.waited_s, 6)
        item.user_properties[:] = [p for p in item.user_properties if p[0] != "rocm_gpus"]
        item.user_properties.append(("rocm_gpus", ",".join(map(str, got.devices))))
        return got.devices

    # -- gates ----------------------------------------------------------------------------------------
    def gate_context(self, request: pytest.FixtureRequest) -> GateContext:
        from pytest_rocm.gates import baselines as baselines_mod
        from pytest_rocm.gates.checks import GateContext

        nodeid = request.node.nodeid
        measurements = self.recorder.measurements.setdefault(nodeid, [])
        files = [str(p) for p in baselines_mod.expand(self.context.settings.baseline_files)]
        return GateContext(
            nodeid, self.context.platform.keys(), self.context.baselines, files, measurements
        )

    def golden(self, request: pytest.FixtureRequest) -> GoldenGate:
        from pytest_rocm.gates.golden import GoldenGate

        paths = self.context.settings.paths
        record = self.context.config.getoption("rocm_golden_record")
        return GoldenGate(
            self.gate_context(request),
            paths.setting("rocm_golden", "rocm_golden_dir"),
            paths.from_command_line(record) if record else None,
            self.context.platform.describe(),
        )

    # -- servers -------------------------------------------------------------------------------------
    @property
    def provider(self) -> ServerProvider:
        if self._provider is None:
            from pytest_rocm.serving.provider import ServerProvider, ServingSettings

            paths = self.context.settings.paths
            self._provider = ServerProvider(
                ServingSettings(
                    config=self.context.config,
                    session_id=self.context.session_id,
                    platform=self.context.platform,
                    model_cache=paths.setting("rocm_model_cache", "rocm_model_cache"),
                    server_config=paths.setting("rocm_server_config", "rocm_server_config"),
                    report_dir=self.context.settings.report_dir,
                    record_server=self.recorder.write,
                    start_ahead=not self.context.config.getoption("rocm_no_start_ahead"),
                    runs_everything=internals.runs_every_test(self.context.config),
                    group_of=self._group_of,
                    will_skip=internals.will_skip,
                    server_waits=self.recorder.server_waits,
                )
            )
        return self._provider

    def _group_of(self, nodeid: str) -> str | None:
        spec = self.recorder.annotator.specs.get(nodeid)
        return spec.group if spec else None

    def attach_server_logs(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A failed test's report carries the last lines of every server running here (they reach
        the records as `log_tail`, where infrastructure signatures are looked for); the test's JUnit
        properties name the logs (pytest writes the properties of the teardown report, the
        item's)."""
        if self._provider is None:
            return
        for title, path, text in self._provider.log_sections():
            report.sections.append((title, text))
            if ("rocm_server_log", path) not in item.user_properties:
                item.user_properties.append(("rocm_server_log", path))
        diagnoses = self._provider.diagnoses()
        # first in the failure's text: the cause the log names, before the client's error
        if diagnoses:
            report.longrepr = (
                "\n".join(f"pytest-rocm: {d}" for d in diagnoses) + "\n\n" + report.longreprtext
            )

    @staticmethod
    def servers_used(item: pytest.Item) -> list[str]:
        """The servers a test was given (a fixture's value that is a server, or holds one as its
        `server`), named by `Server.identity`; [] in a process that made none (no cost there)."""
        from pytest_rocm.serving.process import Server

        if not Server.made:
            return []
        used: dict[str, None] = {}  # in the order the fixtures gave them, each once
        for value in (getattr(item, "funcargs", None) or {}).values():
            server = value if isinstance(value, Server) else getattr(value, "server", None)
            if isinstance(server, Server):
                used[server.identity()] = None
        return list(used)

    def close(self) -> None:
        if self._provider is not None:
            self._provider.close()

    def kill_servers(self) -> None:
        if self._provider is not None:
            self._provider.kill_servers()


def services(request: pytest.FixtureRequest) -> FixtureServices:
    found = request.config.stash.get(SERVICES, None)
    if found is None:
        pytest.fail(
            "pytest-rocm fixtures need the plugin's recording process (not the xdist controller)",
            pytrace=False,
        )
    return found


@pytest.fixture
def accuracy_gate(request: pytest.FixtureRequest) -> AccuracyGate:
    """`accuracy_gate.check(metric, value)` against the platform's baseline."""
    from pytest_rocm.gates.checks import AccuracyGate

    return AccuracyGate(services(request).gate_context(request))


@pytest.fixture
def perf_gate(request: pytest.FixtureRequest) -> PerfGate:
    """`perf_gate.check(metric, samples)`: fails only when every sample is past the baseline's
    threshold."""
    from pytest_rocm.gates.checks import PerfGate

    return PerfGate(services(request).gate_context(request))


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenGate:
    """`golden.check(name, token_ids, logprobs)`: record, or compare with vLLM's
    check_logprobs_close rule."""
    return services(request).golden(request)


@pytest.fixture
def gpus(request: pytest.FixtureRequest) -> list[int]:
    """Device indices for this test alone (its `hardware(gpus=N)`, else 1), exported to
    subprocesses."""
    return services(request).allocate_gpus(request)


@pytest.fixture(scope="session")
def served_model(request: pytest.FixtureRequest) -> ServedModel:
    """The model the suites serve: `.path`, `.name` (the served model name), `.vllm_args`."""
    return services(request).provider.served_model()


@pytest.fixture(scope="session")
def tiny_model(request: pytest.FixtureRequest) -> Callable[..., ServedModel]:
    """`tiny_model(architecture="mixtral", num_local_experts=8, ...)`: a tiny model of another
    architecture (fields of `pytest_rocm.serving.tiny_models.TinyModelSpec`), built at test time
    like the default one; serve it with `vllm_server_factory(model=...)`."""
    return services(request).provider.tiny_model


@pytest.fixture
def vllm_server_factory(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """`vllm_server_factory(args=[...], env={...}, model=None)`: a running vLLM server with these
    extra settings (and another model than `served_model`, given as a
    `pytest_rocm.serving.pool.ServedModel`) for this test; shared with any other fixture that asks
    for the same ones while it runs."""
    provider = services(request).provider
    return lambda args=(), env=None, model=None: provider.server(
        request, "vllm", args, env, model, internals.requesting_test(request)
    )


@pytest.fixture
def sglang_server_factory(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """`sglang_server_factory(args=[...], env={...}, model=None)`: as `vllm_server_factory`, for
    SGLang."""
    provider = services(request).provider
    return lambda args=(), env=None, model=None: provider.server(
        request, "sglang", args, env, model, internals.requesting_test(request)
    )


@pytest.fixture(scope="module")
def vllm_server(request: pytest.FixtureRequest) -> Any:
    """The real vLLM OpenAI-compatible server for this module (its `vllm_server` marker adds
    arguments, or names a tiny model of another architecture); held for the module, so servers that
    tests start beside it never stop it."""
    return _module_server(request, "vllm")


@pytest.fixture(scope="module")
def sglang_server(request: pytest.FixtureRequest) -> Any:
    """The real SGLang server for this module; skipped, saying why, where SGLang is not
    installed."""
    return _module_server(request, "sglang")


def _module_server(request: pytest.FixtureRequest, kind: str) -> Any:
    provider = services(request).provider
    marker = request.node.get_closest_marker(f"{kind}_server")
    settings = dict(marker.kwargs) if marker else {}
    spec = settings.pop("tiny_model", None)
    model = provider.tiny_model(**spec) if spec is not None else None
    return provider.server(
        request, kind, model=model, test=internals.requesting_test(request), **settings
    )
