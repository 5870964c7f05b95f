"""Servers shared by the tests of one process: started on first use, kept while others need the same
one.

A server is keyed by what decides its behaviour (kind, model, arguments,
environment), so every module that asks for the default server gets the same
process, and a test that needs a variant (prefix caching off, speculative
decoding) gets its own. A fixture holds its server until its scope ends; idle
servers beyond `max_alive` are stopped (least recently used first, those a later
test asks for last), which bounds memory. Servers started ahead of need
(`serving/ahead.py`, from another thread) wait in `ahead` until a test asks.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
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
    group_processes,
    load_server_config,
)

DEFAULT_MAX_ALIVE = 2
# What a server takes in host memory until one of this pool's has been measured: a tiny model's vLLM
# CPU server (API server, engine core, KV cache) measured 3.5 GB here.
DEFAULT_SERVER_BYTES = 4 * 2**30
# A server is started ahead only if the memory left after it stays above this share of the machine's.
AHEAD_RESERVE_SHARE = 0.25


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
        # On the CPU one idle server (each holds 3.5 GB, and one that has served takes about a
        # CPU-second in its first 10 idle seconds, measured); more only while a later test asks
        # for them and memory allows (`_trim`).
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
        # Servers are started ahead by another thread (serving/ahead.py): the dicts below change
        # only under this lock, and nobody waits for a server while holding it.
        self.lock = threading.RLock()
        # key -> (server launched ahead of need, its health timeout)
        self.ahead: dict[tuple, tuple[Server, float]] = {}
        self.starting: dict[tuple, Server] = {}  # key -> server a test is waiting for now
        self.quiet = False  # speed is being measured: nothing starts ahead (`pause_ahead`)
        self.ahead_unused: list[Server] = []  # started ahead, stopped without being asked for
        self.closed = False  # the run ends: nothing starts ahead any more (`close`)
        # key -> whether a later test will ask for it (the run's plan, serving/ahead.py)
        self.asked_for_later: Callable[[tuple], bool] = lambda key: False
        self.largest_server_bytes = 0  # the most host memory one of this pool's servers took

    def config(self, kind: str) -> PlatformServerConfig:
        return load_server_config(self.config_path, kind, self.platform_keys)

    @staticmethod
    def key(kind: str, model: ServedModel, args, env) -> tuple:
        return kind, model.path, tuple(args), tuple(sorted((env or {}).items()))

    def get(
        self,
        kind: str,
        model: ServedModel,
        args: list[str] | tuple = (),
        env: dict | None = None,
        asked: Callable[[], None] | None = None,
    ) -> Server:
        """A healthy server for this configuration, started (and waited for) if none is running,
        held until `release`: a held server is never stopped to make room for another. The wait
        happens outside the pool's lock, so servers are started ahead meanwhile. `asked()` is called
        under the lock once the server is running or counted as starting (whoever starts servers
        ahead then sees both the request and its start)."""
        args, env = list(args), dict(env or {})
        key = self.key(kind, model, args, env)
        with self.lock:
            server = self.servers.get(key)
            # it died since the last test: start a fresh one
            if server is not None and not server.alive():
                self._stop(key)
                server = None
            if starts := server is None:
                self._trim(self.max_alive - 1)
                # started ahead: only what is left of its start is waited for, and a start that
                # failed ahead fails here, on the test that needs it
                claimed = self.ahead.pop(key, None)
                if claimed and claimed[0].ready_at is not None and not claimed[0].alive():
                    # it was up and died before a test asked for it (the machine took its
                    # memory, say): started again, as a server that died between tests is
                    self._lose(claimed[0])
                    claimed = None
                server, timeout = claimed or self._new_server(kind, model, args, env)
                if claimed:
                    server.pause(False)
                    server.run_normally()  # a test waits for it now, or is about to use it
                else:
                    server.launch()
                self.starting[key] = server
            if asked is not None:
                asked()
        if starts:
            try:
                self._healthy(server, timeout)
            finally:
                with self.lock:
                    self.starting.pop(key, None)
            with self.lock:
                self.servers[key] = server
        with self.lock:
            self.servers.move_to_end(key)
            self.holders[key] = self.holders.get(key, 0) + 1
        return server

    def _lose(self, server: Server) -> None:
        """A server started ahead that died after it was up: stopped (its engine workers may
        outlive it) and recorded with the others no test used, saying how it ended."""
        code = server.process.returncode if server.process is not None else None
        server.lost = f"exited with code {code} after it was up, before a test asked for it"
        server.stop()
        self.ahead_unused.append(server)

    def release(self, server: Server) -> None:
        """The fixture that got `server` is done with it; stop idle servers beyond `max_alive`."""
        with self.lock:
            for key, running in self.servers.items():
                if running is server and self.holders.get(key):
                    self.holders[key] -= 1
            self._trim(self.max_alive)

    def _trim(self, keep: int) -> None:
        """Stop idle servers, least recently used first, until at most `keep` run; an idle server
        a later test will ask for (`asked_for_later`) goes last, and stays while the machine's
        memory keeps its reserve (a start saved)."""
        while len(self.servers) > keep:
            idle = [key for key in self.servers if not self.holders.get(key)]
            if not idle:
                return  # every running server is held: run more than the limit until one is released
            unwanted = [key for key in idle if not self.asked_for_later(key)]
            if not unwanted and memory_room(0) is None:
                return
            self._stop((unwanted or idle)[0])

    def _devices(self, count: int) -> devices_mod.Allocation:
        if count not in self.device_sets:
            self.device_sets[count] = devices_mod.allocate(
                self.session_id, [g.index for g in self.platform.gpus], count, self.platform.vendor
            )
        return self.device_sets[count]

    def _new_server(
        self, kind: str, model: ServedModel, args: list[str], env: dict
    ) -> tuple[Server, float]:
        """A server for these settings, not started, and its health timeout."""
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
        return server, platform_config.health_timeout_s

    def _healthy(self, server: Server, timeout: float) -> None:
        try:
            server.wait_healthy(timeout)
        except (ServerStartError, ServerConfigError) as exc:
            if self.on_start:
                self.on_start(server, str(exc).split("\n", 1)[0])
            raise
        self.largest_server_bytes = max(self.largest_server_bytes, group_memory_bytes(server))
        if self.on_start:
            self.on_start(server, None)

    def start_ahead(
        self,
        kind: str,
        model: ServedModel,
        args: list[str] | tuple = (),
        env: dict | None = None,
        *,
        starting_at_most: int = 1,
    ) -> str | None:
        """Launch a server `get` will be asked for later, without waiting for it, if fewer than
        `starting_at_most` servers are starting and the machine's memory holds one more. Returns
        None when it is launched (or already running, starting or launched), else why not."""
        args, env = list(args), dict(env or {})
        key = self.key(kind, model, args, env)
        with self.lock:
            if self.closed:
                return "the run was ending"
            if self.has(key):
                return None
            if (refused := self.configured_not_ahead(kind)) is not None:
                return refused
            if self.quiet:
                return "a test was measuring speed (nothing starts beside it)"
            starting = self.starting_count()
            if starting >= starting_at_most:
                return f"{starting} server(s) starting already (at most {starting_at_most} at once)"
            # the ones still starting have not taken all their memory yet: count them whole
            room = memory_room((self.largest_server_bytes or DEFAULT_SERVER_BYTES) * (1 + starting))
            if room is not None:
                return room
            server, timeout = self._new_server(kind, model, args, env)
            server.ahead = True
            # on the CPU time the tests leave: a test's own server and client are never slowed
            server.launch(when_idle=True)
            self.ahead[key] = (server, timeout)
            return None

    def configured_not_ahead(self, kind: str) -> str | None:
        """Why the server configuration starts no `kind` server ahead here, or None."""
        if self.config(kind).start_ahead:
            return None
        return f"the server configuration does not start {kind} servers ahead on this platform"

    def has(self, key: tuple) -> bool:
        """A server of `key` runs, starts for a test, or was started ahead."""
        with self.lock:
            return key in self.servers or key in self.ahead or key in self.starting

    def starting_count(self) -> int:
        """Servers launched and not yet seen healthy: started ahead, or waited for by a test."""
        with self.lock:
            return len(self.starting) + sum(
                1 for server, _ in self.ahead.values() if server.ready_at is None and server.alive()
            )

    def pause_ahead(self, paused: bool) -> None:
        """Stop (or continue) every server still starting ahead, and refuse (or allow again) new
        starts ahead: nothing starts while speed is measured."""
        with self.lock:
            self.quiet = paused
            for server, _ in self.ahead.values():
                if server.ready_at is None and server.paused != paused:
                    server.pause(paused)

    def poll_ahead(self) -> None:
        """Note which servers started ahead answer /health by now (one quick request each, outside
        the lock): they take no CPU while they wait to be asked for."""
        with self.lock:
            waiting = [
                server
                for server, _ in self.ahead.values()
                if server.ready_at is None and not server.paused
            ]
        for server in waiting:
            if server.answers_health():
                server.note_healthy()

    def stop_ahead(self, keep) -> list[Server]:
        """Stop the servers started ahead whose key `keep(key)` refuses (no test will ask for
        them any more); returns them, counted as unused."""
        with self.lock:
            dropped = [key for key in self.ahead if not keep(key)]
            stopped = [self.ahead.pop(key)[0] for key in dropped]
        for server in stopped:
            server.stop()
        self.ahead_unused.extend(stopped)
        return stopped

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

    def kill(self) -> None:
        """SIGKILL to every server's process group, without the lock (its holder may be the thread
        that hangs) and without waiting: the process ends next and would leave them running."""
        ahead = [server for server, _ in self.ahead.values()]
        for server in [*self.servers.values(), *self.starting.values(), *ahead]:
            server.kill()

    def close(self) -> None:
        with self.lock:
            # the thread that starts servers ahead may still be building a model: what it would
            # launch now nobody would stop
            self.closed = True
        self.stop_ahead(keep=lambda key: False)
        with self.lock:
            for key in list(self.servers):
                self._stop(key)
        for allocation in self.device_sets.values():
            allocation.release()
        self.device_sets.clear()


def group_memory_bytes(server: Server) -> int:
    """The resident memory of the server's process group (the API server and its engine workers),
    from /proc; 0 where that cannot be read."""
    if server.process is None:
        return 0
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    # fields after the command: state, ppid, pgrp, ..., rss in pages (21)
    return sum(
        int(fields[21]) * page
        for _, fields in group_processes(server.process.pid)
        if len(fields) > 21
    )


def memory_room(server_bytes: int) -> str | None:
    """None when the machine's available memory holds one more server of `server_bytes` and keeps
    AHEAD_RESERVE_SHARE of the total free; else why not (unknown counts as no room)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            values = {
                line.split(":")[0]: int(line.split()[1]) * 1024
                for line in meminfo
                if line.split(":")[0] in ("MemTotal", "MemAvailable")
            }
        total, available = values["MemTotal"], values["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return "the machine's free memory cannot be read (/proc/meminfo)"
    left = available - server_bytes
    if left < AHEAD_RESERVE_SHARE * total:
        return (
            f"{available / 2**30:.1f} GiB free, less {server_bytes / 2**30:.1f} GiB for another server, "
            f"would leave under {AHEAD_RESERVE_SHARE:.0%} of the machine's {total / 2**30:.1f} GiB"
        )
    return None
