"""Which test a worker runs next on a GPU runner: longest module first, under the runner's GPU
capacity.

The rule is shared by the xdist scheduler (`xdist_scheduler.py`) and the simulation
(`simulate.py`), so a simulated makespan is a prediction of the real one.

Each xdist worker runs one test at a time, and (as xdist's workers do) starts a test only once
the one after it is queued or it has been told to stop: a worker's queue holds the test it runs
and at most one more. The running test (the head of a queue) holds its GPUs; the GPUs no head
holds are free.

Pending tests are ordered by module, longest first (see `longest_first`). The first pending test
goes wherever it fits. When it does not fit, it is given a reservation (EASY backfilling): the
earliest time the running tests free enough GPUs for it; another test may go first only if it ends
by then or leaves the reserved test the GPUs it needs.

- An idle worker gets such a test if one fits the free GPUs, and nothing otherwise (it is asked again
  whenever a test ends), so no test waits for GPUs another test holds.
- A worker whose head runs gets its next test at once (the head cannot start otherwise): such a test
  that will fit when the head ends (its GPUs plus the free ones), placed as longest-first would place
  it; failing that any test that fits, delaying the reserved one; failing that the one that needs the
  fewest GPUs (it waits for the device locks, which keep the GPUs exclusive whatever is decided).
- A rerun goes to the front. With nothing pending, a worker is told to stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SHUTDOWN = "shutdown"


@dataclass(frozen=True)
class Job:
    """One test as the scheduler sees it: its index in the collection, its GPU demand and expected
    seconds."""

    index: int
    nodeid: str
    gpus: int
    seconds: float


@dataclass
class Dispatcher:
    capacity: int
    pending: list[Job] = field(default_factory=list)  # longest first
    queues: dict[object, list[Job]] = field(default_factory=dict)
    stopped: set = field(default_factory=set)
    started: dict[object, float] = field(default_factory=dict)  # when each worker's head started

    @classmethod
    def longest_first(cls, jobs: list[Job], capacity: int) -> Dispatcher:
        """Pending tests in modules ordered longest first (a module's expected seconds summed;
        ordering by GPU-seconds instead did worse on mixed runs, benchmarks/scheduling.py), each
        module's tests together and as collected. A module's tests stay together because its
        module-scoped fixtures (a served model: minutes on a GPU runner) are set up again whenever a
        worker's next test comes from another module, and pytest orders a module's tests to share
        its parametrized fixtures. The order is
        stable: two runs with the same durations schedule alike. A demand above the capacity counts as the
        whole runner."""
        capacity = max(capacity, 1)
        clamped = [Job(j.index, j.nodeid, min(max(j.gpus, 0), capacity), j.seconds) for j in jobs]
        total: dict[str, float] = {}
        first: dict[str, int] = {}
        for job in clamped:
            module = job.nodeid.partition("::")[0]
            total[module] = total.get(module, 0.0) + job.seconds
            first.setdefault(module, job.index)

        def order(job: Job):
            module = job.nodeid.partition("::")[0]
            return -total[module], first[module], job.index

        return cls(capacity, sorted(clamped, key=order))

    def add_worker(self, worker) -> None:
        self.queues.setdefault(worker, [])

    @property
    def free(self) -> int:
        return self.capacity - sum(queue[0].gpus for queue in self.queues.values() if queue)

    def _take(
        self, budget: int, must: bool, start: int = 0, begins: float = 0.0, now: float = 0.0
    ) -> Job | None:
        """The pending test to start at `begins` on `budget` GPUs: the first pending test if it
        fits, else one that may go before its reservation, scanning from `start` (the worker's place
        among the busy ones). With `must` (a worker cannot start its own test without a next one),
        failing those any test that fits, then the one that needs the fewest GPUs."""
        if not self.pending:
            return None
        first = self.pending[0]
        if first.gpus <= budget:
            return self.pending.pop(0)
        shadow, spare = self._reservation(first, now)
        start = min(start, len(self.pending) - 1)
        for position in list(range(max(start, 1), len(self.pending))) + list(
            range(1, max(start, 1))
        ):
            job = self.pending[position]
            if job.gpus <= budget and (begins + job.seconds <= shadow or job.gpus <= spare):
                return self.pending.pop(position)
        if not must:
            return None
        # it must take something: what fits, though it delays the first
        for position in range(1, len(self.pending)):
            if self.pending[position].gpus <= budget:
                return self.pending.pop(position)
        fewest = min(
            range(len(self.pending)), key=lambda position: (self.pending[position].gpus, position)
        )
        return self.pending.pop(fewest)

    def _reservation(self, job: Job, now: float) -> tuple[float, int]:
        """When the running tests (the heads) will have freed enough GPUs for `job`, and how many
        GPUs it leaves spare then."""
        free = self.free
        ends = sorted(
            (self._free_at(worker, now, heads_only=True), queue[0].gpus)
            for worker, queue in self.queues.items()
            if queue
        )
        when = now
        for end, gpus in ends:
            if free >= job.gpus:
                break
            free += gpus
            when = end
        return when, free - job.gpus

    def fill(self, workers, now: float = 0.0) -> dict[object, list[Job | str]]:
        """What to send each of these workers now (tests to queue, and/or SHUTDOWN). Every idle
        worker gets its first test before any gets a second, so the first tests spread over the
        workers. A worker whose head waits gets its second test (or SHUTDOWN, so the head runs) as
        longest-first would place it: the worker expected to free up first gets the longest test,
        the next one the next longest, and so on."""
        workers = [w for w in workers if w in self.queues and w not in self.stopped]
        sent: dict[object, list[Job | str]] = {w: [] for w in workers}
        for worker in workers:
            queue = self.queues[worker]
            if not queue and self.pending:
                first = self._take(self.free, must=False, begins=now, now=now)
                # else nothing fits the free GPUs now: asked again when a test ends
                if first is not None:
                    queue.append(first)
                    sent[worker].append(first)
        for worker in sorted(workers, key=lambda w: self._free_at(w, now)):
            queue = self.queues[worker]
            if len(queue) == 1:
                # its place among the busy workers (an idle one waits for GPUs: it takes no test
                # sooner)
                rank = sum(
                    self._free_at(other, now) < self._free_at(worker, now)
                    for other, other_queue in self.queues.items()
                    if other != worker and other_queue and other not in self.stopped
                )
                after = self._take(
                    self.free + queue[0].gpus,
                    must=True,
                    start=rank,
                    begins=self._free_at(worker, now),
                    now=now,
                )
                if after is not None:
                    queue.append(after)
                    sent[worker].append(after)
                    self.started.setdefault(worker, now)
            if not self.pending and len(queue) < 2:
                self.stopped.add(worker)
                sent[worker].append(SHUTDOWN)
                if queue:
                    self.started.setdefault(worker, now)
        return {w: things for w, things in sent.items() if things}

    def _free_at(self, worker, now: float, heads_only: bool = False) -> float:
        """When this worker is expected to have run its queue, or its head only (from when it
        started, or now)."""
        queue = self.queues.get(worker, [])
        if not queue:
            return now
        return self.started.get(worker, now) + sum(
            job.seconds for job in (queue[:1] if heads_only else queue)
        )

    def complete(self, worker, index: int, now: float = 0.0) -> None:
        queue = self.queues.get(worker, [])
        for position, job in enumerate(queue):
            if job.index == index:
                del queue[position]
                break
        self.started.pop(worker, None)
        if queue and (len(queue) >= 2 or worker in self.stopped):
            self.started[worker] = now  # the next test had its successor queued: it starts now

    def requeue_front(self, job: Job) -> None:
        """A rerun (or a crashed worker's queued test): first in line."""
        self.pending.insert(
            0, Job(job.index, job.nodeid, min(job.gpus, self.capacity), job.seconds)
        )

    def remove_worker(self, worker) -> list[Job]:
        """A worker died: its queue (the head first) leaves it."""
        self.stopped.discard(worker)
        return self.queues.pop(worker, [])
