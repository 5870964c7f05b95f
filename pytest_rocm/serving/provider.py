"""What the suites' server fixtures need from the run: the model to serve, the server pool, the
logs.

One `ServerProvider` per process, made on first use (runs without suites never import it).
The model is the tiny one built here (`--rocm-tiny-model-seed`, default 0), or real
weights on a GPU runner (`--rocm-model PATH`). Server logs go to the report folder
(`servers/`), else to pytest's temporary folder. On the first request it reads the run's server
plan and, where servers may start ahead, starts the thread that does it (`serving/ahead.py`); each
request says which step of the plan it is, so what comes after it is what comes next.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pytest_rocm.hw.model import Platform
from pytest_rocm.serving.ahead import AheadStarter
from pytest_rocm.serving.plan import Step, server_plan
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
MIN_WAIT_S = 0.05  # a wait for a server shorter than this is not counted (the server was up)


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
    # nodeid -> its group (the plan keeps starts away from the performance group's tests)
    group_of: Callable[[str], str | None] = lambda nodeid: None
    # item -> whether it will be skipped before it runs (it then asks for no server)
    will_skip: Callable[[Any], bool] = lambda item: False  # internals.will_skip, on a pytest.Item
    # nodeid -> seconds its current phase waited for servers (the recorder writes it, `server_wait_s`)
    server_waits: dict[str, float] = field(default_factory=dict)


class ServerProvider:
    def __init__(self, settings: ServingSettings):
        self.settings = settings
        self.config = settings.config
        self._model: ServedModel | None = None
        self._pool: ServerPool | None = None
        self._requester = ""  # the node whose fixture is starting a server now
        self._not_ahead: str | None = None  # why the server being started now was not ahead
        self._plan: list[Step] | None = None  # the servers the run asks for, in order
        self._ahead: AheadStarter | None = None
        # SIGTERM's handler before this process started servers (`pool`), put back at `close`
        self._sigterm: list = []

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
        return self._tiny_model(spec, build=True)

    def _tiny_model(self, spec: dict, build: bool) -> ServedModel:
        """The tiny model of `spec`; built first only with `build` (the plan needs only its
        folder)."""
        problem = spec_problem(spec)
        if problem:
            pytest.fail(f"tiny model {spec}: {problem}", pytrace=False)
        spec = {"seed": self.config.getoption("rocm_tiny_model_seed"), **spec}
        name = f"tiny-{spec.get('architecture', 'llama')}"
        if not build:
            return ServedModel(
                path=str(self.model_cache() / TinyModelSpec(**spec).folder_name()), name=name
            )
        try:
            path = ensure_tiny_model(self.model_cache(), TinyModelSpec(**spec))
        except ModelBuildError as exc:
            pytest.fail(f"tiny model {spec}: {exc}", pytrace=False)
        return ServedModel(path=str(path), name=name)

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
            # A job's cancel or a pod's deletion (SIGTERM) ends the run as Ctrl-C does, through
            # every teardown: its servers stopped, the report saying interrupted. Uncaught, it
            # left them running and the report unwritten. Only the main thread may set it.
            if threading.current_thread() is threading.main_thread():
                self._sigterm.append(signal.signal(signal.SIGTERM, _interrupt))
            self._pool = ServerPool(
                session_id=self.settings.session_id,
                platform=platform,
                platform_keys=platform.keys(),
                config_path=config_path,
                log_dir=log_dir,
                on_start=self._record_start,
            )
        return self._pool

    def server(
        self,
        request,
        kind: str,
        args=(),
        env=None,
        model: ServedModel | None = None,
        test: str | None = None,
    ):
        """A running server of `kind` for the served model (skipped, saying why, where it is not
        installed), held until the scope of the fixture behind `request` ends. `test`: the node id
        of the test being set up or run (its record counts the seconds it waited)."""
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
        args, env = list(args), dict(env or {})
        step = self._step_for(request, pool, kind, model, args, env)
        self._requester = request.node.nodeid
        self._not_ahead = self._why_not_ahead(request, step, kind)
        tested = test or request.node.nodeid
        began = time.monotonic()
        # once the request counts in the pool: what comes after this step is what comes next
        asked = partial(self._ahead.at, step) if step is not None else None
        try:
            server = pool.get(kind, model, args, env, asked)
        finally:
            self._add_wait(tested, time.monotonic() - began)
        request.addfinalizer(lambda: pool.release(server))
        if step is not None and self._plan[step].measures_speed:
            # nothing may be starting while this server's speed is measured
            self._ahead.hold_quiet()
            request.addfinalizer(self._ahead.let_go)
        return server

    def _add_wait(self, nodeid: str, seconds: float) -> None:
        """Count what a test waited for a server into its record (the duration store keeps it
        apart from the test's own time); a server already up costs nothing worth counting."""
        if seconds >= MIN_WAIT_S:
            waits = self.settings.server_waits
            waits[nodeid] = round(waits.get(nodeid, 0.0) + seconds, 3)

    def _step_for(self, request, pool, kind, model, args, env) -> int | None:
        """The plan's step this request is (the plan and the start-ahead thread are made on the
        first request); None where nothing starts ahead, or for a request no step declares."""
        if self._plan is None:
            self._plan = []
            if self.settings.start_ahead and self.settings.runs_everything:
                self._plan = server_plan(
                    request.session.items, self.settings.will_skip, self.settings.group_of
                )
                self._ahead = AheadStarter(pool, self._plan, self._settings_of)
        if self._ahead is None:
            return None
        if request.scope == "module":
            module = request.node.nodeid
            return next(
                (
                    i
                    for i, s in enumerate(self._plan)
                    if s.owner == module and s.kind == kind and not s.variant
                ),
                None,
            )
        wanted = pool.key(kind, model, args, env)
        for index, step in enumerate(self._plan):
            if step.variant and step.owner == request.node.nodeid and step.kind == kind:
                if self._ahead.key(index) == wanted:
                    return index
        return None

    def _settings_of(self, step: Step, build: bool = True) -> tuple[ServedModel, list, dict]:
        """(model, args, env) of a step, as its fixture or factory call asks for them; a tiny
        model is built first only with `build`."""
        settings = dict(step.settings)
        spec = settings.pop("tiny_model", None)
        if not is_installed(step.kind, self._pool.config(step.kind).python):
            raise ServerConfigError(f"{step.kind} is not installed: its tests are skipped")
        model = self._tiny_model(spec, build) if spec is not None else self.served_model()
        return model, list(settings.get("args", ())), dict(settings.get("env") or {})

    def _why_not_ahead(self, request, step: int | None, kind: str) -> str | None:
        """What the record of a server started on demand says about starting it ahead."""
        if not self.settings.start_ahead:
            return "--rocm-no-start-ahead"
        if not self.settings.runs_everything:
            return "this process runs only its share of the tests (xdist workers)"
        if step is None:
            if request.scope == "module":
                return None
            return (
                f"not declared: no @pytest.mark.{kind}_server_variant on {request.node.nodeid} "
                "has these settings"
            )
        return self._ahead.why_not.get(step) or self._ahead.failure

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
                "launched_t": round(server.launched_t, 3),
                "healthy_after_s": None if error else round(server.started_s, 1),
                "start_cpu_s": None
                if error or server.start_cpu_s is None
                else round(server.start_cpu_s, 1),
                # what the test that asked for it waited: all of its start, or what was left of it
                "waited_s": round(server.waited_s, 1),
                "started_ahead": server.ahead,
                "not_started_ahead": None if server.ahead else self._not_ahead,
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
                    "launched_t": round(server.launched_t, 3),
                    "healthy_after_s": None
                    if server.ready_at is None
                    else round(server.ready_at - server.launched_at, 1),
                    "start_cpu_s": None
                    if server.start_cpu_s is None
                    else round(server.start_cpu_s, 1),
                    "waited_s": 0.0,
                    "started_ahead": True,
                    "unused": True,
                    "error": server.lost,
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
        try:
            if self._ahead is not None:
                self._ahead.close()
        finally:  # a second Ctrl-C while the thread ends: the servers are stopped all the same
            if self._pool is not None:
                self._pool.close()
                self.record_unused()
            if self._sigterm:
                # None: one set outside Python, which cannot be put back; the default then
                signal.signal(signal.SIGTERM, self._sigterm.pop() or signal.SIG_DFL)

    def kill_servers(self) -> None:
        """Every server of this process killed at once: the process is about to end without its
        teardowns (a hang's timer exits it)."""
        if self._pool is not None:
            self._pool.kill()


def _interrupt(signal_number, frame):
    raise KeyboardInterrupt(f"pytest-rocm: {signal.Signals(signal_number).name} (a cancelled job)")
