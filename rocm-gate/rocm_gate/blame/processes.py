"""A command of the base experiment (the install, an attempt's pytest) in a process group of its own,
until a deadline: at the deadline, or when the experiment is interrupted, the whole group is stopped
(SIGTERM, then SIGKILL after a grace), so no server or build a test or an install started outlives
it. Its output goes to a file; the caller reads the tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Finished", "GRACE_S", "run", "tail"]

# how long a stopped group has to end (pytest writes its report on SIGTERM) before SIGKILL
GRACE_S = 10.0


@dataclass
class Finished:
    exit: int | None  # None: stopped at the deadline before it ended
    seconds: float
    log: Path

    @property
    def stopped(self) -> bool:
        return self.exit is None


def _signal_group(group: int, number: int) -> bool:
    """Send `number` to the process group; False when no process of it is left."""
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that changed its user: nothing more to do
        return False
    return True


def _stop(process: subprocess.Popen, grace: float) -> None:
    """End the process and every process of its group: SIGTERM, then SIGKILL after `grace`."""
    if process.poll() is None and _signal_group(process.pid, signal.SIGTERM):
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # what is left of the group (a server a test started, the leader itself if it held on): the
    # group's id stays the leader's while any member lives, so it names only these
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def run(
    command: list[str],
    cwd: Path,
    deadline: float,
    log: Path,
    env: dict | None = None,
    grace: float = GRACE_S,
) -> Finished:
    """Run `command` in `cwd` until it ends or `deadline` (time.monotonic()) passes; its output and
    errors go to `log`. A KeyboardInterrupt (Ctrl-C, the job's SIGTERM as `cli.main` raises it)
    stops the group and goes on up."""
    started = time.monotonic()
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stopped = False
        try:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                stopped = True
        finally:
            _stop(process, grace if stopped else 1.0)
    return Finished(None if stopped else process.returncode, time.monotonic() - started, log)


def tail(log: Path, lines: int = 30, limit: int = 4000) -> str:
    """The last `lines` lines of a log, at most `limit` characters (from its end)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - 64 * 1024, 0))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = "\n".join(text.rstrip().splitlines()[-lines:])
    return kept[-limit:]
