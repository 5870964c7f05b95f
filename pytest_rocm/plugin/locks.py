"""The run's folder of device locks as pytest's hooks see it: a folder that cannot be used
(hw/allocation.py's LockFolderError, naming the path and the fix) is a usage error of the run, shown
by pytest as one line, not an internal error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_rocm.hw import allocation


@contextmanager
def as_usage_error() -> Iterator[None]:
    """Inside a hook: the lock folder's error ends the run as a usage error, naming the path."""
    try:
        yield
    except allocation.LockFolderError as error:
        raise pytest.UsageError(str(error)) from None


def lock_root(session_id: str) -> Path:
    with as_usage_error():
        return allocation.lock_root(session_id)
