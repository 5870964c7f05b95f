"""`rocm-gate shard --runners K --index I SOURCE...`: the tests runner I of K runs, balanced by
expected GPU-time.

Longest first onto the shard with the least GPU-time so far (ties to the lowest shard number): the
same tests give the same shards on every runner, so K jobs each run `rocm-gate shard ... --index I`
and together run every test once. Expected seconds come from the duration store (`--durations`,
measured by earlier runs: `pytest --rocm-durations FILE`), else from SGLang's `est_time` for a
registrations file, else 1 s each. A module whose servers the store saw start stays on one runner
with its start counted, unless its tests alone outweigh a runner's share
(`pytest_rocm.scheduling.shards`).

SOURCE is what `rocm-gate groups` reads: `pytest --collect-only -q` output (or `-`), a file list, a
folder, or SGLang's registrations (`.jsonl`, with `--suite NAME`: that suite's files, its `est_time`
and its GPU count).

It prints the shard's node ids (or paths), one per line, ready for `pytest @FILE`; the balance goes
to standard error. Exit statuses: 0 done, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rocm_gate.cli import exits
from rocm_gate.cli.arguments import whole_number

# the most runners (and the largest index) a shard takes: any real count, and the 10**20 a matrix
# computed wrongly gives still shards (the extra shards are empty)
MOST_SHARDS = 10**30


def add_parser(commands, name: str) -> None:
    shard = commands.add_parser(
        name,
        help="the tests one of K runners runs, balanced by expected GPU-time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shard.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="collect-only output, a file list, a folder, a registrations .jsonl, or -",
    )
    shard.add_argument(
        "--runners",
        # more runners than tests is allowed (the extra shards are empty), however many
        type=whole_number(1, "expected 1 or more, got {value}", MOST_SHARDS),
        required=True,
        metavar="K",
        help="how many runner jobs share it",
    )
    shard.add_argument(
        "--index",
        type=whole_number(
            0, "expected 0 or more (shards are numbered from 0), got {value}", MOST_SHARDS
        ),
        required=True,
        metavar="I",
        help="this runner's shard, 0 to K-1",
    )
    shard.add_argument(
        "--durations", type=Path, metavar="FILE", help="the duration store earlier runs wrote"
    )
    shard.add_argument(
        "--platform-key",
        metavar="KEY",
        help="whose durations (an SKU such as MI300X; default: the store's only platform)",
    )
    shard.add_argument(
        "--suite", metavar="NAME", help="for a registrations .jsonl: the suite whose files to shard"
    )
    shard.add_argument(
        "--json", action="store_true", help="print every shard and the balance as JSON"
    )


def _fail(message: str) -> int:
    print(f"rocm-gate shard: {message}", file=sys.stderr)
    return exits.BAD_INPUT


def _registered_jobs(path: Path, suite: str | None):
    from pytest_rocm.catalog.sglang import RegistryError, read_jsonl
    from pytest_rocm.scheduling.dispatch import Job
    from rocm_gate.parity.sglang_registry import suite_jobs

    if not suite:
        raise ValueError(
            f"{path}: give --suite NAME for a registrations file (which suite's files to shard)"
        )
    try:
        files = read_jsonl(path)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    found = [job for (_, name), jobs in suite_jobs(files).items() if name == suite for job in jobs]
    if not found:
        raise ValueError(f"{path}: no enabled registration in suite {suite!r}")
    return [Job(index, job.nodeid, job.gpus, job.seconds) for index, job in enumerate(found)]


def run(args) -> int:
    from pytest_rocm.scheduling.durations import DurationStore
    from pytest_rocm.scheduling.shards import balance, split, timed

    if args.index >= args.runners:
        return _fail(
            f"--index {args.index} is not a shard of {args.runners} (use 0 to {args.runners - 1})"
        )
    store = DurationStore.load(args.durations) if args.durations else None
    if store is not None and store.problem:
        print(f"rocm-gate shard: {store.problem}", file=sys.stderr)
    key = args.platform_key
    # a platform's server starts count as much as its tests' durations
    known = sorted(set(store.platforms) | set(store.server_starts)) if store is not None else []
    if key is None and known:
        if len(known) > 1:
            return _fail(
                f"{args.durations} has durations for {', '.join(known)}: "
                "choose one with --platform-key"
            )
        key = known[0]
    try:
        jobs, whole_files = _jobs(args.sources, args.suite)
    except ValueError as exc:
        return _fail(str(exc))
    if not jobs:
        return _fail(f"no tests in {', '.join(args.sources)}")
    jobs = timed(jobs, store, key or "", whole_files)
    module_start = store.module_starts(key or "") if store is not None else (lambda module: 0.0)
    shards = split(jobs, args.runners, module_start)
    shown = balance(shards, args.runners)
    mine = shards[args.index].tests if args.index < len(shards) else []
    if args.json:
        print(
            json.dumps(
                {
                    "index": args.index,
                    "tests": [j.nodeid for j in mine],
                    "balance": shown,
                    "shards": [[j.nodeid for j in s.tests] for s in shards],
                },
                indent=2,
            )
        )
    else:
        for job in mine:
            print(job.nodeid)
    _tell(args, mine, len(jobs), shown)
    return 0


def _jobs(sources: list[str], suite: str | None) -> tuple[list, bool]:
    """The jobs SOURCE names, and whether each is a whole file (a registrations .jsonl's). Raises
    ValueError saying what is wrong."""
    from pytest_rocm.catalog.sources import SourceError, read_sources
    from pytest_rocm.catalog.tree import DEFAULT_TEST_FILES
    from pytest_rocm.scheduling.dispatch import Job

    registry = list(dict.fromkeys(s for s in sources if s.endswith(".jsonl")))
    if registry and len(registry) < len(set(sources)):
        raise ValueError(
            "a registrations .jsonl is sharded on its own: give it without other sources"
        )
    try:
        if registry:
            jobs = [job for path in registry for job in _registered_jobs(Path(path), suite)]
            # numbered across the files, in order: the shards keep that order
            return [Job(index, j.nodeid, j.gpus, j.seconds) for index, j in enumerate(jobs)], True
        notes: list[str] = []
        found, _, _ = read_sources(sources, DEFAULT_TEST_FILES, notes)
    except (SourceError, OSError) as exc:
        raise ValueError(str(exc)) from None
    for note in notes:
        print(f"rocm-gate shard: {note}", file=sys.stderr)
    ids = list(dict.fromkeys(nodeid for nodeid, _ in found))
    return [Job(i, nodeid, 1, 1.0) for i, nodeid in enumerate(ids)], False


def _tell(args, mine: list, total: int, shown: dict) -> None:
    """The shard's size and the balance, on standard error."""
    if not mine:
        # `pytest @FILE` with an empty file would collect every test
        print(
            f"rocm-gate shard: shard {args.index} has no tests (one runner's share is less than a "
            "module's server start, or there are more runners than tests): run nothing on this "
            "runner; `pytest @FILE` with an empty FILE would run every test",
            file=sys.stderr,
        )
    print(
        f"rocm-gate shard: {len(mine)} of {total} tests for shard {args.index} of {args.runners}; "
        f"expected GPU-seconds per shard {shown['gpu_seconds']} (slowest/ideal {shown['slowest_to_ideal']})"
        + (
            f", server starts per shard {shown['server_starts']}"
            if any(shown["server_starts"])
            else ""
        ),
        file=sys.stderr,
    )
