"""`rocm-gate dashboard --db HISTORY --out SITE`: build the coverage dashboard, a static site, from
history.

Pages: overview (parity per SKU and group against the named reference, now and over time, and overall per SKU;
the latest runs and their run time), trunk health (per SKU and group from main runs: streak, last
green, flips, time to recovery; a page per test that failed on main, with its runs across SKUs and
commits), runs x groups (main runs apart from PR runs; each cell the worst verdict, opening to the
failing tests), suspects and flaky tests with known gaps, accepted stacks and drift. No script, no
network: open SITE/index.html, or publish the folder (.github/workflows/dashboard.yml deploys it to GitHub Pages).

Exit status: 0 built, 2 bad input.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path


def add_parser(commands, name: str) -> None:
    parser = commands.add_parser(
        name,
        help="build the static coverage dashboard from history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db",
        required=True,
        help="the history store (rocm-gate history add): a file (SQLite) or a postgresql:// URL",
    )
    parser.add_argument("--out", required=True, help="the site folder to write")
    parser.add_argument(
        "--repo",
        metavar="CHECKOUT",
        help="a checkout of the default branch: its first-parent commits say which merge-queue runs "
        "landed on main (without it, no merge-queue run counts for flaky tests, suspects or trunk "
        "health)",
    )


def run(args) -> int:
    try:
        from rocm_gate.dashboard import site
    except ModuleNotFoundError as exc:
        if exc.name != "jinja2":
            raise
        print(
            "rocm-gate dashboard: the pages are rendered with Jinja2, which is not installed: "
            "pip install 'rocm-gate[dashboard]'",
            file=sys.stderr,
        )
        return 2
    from rocm_gate.history import store
    from rocm_gate.history.commits import main_commits

    if not (store.is_url(args.db) or Path(args.db).is_file()):
        print(
            f"rocm-gate dashboard: {args.db}: no such history file (create it with `rocm-gate history add`)",
            file=sys.stderr,
        )
        return 2
    try:
        landed = frozenset(main_commits(args.repo, "HEAD")) if args.repo else None
    except ValueError as exc:
        print(f"rocm-gate dashboard: {exc}", file=sys.stderr)
        return 2
    try:
        with store.connect(args.db) as conn:
            sizes = site.build(conn, Path(args.out), landed)
    except store.HistoryError as exc:
        print(f"rocm-gate dashboard: {exc}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:  # a damaged page found while reading
        print(
            f"rocm-gate dashboard: {args.db}: the history database is damaged ({exc}); restore it from a backup "
            "or rebuild it with `rocm-gate history add`",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(f"rocm-gate dashboard: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(
        f"built {len(sizes)} files, {sum(sizes.values()):,} bytes, in {args.out}/ (open index.html)"
    )
    return 0
