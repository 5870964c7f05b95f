"""Makespans on one runner, simulated: the project's scheduler, xdist's blind `load` order, SGLang's
longest-first partitions, and the lower bound. `benchmarks/scheduling.py` prints them on real data.

Time advances from one test's end to the next. A test that a worker starts while its GPUs are taken
waits for them (the device locks), holding its worker, as a real run does.
"""

from __future__ import annotations

import heapq

from pytest_rocm.scheduling.dispatch import SHUTDOWN, Dispatcher, Job
from pytest_rocm.scheduling.shards import gpu_seconds, place


def lower_bound(jobs: list[Job], capacity: int) -> float:
    """No schedule finishes before all GPU-seconds are spent on the runner, nor before its longest
    test."""
    if not jobs:
        return 0.0
    return max(
        sum(min(j.gpus, capacity) * j.seconds for j in jobs) / capacity,
        max(j.seconds for j in jobs),
    )


class _Runner:
    """GPUs, workers and the clock; `start` is called by a policy whenever a worker may start its
    next test."""

    def __init__(self, capacity: int, workers: int):
        self.capacity, self.used, self.now = capacity, 0, 0.0
        self.ending: list[tuple[float, int, object, Job]] = []  # (end, tiebreak, worker, job)
        # started by their worker, waiting for GPUs (FIFO)
        self.waiting: list[tuple[object, Job]] = []
        self.workers = list(range(workers))
        self._ties = 0

    def start(self, worker, job: Job) -> None:
        if self.used + job.gpus <= self.capacity:
            self.used += job.gpus
            self._ties += 1
            heapq.heappush(self.ending, (self.now + job.seconds, self._ties, worker, job))
        else:
            self.waiting.append((worker, job))

    def next_end(self):
        end, _, worker, job = heapq.heappop(self.ending)
        self.now = end
        self.used -= job.gpus
        still = []
        # in order of arrival, each that fits (the locks favour no one)
        for waiter, waiting_job in self.waiting:
            if self.used + waiting_job.gpus <= self.capacity:
                self.used += waiting_job.gpus
                self._ties += 1
                heapq.heappush(
                    self.ending, (self.now + waiting_job.seconds, self._ties, waiter, waiting_job)
                )
            else:
                still.append((waiter, waiting_job))
        self.waiting = still
        return worker, job


def project_makespan(jobs: list[Job], capacity: int, workers: int | None = None) -> float:
    """The project's scheduler (`Dispatcher`): one worker per GPU unless told otherwise."""
    runner = _Runner(capacity, workers or capacity)
    dispatcher = Dispatcher.longest_first(jobs, capacity)
    queues: dict[int, list[Job]] = {w: [] for w in runner.workers}
    stopping: set[int] = set()
    running: set[int] = set()
    for worker in runner.workers:
        dispatcher.add_worker(worker)

    def send(workers) -> None:
        for worker, things in dispatcher.fill(workers, runner.now).items():
            for thing in things:
                if thing == SHUTDOWN:
                    stopping.add(worker)
                else:
                    queues[worker].append(thing)
        for worker in workers:
            # as an xdist worker does: run the head once another test is queued behind it, or it was
            # told to stop
            if (
                worker not in running
                and queues[worker]
                and (len(queues[worker]) >= 2 or worker in stopping)
            ):
                running.add(worker)
                runner.start(worker, queues[worker][0])

    send(runner.workers)
    while runner.ending:
        worker, job = runner.next_end()
        running.discard(worker)
        queues[worker].pop(0)
        dispatcher.complete(worker, job.index, runner.now)
        send(
            [worker] + [other for other in runner.workers if other != worker and not queues[other]]
        )
    unfinished = sum(len(q) for q in queues.values()) + len(dispatcher.pending)
    if unfinished:
        raise RuntimeError(f"simulation ended with {unfinished} test(s) unscheduled")
    return runner.now


def xdist_load_makespan(jobs: list[Job], capacity: int, workers: int | None = None) -> float:
    """xdist's `load`: tests in collection order to whichever worker is free, blind to GPU demand
    and duration (a test whose GPUs are taken waits for them on its worker)."""
    runner = _Runner(capacity, workers or capacity)
    order = sorted(jobs, key=lambda j: j.index)
    clamped = [Job(j.index, j.nodeid, min(j.gpus, capacity), j.seconds) for j in order]
    for worker in runner.workers:
        if clamped:
            runner.start(worker, clamped.pop(0))
    while runner.ending or runner.waiting:
        worker, _ = runner.next_end()
        if clamped:
            runner.start(worker, clamped.pop(0))
    return runner.now


def lpt_partitions(jobs: list[Job], parts: int) -> list[list[Job]]:
    """Longest first onto the least loaded partition (ties to the lowest number): SGLang's
    auto-partition, and `rocm-gate shard`'s split of every test alone. Deterministic for a given
    list."""
    return place([(None, [job], gpu_seconds(job)) for job in jobs], max(parts, 1))


def sglang_partition_makespan(jobs: list[Job], capacity: int) -> float:
    """SGLang's way on one node: its files split longest-first into `capacity // gpus` partitions
    that each run their files one after another (a suite has one GPU count, from its name)."""
    by_gpus: dict[int, list[Job]] = {}
    for job in jobs:
        by_gpus.setdefault(min(job.gpus, capacity), []).append(job)
    # partitions of different GPU counts run side by side in proportion to their GPU-seconds: the
    # node is split
    spans = []
    for gpus, group in by_gpus.items():
        parts = lpt_partitions(group, max(capacity // max(gpus, 1), 1))
        spans.append(max(sum(j.seconds for j in part) for part in parts))
    return max(spans) if len(spans) == 1 else sum(spans)
