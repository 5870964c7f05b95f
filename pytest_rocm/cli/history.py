"""`rocm-gate history`: the store of every run, and what it says that one run cannot.

  rocm-gate history add --db HISTORY RESULTS...   ingest results folders (or gate-report.json files): each is
                                                  validated first; one already in the store is skipped; a bad
                                                  one is refused, named, and nothing of it is written
  rocm-gate history suspects --db HISTORY         recurring infrastructure faults (a suspected real bug, or a
                                                  machine to drain), flaky tests, known gaps ready to close

The store is one SQLite file in WAL mode: several runners on one host may add at once.

Exit status: 0 done, 2 bad input (after adding every good input given).
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(name, help="add runs to the history store, and ask it for suspects",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="ingest results folders or gate reports")
    add.add_argument("--db", required=True, help="the history file (created when missing)")
    add.add_argument("results", nargs="*", metavar="RESULTS",
                     help="results folders or gate-report.json files (none: create or migrate the store only)")
    suspects = actions.add_parser("suspects", help="recurring infra, flaky tests, known gaps ready to close")
    suspects.add_argument("--db", required=True)
    suspects.add_argument("--window", type=int, default=10, help="runs of each test to look at (default 10)")
    suspects.add_argument("--json", action="store_true")


def run(args) -> int:
    from pathlib import Path

    from pytest_rocm.history import queries, store

    if args.action == "suspects" and not Path(args.db).is_file():
        print(f"rocm-gate history: {args.db}: no such history file (create it with `rocm-gate history add`)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        conn = store.connect(args.db)
    except store.HistoryError as exc:
        print(f"rocm-gate history: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.action == "add":
        status = EXIT_OK
        if not args.results:
            print(f"{args.db}: history store at schema version {store.version(conn)}, {len(queries.runs(conn))} run(s)")
        for source in args.results:
            try:
                done = store.ingest(conn, source)
            except store.HistoryError as exc:
                print(f"rocm-gate history: refused: {exc}", file=sys.stderr)
                status = EXIT_BAD_INPUT
                continue
            print(f"{'added' if done.added else 'already in the store'}: {source} (run {done.run_id}, "
                  f"{done.tests} tests)")
        return status
    found = {"suspects": queries.suspects(conn, args.window), **queries.flaky(conn, args.window),
             "known_gaps_ready_to_close": [g for g in queries.known_gaps(conn) if g["ready_to_close"]]}
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    lines = [f"suspects ({len(found['suspects'])}):"]
    lines += [f"  {s['kind']}: {s['test']}: {s['reason']}" for s in found["suspects"]]
    lines.append(f"flaky now ({len(found['flaky'])}):")
    lines += [f"  {f['test']}: {f['flaky_runs']} flaky of its last {f['runs']} runs, pass rate {f['pass_rate']:.0%} "
              f"(first seen {f['first_seen']}, last {f['last_seen']})" for f in found["flaky"]]
    lines.append(f"no longer flaky ({len(found['stopped'])}):")
    lines += [f"  {f['test']} (last flake {f['last_seen']})" for f in found["stopped"]]
    lines.append(f"known gaps whose test now passes ({len(found['known_gaps_ready_to_close'])}):")
    lines += [f"  {g['test']}: {g['issue']}" for g in found["known_gaps_ready_to_close"]]
    print("\n".join(lines))
    return EXIT_OK
