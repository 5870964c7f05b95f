"""What the suites' server fixtures need from the run: the model to serve, the server pool, the
logs.

One `ServerProvider` per process, made on first use (runs without suites never import it).
The model is the tiny one built here (`--rocm-tiny-model-seed`, default 0), or real
weights on a GPU runner (`--rocm-model PATH`). Server logs go to the report folder
(`servers/`), else to pytest's temporary folder.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_rocm.hw.model import Platform
from pytest_rocm.serving.plan import Step, next_step, server_plan
from pytest_rocm.serving.pool import ServedModel, ServerPool
from pytest_rocm.serving.process import (
    LOG_SECTION,
    LOG_TAIL_LINES,
    ServerConfigError,
    interpreter_packages,
    is_installed,
)
from pytest_rocm.serving.tiny_models import (
    SPEC_FILE,
    ModelBuildError,
    TinyModelSpec,
    ensure_tiny_model,
    spec_problem,
)

TINY_MODEL_NAME = "tiny-llama"
# The tiny model's tokenizer has <tool_call> tokens and its chat template renders tools
# Hermes-style.
TINY_MODEL_VLLM_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
TINY_MODEL_SGLANG_ARGS = ("--tool-call-parser", "hermes")
# What creates the environment of a kind whose server runs in an interpreter of its own.
SETUP_COMMANDS = {"sglang": "bash scripts/setup-sglang-env.sh"}


def default_model_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-rocm" / "models"


@dataclass
class ServingSettings:
    """What the provider needs from the run: its options, where things go, and where to record a
    start."""

    config: pytest.Config
    session_id: str
    platform: Platform
    model_cache: Path | None  # --rocm-model-cache / ini rocm_model_cache, resolved
    server_config: Path | None  # --rocm-server-config / ini rocm_server_config, resolved
    report_dir: Path | None
    record_server: Callable[[dict], None]  # writes one record for the manifest
    # start the next module's server while this one's tests run (--rocm-no-start-ahead: never)
    start_ahead: bool = True
    # whether this process runs every collected test (no xdist, or one worker): only then is the
    # collection the order this process asks for servers in
    runs_everything: bool = True


class ServerProvider:
    def __init__(self, settings: ServingSettings):
        self.settings = settings
        self.config = settings.config
        self._model: ServedModel | None = None
        self._pool: ServerPool | None = None
        self._requester = ""  # the node whose fixture is starting a server now
        self._for_module = False
        self._plan: list[Step] | None = None  # the module servers of the run, in order
        # (module, kind) -> why its server was not started ahead: its record says so
        self.not_ahead: dict[tuple[str, str], str] = {}

    def model_cache(self) -> Path:
        configured = self.settings.model_cache
        from_environment = os.environ.get("PYTEST_ROCM_MODEL_CACHE")
        return configured or (Path(from_environment) if from_environment else default_model_cache())

    def served_model(self) -> ServedModel:
        if self._model is None:
            real = self.config.getoption("rocm_model")
            if real:
                self._model = ServedModel(
                    path=real,
                    name=self.config.getoption("rocm_model_name") or Path(real).name,
                    vllm_args=tuple(shlex.split(self.config.getoption("rocm_model_vllm_args"))),
                )
            else:
                seed = self.config.getoption("rocm_tiny_model_seed")
                try:
                    path = ensure_tiny_model(self.model_cache(), TinyModelSpec(seed=seed))
                except ModelBuildError as exc:
                    pytest.fail(str(exc), pytrace=False)
                self._model = ServedModel(
                    path=str(path),
                    name=TINY_MODEL_NAME,
                    vllm_args=TINY_MODEL_VLLM_ARGS,
                    sglang_args=TINY_MODEL_SGLANG_ARGS,
                )
        return self._model

    def tiny_model(self, **spec) -> ServedModel:
        """A tiny model of another architecture (TinyModelSpec fields: `architecture="mixtral"`,
        ...), built once per cache folder, with the run's weight seed unless `seed` is given."""
        problem = spec_problem(spec)
        if problem:
            pytest.fail(f"tiny model {spec}: {problem}", pytrace=False)
        spec = {"seed": self.config.getoption("rocm_tiny_model_seed"), **spec}
        try:
            path = ensure_tiny_model(self.model_cache(), TinyModelSpec(**spec))
        except ModelBuildError as exc:
            pytest.fail(f"tiny model {spec}: {exc}", pytrace=False)
        return ServedModel(path=str(path), name=f"tiny-{spec.get('architecture', 'llama')}")

    def pool(self, tmp_path_factory) -> ServerPool:
        if self._pool is None:
            config_path = self.settings.server_config
            if config_path is not None and not config_path.is_file():
                pytest.fail(
                    f"server configuration {config_path} does not exist (--rocm-server-config, relative "
                    "to where pytest was started, or ini rocm_server_config, relative to the ini file)",
                    pytrace=False,
                )
            log_dir = (
                self.settings.report_dir / "servers"
                if self.settings.report_dir
                else tmp_path_factory.getbasetemp() / "servers"
            )
            platform = self.settings.platform
            self._pool = ServerPool(
                session_id=self.settings.session_id,
                platform=platform,
                platform_keys=platform.keys(),
                config_path=config_path,
                log_dir=log_dir,
                on_start=self._record_start,
            )
        return self._pool

    def server(self, request, kind: str, args=(), env=None, model: ServedModel | None = None):
        """A running server of `kind` for the served model (skipped, saying why, where it is not
        installed), held until the scope of the fixture behind `request` ends."""
        pool = self.pool(request.getfixturevalue("tmp_path_factory"))
        try:
            python = pool.config(kind).python
        except ServerConfigError as exc:
            pytest.fail(str(exc), pytrace=False)
        if not is_installed(kind, python):
            if python:
                reason = (
                    f"{kind} is not installed for {python}, the interpreter the server configuration names for "
                    f"this platform (create that environment: "
                    f"{SETUP_COMMANDS.get(kind, 'see suites/servers.toml')})"
                )
            else:
                reason = (
                    f"{kind} is not installed in this environment (install the suites' extra: "
                    f"pip install -e .[{'suites' if kind == 'vllm' else 'sglang'}])"
                )
            pytest.skip(reason)
        model = model or self.served_model()
        self._requester = request.node.nodeid
        self._for_module = request.scope == "module"  # a module's server: the plan's, maybe ahead
        try:
            server = pool.get(kind, model, args, env)
        except ServerConfigError as exc:
            pytest.fail(str(exc), pytrace=False)
        request.addfinalizer(lambda: pool.release(server))
        if request.scope == "module":
            self._start_next(request, pool, kind)
        return server

    def _start_next(self, request, pool: ServerPool, kind: str) -> None:
        """Launch the server the next step of the plan asks for, while this module's tests run; or
        keep why not, for that server's record."""
        if self._plan is None:
            self._plan = server_plan(request.session.items)
        module = request.node.nodeid.split("::", 1)[0]
        current = next((s for s in self._plan if s.module == module and s.kind == kind), None)
        step = next_step(self._plan, module, kind)
        if current is None or step is None:
            return
        if not self.settings.start_ahead:
            self.not_ahead[(step.module, step.kind)] = "--rocm-no-start-ahead"
            return
        if not self.settings.runs_everything:
            self.not_ahead[(step.module, step.kind)] = (
                "this process runs only its share of the tests (xdist workers)"
            )
            return
        if current.measures_speed:
            self.not_ahead[(step.module, step.kind)] = f"{module} measures speed (perf_gate)"
            return
        settings = dict(step.settings)
        spec = settings.pop("tiny_model", None)
        try:
            python = pool.config(step.kind).python
            if not is_installed(step.kind, python):
                return  # its tests are skipped, saying why, when they run
            model = self.tiny_model(**spec) if spec is not None else self.served_model()
            why = pool.start_ahead(step.kind, model, **settings)
        except (Exception, pytest.fail.Exception) as exc:
            # the step's own fixture fails with this, naming it, on its tests
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if why:
            self.not_ahead[(step.module, step.kind)] = why

    def _record_start(self, server, error: str | None) -> None:
        """What the manifest says of each server: command, devices, log, start-up time, the model's
        identity."""
        spec_file = Path(server.model) / SPEC_FILE
        model_spec = json.loads(spec_file.read_text()) if spec_file.is_file() else None
        self.settings.record_server(
            {
                "kind": "server",
                "nodeid": self._requester,
                "server": server.kind,
                "model": server.model,
                "model_spec": model_spec,
                "command": server.command,
                "env": server.env,
                "devices": server.devices,
                "log": str(server.log_path),
                # A server in an environment of its own (SGLang on the CPU) records that
                # environment's stack.
                "packages": interpreter_packages(server.command[0])
                if server.command[0] != sys.executable
                else None,
                "healthy_after_s": None if error else round(server.started_s, 1),
                # what the test that asked for it waited: all of its start, or what was left of it
                "waited_s": round(server.waited_s, 1),
                "started_ahead": server.ahead,
                "not_started_ahead": self.not_ahead.get((self._requester, server.kind))
                if self._for_module and not server.ahead
                else None,
                "error": error,
            }
        )

    def record_unused(self) -> None:
        """A record for each server started ahead that no test asked for (stopped at the end)."""
        if self._pool is None:
            return
        for server in self._pool.ahead_unused:
            self.settings.record_server(
                {
                    "kind": "server",
                    "nodeid": "",
                    "server": server.kind,
                    "model": server.model,
                    "command": server.command,
                    "devices": server.devices,
                    "log": str(server.log_path),
                    "healthy_after_s": None,
                    "waited_s": 0.0,
                    "started_ahead": True,
                    "unused": True,
                    "error": None,
                }
            )

    def held_devices(self) -> set[int]:
        """The devices this process's servers hold (a test in the same process may use them too)."""
        return self._pool.held_devices() if self._pool is not None else set()

    def log_sections(self) -> list[tuple[str, str, str]]:
        """(title, log path, last lines) of every server this process started and has not stopped
        (one that died during the test too), for a failed test's report."""
        if self._pool is None:
            return []
        return [
            (
                f"{LOG_SECTION} ({server.kind} on port {server.port}, {'running' if server.alive() else 'stopped'}, "
                f"last {LOG_TAIL_LINES} lines)",
                str(server.log_path),
                server.log_tail(),
            )
            for server in self._pool.started()
        ]

    def diagnoses(self) -> list[str]:
        """What the logs of this process's servers name as the cause of a failure (a kernel the
        environment lacks), one line per server that has one."""
        if self._pool is None:
            return []
        return [
            f"{server.kind} server on port {server.port}: {problem}"
            for server in self._pool.started()
            if (problem := server.diagnosis())
        ]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self.record_unused()
