"""The report folder (`--rocm-report-dir`): one run's files, and only that run's.

The controller claims the folder before any worker starts. It takes the folder's lock: a second run
on the same folder is refused, naming the run that holds it. It then empties the folder of
everything an earlier run left there (records, manifest, gate report, a JUnit file written inside
it, server logs, proposals), so no reader ever mixes two runs. It empties only a folder that
pytest-rocm made (one with the owner mark an earlier run wrote): a folder holding other files is
refused, so `--rocm-report-dir=.` never deletes a tree. `--collect-only` runs nothing and never
claims the folder (docs/architecture.md, "The report folder").

A full disk: the claim sets aside `RESERVE_BYTES` in the folder (a file of that size, allocated), so a
run whose records meet a full disk can still write its end: the controller frees the reserve first
(`free_reserve`), then writes its end-of-run record, the manifest and the gate report, which says the
run is incomplete and why. A folder without room for the reserve is refused at the claim, naming the
free space.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

import pytest

from pytest_rocm.results.records import DISK_FULL, free_space

LOCK_NAME = ".pytest-rocm.lock"
OWNER_NAME = (
    ".pytest-rocm.owner"  # written by every run that claimed the folder: it says the folder is ours
)
RESERVE_NAME = ".pytest-rocm.reserve"
# room kept for the end of a run whose records filled the disk: the end-of-run record, the manifest
# and the gate report of a run of thousands of tests
RESERVE_BYTES = 4 * 1024 * 1024
_SHOWN = 5


class ReportFolder:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock: int | None = None  # the lock file's descriptor, while this run holds it

    def claim(self, run: str) -> None:
        """Lock the folder, empty what an earlier run left, and mark it as this run's (`run` says
        who)."""
        folder = self.folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unusable(exc) from None
        # flock from the standard library, not filelock: the kernel drops it with the process (a
        # killed run leaves no stale lock), the descriptor is not inherited by workers, and this
        # lock needs nothing filelock adds, whose import costs every run about 10 ms
        # (benchmarks/overhead.py)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            owner = folder / OWNER_NAME
            other = (
                owner.read_text(encoding="utf-8", errors="replace").strip()
                if owner.is_file()
                else "another run"
            )
            raise pytest.UsageError(
                f"--rocm-report-dir {folder} is in use by {other}; give this run its own folder "
                "(two runs in one folder would mix their records)"
            ) from None
        except OSError as exc:
            os.close(lock)
            raise self._unusable(exc) from None
        try:
            self._empty()
            (folder / OWNER_NAME).write_text(run + "\n", encoding="utf-8")
            self._reserve()
        except OSError as exc:  # the disk is full (else _empty says what it could not remove)
            os.close(lock)
            raise self._unusable(exc) from None
        except BaseException:
            os.close(lock)
            raise
        self._lock = lock

    def _reserve(self) -> None:
        """Set `RESERVE_BYTES` aside for the run's end (its blocks allocated, not a sparse file)."""
        fd = os.open(self.folder / RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                chunk = b"\xff" * 65536  # a filesystem without fallocate: written out
                for _ in range(RESERVE_BYTES // len(chunk)):
                    os.write(fd, chunk)
        except OSError:
            os.close(fd)
            (self.folder / RESERVE_NAME).unlink(missing_ok=True)
            raise
        os.close(fd)

    def free_reserve(self) -> bool:
        """Give the reserve back to the filesystem (the run's end needs it); whether there was one."""
        try:
            (self.folder / RESERVE_NAME).unlink()
        except OSError:
            return False
        return True

    def _unusable(self, exc: OSError) -> pytest.UsageError:
        if exc.errno in DISK_FULL:
            return pytest.UsageError(
                f"--rocm-report-dir {self.folder}: no room for the run's records ({exc.strerror}; "
                f"{free_space(self.folder if self.folder.is_dir() else self.folder.parent)}; a "
                f"run sets {RESERVE_BYTES // 2**20} MiB aside for its report): free space there, or "
                "give a folder on a larger disk"
            )
        return pytest.UsageError(
            f"--rocm-report-dir {self.folder}: cannot use it as a report folder "
            f"({exc.strerror or exc}); give a folder this user can create and write"
        )

    def _empty(self) -> None:
        folder = self.folder
        left = sorted(
            p for p in folder.iterdir() if p.name not in (LOCK_NAME, OWNER_NAME, RESERVE_NAME)
        )
        if not left:
            return
        if not (folder / OWNER_NAME).is_file():
            shown = ", ".join(p.name for p in left[:_SHOWN]) + (
                f" and {len(left) - _SHOWN} more" if len(left) > _SHOWN else ""
            )
            raise pytest.UsageError(
                f"--rocm-report-dir {folder} holds files pytest-rocm did not write ({shown}). Each run empties its "
                "report folder so that no two runs' files mix: give a new or empty folder"
            )
        for path in left:
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError as exc:
                raise pytest.UsageError(
                    f"--rocm-report-dir {folder}: cannot remove {path.name}, left by an earlier run "
                    f"({exc.strerror or exc}); remove it, or give this run a new folder"
                ) from None

    def release(self) -> None:
        self.free_reserve()
        if self._lock is not None:
            os.close(self._lock)  # closing it releases the lock
            self._lock = None
