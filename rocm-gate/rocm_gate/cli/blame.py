"""`rocm-gate blame`: run a PR run's blocking failures again on the PR's base (the base experiment).

Run in the gate job after the gates: reads the results folder's gate-report.json, takes its blocking
failures, checks the base out in a second git work tree (`--base`, else the tested merge commit's
first parent), installs it with the upstream's own install command, runs each failing test there in
fresh pytest processes (`--attempts`) within one budget (`--budget-minutes`, the install included),
writes base-check.json into the results folder and removes the work tree. Arguments after `--` go to
every attempt's pytest (the gate's `--rocm-rules=DIR`, a simulated `--rocm-platform`).

    rocm-gate blame --results out/gate --install "pip install -e ." -- --rocm-rules="$PWD/rules"

Exit status: 0 it ran, whatever the base did (base-check.json says; also when the base could not
be prepared, or there was nothing to run); 2 bad input (no gate report, a base that is no commit, a
checkout that is not the tested one). Interrupted, it writes what ran and exits 130 or 143.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_rocm.schemas import values
from rocm_gate.cli import exits


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="run a PR's blocking failures again on its base, in a second work tree",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("out/gate"),
        help="the run's results folder: gate-report.json is read, base-check.json written (default out/gate)",
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path("."),
        help="the tested checkout, where the gates ran (default .)",
    )
    parser.add_argument(
        "--base",
        metavar="SHA",
        help="the base commit (default: HEAD^1 of the checkout when HEAD is a merge commit, as a "
        "pull_request run's is)",
    )
    parser.add_argument(
        "--install",
        metavar="CMD",
        help="the upstream's install command, run with `bash -c` in the base's work tree (the gate "
        "workflow's `install` input); default: nothing installed",
    )
    parser.add_argument(
        "--attempts",
        type=values.Option(values.whole, low=1, high=10),
        default=2,
        help="fresh pytest processes per test on the base (1 to 10; default 2)",
    )
    parser.add_argument(
        "--budget-minutes",
        type=values.Option(values.number, unit="minutes", above=True, low=0.0, high=360.0),
        default=30.0,
        help="the whole experiment's budget, install included (default 30): no attempt starts "
        "past it, and a process still running at its end is stopped",
    )
    parser.add_argument(
        "--max-tests",
        type=values.Option(values.whole, low=1, high=5000),
        default=50,
        help="at most this many blocking failures run on the base (default 50); the rest are named",
    )
    parser.add_argument(
        "--worktree",
        type=Path,
        help="where the base's work tree goes (must not exist; default: a new folder under "
        "$RUNNER_TEMP or the system's temporary folder); removed at the end",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the Python whose pytest runs the attempts (default: this one)",
    )
    parser.add_argument(
        "pytest_args",
        nargs="*",
        metavar="-- PYTEST_ARGS",
        help="given to every attempt's pytest after the node ids (e.g. --rocm-rules=DIR)",
    )


def _print_outcomes(made: dict) -> None:
    from pytest_rocm.schemas.markdown import visible

    if made["why"]:
        print(f"rocm-gate blame: {'not prepared: ' if made['tests'] else ''}{visible(made['why'])}")
    for nodeid, test in made["tests"].items():
        outcomes = (
            ", ".join(
                a["outcome"] + (" then passed" if a.get("verdict") == "flaky" else "")
                for a in test["attempts"]
            )
            or "none"
        )
        line = f"  {visible(nodeid)}: {test['on_base']} on the base ({outcomes})"
        if test["not_run"]:
            line += f"; not run: {visible(test['not_run'])}"
        print(line)
    print(
        f"rocm-gate blame: {len(made['tests'])} test(s), {made['used_s']:.0f} s of the "
        f"{made['budget_s']:.0f} s budget"
    )


def run(args) -> int:
    from rocm_gate.blame import Plan
    from rocm_gate.blame import run as experiment

    if args.attempts > 10:
        print("rocm-gate blame: --attempts: at most 10", file=sys.stderr)
        return exits.BAD_INPUT
    plan = Plan(
        results=args.results,
        checkout=args.checkout,
        base=args.base,
        install=args.install or None,
        attempts=args.attempts,
        budget_s=args.budget_minutes * 60.0,
        max_tests=args.max_tests,
        pytest_args=list(args.pytest_args),
        worktree=args.worktree,
        python=args.python,
        say=lambda line: print(f"rocm-gate blame: {line}", flush=True),
    )
    made = experiment(plan)
    _print_outcomes(made)
    return exits.OK
