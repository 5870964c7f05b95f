"""`rocm-gate select --map MAP (--changed-files FILE | --base SHA --head SHA)`: what a change needs
to run.

Per changed file, the first that applies: a test file runs (and selects its group); the map's
`[selection] ignore` (documentation, other platforms' files, vLLM's own CI scripts) runs nothing;
`[selection] everything` (build files, ROCm images and requirements, the AMD CI and platform) runs
every group; a rule's `sources` selects that rule's tests; co-change learned from `--history` selects
the test folders that changed with the file most, until they account for more than `--cover` of its
past test changes (default 0.5: more than half; higher runs more and misses less); anything else is
unknown and runs everything. Every group selected says why.

History to learn from: --history FILE, one JSON object per commit with its `files` (the vendored
`tests/data/upstream/vllm-main-history.jsonl`), or --learn-from-git N: the last N first-parent
commits of --repo.

It fails closed: when it cannot read or decide (a map, history or changed-files list that cannot be
read, a --base or --head that is empty, an option, or no commit, a git call that fails, a --cover or
--learn-from-git value that is empty or out of range), it still prints a selection of everything,
saying why, and exits 2, so a workflow that reads the output runs every group. A rename changes both
its paths (git diff --no-renames).

Exit statuses (docs/architecture.md, "Exit statuses"): 0 decided, 2 could not decide (everything
printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_rocm.schemas import values
from pytest_rocm.schemas.markdown import visible
from rocm_gate.cli import exits
from rocm_gate.cli.arguments import MOST, map_file
from rocm_gate.selection.git import (
    CannotDecide,
    changed_files,
    commit,
    first_parent_history,
    tree_files,
)
from rocm_gate.selection.select import by_strength


def add_parser(commands, name: str) -> None:
    select = commands.add_parser(
        name,
        help="which groups and tests a change needs (PR test selection), with why",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    select.add_argument(
        "--map",
        required=True,
        type=map_file,
        metavar="MAP",
        help="the group map (with [selection]): a file, or a shipped map by name (vllm)",
    )
    select.add_argument(
        "--changed-files",
        type=Path,
        metavar="FILE",
        help="the changed paths, one per line (- for stdin)",
    )
    select.add_argument(
        "--base",
        metavar="SHA",
        help="with --head: the change is `git diff --name-only --no-renames BASE...HEAD` (a "
        "rename changes its old path and its new one)",
    )
    select.add_argument("--head", metavar="SHA")
    select.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the git checkout (default: here)",
    )
    select.add_argument(
        "--history", type=Path, metavar="JSONL", help="commits to learn co-change from"
    )
    # --learn-from-git and --cover are checked when the command runs (`_numbers`), not by argparse:
    # a bad value fails closed, selecting everything, as the docstring says
    select.add_argument(
        "--learn-from-git",
        metavar="N",
        help="learn co-change from the last N first-parent commits of --repo (before --base)",
    )
    select.add_argument(
        "--cover",
        metavar="Q",
        # the default is cochange.COVER, named here without importing it (commands import what they
        # need when they run); a test checks the two agree
        help="per changed file, the test folders that changed with it most, until they account for "
        "more than Q of its past test changes (0 to 1; default 0.5: 0 the top folder only, 1 every "
        "folder that ever changed with it)",
    )
    select.add_argument("--json", action="store_true", help="print the selection as JSON")


def _fail_closed(args, message: str) -> int:
    """Say why on stderr, and print a selection of everything: a reader that ignores the exit status
    still runs every group."""
    from rocm_gate.selection.select import Selection, everything

    print(f"rocm-gate select: {message}; selecting everything", file=sys.stderr)
    _print(args, [], everything(Selection(), f"could not decide: {message}"))
    return exits.BAD_INPUT


def _changed(args) -> list[str]:
    if args.changed_files is not None:
        if str(args.changed_files) == "-":
            data = sys.stdin.buffer.read()
        else:
            data = args.changed_files.read_bytes()
        try:
            return [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{args.changed_files}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    base, head = commit(args.repo, "--base", args.base), commit(args.repo, "--head", args.head)
    return changed_files(args.repo, base, head, (args.base, args.head))


def run(args) -> int:
    from pytest_rocm.catalog.groups import GroupMapError, load_group_map
    from rocm_gate.selection.cochange import COVER, CoChange, CommitHistoryError, read_history
    from rocm_gate.selection.select import select

    git_range = args.base is not None or args.head is not None
    if (args.changed_files is not None) == git_range or (
        git_range and (args.base is None or args.head is None)
    ):
        return _fail_closed(args, "give --changed-files FILE, or --base SHA and --head SHA")
    try:
        cover, args.learn_from_git = _numbers(args, COVER)
    except values.BadValue as exc:
        return _fail_closed(args, str(exc))
    if args.history and args.learn_from_git:
        return _fail_closed(args, "give --history FILE or --learn-from-git N, not both")
    try:
        group_map = load_group_map(args.map)
        changed = _changed(args)
        base = (
            commit(args.repo, "--base", args.base)
            if args.learn_from_git and args.base is not None
            else None
        )
        history = (
            CoChange.learn(read_history(args.history), cover=cover)
            if args.history
            else (
                CoChange.learn(
                    first_parent_history(args.repo, args.learn_from_git, base), cover=cover
                )
                if args.learn_from_git
                else None
            )
        )
        tree = _tree(args)
    except (GroupMapError, CommitHistoryError, CannotDecide, ValueError, OSError) as exc:
        return _fail_closed(args, str(exc))
    _print(args, changed, select(changed, group_map, history, tree))
    return exits.OK


def _numbers(args, default_cover: float) -> tuple[float, int | None]:
    """--cover (a share from 0 to 1) and --learn-from-git (commits, 1 or more), where given;
    values.BadValue naming the option for an empty or bad one."""
    cover = default_cover if args.cover is None else values.share(args.cover, "--cover")
    commits = (
        None
        if args.learn_from_git is None
        else values.count(
            args.learn_from_git,
            "--learn-from-git",
            low=1,
            high=MOST,
            unit="commits",
            too_small="give a number of commits, 1 or more, got {value}",
        )
    )
    return cover, commits


def _tree(args) -> set[str] | None:
    """The files of the tree the selection runs in: the head commit's, or with --changed-files the
    checkout's at --repo (tracked files) where it is one; None where unknown (a deleted test file
    is then run as named, and a helper's own folder)."""
    head = commit(args.repo, "--head", args.head) if args.head is not None else None
    return tree_files(args.repo, head, args.head)


