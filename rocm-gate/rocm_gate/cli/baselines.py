"""`rocm-gate baselines diff OLD NEW`: every baseline a change loosened, tightened, moved, added or
removed.

Exit statuses: 0 done, 2 unreadable or invalid baseline file, 3 with --fail-on-loosened when a
threshold was loosened (a loosened baseline is a reviewed change, never automatic).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rocm_gate.cli import exits


def add_parser(commands, name: str) -> None:
    baselines = commands.add_parser(
        name,
        help="baseline files: what a change loosened or tightened",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    baseline_commands = baselines.add_subparsers(dest="baselines_command", required=True)
    diff = baseline_commands.add_parser(
        "diff",
        help="compare two baseline files or folders (exit 3 with "
        "--fail-on-loosened when a threshold was loosened)",
    )
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    diff.add_argument("--json", action="store_true")
    diff.add_argument("--fail-on-loosened", action="store_true")


def run(args) -> int:
    from pytest_rocm.gates import baselines as baselines_mod

    try:
        changes = baselines_mod.diff(baselines_mod.load([args.old]), baselines_mod.load([args.new]))
    except baselines_mod.BaselineError as exc:
        print(f"rocm-gate baselines diff: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    if args.json:
        print(json.dumps(changes, indent=2))
    else:
        for change in changes:
            what = f"{change['test']} :: {change['metric']} @ {change['platform']}"
            detail = " -> ".join(x for x in (change.get("before"), change.get("after")) if x)
            print(f"{change['change'].upper():<9} {what}: {detail}")
        counts = {
            kind: sum(c["change"] == kind for c in changes)
            for kind in ("loosened", "tightened", "moved", "added", "removed")
        }
        print(", ".join(f"{n} {kind}" for kind, n in counts.items()))
    loosened = any(c["change"] == "loosened" for c in changes)
    return exits.NO if loosened and args.fail_on_loosened else 0
