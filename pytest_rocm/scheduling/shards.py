"""Splitting one run's tests across K runners (`rocm-gate shard`): what goes together, and how the
parts are balanced.

A module whose servers take time to start (the duration store's `server_starts`: a real model's
weights load for minutes) pays that start on every runner that runs any of its tests, held on the
most GPUs any of its tests asks for (a server for a 2-GPU test holds two while it loads). A plan's
true cost counts it so: a runner's load is its tests' GPU-seconds plus one start for each served
module it has tests of.

Which split is best depends on how the starts compare with the tests, so four plans are made and
the best kept:

- `whole`: each served module's tests together on one runner;
- `fair`: a served module whose tests alone outweigh a runner's fair share (everything's load over
  K) cut into that many pieces of consecutive tests (collection order), the rest whole;
- `spread`: every served module cut into as many pieces as there are runners (or tests);
- `per test`: every test alone, starts ignored (what `rocm-gate shard` did before starts were
  measured).

Each is placed longest first onto the least loaded runner, a piece of a module never beside another
piece of it. The plan kept has the least makespan (the slowest runner's true load), except that a
plan within 5% of it that spends fewer GPU-seconds in all wins: paying another start for a second
or two of makespan is no gain. So the plan kept is at most 5% slower than the split made before
starts were measured, and then only to spend fewer GPU-seconds; with no start measured every plan
is that split.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from pytest_rocm.scheduling.dispatch import Job

# a plan whose makespan is within this factor of the least, and that spends fewer GPU-seconds, wins
CLOSE_ENOUGH = 1.05
PLANS = ("whole", "fair", "spread", "per test")  # in this order on a tie: fewer starts first


@dataclass
class Shard:
    tests: list[Job]  # in collection order
    load: float  # expected GPU-seconds, a start for each served module it has tests of
    starts: int  # server starts it pays


@dataclass
class Plan:
    name: str
    shards: list[Shard]

    @property
    def makespan(self) -> float:
        return max((s.load for s in self.shards), default=0.0)

    @property
    def total(self) -> float:
        return sum(s.load for s in self.shards)


def module_of(nodeid: str) -> str:
    return nodeid.partition("::")[0]


def gpu_seconds(job: Job) -> float:
    return job.seconds * max(job.gpus, 1)


def shard(jobs: list[Job], runners: int, module_start) -> list[Shard]:
    """`jobs` (in collection order) onto `runners` shards; `module_start(module)`: the seconds its
    servers are expected to take to start (0: none measured)."""
    return best_plan(plans(jobs, runners, module_start)).shards


def best_plan(candidates: list[Plan]) -> Plan:
    fastest = min(plan.makespan for plan in candidates)
    close = [plan for plan in candidates if plan.makespan <= fastest * CLOSE_ENOUGH + 1e-9]
    return min(close, key=lambda plan: (plan.total, PLANS.index(plan.name)))


def plans(jobs: list[Job], runners: int, module_start) -> list[Plan]:
    """The four plans (`PLANS`), each with its shards' true loads."""
    runners = max(runners, 1)
    by_module: dict[str, list[Job]] = {}
    for job in jobs:
        by_module.setdefault(module_of(job.nodeid), []).append(job)
    start_loads = {}
    for module, tests in by_module.items():
        seconds = module_start(module)
        if seconds > 0:
            start_loads[module] = seconds * max(max(job.gpus, 1) for job in tests)
    fair = (sum(gpu_seconds(job) for job in jobs) + sum(start_loads.values())) / runners

    def pieces_for(name: str, tests: list[Job]) -> int:
        if name == "whole":
            return 1
        if name == "spread":
            return min(len(tests), runners)
        tests_load = sum(gpu_seconds(job) for job in tests)
        return min(len(tests), runners, max(1, math.ceil(tests_load / fair))) if fair > 0 else 1

    made = []
    for name in PLANS:
        units: list[tuple[str | None, list[Job], float]] = []  # (served module, tests, load)
        for module, tests in by_module.items():
            if name == "per test" or module not in start_loads:
                units += [(None, [job], gpu_seconds(job)) for job in tests]
                continue
            for piece in consecutive(tests, pieces_for(name, tests)):
                load = sum(gpu_seconds(job) for job in piece) + start_loads[module]
                units.append((module, piece, load))
        placed = place(units, runners)
        made.append(Plan(name, [_shard(tests, start_loads) for tests in placed]))
    return made


