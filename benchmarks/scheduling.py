"""Scheduling on one GPU runner and sharding across runners, on SGLang's real CI registrations.

1. One 8-GPU node per suite: every enabled registration of a suite (its `est_time`, its GPU count from
   the suite name), as makespans over the lower bound `max(sum(gpus x seconds) / 8, longest test)`:
   the project's scheduler (`--rocm-scheduler=gpu`, simulated with the rule it runs), xdist's blind
   `load` order, and SGLang's own longest-first partitions (8 // gpus partitions run side by side).
2. One MI300X node for all of SGLang's per-commit AMD suites at once (1-, 2- and 8-GPU tests mixed):
   where packing by GPU demand matters. SGLang runs its suites as separate jobs: here one after another.
3. Sharding a suite over the runners SGLang uses for it: the slowest shard over the ideal, for
   `rocm-gate shard` and for SGLang's `auto_partition` (longest first by est_time, filename tie-break).
4. The real scheduler (not the simulation) on a suite of sleeping tests with GPU markers (a file each) on a
   simulated `mi300x-8`, 8 xdist workers: measured makespan (first test start to last test end, from the records)
   against the simulation of the same tests with the durations the first run measured.
5. Seeded random mixes of GPU demands and durations (synthetic), so one small case decides nothing.
6. Servers started ahead of need on a GPU runner: each of SGLang's AMD partitions (its files one after
   another, as a runner runs them; each file starts its own server) with real model start-up times, the
   makespan when every server starts when its file asks and when the next file's server starts while the
   current file's tests run, on GPUs the current file does not hold: this assumes a runner with twice the
   GPUs its files need (an 8-GPU node running four 1-GPU or two 2-GPU partitions; SGLang's own 1-GPU
   runners have no second GPU, and 8-GPU files leave none free). Start-up times by the file's GPU count,
   from published measurements (START_S); measured here: the tiny model's CPU server 35 s quiet, 70 s busy.

    .venv/bin/python benchmarks/scheduling.py [--registrations FILE] [--skip-real]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_rocm.catalog.sglang import read_jsonl  # noqa: E402
from pytest_rocm.scheduling.dispatch import Job  # noqa: E402
from pytest_rocm.scheduling.simulate import (  # noqa: E402
    lower_bound,
    lpt_partitions,
    project_makespan,
    sglang_partition_makespan,
    xdist_load_makespan,
)
from rocm_gate.parity.sglang_registry import suite_jobs  # noqa: E402

CAPACITY = 8
# SGLang's partition counts for its AMD per-commit suites (research/sglang-pytorch-ci.md:
# pr-test-amd.yml)
SGLANG_PARTITIONS = {
    "stage-b-test-1-gpu-small-amd": 14,
    "stage-b-test-1-gpu-large-amd": 8,
    "stage-b-test-2-gpu-large-amd": 2,
    "stage-c-test-large-8-gpu-amd": 3,
}


def one_node(all_suites) -> None:
    print(
        "1. one 8-GPU node per suite (suites of 5+ files that fit a node), makespan / lower bound"
    )
    print(
        f"   {'suite':42} {'files':>5} {'gpus':>4} {'bound s':>8} {'project':>8} {'xdist load':>10} {'SGLang':>7}"
    )
    totals = {"bound": 0.0, "project": 0.0, "load": 0.0, "sglang": 0.0}
    worst = ("", 0.0)
    for (_backend, suite), jobs in sorted(all_suites.items()):
        if len(jobs) < 5 or jobs[0].gpus > CAPACITY:
            continue
        bound = lower_bound(jobs, CAPACITY)
        figures = {
            "bound": bound,
            "project": project_makespan(jobs, CAPACITY),
            "load": xdist_load_makespan(jobs, CAPACITY),
            "sglang": sglang_partition_makespan(jobs, CAPACITY),
        }
        for key, value in figures.items():
            totals[key] += value
        worst = max(worst, (suite, figures["project"] / bound), key=lambda w: w[1])
        print(
            f"   {suite:42} {len(jobs):5} {jobs[0].gpus:4} {bound:8.0f} {figures['project'] / bound:8.3f} "
            f"{figures['load'] / bound:10.3f} {figures['sglang'] / bound:7.3f}"
        )
    print(
        f"   all suites (sum of makespans / sum of bounds): project {totals['project'] / totals['bound']:.3f}x, "
        f"xdist load {totals['load'] / totals['bound']:.3f}x, SGLang {totals['sglang'] / totals['bound']:.3f}x "
        f"(goal <= 1.05x); project's worst suite: {worst[0]} {worst[1]:.3f}x"
    )


def mixed_node(all_suites) -> None:
    jobs = []
    for (backend, suite), registered in sorted(all_suites.items()):
        if backend == "amd" and suite.startswith(("stage-a", "stage-b", "stage-c")):
            jobs += [Job(len(jobs), f"{suite}/{j.nodeid}", j.gpus, j.seconds) for j in registered]
    bound = lower_bound(jobs, CAPACITY)
    sglang = sum(
        sglang_partition_makespan([j for j in jobs if j.nodeid.startswith(suite + "/")], CAPACITY)
        for suite in {j.nodeid.split("/")[0] for j in jobs}
    )
    print(
        f"2. all per-commit AMD suites on one MI300X node ({len(jobs)} files, 1- to 8-GPU): bound {bound:.0f} s; "
        f"project {project_makespan(jobs, CAPACITY) / bound:.3f}x, xdist load "
        f"{xdist_load_makespan(jobs, CAPACITY) / bound:.3f}x, SGLang's suites one after another {sglang / bound:.3f}x"
    )


def sharding(all_suites) -> None:
    print("3. sharding over SGLang's partition counts: slowest shard / ideal")
    for suite, parts in SGLANG_PARTITIONS.items():
        jobs = all_suites.get(("amd", suite))
        if not jobs:
            continue
        ideal = sum(j.seconds for j in jobs) / parts
        ours = max(sum(j.seconds for j in shard) for shard in lpt_partitions(jobs, parts))
        # SGLang's auto_partition: est_time, largest first (stable, filename tie-break), onto the
        # smallest sum
        loads = [0.0] * parts
        for job in sorted(jobs, key=lambda j: (-j.seconds, j.nodeid)):
            loads[loads.index(min(loads))] += job.seconds
        print(
            f"   {suite:32} {len(jobs):3} files over {parts:2}: rocm-gate shard {ours / ideal:.3f}, "
            f"SGLang auto_partition {max(loads) / ideal:.3f} (longest file {max(j.seconds for j in jobs):.0f} s, "
            f"ideal {ideal:.0f} s)"
        )


SLEEPER = """
    import time
    import pytest

    @pytest.mark.hardware(gpus={gpus})
    def test_sleep(gpus):
        time.sleep({seconds})
