"""The xdist scheduler of `--rocm-scheduler=gpu`: xdist's scheduler protocol around
`dispatch.Dispatcher`.

xdist (3.8) asks a scheduler for: `nodes`, `collection_is_completed`, `tests_finished`,
`has_pending`, `add_node`, `add_node_collection`, `mark_test_complete`, `mark_test_pending`,
`remove_pending_tests_from_node`, `remove_node` and `schedule` (docs/architecture.md, "Library facts
we rely on"). This module and `plugin/internals.py` are the only ones that touch xdist's worker
objects (`send_runtest_some`, `shutdown`, `shutting_down`, `gateway`).

What it knows of each test comes from outside xdist: the GPU demand from the workers' collection
(each worker writes `demands-<worker>.json` beside the run's device locks before xdist hears its
collection ended), the expected duration from the duration store. Reruns of failed blocking gates
reach it through `mark_test_pending` and go first; the device locks keep GPUs exclusive whatever it
decides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_rocm.scheduling.dispatch import SHUTDOWN, Dispatcher, Job
from pytest_rocm.schemas.artifacts import write_json_atomic

DEMANDS_PREFIX = "demands-"


def write_demands(folder: Path, worker: str, demands: dict[str, int]) -> None:
    """Written by each worker when its collection ends: {node id: GPUs} for tests that need other
    than 1."""
    write_json_atomic(folder / f"{DEMANDS_PREFIX}{worker}.json", demands)


def read_demands(folder: Path) -> dict[str, int]:
    for path in sorted(folder.glob(f"{DEMANDS_PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if isinstance(v, int) and v >= 0}
    return {}


def with_server_starts(nodeids: Sequence[str], expected, module_starts) -> list[tuple[str, float]]:
    """(nodeid, expected seconds) in collection order, a module's server starts counted into its
    first test: the worker that runs it waits for them (the module's other tests share its servers,
    and `longest_first` keeps a module's tests together)."""
    seen: set[str] = set()
    timed = []
    for nodeid in nodeids:
        module = nodeid.split("::", 1)[0]
        starts = module_starts(module) if module not in seen else 0.0
        seen.add(module)
        timed.append((nodeid, expected(nodeid) + starts))
    return timed


class GpuScheduling:
    """Longest first under the runner's GPU capacity (see `dispatch`)."""

    def __init__(
        self,
        config,
        log,
        capacity: int,
        expected,
        demands_folder: Path,
        numnodes: int,
        module_starts=lambda module: 0.0,
    ):
        self.config = config
        self.log = log
        self.capacity = capacity
        # nodeid -> expected seconds, and module -> seconds its servers take to start (a
        # DurationStore's views for this platform)
        self.expected = expected
        self.module_starts = module_starts
        self.demands_folder = demands_folder
        self.numnodes = numnodes
        self.node2collection: dict = {}
        self.collection: list[str] | None = None
        self.dispatcher: Dispatcher | None = None
        self.index_of: dict[str, int] = {}
        self.jobs: dict[int, Job] = {}
        self._nodes: list = []
        self.started = time.monotonic()

    # -- what xdist reads ---------------------------------------------------------------------------
    @property
    def nodes(self) -> list:
        return list(self._nodes)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.dispatcher is None:
            return False
        if self.dispatcher.pending:
            return False
        return all(len(self.dispatcher.queues.get(node, ())) < 2 for node in self._nodes)

    @property
    def has_pending(self) -> bool:
        if self.dispatcher is None:
            return False
        return bool(self.dispatcher.pending) or any(
            self.dispatcher.queues.get(node) for node in self._nodes
        )

    # -- what xdist tells it ------------------------------------------------------------------------
    def add_node(self, node) -> None:
        self._nodes.append(node)
        if self.dispatcher is not None:
            self.dispatcher.add_worker(node)

    def add_node_collection(self, node, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            self.log(
                f"worker {node.gateway.id} collected other tests than the first worker; it gets none"
            )
            return
        self.node2collection[node] = list(collection)

    def schedule(self) -> None:
        if self.dispatcher is None:
            (first_node, first), *others = self.node2collection.items()
            differences = [(node, collection) for node, collection in others if collection != first]
            # nothing runs; with nothing pending xdist ends the session as its own schedulers do
            if differences:
                self._report_different_collections(first_node, first, differences)
                self.collection, self.dispatcher = first, Dispatcher(self.capacity)
                for node in self._nodes:
                    self.dispatcher.add_worker(node)
                return
            self.collection = first
            demands = read_demands(self.demands_folder)
            self.index_of = {nodeid: i for i, nodeid in enumerate(first)}
            jobs = [
                Job(i, nodeid, demands.get(nodeid, 1), seconds)
                for i, (nodeid, seconds) in enumerate(
                    with_server_starts(first, self.expected, self.module_starts)
                )
            ]
            self.jobs = {job.index: job for job in jobs}
            self.dispatcher = Dispatcher.longest_first(jobs, self.capacity)
            for node in self._nodes:
                self.dispatcher.add_worker(node)
        self._fill(self._nodes)

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self.dispatcher.complete(node, item_index, self._now())
        self._fill(
            [node]
            + [
                other
                for other in self._nodes
                if other is not node and not self.dispatcher.queues.get(other)
            ]
        )

    def mark_test_pending(self, item: str) -> None:
        """A rerun: first in line, for the next worker that can take it."""
        index = self.index_of[item]  # plugin/internals.py hands over only tests of `collection`
        self.dispatcher.requeue_front(self.jobs[index])
        self._fill([node for node in self._nodes if not node.shutting_down])

    def remove_pending_tests_from_node(self, node, indices: Sequence[int]) -> None:
        raise NotImplementedError()  # no work stealing: a worker's queue is at most two tests

    def remove_node(self, node) -> str | None:
        """A worker went away (finished, or crashed): the test it was running is the crash item; the
        one queued behind it goes back to the front."""
        self._nodes = [n for n in self._nodes if n is not node]
        if self.dispatcher is None:
            return None
        queue = self.dispatcher.remove_worker(node)
        if not queue:
            return None
        for job in reversed(queue[1:]):
            self.dispatcher.requeue_front(job)
        self._fill([n for n in self._nodes if not n.shutting_down])
        return self.collection[queue[0].index]

    def _report_different_collections(self, first_node, first, differences) -> None:
        """As xdist's own schedulers do: a collection error per worker whose tests differ (random
        parameters, a conftest that depends on the worker), so the run fails saying so instead of
        running a mix."""
        import pytest
        from xdist.report import report_collection_diff

        for node, collection in differences:
            message = report_collection_diff(
                first, collection, first_node.gateway.id, node.gateway.id
            )
            self.log(message)
            self.config.hook.pytest_collectreport(
                report=pytest.CollectReport(
                    nodeid=node.gateway.id, outcome="failed", longrepr=message, result=[]
                )
            )

    # -- sending ------------------------------------------------------------------------------------
    def _now(self) -> float:
        return time.monotonic() - self.started

    def _fill(self, nodes) -> None:
        live = [node for node in nodes if not node.shutting_down]
        for node, things in self.dispatcher.fill(live, self._now()).items():
            indices = [thing.index for thing in things if thing != SHUTDOWN]
            if indices:
                node.send_runtest_some(indices)
            if SHUTDOWN in things:
                node.shutdown()


if TYPE_CHECKING:  # a type checker holds GpuScheduling to xdist's own scheduler protocol
    from xdist.scheduler.protocol import Scheduling

    _PROTOCOL: type[Scheduling] = GpuScheduling
