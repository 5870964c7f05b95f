"""`rocm-gate select --map MAP (--changed-files FILE | --base SHA --head SHA)`: what a change needs to run.

Per changed file, the first that applies: a test file runs (and selects its group); the map's
`[selection] ignore` (documentation, other platforms' files) runs nothing; `[selection] everything`
(build files, this CI's configuration, core modules) runs every group; a rule's `sources` selects that
rule's tests; co-change learned from `--history` selects the test folders that changed with the file;
anything else is unknown and runs everything. Every group selected says why.

History to learn from: --history FILE, one JSON object per commit with its `files` (the vendored
`tests/data/upstream/vllm-main-history.jsonl`), or --learn-from-git N: the last N first-parent commits of --repo.

Exit statuses: 0 done, 2 bad input (a map, history or git call that fails, named).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pytest_rocm.cli.arguments import whole_number

EXIT_BAD_INPUT = 2


def add_parser(commands, name: str) -> None:
    select = commands.add_parser(name, help="which groups and tests a change needs (PR test selection), with why",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    select.add_argument("--map", required=True, type=Path, metavar="MAP.toml", help="the group map (with [selection])")
    select.add_argument("--changed-files", type=Path, metavar="FILE", help="the changed paths, one per line (- for stdin)")
    select.add_argument("--base", metavar="SHA", help="with --head: the change is `git diff --name-only BASE...HEAD`")
    select.add_argument("--head", metavar="SHA")
    select.add_argument("--repo", type=Path, default=Path("."), metavar="DIR", help="the git checkout (default: here)")
    select.add_argument("--history", type=Path, metavar="JSONL", help="commits to learn co-change from")
    select.add_argument("--learn-from-git", type=whole_number(1, "give a number of commits, 1 or more, got {value}"),
                        metavar="N",
                        help="learn co-change from the last N first-parent commits of --repo (before --base)")
    select.add_argument("--json", action="store_true", help="print the selection as JSON")


def _fail(message: str) -> int:
    print(f"rocm-gate select: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _changed(args) -> list[str]:
    if args.changed_files is not None:
        if str(args.changed_files) == "-":
            data = sys.stdin.buffer.read()
        else:
            data = args.changed_files.read_bytes()
        try:
            return [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as exc:
            raise ValueError(f"{args.changed_files}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    done = subprocess.run(["git", "-C", str(args.repo), "diff", "--name-only", f"{args.base}...{args.head}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"git diff {args.base}...{args.head} in {args.repo} failed: "
                         f"{(done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def _git_history(repo: Path, commits: int, before: str | None) -> list[dict]:
    """The last `commits` first-parent commits (before `before`, when given) as {"sha", "files"}."""
    command = ["git", "-C", str(repo), "log", "--first-parent", f"-n{commits}", "--name-only", "--format=@%H"]
    done = subprocess.run(command + ([before] if before else []), capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"git log in {repo} failed: {(done.stderr.strip() or 'no output').splitlines()[-1]}")
    history: list[dict] = []
    for line in done.stdout.splitlines():
        if line.startswith("@"):
            history.append({"sha": line[1:], "files": []})
        elif line.strip() and history:
            history[-1]["files"].append(line.strip())
    return history


def run(args) -> int:
    from pytest_rocm.catalog.groups import GroupMapError, load_group_map
    from pytest_rocm.selection.cochange import CoChange, HistoryError, read_history
    from pytest_rocm.selection.select import select

    git_range = args.base is not None or args.head is not None
    if (args.changed_files is not None) == git_range or (git_range and (args.base is None or args.head is None)):
        return _fail("give --changed-files FILE, or --base SHA and --head SHA")
    if args.history and args.learn_from_git:
        return _fail("give --history FILE or --learn-from-git N, not both")
    try:
        group_map = load_group_map(args.map)
        history = CoChange.learn(read_history(args.history)) if args.history else (
            CoChange.learn(_git_history(args.repo, args.learn_from_git, args.base)) if args.learn_from_git else None)
        changed = _changed(args)
    except (GroupMapError, HistoryError, ValueError, OSError) as exc:
        return _fail(str(exc))
    chosen = select(changed, group_map, history)
    if args.json:
        print(json.dumps({"changed": changed, **chosen.to_dict()}, indent=2))
        return 0
    if chosen.everything:
        print(f"everything: {chosen.why_everything}")
    elif not chosen.groups:
        print("nothing to run: " + ("every changed file is ignored" if changed else "no file changed"))
    for group, reasons in sorted(chosen.groups.items()):
        if not chosen.everything:
            print(f"{group}: {reasons[0]}" + (f" (and {len(set(reasons)) - 1} more reasons)" if len(set(reasons)) > 1 else ""))
    if not chosen.everything:
        for test in sorted(chosen.tests):
            print(f"  run {test}")
    for path in chosen.ignored:
        print(f"  ignored {path}")
    return 0
