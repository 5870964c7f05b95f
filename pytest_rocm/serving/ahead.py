"""Servers started ahead of need (docs/architecture.md, "Servers started ahead of need"): a thread
that walks the run's server plan (`serving/plan.py`) and launches the servers the coming tests will
ask for while the tests before them run, within the machine's cores and memory.

The rules, each for a reason:
- in plan order, and never a server running, starting or launched already: what is needed first is
  ready first;
- in the scheduler's idle class (SCHED_IDLE): a start ahead takes only the CPU time the running test
  and its server leave, so it never slows what they do or measure; the test that asks for it puts it
  back in the normal class (`ServerPool.get`);
- at most as many starting at once as the process may use cores, servers a test waits for included;
- only while the memory left after another server stays above a reserve (`pool.memory_room`);
- an idle server a later step asks for is kept rather than stopped, while memory allows;
- nothing starts while speed is measured: once the server of a step that measures speed is up, the
  starts in flight are stopped where they are (SIGSTOP: no CPU at all) and nothing is launched until
  that step lets go of its server, when they go on;
- a server started ahead that no coming step needs any more (its test was skipped or deselected at
  run time) is stopped and counted unused.

The thread only launches processes and polls /health; every wait for a server stays in the test
that needs it (`ServerPool.get`), so a start that fails ahead fails there, named as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from pytest_rocm.serving.plan import Step
from pytest_rocm.serving.pool import ServedModel, ServerPool

POLL_S = 0.5  # how often the thread looks at the servers starting (a /health request each)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class AheadStarter:
    def __init__(
        self,
        pool: ServerPool,
        plan: list[Step],
        settings_for: Callable[[Step, bool], tuple[ServedModel, list, dict]],
        cores: int | None = None,
    ):
        self.pool = pool
        self.plan = plan
        # (step, build) -> (model, args, env) as the fixture asks for them, its tiny model built
        # first only with build; may raise (a model that does not build): that step is then started
        # when asked, and fails there
        self.settings_for = settings_for
        self.cores = cores or usable_cores()
        self.position = -1  # run-order index of the latest test that asked for a server
        self.claimed: set[int] = set()  # plan steps asked for by now
        self.quiet_holds = 0  # steps that measure speed and hold their server now
        self.why_not: dict[int, str] = {}  # plan index -> why that step's server was not ahead
        self._keys: dict[int, tuple | None] = {}  # plan index -> its pool key (None: cannot be had)
        self.failure: str | None = None  # the first error of the thread, if it had one
        self._wake = threading.Condition()
        self._closed = False
        pool.asked_for_later = self.asked_for_later
        self._thread = threading.Thread(
            target=self._run, name="pytest-rocm start-ahead", daemon=True
        )
        self._thread.start()

    # -- what the provider tells it ------------------------------------------------------------------
    def at(self, step: int) -> None:
        """A test asks for the server of plan step `step` now: the steps before it are done, and it
        is not one to start ahead any more."""
        self.claimed.add(step)
        self.position = max(self.position, self.plan[step].first)
        self._poke()

    def hold_quiet(self) -> None:
        """Speed is measured from now until `let_go`: launch nothing (the pool refuses), and stop the
        starts in flight where they are (they go on afterwards)."""
        with self._wake:
            self.quiet_holds += 1
            self.pool.pause_ahead(True)

    def let_go(self) -> None:
        with self._wake:
            self.quiet_holds = max(0, self.quiet_holds - 1)
            if not self.quiet_holds:
                self.pool.pause_ahead(False)
        self._poke()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        # Not long: the thread may be building a tiny model (or waiting for another run's build),
        # and the pool, closed next, refuses whatever it would launch afterwards.
        self._thread.join(timeout=5)

    # -- the thread --------------------------------------------------------------------------------
    def _poke(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._closed:
                    return
                self._wake.wait(POLL_S)
                if self._closed:
                    return
            try:
                self.pool.poll_ahead()
                self._drop_passed()
                self._launch()
            # never take the run down: what is not started ahead starts when asked, and its record
            # says why
            except Exception as exc:
                self.failure = self.failure or f"starting ahead failed: {_why(exc)}"

    def key(self, index: int) -> tuple | None:
        """The pool key of plan step `index` (None where its settings cannot be had): known
        without building its tiny model."""
        if index not in self._keys:
            step = self.plan[index]
            try:
                self._keys[index] = self.pool.key(step.kind, *self.settings_for(step, False))
            except (Exception, pytest.fail.Exception) as exc:
                self._keys[index] = None
                self.why_not[index] = _why(exc)
        return self._keys[index]

    def _drop_passed(self) -> None:
        """Stop what was started ahead for tests that have run by now without asking for it (the
        step being asked for now is still needed)."""
        needed = {self.key(i) for i, step in enumerate(self.plan) if step.first >= self.position}
        self.pool.stop_ahead(keep=lambda key: key in needed)

    def _coming(self) -> list[int]:
        """The plan steps not asked for yet, from the current test on (a test may ask for a
        variant after its module's server)."""
        return [
            i
            for i, step in enumerate(self.plan)
            if step.first >= self.position and i not in self.claimed
        ]

    def asked_for_later(self, key: tuple) -> bool:
        """Whether a step not asked for yet needs the server of `key` (the pool keeps such an idle
        server rather than start it again)."""
        return any(self._keys.get(i) == key for i in self._coming())

    def _launch(self) -> None:
        coming = self._coming()
        for index in coming:
            self.key(index)  # every coming step's key, for `asked_for_later`
        if self.quiet_holds:
            return
        for place, index in enumerate(coming):
            if self.key(index) is None or self.pool.has(self.key(index)):
                continue
            step = self.plan[index]
            if (why := self.pool.configured_not_ahead(step.kind)) is not None:
                # nor its tiny model built here: the build would take CPU the tests use
                self.why_not[index] = why
                continue
            try:
                model, args, env = self.settings_for(step, True)  # its tiny model built first
            except (Exception, pytest.fail.Exception) as exc:
                self._keys[index] = None  # its test builds it again, and fails there, saying why
                self.why_not[index] = _why(exc)
                continue
            why = self.pool.start_ahead(step.kind, model, args, env, starting_at_most=self.cores)
            if why is not None:
                # in plan order: nothing later goes before this one
                for later in coming[place:]:
                    self.why_not[later] = why
                return


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"
