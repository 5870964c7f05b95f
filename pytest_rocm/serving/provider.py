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


class ServerProvider:
    def __init__(self, settings: ServingSettings):
        self.settings = settings
        self.config = settings.config
        self._model: ServedModel | None = None
        self._pool: ServerPool | None = None
        self._requester = ""  # the node whose fixture is starting a server now

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
        try:
            server = pool.get(kind, model, args, env)
        except ServerConfigError as exc:
            pytest.fail(str(exc), pytrace=False)
        request.addfinalizer(lambda: pool.release(server))
        return server

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
                "error": error,
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
