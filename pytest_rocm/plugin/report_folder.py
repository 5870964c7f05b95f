"""The report folder (`--rocm-report-dir`): one run's files, and only that run's.

The controller claims the folder before any worker starts. It takes the folder's lock: a second run
on the same folder is refused, naming the run that holds it. It then empties the folder of
everything an earlier run left there (records, manifest, gate report, a JUnit file written inside
it, server logs, proposals), so no reader ever mixes two runs. It empties only a folder that
pytest-rocm made (one with the owner mark an earlier run wrote): a folder holding other files is
refused, so `--rocm-report-dir=.` never deletes a tree. `--collect-only` runs nothing and never
claims the folder (docs/architecture.md, "The report folder").
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest

LOCK_NAME = ".pytest-rocm.lock"
OWNER_NAME = (
    ".pytest-rocm.owner"  # written by every run that claimed the folder: it says the folder is ours
)
_SHOWN = 5


class ReportFolder:
    def __init__(self, folder: Path):
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
        except BaseException:
            os.close(lock)
            raise
        self._lock = lock

    def _unusable(self, exc: OSError) -> pytest.UsageError:
        return pytest.UsageError(
            f"--rocm-report-dir {self.folder}: cannot use it as a report folder "
            f"({exc.strerror or exc}); give a folder this user can create and write"
        )

    def _empty(self) -> None:
        folder = self.folder
        left = sorted(p for p in folder.iterdir() if p.name not in (LOCK_NAME, OWNER_NAME))
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
        if self._lock is not None:
            os.close(self._lock)  # closing it releases the lock
            self._lock = None