def place(units: list[tuple[str | None, list[Job], float]], runners: int) -> list[list[Job]]:
    """Longest first (ties: the first test's node id) onto the least loaded runner (ties: the lowest
    number), never onto a runner that already holds a piece of the same served module (a module has
    at most as many pieces as there are runners, so one is always free)."""
    loads = [(0.0, number) for number in range(runners)]
    heapq.heapify(loads)
    placed: list[list[Job]] = [[] for _ in range(runners)]
    holding: dict[str, set[int]] = {}
    for module, tests, load in sorted(units, key=lambda unit: (-unit[2], unit[1][0].nodeid)):
        skipped = []
        while True:
            least, number = heapq.heappop(loads)
            if module is None or number not in holding.get(module, ()):
                break
            skipped.append((least, number))
        for entry in skipped:
            heapq.heappush(loads, entry)
        placed[number] += tests
        if module is not None:
            holding.setdefault(module, set()).add(number)
        heapq.heappush(loads, (least + load, number))
    return placed


def _shard(tests: list[Job], start_loads: dict[str, float]) -> Shard:
    """A runner's tests in collection order, with its true load: its tests, and one start for each
    served module it has tests of."""
    served = {module_of(job.nodeid) for job in tests} & start_loads.keys()
    return Shard(
        tests=sorted(tests, key=lambda job: job.index),
        load=sum(gpu_seconds(job) for job in tests) + sum(start_loads[m] for m in served),
        starts=len(served),
    )


def consecutive(tests: list[Job], pieces: int) -> list[list[Job]]:
    """`tests` cut into `pieces` runs of consecutive tests with about equal GPU-seconds: each cut at
    the boundary between tests nearest its share."""
    if pieces <= 1:
        return [tests]
    share = sum(gpu_seconds(job) for job in tests) / pieces
    cut: list[list[Job]] = [[]]
    done = 0.0
    for number, job in enumerate(tests):
        seconds = gpu_seconds(job)
        tests_left, pieces_left = len(tests) - number, pieces - len(cut)
        # cut before this test where that leaves the piece nearer its share than after it, or
        # where every piece still to come needs a test of its own
        if (
            cut[-1]
            and pieces_left > 0
            and (done + seconds / 2 > share * len(cut) or tests_left <= pieces_left)
        ):
            cut.append([])
        cut[-1].append(job)
        done += seconds
    return cut


def timed(jobs: list[Job], store, key: str, whole_files: bool) -> list[Job]:
    """The jobs with the duration store's expected seconds (`store`: a `DurationStore`, or None to
    keep each job's own). A job of `whole_files` runs a whole file: the sum of its tests measured,
    else its own estimate."""
    if store is None:
        return jobs
    if whole_files:
        measured: dict[str, float] = {}
        for nodeid, seconds in store.measured(key).items():
            path = nodeid.partition("::")[0]
            measured[path] = measured.get(path, 0.0) + seconds
        return [Job(j.index, j.nodeid, j.gpus, measured.get(j.nodeid, j.seconds)) for j in jobs]
    expected = store.expected(key)
    return [Job(j.index, j.nodeid, j.gpus, expected(j.nodeid)) for j in jobs]


def split(jobs: list[Job], runners: int, module_start) -> list[Shard]:
    """The shards of `runners`: more runners than tests gives one empty shard after the last test's,
    standing for all the others (no memory is spent on a million empty ones)."""
    shards = shard(jobs, min(runners, len(jobs)), module_start)
    return shards + [Shard([], 0.0, 0)] * (min(runners, len(jobs) + 1) - len(shards))


def balance(shards: list[Shard], runners: int) -> dict:
    """The shards' expected GPU-seconds, server starts, the ideal share of `runners` and the
    slowest's ratio to it."""
    loads = [s.load for s in shards]
    ideal = sum(loads) / runners
    return {
        "runners": runners,
        "gpu_seconds": [round(x, 1) for x in loads],
        "server_starts": [s.starts for s in shards],
        "ideal": round(ideal, 1),
        "slowest_to_ideal": round(max(loads) / ideal, 4) if ideal else None,
    }
