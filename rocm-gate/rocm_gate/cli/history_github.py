"""`rocm-gate history download` and `rocm-gate history sync`: the history store and GitHub (the
actions of `rocm-gate history` that talk to GitHub; cli/history.py holds the rest).

  rocm-gate history download --out history/history.db
      the newest copy of the embedded store: the `rocm-gate-history` artifact of the default branch's own
      workflows (never a gate run's); none yet leaves --out as it was (a new store starts there)
  rocm-gate history sync --db STORE --gate-workflow PIN --class CLASS=RUNNER_GROUP [--workflow rocm-gate.yml]
      add every completed gate run GitHub lists in the window (`--hours`) that the store lacks, main's and
      PRs', each checked as a publish checks it (the pinned gate workflow, the class's runner group, the
      results' claims against GitHub's facts), under the origin GitHub gives it (knowledge/sync.py)

Credentials as the other GitHub commands take them (the App's variables, else GITHUB_TOKEN with
`actions: read`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from pytest_rocm.schemas import values
from pytest_rocm.schemas.markdown import visible
from rocm_gate.cli import exits, github_options


def add_parsers(actions) -> None:
    download = actions.add_parser(
        "download", help="the newest copy of the embedded store, from the default branch's artifact"
    )
    github_options.add(download)
    download.add_argument("--out", required=True, help="where the store file goes")
    sync = actions.add_parser(
        "sync", help="add every completed gate run GitHub lists that the store lacks"
    )
    github_options.add(sync)
    sync.add_argument("--db", required=True, help="the history store (a file or postgresql://...)")
    github_options.add_gate_runs(sync)
    sync.add_argument(
        "--hours",
        type=values.Option(values.hours, above=True, high=24 * 90.0),
        default=48.0,
        help="gate runs created this many hours back (above 0 and at most 2160; default 48)",
    )
    sync.add_argument("--main-only", action="store_true", help="add main's runs only, not PRs'")
    # a demo repository's simulated results, as `publish --allow-simulated` takes them
    sync.add_argument("--allow-simulated", action="store_true", help=argparse.SUPPRESS)


def run_download(args) -> int:
    from rocm_gate.github.api import PublishError
    from rocm_gate.knowledge import carry

    try:
        client = github_options.api_client(args)
        found = carry.download(client, Path(args.out))
    except github_options.OptionError as exc:
        print(f"rocm-gate history download: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except PublishError as exc:
        print(f"rocm-gate history download: {exc}", file=sys.stderr)
        return exits.BAD_INPUT if exc.refused else exits.NOT_DONE
    if found is None:
        print(
            f"no {carry.ARTIFACT} artifact yet: a new store starts at {visible(args.out)} (each "
            "publish adds the runs it judges)"
        )
    else:
        print(
            f"{visible(args.out)}: the store of run {found.run_id} (artifact {found.artifact_id}, "
            f"{found.created_at})"
        )
    return exits.OK


def run_sync(args) -> int:
    from rocm_gate.github.api import PublishError
    from rocm_gate.history import store
    from rocm_gate.knowledge import sync

    if not (args.hours > 0 and args.hours <= 24 * 90):
        print(
            f"rocm-gate history sync: --hours must be above 0 and at most 2160, got {args.hours}",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    now = dt.datetime.now(dt.UTC)
    try:
        client = github_options.api_client(args)
        conn = store.connect(args.db)
        try:
            done = sync.catch_up(
                conn,
                client,
                args.workflow,
                list(args.classes),
                args.gate_workflow,
                now - dt.timedelta(hours=args.hours),
                now,
                include_pr=not args.main_only,
                allow_simulated=args.allow_simulated,
            )
        finally:
            conn.close()
    except (github_options.OptionError, store.HistoryError) as exc:
        print(f"rocm-gate history sync: {visible(exc)}", file=sys.stderr)
        return exits.BAD_INPUT
    except PublishError as exc:
        print(f"rocm-gate history sync: {exc}", file=sys.stderr)
        return exits.BAD_INPUT if exc.refused else exits.NOT_DONE
    for line in done.added:
        print(f"added: {line}")
    for line in done.refused:
        print(f"not added: {visible(line)}")
    print(f"rocm-gate history sync: {len(done.added)} run(s) added, {len(done.refused)} refused")
    return exits.OK
