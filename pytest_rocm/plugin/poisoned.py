"""A process that a device fault poisoned runs no test after it (docs/architecture.md, "A device fault
poisons its process").

Registered in the process that runs tests once its recorder saw a sticky fault
(`results/poisoning.py`). The faulting test's teardown takes down every fixture of the process, so
none is left for a later teardown in the poisoned process; every later test is not run here but
recorded `deferred`, and the controller runs it in a fresh process after the pass
(`plugin/fresh.py`). Under xdist the controller has replaced this worker by then, so the tests still
to come go to a clean one; only those already sent here are moved.
"""

from __future__ import annotations

import pytest

from pytest_rocm.plugin import internals
from pytest_rocm.plugin.recording import Recorder


class PoisonedProcess:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.torn_down = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """The faulting test's own teardown (the fault was in its setup or call): every fixture
        goes now, with its errors in this test's teardown, where pytest reports them."""
        self.torn_down = True
        internals.tear_down_all(item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        if not self.torn_down:
            # the fault came in a teardown, which kept the fixtures the next test shares: they
            # go now, and an error of theirs is the poisoned process's, no test's
            self.torn_down = True
            try:
                internals.tear_down_all(item)
            except Exception as exc:  # noqa: BLE001 (any finalizer's error in a poisoned process)
                self.recorder.defer(
                    item.nodeid, f"fixtures torn down in the poisoned process failed: {exc!r}"
                )
                return True
        self.recorder.defer(item.nodeid)
        return True
