"""`rocm-gate drain`: should this node stop taking jobs? Decided from its history, with the evidence
and the commands.

Reads earlier preflight artifacts (`rocm-gate preflight --out`) and gate reports under --history,
and prints the reasons, the `kubectl` cordon/drain commands, and the image to roll back to (the last
one whose run on the default branch concluded `success`, with the report it comes from). It prints
commands, each argument quoted for the shell; it never runs them. A history file that is not a valid
artifact is skipped and named on stderr.

Exit status: 0 keep the node, 3 drain it, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rocm_gate.cli import exits


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="decide from a node's history whether to drain it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--history",
        metavar="DIR",
        required=True,
        help="folder of preflight.json and gate-report.json files",
    )
    parser.add_argument(
        "--node",
        required=True,
        help="the node (as preflight's `node` and the manifest's `runner` name it)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def run(args) -> int:
    from pytest_rocm.schemas.markdown import plain
    from rocm_gate.preflight import drain

    try:
        history = drain.read_history(Path(args.history))
    except drain.EvidenceFolderError as exc:
        print(f"rocm-gate drain: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    # named, and the decision is made on the files that could be read
    for problem in history.skipped:
        print(f"rocm-gate drain: skipped {problem}", file=sys.stderr)
    decision = drain.decide(args.node, history)
    if args.json:
        print(
            json.dumps(
                {
                    **decision.to_dict(),
                    "ignored_files": history.ignored,
                    "skipped_files": history.skipped,
                },
                indent=2,
            )
        )
    else:
        print(
            f"node {plain(args.node)}: {'DRAIN' if decision.drain else 'keep'} "
            f"({len(history.preflights)} preflight(s), {len(history.reports)} gate report(s) read"
            + (f", {len(history.skipped)} file(s) skipped" if history.skipped else "")
            + ")"
        )
        lines = [
            *(f"  - {reason}" for reason in decision.reasons),
            *(f"  note: {note}" for note in decision.notes),
        ]
        if decision.rollback_image:
            lines.append(
                f"  last image with a successful run on the default branch: {decision.rollback_image}"
                + (
                    " (the current one)"
                    if decision.rollback_image == decision.current_image
                    else ""
                )
                + f" (from {plain(decision.rollback_from)})"
            )
        commands = decision.commands()
        if commands:
            lines += ["", "commands (run them yourself):", *(f"  {c}" for c in commands)]
        print("\n".join(lines))
    return exits.NO if decision.drain else exits.OK
