"""`rocm-gate groups --map MAP SOURCE...`: how a test tree sorts into groups, before anything runs.

SOURCE is any of:
  a folder           its test files (pytest's default python_files), named from the checkout's root (the
                     nearest folder at or above it with .git, pyproject.toml, pytest.ini, tox.ini, setup.cfg
                     or setup.py), as pytest names them
  FILE.jsonl         SGLang's registrations (one {"path", "registrations"} object per line)
  FILE or -          a list of paths or node ids, one per line: a file list such as `git ls-files tests`, or the
                     output of `pytest --collect-only -q` (node ids: items are counted) or `-qq` (`path: N`)

It prints items and files per group (with gates and merge-blocking tests), the files no rule sorts,
the map's patterns that match nothing in the tree, rules that sort no test, and files two groups'
rules match. The same table ends `pytest --collect-only` when the plugin is installed.

Exit statuses: 0 done, 2 bad input (an unreadable map or source, named), 3 with --strict when a
pattern matches nothing, a rule sorts no test, or a file is matched by two groups.
"""

from __future__ import annotations

import argparse
import json
import sys

from rocm_gate.cli import exits
from rocm_gate.cli.arguments import map_file


def add_parser(commands, name: str) -> None:
    groups = commands.add_parser(
        name,
        help="how a test tree sorts into groups: per-group counts, unmapped files, "
        "stale patterns, overlaps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="a folder, a registrations .jsonl, a list file, or -",
    )
    groups.add_argument(
        "--map",
        required=True,
        type=map_file,
        metavar="MAP",
        help="the group map to check: a file, or a shipped map by name (vllm, sglang)",
    )
    groups.add_argument(
        "--applicability",
        type=map_file,
        metavar="TOML",
        help="tests that can never apply to ROCm: listed once, in no group",
    )
    groups.add_argument(
        "--python-files",
        action="append",
        default=None,
        metavar="GLOB",
        help="which files of a file list or folder are test files (repeatable; default: pytest's, "
        "test_*.py and *_test.py)",
    )
    groups.add_argument(
        "--extra-group",
        action="append",
        default=[],
        metavar="NAME",
        help="a group name the map may use besides the built-in ones (repeatable; as the "
        "rocm_groups ini option does for the plugin)",
    )
    groups.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    groups.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when a pattern matches nothing, a rule sorts no test, or two groups match a file",
    )


def run(args) -> int:
    from pytest_rocm.catalog.applicability import ApplicabilityError, load_applicability
    from pytest_rocm.catalog.groups import GROUPS, GroupMapError, load_group_map
    from pytest_rocm.catalog.sources import SourceError, read_sources
    from pytest_rocm.catalog.tree import DEFAULT_TEST_FILES, TreeEntry, sort_tree, tree_lines

    globs = tuple(args.python_files or DEFAULT_TEST_FILES)
    notes: list[str] = []
    try:
        group_map = load_group_map(args.map, set(GROUPS) | set(args.extra_group))
        applicability = load_applicability(args.applicability) if args.applicability else None
        found, items_known, set_aside = read_sources(args.sources, globs, notes)
        entries = [TreeEntry(nodeid) for nodeid, count in found for _ in range(count)]
    except (GroupMapError, ApplicabilityError, SourceError, OSError) as exc:
        print(f"rocm-gate groups: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    if not entries:
        print(
            f"rocm-gate groups: no tests in {', '.join(args.sources)} (test files are {' '.join(globs)}; "
            "give a checkout folder, a file list, or `pytest --collect-only -q` output)",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    if not items_known:  # a file list: one entry per file, whatever the count column said
        entries = list({e.nodeid: e for e in entries}.values())
    report = sort_tree(entries, group_map, applicability, items_known=items_known)
    report["sources"] = list(args.sources)
    report["not_test_files"] = set_aside
    report["notes"] = notes
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for line in tree_lines(report):
            print(line)
        if set_aside:
            print(
                f"set aside: {set_aside} .py files that are not test files ({' '.join(globs)}): conftest, "
                "helpers, __init__"
            )
    problems = (
        [p for p in report["unused_patterns"] if not p.get("unchecked")]
        + report["rules_winning_nothing"]
        + report["overlaps"]
    )
    for note in notes:
        print(f"rocm-gate groups: {note}", file=sys.stderr)
    return exits.NO if args.strict and problems else exits.OK