# reasons shown per group in the text output, strongest first; --json has them all
SHOWN_REASONS = 2


def _print(args, changed: list[str], chosen) -> None:
    """The selection, each name a PR chose (its files') escaped for a terminal or a job's log: a
    file name carrying a newline and `::error`, an escape sequence or a right-to-left override
    prints as text (schemas/markdown.py: visible)."""
    if args.json:
        print(json.dumps({"changed": changed, **chosen.to_dict()}, indent=2))
        return
    if chosen.everything:
        print(f"everything: {visible(chosen.why_everything)}")
    elif not chosen.groups:
        print("nothing to run: every changed file is ignored")
    else:
        for group, reasons in sorted(chosen.groups.items()):
            strongest = by_strength(reasons)
            print(
                f"{visible(group)}: "
                + "; ".join(visible(reason) for reason in strongest[:SHOWN_REASONS])
                + (
                    f" (and {len(strongest) - SHOWN_REASONS} weaker reason(s): --json lists them)"
                    if len(strongest) > SHOWN_REASONS
                    else ""
                )
            )
        for test in sorted(chosen.tests):
            size = chosen.sizes.get(test)
            files = f", {size} test file(s)" if size is not None else ""
            # the reason that selected the path, always: a folder link can be most of the tree
            print(f"  run {visible(test)}  ({visible(by_strength(chosen.tests[test])[0])}{files})")
        if chosen.test_files:
            selected = chosen.selected_files() or 0
            print(
                f"runs {selected} of the tree's {chosen.test_files} test files "
                f"({selected / chosen.test_files:.0%})"
            )
    for path in chosen.ignored:
        print(f"  ignored {visible(path)}")
