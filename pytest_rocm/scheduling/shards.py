"""Splitting one run's tests across K runners (`rocm-gate shard`): what goes together, and how the
parts are balanced.

A module whose servers take time to start (the duration store's `server_starts`: a real model's
weights load for minutes) pays that start on every runner that runs any of its tests, so its tests
stay together: one unit whose load is its tests' GPU-seconds plus the start, held on the most GPUs
any of its tests asks for (a server for a 2-GPU test holds two while it loads). A module whose tests
alone are more than a runner's fair share (everything's load over K) is cut into as many pieces of
consecutive tests (collection order) as it has shares, each paying the start again: kept whole, it
alone would set the time to signal; cut finer, it would pay starts for little gain. Every other
test is a unit of its own, as before any start was measured. The units then go longest first onto
the least loaded runner (`lpt_partitions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_rocm.scheduling.dispatch import Job
from pytest_rocm.scheduling.simulate import lpt_partitions


@dataclass
class Shard:
    tests: list[Job]  # in collection order
    load: float  # expected GPU-seconds, server starts included
    starts: int  # server starts it pays


def module_of(nodeid: str) -> str:
    return nodeid.partition("::")[0]


def gpu_seconds(job: Job) -> float:
    return job.seconds * max(job.gpus, 1)


def shard(jobs: list[Job], runners: int, module_start) -> list[Shard]:
    """`jobs` (in collection order) onto `runners` shards; `module_start(module)`: the seconds its
    servers are expected to take to start (0: none measured)."""
    by_module: dict[str, list[Job]] = {}
    for job in jobs:
        by_module.setdefault(module_of(job.nodeid), []).append(job)
    starts = {module: module_start(module) for module in by_module}
    start_loads = {
        module: starts[module] * max(max(job.gpus, 1) for job in tests)
        for module, tests in by_module.items()
    }
    fair = (sum(gpu_seconds(job) for job in jobs) + sum(start_loads.values())) / max(runners, 1)
    units: list[tuple[list[Job], float, int]] = []  # (tests, load, server starts)
    for module, tests in by_module.items():
        if starts[module] <= 0:
            units += [([job], gpu_seconds(job), 0) for job in tests]
            continue
        tests_load = sum(gpu_seconds(job) for job in tests)
        pieces = min(len(tests), runners, max(1, math.ceil(tests_load / fair))) if fair > 0 else 1
        for piece in _consecutive(tests, pieces):
            units.append((piece, sum(gpu_seconds(j) for j in piece) + start_loads[module], 1))
    # one Job per unit for the partitioner: its first test names it (a deterministic tie-break)
    stand_ins = [
        Job(number, tests[0].nodeid, 1, load) for number, (tests, load, _) in enumerate(units)
    ]
    shards = []
    for part in lpt_partitions(stand_ins, runners):
        chosen = [units[stand_in.index] for stand_in in part]
        shards.append(
            Shard(
                tests=sorted(
                    (job for tests, _, _ in chosen for job in tests), key=lambda j: j.index
                ),
                load=sum(load for _, load, _ in chosen),
                starts=sum(count for _, _, count in chosen),
            )
        )
    return shards


def _consecutive(tests: list[Job], pieces: int) -> list[list[Job]]:
    """`tests` cut into `pieces` runs of consecutive tests with about equal GPU-seconds."""
    if pieces <= 1:
        return [tests]
    target = sum(gpu_seconds(job) for job in tests) / pieces
    cut: list[list[Job]] = [[]]
    done = 0.0
    for number, job in enumerate(tests):
        left_tests, left_pieces = len(tests) - number, pieces - len(cut) + 1
        # a new piece once this one holds its share, or when every later piece needs a test
        if (
            cut[-1]
            and len(cut) < pieces
            and (done >= target * len(cut) or left_tests < left_pieces)
        ):
            cut.append([])
        cut[-1].append(job)
        done += gpu_seconds(job)
    return cut
