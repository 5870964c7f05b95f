"""`rocm-gate sweep`: finish every check a failed or lost publish left behind (the scheduled sweep
workflow).

For the gate runs of `--workflow` that completed in the last `--hours`, and each
`--class CLASS=RUNNER_GROUP`, publishes the run's completed stage again from GitHub's facts and the
run's artifact, exactly as the publish workflow would have (rocm-gate/rocm_gate/github/sweep.py). With
--trunk, a completed check that blocks and is older than the newest trunk state is published again
against it (a break main learned of after the PR ran stops blocking it). A check
that still cannot be finished `--stuck-after` minutes after its run ended is completed `timed_out`,
saying why, with no rerun button: nothing established that the run was approved, and a rerun's
dispatch approves (someone with write access reruns it on purpose). A run older than the newest
result on its commit is never published over it.

Exit status: 0 swept, 2 bad input or GitHub refused, 4 GitHub could not be reached.
"""

from __future__ import annotations

import argparse
import sys

from pytest_rocm.schemas import values
from rocm_gate.cli import exits, github_options, main_state
from rocm_gate.cli.arguments import whole_number


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="finish the checks that publishing left unfinished",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    github_options.add(parser)
    github_options.add_gate_runs(parser)
    parser.add_argument(
        "--hours",
        type=whole_number(1, "--hours must be at least 1, got {value}", 2160),
        default=48,
        help="gate runs completed in this many hours (1 to 2160; default 48)",
    )
    parser.add_argument(
        "--stuck-after",
        type=whole_number(1, "--stuck-after must be at least 1, got {value}", 10080),
        default=30,
        metavar="MINUTES",
        help="a check still unfinished this long after its run is completed timed_out (1 to 10080; "
        "default 30)",
    )
    parser.add_argument("--incomplete", choices=("block", "neutral"), default="block")
    parser.add_argument(
        "--trunk",
        metavar="FILE",
        action="append",
        help="main's state on a SKU (`rocm-gate history trunk`; repeat for each SKU): every completed "
        "check that blocks (`failure`) and was written before the newest of these states is published "
        "again against it, so a break main learned of after the PR ran stops blocking it",
    )
    main_state.add(parser)
    parser.add_argument(
        "--trunk-max-age",
        type=values.Option(values.hours, high=2160.0),
        default=48.0,
        metavar="HOURS",
        help="a trunk state older than this excuses nothing (0 to 2160; default 48)",
    )


def run(args) -> int:
    from pytest_rocm.schemas.loader import ArtifactError, load_artifact
    from rocm_gate.github import api, publishing
    from rocm_gate.github.sweep import sweep

    try:
        trunk = [load_artifact(path, "trunk") for path in args.trunk or ()] or None
    except ArtifactError as exc:
        print(f"rocm-gate sweep: --trunk {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    try:
        if github_options.app_id() is None:
            raise github_options.OptionError(
                "the sweep writes as the GitHub App: set ROCM_GATE_APP_ID, "
                "ROCM_GATE_APP_PRIVATE_KEY and ROCM_GATE_APP_INSTALLATION_ID"
            )
        main_state.check_hours(args, "sweep")
        client = github_options.api_client(args)
        live = main_state.live(args, client, args.workflow, args.gate_workflow, dict(args.classes))
        classes = [
            (
                publishing.Options(
                    runner_class=c,
                    gate_workflow=args.gate_workflow,
                    runner_group=g,
                    incomplete=args.incomplete,
                    trunk=trunk,
                    trunk_max_age_h=args.trunk_max_age,
                    main_state=live,
                ),
                c,
            )
            for c, g in args.classes
        ]
        try:
            done = sweep(
                client, args.workflow, classes, hours=args.hours, stuck_after_min=args.stuck_after
            )
        finally:
            if live is not None:
                live.close()
                for line in live.log:
                    print(f"rocm-gate sweep: {line}")
    except github_options.OptionError as exc:
        print(f"rocm-gate sweep: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except api.PublishError as exc:
        print(f"rocm-gate sweep: {exc}", file=sys.stderr)
        return exits.BAD_INPUT if exc.refused else exits.NOT_DONE
    for item in done:
        print(f"run {item.run_id} {item.runner_class}: {item.action}")
    print(f"rocm-gate sweep: {len(done)} run(s) needed something")
    return exits.OK
