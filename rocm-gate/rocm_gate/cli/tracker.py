"""`rocm-gate tracker`: keep the failure tracker issue of main, one per SKU and framework.

  rocm-gate tracker --trunk trunk-MI300X.json [--trunk trunk-MI355X.json] --framework vllm [--db HISTORY]
      For each trunk state (`rocm-gate history trunk`), create or update the issue labelled rocm-gate-tracker
      that lists what fails on main on that SKU: since which commit, for how long, the suspect range, last seen
      and how; flaky tests; with --db, history's infra suspects and drain candidates. An issue whose text would
      not change is not written (rocm-gate/rocm_gate/github/tracker.py). `--dry-run` prints the issues instead.

Credentials and repository as for publish (GITHUB_TOKEN with issues: write, or the App's variables).

Exit status: 0 done, 2 bad input or GitHub refused a request, 4 GitHub could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys

from pytest_rocm.schemas.markdown import visible
from rocm_gate.cli import exits, github_options


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="keep the failure tracker issue of main per SKU",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--trunk",
        action="append",
        required=True,
        metavar="FILE",
        help="a trunk state (`rocm-gate history trunk --out FILE`); repeat for each SKU",
    )
    parser.add_argument(
        "--framework", required=True, help="the framework the tests are of (vllm, sglang)"
    )
    parser.add_argument(
        "--db",
        help="the history store (a file, or a postgresql:// URL), for infra suspects and drain "
        "candidates",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each issue's title and body; send nothing"
    )
    github_options.add(parser)


def run(args) -> int:
    from pytest_rocm.schemas.loader import ArtifactError, load_artifact
    from rocm_gate.github import api, tracker

    try:
        states = [load_artifact(path, "trunk") for path in args.trunk]
    except ArtifactError as exc:
        print(f"rocm-gate tracker: {visible(exc)}", file=sys.stderr)
        return exits.BAD_INPUT
    suspects = _suspects(args.db) if args.db else []
    if suspects is None:
        return exits.BAD_INPUT
    if args.dry_run:
        for state in states:
            title, body = tracker.render(state, args.framework, suspects)
            print(json.dumps({"title": title, "body": body}, indent=2))
        return exits.OK
    try:
        client = github_options.api_client(args)
        for state in states:
            done = tracker.keep(client, state, args.framework, suspects)
            print(
                f"{visible(state['sku'])}: issue #{done.number} {done.action} {done.html_url or ''}".rstrip()
            )
    except github_options.OptionError as exc:
        print(f"rocm-gate tracker: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except api.PublishError as exc:
        print(f"rocm-gate tracker: {exc}", file=sys.stderr)
        return exits.BAD_INPUT if exc.refused else exits.NOT_DONE
    return exits.OK


def _suspects(db: str) -> list[dict] | None:
    import sqlite3
    from pathlib import Path

    from rocm_gate.history import queries, store

    if not (store.is_url(db) or Path(db).is_file()):
        print(f"rocm-gate tracker: --db {visible(db)}: no such history file", file=sys.stderr)
        return None
    try:
        with store.connect(db) as conn:
            return queries.suspects(conn)
    except (store.HistoryError, sqlite3.DatabaseError) as exc:
        print(
            f"rocm-gate tracker: --db {visible(store.describe(db))}: {visible(exc)}",
            file=sys.stderr,
        )
        return None
