"""`rocm-gate rerun`: a `check_run` webhook (a button click, GitHub's Re-run) to a dispatch of the
gate workflow.

"Re-run AMD" reruns the failed and infra gates (scope `failed`), "Re-run all" and GitHub's Re-run
every gate (scope `all`), for the check's head SHA and runner class, on the default branch's
workflow file. Events for other checks, other Apps, or senders without write access are ignored,
with the reason printed.

`--list-failed RESULTS_DIR` prints, one per line, the test ids a `failed`-scope rerun runs
(failures, infra faults and gates that never ran in that run's gate report); the gate workflow
passes them to pytest.

Exit status: 0 dispatched, ignored or listed, 2 bad input or GitHub refused the dispatch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pytest_rocm.schemas import values
from rocm_gate.cli import exits, github_options


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="turn a check run's rerun request into a workflow dispatch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--event-path", help="the check_run payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument(
        "--workflow",
        default="rocm-gate.yml",
        help="the gate workflow file to dispatch (default: %(default)s)",
    )
    parser.add_argument(
        "--app-id",
        type=values.Option(values.whole, low=1, high=2**63 - 1, unit="an App's id"),
        help="act only on checks of this App",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the dispatch; send nothing")
    parser.add_argument(
        "--list-failed",
        metavar="RESULTS_DIR",
        help="print the test ids to rerun from a run's results",
    )
    github_options.add(parser)


def run(args) -> int:
    from rocm_gate.github import api, artifacts, rerun

    if args.list_failed:
        try:
            report = artifacts.read_results(Path(args.list_failed)).report
        except artifacts.ArtifactError as exc:
            print(f"rocm-gate rerun: {exc}", file=sys.stderr)
            return exits.BAD_INPUT
        print("\n".join(rerun.failed_gates(report)))
        return exits.OK
    try:
        payload = github_options.read_event(args.event_path or os.environ.get("GITHUB_EVENT_PATH"))
        repo = github_options.repo(args)
        client = None if args.dry_run else github_options.api_client(args, repo)
        asked = rerun.plan(
            payload, (lambda login: "write") if args.dry_run else client.permission, args.app_id
        )
        print(json.dumps({"workflow": args.workflow, "ref": asked.ref, "inputs": asked.inputs()}))
        if not args.dry_run:
            client.dispatch(args.workflow, asked.ref, asked.inputs())
    except rerun.Ignored as exc:
        print(f"rocm-gate rerun: ignored: {exc}")
        return exits.OK
    except (github_options.OptionError, KeyError, TypeError) as exc:
        print(f"rocm-gate rerun: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except (api.PublishError, *api.GITHUB_ERRORS) as exc:
        print(f"rocm-gate rerun: not dispatched: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    return exits.OK
