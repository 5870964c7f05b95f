"""Servers shared by the tests of one process: started on first use, kept while others need the same
one.

A server is keyed by what decides its behaviour (kind, model, arguments,
environment), so every module that asks for the default server gets the same
process, and a test that needs a variant (prefix caching off, speculative
decoding) gets its own. A fixture holds its server until its scope ends; idle
servers beyond `max_alive` are stopped (least recently used first), which bounds
memory and, on the CPU, keeps idle servers from taking the cores.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.hw import allocation as devices_mod
from pytest_rocm.serving.process import (
    PlatformServerConfig,
    Server,
    ServerConfigError,
    ServerStartError,
    command_for,
    free_port,
    load_server_config,
)

DEFAULT_MAX_ALIVE = 2


@dataclass(frozen=True)
class ServedModel:
    """The weights the suites serve: the tiny model built here, or real weights given with
    --rocm-model."""

    path: str
    name: str
    vllm_args: tuple[str, ...] = ()  # what serving this model with vLLM needs, on every platform
    sglang_args: tuple[str, ...] = ()  # the same for SGLang

    def args_for(self, kind: str) -> tuple[str, ...]:
        return {"vllm": self.vllm_args, "sglang": self.sglang_args}[kind]


def devices_wanted(args: list[str], platform_gpus: int) -> int:
    """Tensor parallel size times pipeline parallel size, from the server's arguments (1 without
    either)."""
    if platform_gpus == 0:
        return 0
    sizes = {"--tensor-parallel-size": 1, "--pipeline-parallel-size": 1}
    aliases = {
        "-tp": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size",
        "--tp": "--tensor-parallel-size",
        "--tp-size": "--tensor-parallel-size",
        "--pp-size": "--pipeline-parallel-size",
    }
    for index, arg in enumerate(args):
        name, _, value = arg.partition("=")
        name = aliases.get(name, name)
        if name in sizes:
            value = value or (args[index + 1] if index + 1 < len(args) else "")
            try:
                sizes[name] = int(value)
            except ValueError as exc:
                raise ServerConfigError(
                    f"server argument {name} needs a whole number, got {value!r}"
                ) from exc
    return sizes["--tensor-parallel-size"] * sizes["--pipeline-parallel-size"]


class ServerPool:
    def __init__(
        self,
        *,
        session_id: str,
        platform,
        platform_keys: list[str | None],
        config_path: Path | None,
        log_dir: Path,
        max_alive: int | None = None,
        on_start=None,
        command=command_for,
    ):
        self.session_id = session_id
        self.platform = platform
        self.platform_keys = platform_keys
        self.config_path = config_path
        self.log_dir = log_dir
        # On the CPU an idle vLLM server still spins its OpenMP threads: keep one, or they skew the
        # timings.
        self.max_alive = max_alive or (1 if not platform.gpus else DEFAULT_MAX_ALIVE)
        self.servers: OrderedDict[tuple, Server] = OrderedDict()
        # key -> fixtures using it now: never stopped to make room
        self.holders: dict[tuple, int] = {}
        # Servers of one size share its devices (the servers' configuration splits their memory), so
        # a module's server and a test's variant of it fit on a one-GPU runner; held until the pool
        # closes.
        self.device_sets: dict[int, devices_mod.Allocation] = {}
        self.on_start = (
            on_start  # on_start(server, error or None) after each start, for the records
        )
        self.command = command  # command(kind, model path, served name, port, args, python) -> argv

    def config(self, kind: str) -> PlatformServerConfig:
        return load_server_config(self.config_path, kind, self.platform_keys)

    @staticmethod
    def key(kind: str, model: ServedModel, args, env) -> tuple:
        return kind, model.path, tuple(args), tuple(sorted((env or {}).items()))

    def get(
        self, kind: str, model: ServedModel, args: list[str] | tuple = (), env: dict | None = None
    ) -> Server:
        """A healthy server for this configuration, started (and waited for) if none is running,
        held until `release`: a held server is never stopped to make room for another."""
        args, env = list(args), dict(env or {})
        key = self.key(kind, model, args, env)
        server = self.servers.get(key)
        # it died since the last test: start a fresh one
        if server is not None and not server.alive():
            self._stop(key)
            server = None
        if server is None:
            server = self._start(key, kind, model, args, env)
        self.servers.move_to_end(key)
        self.holders[key] = self.holders.get(key, 0) + 1
        return server

    def release(self, server: Server) -> None:
        """The fixture that got `server` is done with it; stop idle servers beyond `max_alive`."""
        for key, running in self.servers.items():
            if running is server and self.holders.get(key):
                self.holders[key] -= 1
        self._trim(self.max_alive)

    def _trim(self, keep: int) -> None:
        while len(self.servers) > keep:
            idle = [key for key in self.servers if not self.holders.get(key)]
            if not idle:
                return  # every running server is held: run more than the limit until one is released
            self._stop(idle[0])

    def _devices(self, count: int) -> devices_mod.Allocation:
        if count not in self.device_sets:
            self.device_sets[count] = devices_mod.allocate(
                self.session_id, [g.index for g in self.platform.gpus], count, self.platform.vendor
            )
        return self.device_sets[count]

    def _start(
        self, key: tuple, kind: str, model: ServedModel, args: list[str], env: dict
    ) -> Server:
        self._trim(self.max_alive - 1)
        platform_config = self.config(kind)
        all_args = [*platform_config.args, *model.args_for(kind), *args]
        allocation = self._devices(devices_wanted(all_args, len(self.platform.gpus)))
        port = free_port()
        server = Server(
            kind=kind,
            model=model.path,
            served_name=model.name,
            port=port,
            command=self.command(
                kind, model.path, model.name, port, all_args, platform_config.python
            ),
            env={**platform_config.env, **env, **allocation.env},
            log_path=self.log_dir / f"{kind}-{port}.log",
            devices=allocation.devices,
        )
        try:
            server.start(platform_config.health_timeout_s)
        except (ServerStartError, ServerConfigError) as exc:
            if self.on_start:
                self.on_start(server, str(exc).split("\n", 1)[0])
            raise
        if self.on_start:
            self.on_start(server, None)
        self.servers[key] = server
        return server

    def held_devices(self) -> set[int]:
        return {d for allocation in self.device_sets.values() for d in allocation.devices}

    def alive(self) -> list[Server]:
        return [server for server in self.servers.values() if server.alive()]

    def started(self) -> list[Server]:
        """Every server started and not stopped by the pool, alive or not (one that died keeps its
        log)."""
        return list(self.servers.values())

    def _stop(self, key: tuple) -> None:
        self.holders.pop(key, None)
        self.servers.pop(key).stop()

    def close(self) -> None:
        for key in list(self.servers):
            self._stop(key)
        for allocation in self.device_sets.values():
            allocation.release()
        self.device_sets.clear()
