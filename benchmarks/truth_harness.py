"""The truth harness (tests/truth.py) over many generated histories: how many histories and checks it
ran, and its disagreements with the oracle (goal 0); with the PRs blocked by a break no main run had
shown yet (the sweep judges those again once main learns of it) and the PRs' own regressions
blocked (goal 100%).

    .venv/bin/python benchmarks/truth_harness.py [--histories 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from truth import Verdicts, judge, world  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = Verdicts()
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.histories):
        judge(world(random.Random(seed), seed), found)
    seconds = time.perf_counter() - started
    blocked = found.own_blocked / found.own_regressions if found.own_regressions else 1.0
    print(f"histories generated and judged: {found.histories} ({seconds:.1f} s)")
    print(f"checks against the oracle: {found.checks}")
    print(f"disagreements with the oracle: {len(found.disagreements)} (goal 0)")
    print(
        f"PRs' own regressions blocked: {found.own_blocked}/{found.own_regressions} = {blocked:.1%} "
        "(goal 100%)"
    )
    print(
        f"blocking failures that were main's but no main run had shown yet: {found.unknowable_blocks} "
        f"at publish time; {found.still_unknowable} still, judged again against main's newest state "
        "(the sweep)"
    )
    for line in found.disagreements[:20]:
        print("  " + line)
    return 1 if found.disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
