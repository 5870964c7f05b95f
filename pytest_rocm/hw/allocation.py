"""GPU allocation across the processes of one run (the controller and its xdist workers).

Each device index has a lock file under a folder named by the run's session id.
A test takes all the devices it needs or none: it tries each lock without
waiting, and on any miss releases what it holds and retries after a short
random pause, so two 4-GPU tests never hold half each and wait forever. The
locks are `flock` locks (filelock's UnixFileLock): the kernel drops them when
the holding process dies, so a crashed worker never strands a device.

A rerun asks for other devices than its failed attempt used (an "avoid" list
the rerun planner writes beside the locks), falling back to them only when the
runner has no others.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import NotDone

DEFAULT_WAIT_S = 3600.0

# Which variable makes a subprocess see only its devices. HIP honours HIP_VISIBLE_DEVICES (and
# CUDA_VISIBLE_DEVICES); ROCR_VISIBLE_DEVICES filters below HIP and would be applied first, so
# setting it to the same indices as well would double-filter: we set one variable per vendor.
VISIBLE_DEVICES_VARIABLE = {"amd": "HIP_VISIBLE_DEVICES", "nvidia": "CUDA_VISIBLE_DEVICES"}


def visible_devices_env(vendor: str, devices: list[int]) -> dict[str, str]:
    """The environment that makes a subprocess see only `devices` (nothing on a CPU platform)."""
    variable = VISIBLE_DEVICES_VARIABLE.get(vendor)
    return {variable: ",".join(map(str, devices))} if variable else {}


class AllocationTimeout(NotDone):
    pass


class LockFolderError(AllocationTimeout):
    """The folder of the device locks cannot be used (a file in its place, no permission), naming
    the path and the fix: the `gpus` fixture's error (a test that cannot get devices), and a usage
    error in pytest's hooks (plugin/locks.py)."""


LOCKS_FOLDER = "pytest-rocm-locks"


def lock_root(session_id: str) -> Path:
    """The run's folder of device locks, under `$TMPDIR/pytest-rocm-locks`; LockFolderError when
    something that is not a folder holds that name (every run on this machine would fail on it)."""
    base = Path(tempfile.gettempdir()) / LOCKS_FOLDER
    if not base.is_dir() and (base.exists() or base.is_symlink()):
        what = (
            "a symbolic link that leads to no folder"
            if base.is_symlink()
            else "a file, not a folder"
        )
        raise LockFolderError(
            f"pytest-rocm: {base} is {what}; pytest-rocm keeps the device locks of every run there. Remove it "
            f"(rm {base}) or give the run another temporary folder (TMPDIR=/some/folder pytest ...)"
        )
    return base / session_id


def _make(root: Path) -> Path:
    """Create the run's lock folder; LockFolderError, naming it, when the system refuses."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LockFolderError(
            f"pytest-rocm: cannot create the device lock folder {root} ({exc.strerror or exc}); make "
            f"{root.parent} a folder this user can write, or give the run another temporary folder "
            "(TMPDIR=/some/folder pytest ...)"
        ) from None
    return root


def _key(nodeid: str) -> str:
    return hashlib.sha1(nodeid.encode()).hexdigest()[:16]


def write_avoid(session_id: str, nodeid: str, devices: list[int]) -> None:
    """Ask the next attempt of `nodeid` to run on other devices than these."""
    root = _make(lock_root(session_id))
    path = root / f"avoid-{_key(nodeid)}.json"
    previous = set(json.loads(path.read_text())) if path.exists() else set()
    path.write_text(json.dumps(sorted(previous | set(devices))))


def read_avoid(session_id: str, nodeid: str) -> set[int]:
    try:
        path = lock_root(session_id) / f"avoid-{_key(nodeid)}.json"
    # no folder, no rerun asked for other devices; taking a device says what is wrong
    except LockFolderError:
        return set()
    return set(json.loads(path.read_text())) if path.exists() else set()


@dataclass
class Allocation:
    devices: list[int]
    vendor: str
    locks: list = field(default_factory=list)  # filelock.FileLock
    reused_avoided: bool = False  # the runner had no other devices than the failed attempt's
    waited_s: float = 0.0  # how long other tests held the devices: not this test's own time

    @property
    def env(self) -> dict[str, str]:
        return visible_devices_env(self.vendor, self.devices)

    def release(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks.clear()


def allocate(
    session_id: str,
    pool: list[int],
    count: int,
    vendor: str,
    avoid: AbstractSet[int] = frozenset(),
    wait_s: float = DEFAULT_WAIT_S,
    held_here: AbstractSet[int] = frozenset(),
) -> Allocation:
    """Take `count` devices of `pool` for this process, all or nothing. Devices in `held_here` are
    already this process's (its servers hold them): they count as free, and stay held when this
    allocation ends."""
    from filelock import BaseFileLock, FileLock, Timeout

    if count == 0:
        return Allocation([], vendor)
    if count > len(pool):
        raise AllocationTimeout(f"needs {count} devices, the runner has {len(pool)}")
    root = _make(lock_root(session_id))
    preferred = [d for d in pool if d not in avoid] + [d for d in pool if d in avoid]
    started = time.monotonic()
    deadline = started + wait_s
    rng = random.Random(os.getpid())
    while True:
        held: list[tuple[int, BaseFileLock | None]] = []
        for device in sorted(preferred, key=lambda d: d not in held_here):  # its own devices first
            if device in held_here:
                held.append((device, None))
                if len(held) == count:
                    break
                continue
            lock = FileLock(root / f"gpu{device}.lock")
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            held.append((device, lock))
            if len(held) == count:
                break
        if len(held) == count:
            devices = sorted(d for d, _ in held)
            return Allocation(
                devices,
                vendor,
                [lk for _, lk in held if lk is not None],
                reused_avoided=bool(set(devices) & avoid),
                waited_s=time.monotonic() - started,
            )
        for _, taken in held:
            if taken is not None:
                taken.release()
        if time.monotonic() > deadline:
            raise AllocationTimeout(
                f"could not get {count} of devices {pool} within {wait_s:.0f} s"
            )
        time.sleep(rng.uniform(0.02, 0.2))