"""
CASES = [
    ("a", 2, 3.2),
    ("b", 2, 2.4),
    ("c", 4, 2.0),
    ("d", 1, 1.6),
    ("e", 1, 1.6),
    ("f", 8, 1.2),
    ("g", 1, 0.8),
    ("h", 2, 0.8),
    ("i", 1, 2.4),
    ("j", 1, 0.4),
    ("k", 4, 1.2),
    ("l", 1, 1.2),
    ("m", 1, 2.0),
    ("n", 2, 1.6),
]


def measured_makespan(folder: Path) -> float:
    records = [json.loads(line) for path in folder.glob("records-*.jsonl") for line in path.open()]
    calls = [r for r in records if "kind" not in r and r["when"] == "call"]
    return max(r["t"] for r in calls) - min(r["t"] - r["duration"] for r in calls)


def real_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # a file per test, as GPU suites mostly are (and SGLang's registrations)
        for name, gpus, seconds in CASES:
            (root / f"test_{name}.py").write_text(
                textwrap.dedent(SLEEPER.format(gpus=gpus, seconds=seconds))
            )
        (root / "pytest.ini").write_text("[pytest]\n")
        base = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "8",
            "--rocm-scheduler=gpu",
            "--rocm-platform=mi300x-8",
            "--rocm-durations=durations.json",
        ]
        spans = []
        for run in ("learn", "run1", "run2", "run3"):
            done = subprocess.run(
                [*base, f"--rocm-report-dir={run}"], cwd=root, capture_output=True, text=True
            )
            if done.returncode != 0:
                sys.exit(f"pytest failed:\n{done.stdout[-3000:]}")
            if run != "learn":
                spans.append(measured_makespan(root / run))
        store = json.loads((root / "durations.json").read_text())["platforms"]["MI300X"]
        learned = {
            nodeid.split("::")[0]: statistics.median(samples) for nodeid, samples in store.items()
        }
        jobs = [
            Job(i, f"test_{name}.py::test_sleep", gpus, learned[f"test_{name}.py"])
            for i, (name, gpus, _) in enumerate(CASES)
        ]
        simulated = project_makespan(jobs, CAPACITY)
        measured = statistics.median(spans)
        print(
            f"4. the real scheduler on a simulated mi300x-8 ({len(CASES)} sleeping tests, 1 to 8 GPUs, 8 workers): "
            f"measured makespan median {measured:.2f} s (runs {', '.join(f'{s:.2f}' for s in spans)}), simulated "
            f"{simulated:.2f} s, measured/simulated {measured / simulated:.3f}; lower bound "
            f"{lower_bound(jobs, CAPACITY):.2f} s, xdist load simulated {xdist_load_makespan(jobs, CAPACITY):.2f} s"
        )


def random_mixes(trials: int = 300) -> None:
    """Seeded random runs of 8 to 60 tests, 1/2/4/8 GPUs (mostly 1), log-normal durations: no single
    case decides which rule is better."""
    import random

    rng = random.Random(1)
    ratios: dict[str, list[float]] = {"project": [], "xdist load": []}
    for _ in range(trials):
        jobs = [
            Job(
                i,
                f"test_{i}.py::test",
                rng.choice([1, 1, 1, 1, 2, 2, 4, 8]),
                round(rng.lognormvariate(3, 1), 1),
            )
            for i in range(rng.randint(8, 60))
        ]
        bound = lower_bound(jobs, CAPACITY)
        ratios["project"].append(project_makespan(jobs, CAPACITY) / bound)
        ratios["xdist load"].append(xdist_load_makespan(jobs, CAPACITY) / bound)
    print(
        f"5. {trials} seeded random mixes (8-60 tests, 1-8 GPUs) on one 8-GPU node, makespan / lower bound: "
        + "; ".join(
            f"{name} mean {statistics.mean(r):.3f}, p90 {sorted(r)[int(0.9 * len(r))]:.3f}, "
            f"max {max(r):.3f}"
            for name, r in ratios.items()
        )
    )


# Seconds from launch to healthy by GPU count of the file's server, from published measurements:
# - 1 GPU (up to 8B): 75 s, between vllm-project/vllm#20264 (Llama 3.2 with the torch.compile cache: first
#   answer 59 s after launch) and run-ai/runai-model-streamer#67 (an 8B's engine init 90.8 s after weights);
# - 2 GPUs: 215 s, vllm-project/vllm#19824 (Llama-70B-FP8: 60 s P2P check, 10 s weights from page cache, 15 s
#   Dynamo, 70 s torch.compile, 60 s CUDA graphs);
# - 4 and 8 GPUs: 390 s, sgl-project/sglang#27139 (Qwen3-235B FP8 on 4 GPUs "~6.5 minutes"; "3-6+ minutes for
#   large models").
# SGLang's est_time is the file's whole time (its setUpClass starts the server): its tests are the rest, at
# least a fifth of it.
START_S = {1: 75.0, 2: 215.0, 4: 390.0, 8: 390.0}


def serial_makespan(files: list[tuple[float, float]], ahead: bool) -> float:
    """Files (server start seconds, test seconds) run one after another. Ahead: file i+1's server is
    launched when file i's tests begin, and file i+1's tests begin when both are done."""
    end = 0.0
    ready = files[0][0] if files else 0.0
    for index, (_start, tests) in enumerate(files):
        if not ahead:
            end += _start + tests
            continue
        begin = max(end, ready)
        if index + 1 < len(files):
            ready = begin + files[index + 1][0]  # launched as this file's tests begin
        end = begin + tests
    return end


def starts_ahead(all_suites) -> None:
    print(
        "6. servers started ahead on a GPU runner: SGLang's AMD partitions, real start-up times (START_S)"
    )
    print(
        f"   {'suite':32} {'gpus':>4} {'runners':>7} {'on demand s':>11} {'ahead s':>8} {'ratio':>6}"
    )
    total = {"demand": 0.0, "ahead": 0.0}
    for suite, parts in SGLANG_PARTITIONS.items():
        jobs = all_suites.get(("amd", suite))
        if not jobs:
            continue
        gpus = jobs[0].gpus
        if 2 * gpus > CAPACITY:
            print(
                f"   {suite:32} {gpus:4}: a second server does not fit beside the first on {CAPACITY} GPUs"
            )
            continue
        start = START_S[gpus]
        demand = ahead = 0.0
        for partition in lpt_partitions(jobs, parts):
            files = [(start, max(j.seconds - start, j.seconds / 5)) for j in partition]
            # the partitions run side by side: the suite takes as long as its slowest
            demand = max(demand, serial_makespan(files, ahead=False))
            ahead = max(ahead, serial_makespan(files, ahead=True))
        total["demand"] += demand
        total["ahead"] += ahead
        print(f"   {suite:32} {gpus:4} {parts:7} {demand:11.0f} {ahead:8.0f} {ahead / demand:6.3f}")
    print(
        f"   all: {total['ahead']:.0f} s with servers started ahead against {total['demand']:.0f} s on demand: "
        f"{total['ahead'] / total['demand']:.3f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registrations",
        type=Path,
        default=REPO / "tests/data/upstream/sglang-ci-registrations.jsonl",
    )
    parser.add_argument("--skip-real", action="store_true", help="simulations only")
    args = parser.parse_args()
    all_suites = suite_jobs(read_jsonl(args.registrations))
    one_node(all_suites)
    mixed_node(all_suites)
    sharding(all_suites)
    if not args.skip_real:
        real_run()
    random_mixes()
    starts_ahead(all_suites)


if __name__ == "__main__":
    main()
