"""A day of vLLM-like activity through the shipped workflow files: main's state, live, as deployed.

The upstream repository of the trigger chain's tests (tests/upstream_repo.py: examples/upstream/ as shipped,
the loopback GitHub validated by GitHub's OpenAPI description, tests/actions.py playing each event as GitHub
documents it) lives a day: a commit lands on main every `--push-every` minutes and its push run completes
`--main-minutes` later; a PR opens every `--pr-every` minutes on main's newest commit (some with a regression
of their own), its check published by the publish workflow as its run completes; a break lands on main at a
third of the day and is fixed at two thirds; the sweep runs every `--sweep-every` minutes. Every run is real:
the gate job runs pytest with the plugin on the upstream's gate tests, publish runs `rocm-gate publish
--workflow-run` with the embedded store carried as an artifact.

It prints, against the goals:
- clean PRs blocked at their publish by a failure a completed main run had already shown (goal 0);
- clean PRs blocked at their publish by a break no main run had completed on yet (nothing can know it then),
  and for each of them, the minutes from the completion of the main run that showed the failure to the check
  being right (goal: under one sweep interval), with the wall-clock seconds that main run's publish took;
- the PRs' own regressions blocked (goal 100%).

    .venv/bin/python benchmarks/workflow_day.py [--hours 24] [--push-every 30] [--pr-every 45] [--seed 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from upstream_repo import (  # noqa: E402
    GATES,
    REGRESSION,
    checks,
    loopback_github,
    repository,
    set_gate_input,
)

OWN_REGRESSION = {
    "tests/entrypoints/openai/test_api.py": GATES["tests/entrypoints/openai/test_api.py"].replace(
        "assert 'ok'", "assert '', 'chat completion came back empty'"
    )
}


@dataclass
class Pr:
    number: int
    head: str
    base: str
    own: bool
    published: dt.datetime
    broken_base: bool  # its base holds main's break
    known: bool = False  # a completed main run had shown the break when it was published
    blocked: bool = False
    right_at: dt.datetime | None = None


@dataclass
class Day:
    prs: list[Pr] = field(default_factory=list)
    main_completions: list[tuple[dt.datetime, str, bool]] = field(default_factory=list)
    publish_seconds: list[float] = field(default_factory=list)  # a main run's events, wall clock


def live_day(args, root: Path) -> Day:
    rng = random.Random(args.seed)
    day = Day()
    with loopback_github() as github:
        upstream = repository(github, root)
        if args.base_check_minutes is not None:  # the caller's setting of the base experiment
            set_gate_input(upstream, "base-check-minutes", str(args.base_check_minutes))
        start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=args.hours + 1)
        upstream.clock = start
        end = start + dt.timedelta(hours=args.hours)
        broke_at, fixed_at = start + (end - start) / 3, start + 2 * (end - start) / 3
        broken = False
        pending: list[tuple[dt.datetime, str, bool]] = []  # (completes, sha, holds the break)
        next_push, next_pr, next_sweep = start, start + dt.timedelta(minutes=5), start
        number = 200
        while upstream.clock < end:
            upstream.clock = min(next_push, next_pr, next_sweep, *(p[0] for p in pending))
            now = upstream.clock
            for item in [p for p in pending if p[0] <= now]:  # a main run completes
                pending.remove(item)
                began = time.perf_counter()
                upstream.clock = item[0] - dt.timedelta(minutes=30)  # its run started then
                upstream.push(landed=item[1])
                upstream.clock = now
                day.publish_seconds.append(time.perf_counter() - began)
                day.main_completions.append(item)
                update(day, github, now)
            if now >= next_push:
                files = {"docs/log.md": f"landed at {now.isoformat()}\n"}
                if not broken and broke_at <= now < fixed_at:
                    files, broken = {**files, **REGRESSION}, True
                elif broken and now >= fixed_at:
                    files, broken = {**files, **GATES}, False
                sha = upstream.commit(files, f"main at {now:%H:%M}")
                pending.append((now + dt.timedelta(minutes=args.main_minutes), sha, broken))
                next_push = now + dt.timedelta(minutes=args.push_every)
            if now >= next_pr:
                number += 1
                own = rng.random() < args.own_share
                change = OWN_REGRESSION if own else {"vllm/model.py": f"x = {number}\n"}
                pull = upstream.open_pull(number, change, fork=False, author="maintainer")
                known = (
                    any(holds and done <= now for done, _sha, holds in day.main_completions[-50:])
                    and broken
                )
                upstream.pull_request(pull, "opened", "maintainer")
                pr = Pr(number, pull.head, pull.base, own, now, broken, known and broken)
                [check] = checks(github, pull.head)
                pr.blocked = check["conclusion"] == "failure"
                if not (pr.blocked and not own):
                    pr.right_at = now
                day.prs.append(pr)
                next_pr = now + dt.timedelta(minutes=args.pr_every)
            if now >= next_sweep:
                upstream.schedule("rocm-gate-sweep.yml")
                update(day, github, now)
                next_sweep = now + dt.timedelta(minutes=args.sweep_every)
    return day


def update(day: Day, github, now: dt.datetime) -> None:
    """A blocked clean PR whose check no longer blocks is right from `now`."""
    for pr in day.prs:
        if pr.right_at is None and not pr.own:
            [check] = checks(github, pr.head)
            if check["conclusion"] != "failure":
                pr.right_at = now


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument(
        "--push-every", type=float, default=30.0, help="minutes between commits on main"
    )
    parser.add_argument("--main-minutes", type=float, default=30.0, help="a main run's length")
    parser.add_argument("--pr-every", type=float, default=45.0, help="minutes between PRs")
    parser.add_argument("--sweep-every", type=float, default=30.0, help="the sweep's cron interval")
    parser.add_argument(
        "--own-share", type=float, default=0.25, help="PRs with a regression of their own"
    )
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--base-check-minutes",
        type=int,
        help="the gate's base experiment budget as the caller sets it (0: off; default: the "
        "reusable workflow's)",
    )
    args = parser.parse_args()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="workflow-day-") as root:
        day = live_day(args, Path(root))
    report(day, args, time.perf_counter() - began)
    return 0


def minutes_to_right(day: Day, pr: Pr) -> float | None:
    """Minutes from the completion of the first main run that showed the break to the check being
    right; None where it never was."""
    shown = [done for done, _, holds in day.main_completions if holds and done >= pr.published]
    if pr.right_at is None or not shown:
        return None
    return max(0.0, (pr.right_at - shown[0]).total_seconds() / 60)


def report(day: Day, args, seconds: float) -> None:
    clean = [p for p in day.prs if not p.own]
    own = [p for p in day.prs if p.own]
    known = [p for p in clean if p.blocked and p.known]
    unknown = [p for p in clean if p.blocked and not p.known]
    waits = [m for p in unknown if (m := minutes_to_right(day, p)) is not None]
    never = [p.number for p in unknown if p.right_at is None]
    print(
        f"a day through the shipped workflows ({args.hours:g} h, {seconds:.0f} s): {len(day.main_completions)} main "
        f"runs ({args.push_every:g} min apart, {args.main_minutes:g} min each), {len(day.prs)} PRs ({len(own)} with "
        f"a regression of their own), a break landing a third of the way and fixed at two thirds, the sweep "
        f"every {args.sweep_every:g} min"
    )
    print(
        f"clean PRs blocked by a failure a completed main run had already shown: {len(known)} (goal 0) "
        f"{[p.number for p in known]}"
    )
    print(
        f"clean PRs blocked by a break no main run had completed on yet: {len(unknown)}; minutes from the main "
        f"run that showed it to the check being right: median "
        f"{statistics.median(waits) if waits else '-'}, longest {max(waits) if waits else '-'} (goal: under "
        f"{args.sweep_every:g}); never right: {never}"
    )
    print(
        f"a main run's events (its gate run, publish and history job) took {statistics.median(day.publish_seconds):.1f} s "
        f"median on this machine (the wall-clock bound of 'at once')"
        if day.publish_seconds
        else "no main run completed"
    )
    on_broken = [p for p in clean if p.broken_base and not p.known]
    print(
        f"clean PRs based on the break before any main run showed it: {len(on_broken)}, of which "
        f"{sum(not p.blocked for p in on_broken)} were right at their publish (the base experiment "
        f"{'off' if args.base_check_minutes == 0 else 'on'})"
    )
    caught = sum(p.blocked for p in own)
    print(f"PR regressions blocked: {caught}/{len(own)} (goal 100%)")


if __name__ == "__main__":
    raise SystemExit(main())
