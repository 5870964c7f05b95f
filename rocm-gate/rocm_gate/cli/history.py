"""`rocm-gate history`: the store of every run, and what it says that one run cannot.

  rocm-gate history add --db HISTORY RESULTS...   ingest results folders (or gate-report.json files): each is
                                                  validated first; one already in the store is skipped; a bad
                                                  one is refused, named, and nothing of it is written
  rocm-gate history suspects --db HISTORY         recurring infrastructure faults (a suspected real bug, or a
                                                  machine to drain), flaky tests, known gaps ready to close
  rocm-gate history trunk --db HISTORY --sku SKU --out trunk.json [--repo CHECKOUT]
                                                  the state of the default branch on one SKU, from main runs
                                                  only (push, schedule, dispatch on it, its merge queue): per
                                                  test failing since, last green, suspect commits, flips, time
                                                  red, flaky; `rocm-gate publish --trunk` reads it. --repo: a
                                                  checkout of the repository, for main's commit order and the
                                                  commits of each suspect range (else only tested commits)
  rocm-gate history quarantine --db HISTORY --sku SKU --file quarantine.json [--after-hours 72] [--lift-after 3]
                                                  keep the quarantine file: add tests red on main past the
                                                  time, lift those green on their last K main runs; the
                                                  plugin reads it with --rocm-quarantine
  rocm-gate history grant --db URL --writer ROLE --reader ROLE
                                                  on a PostgreSQL store, as the database's owner:
                                                  the writer's role may read and add runs (publish,
                                                  sweep, the dashboard workflow), the reader's may
                                                  only read (a dashboard); creates missing roles

HISTORY is a file (SQLite in WAL mode, created when missing: several runners on one host may add at
once) or a postgresql://USER@HOST/DATABASE URL (PostgreSQL: many runner pools at once; `pip install
'rocm-gate[postgres]'`). Keep a password out of the URL (PGPASSWORD, ~/.pgpass): a URL's password
is never printed, but a command line is visible to the host's other users.

Exit status: 0 done, 2 bad input (after adding every good input given), or a store that cannot be
used (named: damaged, unreachable, refused credentials, a role that may only read).
Test ids and every other text from results are printed with control characters escaped.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from datetime import UTC
from pathlib import Path

from pytest_rocm.schemas import values
from pytest_rocm.schemas.markdown import visible
from rocm_gate.cli import exits
from rocm_gate.cli.arguments import whole_number

WINDOW = whole_number(1, "--window must be at least 1 run, got {value}")
DB_HELP = "the history store: a file (SQLite) or a postgresql://USER@HOST/DATABASE URL"


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="add runs to the history store, and ask it for suspects",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="ingest results folders or gate reports")
    add.add_argument("--db", required=True, help=DB_HELP + " (created or migrated when needed)")
    add.add_argument(
        "--origin",
        choices=("manifest", "pr", "other"),
        default="manifest",
        help="where the runs come from: as their manifests say (default), or `pr` whatever they say: "
        "for results of runs GitHub lists as not on the default branch (a PR's code wrote "
        "them, and could claim to be main)",
    )
    add.add_argument(
        "--run",
        type=values.Option(values.github_run),
        metavar="ID[-ATTEMPT]",
        help="the GitHub run the results come from, as GitHub lists it (an id alone is attempt 1: "
        "7, 7-1 and 007-1 are one run): with the origin and each report's content, its identity "
        "in the store (default: the report's bytes, so a copy of a report in another run would "
        "be taken for it)",
    )
    add.add_argument(
        "--sha",
        type=full_sha,
        help="the commit GitHub says the run is of: results whose manifest names another tested "
        "commit are never main's, whatever they claim (stored as `pr`)",
    )
    add.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        help="results folders or gate-report.json files (none: create or migrate the store only)",
    )
    suspects = actions.add_parser(
        "suspects", help="recurring infra, flaky tests, known gaps ready to close"
    )
    suspects.add_argument("--db", required=True, help=DB_HELP)
    suspects.add_argument(
        "--window",
        type=WINDOW,
        default=10,
        help="runs of each test on a SKU to look at for suspects (default 10; flaky tests: the trunk "
        "state's 30 commits)",
    )
    suspects.add_argument("--json", action="store_true")
    trunk = actions.add_parser(
        "trunk", help="the default branch's state on one SKU, as trunk.json for publish"
    )
    trunk.add_argument("--db", required=True, help=DB_HELP)
    trunk.add_argument(
        "--sku", required=True, help="the SKU as history stores it (MI300X; several: MI300X/MI355X)"
    )
    trunk.add_argument(
        "--window", type=WINDOW, default=30, help="main commits to look at (default 30)"
    )
    trunk.add_argument(
        "--repo", metavar="CHECKOUT", help="a checkout of the repository with main's history"
    )
    trunk.add_argument(
        "--tracker-url", help="the failure tracker's issue (https://...), linked from the check"
    )
    trunk.add_argument(
        "--out", default="trunk.json", help="the file to write (default %(default)s)"
    )
    quarantine = actions.add_parser(
        "quarantine", help="add main failures red too long, lift those green again"
    )
    quarantine.add_argument("--db", required=True, help=DB_HELP)
    quarantine.add_argument("--sku", required=True)
    quarantine.add_argument(
        "--file", required=True, help="the quarantine file (created when missing)"
    )
    quarantine.add_argument(
        "--after-hours",
        type=values.Option(values.hours, high=8760.0),
        default=72.0,
        help="red on main this long makes a test quarantined (0 to 8760; default 72)",
    )
    quarantine.add_argument(
        "--lift-after",
        type=whole_number(1, "--lift-after must be at least 1 run, got {value}"),
        default=3,
        help="green main runs in a row that lift it (default 3)",
    )
    quarantine.add_argument(
        "--window", type=WINDOW, default=30, help="main commits to look at (default 30)"
    )
    # the store and GitHub: download (the embedded store's newest copy) and sync (catch up)
    from rocm_gate.cli import history_github

    history_github.add_parsers(actions)
    _add_grant(actions)


def _add_grant(actions) -> None:
    grant = actions.add_parser(
        "grant", help="PostgreSQL: a writer's role (read, add runs) and a reader's (read only)"
    )
    grant.add_argument(
        "--db", required=True, help="the store's postgresql:// URL, as the database's owner"
    )
    grant.add_argument(
        "--writer",
        required=True,
        type=role_name,
        help="the role of the jobs that add runs (created if missing)",
    )
    grant.add_argument(
        "--reader",
        required=True,
        type=role_name,
        help="the role of those that only read (created if missing)",
    )


def role_name(value: str) -> str:
    """A PostgreSQL role as `history grant` takes it: a plain lower-case name."""
    from rocm_gate.history.roles import ROLE

    if not ROLE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"expected a role name of lower-case letters, digits and _ (at most 63), got {value!r}"
        )
    return value


def run(args) -> int:
    from rocm_gate.cli import history_github
    from rocm_gate.history import store

    if args.action in ("download", "sync"):
        return {"download": history_github.run_download, "sync": history_github.run_sync}[
            args.action
        ](args)

    if args.action not in ("add", "grant") and not (
        store.is_url(args.db) or Path(args.db).is_file()
    ):
        print(
            f"rocm-gate history: {args.db}: no such history file (create it with `rocm-gate history add`)",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    try:
        with store.connect(args.db) as conn:
            return {
                "add": _add,
                "suspects": _suspects,
                "trunk": _trunk,
                "quarantine": _quarantine,
                "grant": _grant,
            }[args.action](conn, args)
    except store.HistoryError as exc:
        print(f"rocm-gate history: {visible(exc)}", file=sys.stderr)
        return exits.BAD_INPUT
    # a damaged page found while reading a SQLite file's rows, after the store opened
    except sqlite3.DatabaseError as exc:
        print(
            f"rocm-gate history: {args.db}: the history database is damaged ({exc}); restore it from a backup "
            "or rebuild it with `rocm-gate history add` from the results folders",
            file=sys.stderr,
        )
        return exits.BAD_INPUT


def full_sha(value: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{40}", value):
        raise argparse.ArgumentTypeError(f"expected a full 40-hex commit SHA, got {value!r}")
    return value.lower()


def _add(conn, args) -> int:
    from rocm_gate.history import queries, store

    status = exits.OK
    if not args.results:
        print(
            f"{conn.target}: history store at schema version {store.version(conn)}, {len(queries.runs(conn))} run(s)"
        )
    for source in args.results:
        try:
            done = store.ingest(conn, source, args.origin, args.run, args.sha)
        except store.StoreError:
            raise  # the store, not this input: nothing more can be added
        except store.HistoryError as exc:
            print(f"rocm-gate history: refused: {visible(exc)}", file=sys.stderr)
            status = exits.BAD_INPUT
            continue
        print(
            f"{'added' if done.added else 'already in the store'}: {visible(source)} (run {done.run_id}, "
            f"{done.tests} tests)"
        )
    return status


def _suspects(conn, args) -> int:
    from rocm_gate.history import queries

    gaps = queries.known_gaps(conn)
    found = {
        "suspects": queries.suspects(conn, args.window),
        **queries.flaky(conn),
        "known_gaps_ready_to_close": [g for g in gaps if g["ready_to_close"]],
        "known_gaps_closed": [g for g in gaps if g["closed"]],
    }
    if args.json:
        print(json.dumps(found, indent=2))  # JSON escapes control characters itself
        return exits.OK
    lines = [f"suspects ({len(found['suspects'])}):"]
    lines += [f"  {s['kind']} ({s['sku']}): {s['test']}: {s['reason']}" for s in found["suspects"]]
    lines.append(
        f"flaky now ({len(found['flaky'])}; pass and fail on one commit and SKU, or failures between "
        "passes on alternate commits):"
    )
    lines += [
        f"  {f['test']}: {f['flaky_runs']} flaky of its last {f['runs']} runs on {', '.join(f['skus'])} "
        f"(first seen {f['first_seen']}, last {f['last_seen']})"
        for f in found["flaky"]
    ]
    lines.append(f"no longer flaky ({len(found['stopped'])}):")
    lines += [f"  {f['test']} (last flake {f['last_seen']})" for f in found["stopped"]]
    lines.append(
        f"known gaps whose test now passes on every SKU it was seen on "
        f"({len(found['known_gaps_ready_to_close'])}):"
    )
    lines += [
        f"  {g['test']}: {g['issue']} ({', '.join(g['skus'])})"
        for g in found["known_gaps_ready_to_close"]
    ]
    lines.append(
        f"known gaps closed: their marker is gone, the newest runs have the test with no such gap "
        f"({len(found['known_gaps_closed'])}):"
    )
    lines += [
        f"  {g['test']}: {g['issue']} ({', '.join(g['closed_on'])})"
        for g in found["known_gaps_closed"]
    ]
    print("\n".join(visible(line) for line in lines))
    return exits.OK


def _trunk(conn, args) -> int:
    from pytest_rocm.schemas.artifacts import write_json_atomic
    from rocm_gate.history import queries
    from rocm_gate.history.commits import main_commits
    from rocm_gate.trunk import state

    runs, unplaced = state.main_runs(conn, args.sku)
    if args.tracker_url and not args.tracker_url.startswith("https://"):
        print(
            f"rocm-gate history: --tracker-url must be an https:// link, got {visible(args.tracker_url)!r}",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    try:
        commits = main_commits(args.repo, runs[-1][1] if runs else None) if args.repo else None
    except ValueError as exc:
        print(f"rocm-gate history: {visible(exc)}", file=sys.stderr)
        return exits.BAD_INPUT
    from datetime import datetime

    document = state.build(
        conn,
        args.sku,
        args.window,
        commits,
        datetime.now(UTC).isoformat(timespec="seconds"),
        args.tracker_url,
    )
    if not runs:
        skus = sorted({r["sku"] for r in queries.runs(conn)})
        print(
            f"rocm-gate history: warning: no main runs of {visible(args.sku)} in {conn.target} (SKUs stored: "
            f"{', '.join(map(visible, skus)) or 'none'}; a run counts as main when its manifest's provenance is a "
            "push, schedule or dispatch on the default branch): the trunk state says nothing",
            file=sys.stderr,
        )
    if unplaced:
        print(
            f"rocm-gate history: warning: {len(unplaced)} main run(s) of {visible(args.sku)} left out (store ids "
            f"{', '.join(map(str, unplaced[:10]))}): their commit is not a full 40-hex SHA, which no commit "
            "list can place; run them with a checkout git can read, or GITHUB_SHA set",
            file=sys.stderr,
        )
    # what this command writes, `publish --trunk` must load: checked before it is written
    from pytest_rocm.schemas.artifacts import schema_error

    problem = schema_error(document, "trunk")
    if problem is not None:
        print(
            f"rocm-gate history: the trunk state of {visible(args.sku)} would not load ({problem[0]}: "
            f"{visible(problem[1])}); nothing written. This is a bug: report it with the store",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    try:
        write_json_atomic(args.out, document)
    except OSError as exc:
        print(
            f"rocm-gate history: --out {visible(args.out)}: cannot write the trunk state ({exc.strerror or exc}); "
            "give a file path in a writable folder",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    failing = sum(t["state"] == "failing" for t in document["tests"].values())
    flaky = sum(bool(t["flaky_count"]) for t in document["tests"].values())
    gone = sum(t["state"] == "gone" for t in document["tests"].values())
    print(
        f"{args.out}: {visible(args.sku)} over {document['main_commits']} main commit(s) ({document['main_runs']} "
        f"run(s)): {failing} failing, {flaky} flaky, {document['green']} green, {gone} gone from main's runs"
    )
    return exits.OK


def _quarantine(conn, args) -> int:
    from pytest_rocm.schemas.artifacts import write_json_atomic
    from pytest_rocm.schemas.loader import ArtifactError, load_artifact
    from rocm_gate.trunk import quarantine, state

    if not (args.after_hours >= 0 and args.after_hours < 1e6):
        print(
            f"rocm-gate history: --after-hours must be a number of hours from 0, got {args.after_hours}",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    path = Path(args.file)
    try:
        document = load_artifact(path, "quarantine") if path.exists() else quarantine.empty()
    except ArtifactError as exc:
        print(
            f"rocm-gate history: {visible(exc)}; fix it or delete it to start again",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    trunk = state.build(conn, args.sku, args.window)
    document, added, lifted = quarantine.update(
        conn, document, trunk, args.after_hours, args.lift_after
    )
    try:
        write_json_atomic(path, document)
    except OSError as exc:
        print(
            f"rocm-gate history: --file {visible(path)}: cannot write it ({exc.strerror or exc})",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    lines = [
        f"{path}: {len(document['tests'])} quarantined, {len(added)} added, {len(lifted)} lifted on "
        f"{args.sku}"
    ]
    lines += [f"  added: {name}" for name in added] + [f"  lifted: {name}" for name in lifted]
    print("\n".join(visible(line) for line in lines))
    return exits.OK


def _grant(conn, args) -> int:
    from rocm_gate.history import roles

    for line in roles.grant(conn, args.writer, args.reader):
        print(f"{conn.target}: {line}")
    return exits.OK
