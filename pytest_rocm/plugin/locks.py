"""The run's folder of device locks as pytest's hooks see it: a folder that cannot be used
(hw/allocation.py's LockFolderError, naming the path and the fix) is a usage error of the run, shown
by pytest as one line, not an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_rocm.hw import allocation


def lock_root(session_id: str) -> Path:
    try:
        return allocation.lock_root(session_id)
    except allocation.LockFolderError as error:
        raise pytest.UsageError(str(error)) from None
