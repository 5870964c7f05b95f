"""Hangs under pytest-timeout's thread method, which ends the process without a report.

pytest-timeout lets a plugin set the timer (`pytest_timeout_set_timer`). Ours
does what its thread method does (dump the stacks, exit), but first writes a
record of the hang with the stacks' head, so the controller's crash handling
and the verdict see a timeout and where it hung, not just a dead worker, and
kills the process's servers, which no teardown stops after the exit.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

STACK_CHARS = 4000


def start_timer(
    item: pytest.Item,
    settings: Any,
    record: Callable[[dict[str, Any]], None],
    kill_servers: Callable[[], None],
) -> bool:
    import pytest_timeout

    def expire() -> None:
        stacks = "".join(
            "".join(traceback.format_stack(frame))
            for ident, frame in sys._current_frames().items()
            if ident != threading.get_ident()
        )
        record(
            {
                "nodeid": item.nodeid,
                "when": "call",
                "outcome": "failed",
                "duration": float(settings.timeout),
                "hang": True,
                "failure": f"pytest-rocm: timed out after {settings.timeout} s (a hang); "
                f"stacks:\n{stacks[-STACK_CHARS:]}",
            }
        )
        kill_servers()  # no teardown runs after the exit: nothing else would stop them
        pytest_timeout.timeout_timer(item, settings)  # dumps the stacks to the terminal and exits

    timer = threading.Timer(settings.timeout, expire)
    timer.name = f"pytest-rocm timeout {item.nodeid}"
    timer.daemon = True

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's cancel hook calls this
    timer.start()
    return True
