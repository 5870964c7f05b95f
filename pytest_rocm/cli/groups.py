"""`rocm-gate groups --map MAP SOURCE...`: how a test tree sorts into groups, before anything runs.

SOURCE is any of:
  a folder           its test files (pytest's default python_files), named from the checkout's root (the
                     nearest folder at or above it with .git, pyproject.toml, pytest.ini, tox.ini, setup.cfg
                     or setup.py), as pytest names them
  FILE.jsonl         SGLang's registrations (one {"path", "registrations"} object per line)
  FILE or -          a list of paths or node ids, one per line: a file list such as `git ls-files tests`, or the
                     output of `pytest --collect-only -q` (node ids: items are counted) or `-qq` (`path: N`)

It prints items and files per group (with gates and merge-blocking tests), the files no rule sorts, the map's
patterns that match nothing in the tree, rules that sort no test, and files two groups' rules match. The same
table ends `pytest --collect-only` when the plugin is installed.

Exit statuses: 0 done, 2 bad input (an unreadable map or source, named), 3 with --strict when a pattern matches
nothing, a rule sorts no test, or a file is matched by two groups.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_MAP_PROBLEMS = 3
SKIPPED_FOLDERS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox", ".eggs"}
# pytest's own lines around the node ids of `--collect-only -q`: counts and section rules, never tests.
_PYTEST_TRAILER = re.compile(r"^(\d+(/\d+)? tests? (collected|deselected)|no tests (collected|ran)|collected \d+ item)")
_QQ_LINE = re.compile(r"^(\S.*?\.py): (\d+)$")
_SECTION = re.compile(r"^(={3,}|_{3,}|!{3,})")


class SourceError(ValueError):
    pass


def add_parser(commands, name: str) -> None:
    groups = commands.add_parser(name, help="how a test tree sorts into groups: per-group counts, unmapped files, "
                                            "stale patterns, overlaps", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    groups.add_argument("sources", nargs="+", metavar="SOURCE", help="a folder, a registrations .jsonl, a list file, or -")
    groups.add_argument("--map", required=True, type=Path, metavar="MAP.toml", help="the group map to check")
    groups.add_argument("--applicability", type=Path, metavar="TOML",
                        help="tests that can never apply to ROCm: listed once, in no group")
    groups.add_argument("--python-files", action="append", default=None, metavar="GLOB",
                        help="which files of a file list or folder are test files (repeatable; default: pytest's, "
                             "test_*.py and *_test.py)")
    groups.add_argument("--extra-group", action="append", default=[], metavar="NAME",
                        help="a group name the map may use besides the built-in ones (repeatable; as the "
                             "rocm_groups ini option does for the plugin)")
    groups.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    groups.add_argument("--strict", action="store_true",
                        help="exit 3 when a pattern matches nothing, a rule sorts no test, or two groups match a file")


def _is_test_file(path: str, globs: tuple[str, ...]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _decode(data: bytes, where: str) -> list[str]:
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                          "give a list of paths or node ids, one per line") from None


def _read_lines(lines: list[str], where: str, notes: list[str]) -> tuple[list[tuple[str, int]], bool]:
    """(path or node id, count) from a file list or pytest's `--collect-only -q/-qq` output, and whether the
    counts came from `-qq` lines."""
    found, counted = [], False
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n").strip()
        if not text or _PYTEST_TRAILER.match(text):
            continue
        if _SECTION.match(text):  # a pytest section ("==== ERRORS ====", "!!! Interrupted"): the list has ended
            if "error" in text.lower() or "interrupted" in text.lower():
                notes.append(f"{where}: pytest reported errors while collecting (line {number}: {text.strip('=! ')}); "
                             "the tree below is incomplete")
            break
        qq = _QQ_LINE.match(text)
        if qq:
            found.append((qq.group(1), int(qq.group(2))))
            counted = True
        elif "\x00" in text or len(text) > 4096:
            raise SourceError(f"{where}:{number}: not a path or node id (binary or oversized line)")
        else:
            found.append((text.removeprefix("./"), 1))
    return found, counted


# What marks a checkout's root (pytest's rootdir files, and git's).
ROOT_MARKERS = (".git", "pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg", "setup.py")


def _tree_root(folder: Path) -> Path:
    """Where node ids start for a folder's files, as pytest would name them: the nearest folder at or above it
    that marks a checkout's root (`vllm` from its parent, `test/registered` inside an SGLang checkout); with
    none, the current folder when the folder is inside it, else the folder itself."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    cwd = Path.cwd().resolve()
    return cwd if folder.is_relative_to(cwd) else folder


def _read_source(source: str, globs: tuple[str, ...], notes: list[str]):
    """(entries as (nodeid, count), items_known, files set aside as not test files)."""
    from pytest_rocm.parity.sglang_registry import RegistryError, read_jsonl

    if source == "-":
        where = "standard input"
        raw = _decode(sys.stdin.buffer.read(), where)
    else:
        path = Path(source)
        if path.is_dir():
            base = _tree_root(path.resolve())
            found = []
            for folder, dirs, files in os.walk(path.resolve()):
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
                found += [Path(folder, f).relative_to(base).as_posix() for f in sorted(files) if f.endswith(".py")]
            tests = [(p, 1) for p in found if _is_test_file(p, globs)]
            return tests, False, len(found) - len(tests)
        if not path.is_file():
            raise SourceError(f"{source}: no such file or folder")
        if path.suffix == ".py":  # a test file itself, named as pytest would name it from here
            return [(path.as_posix().removeprefix("./"), 1)], False, 0
        if path.suffix == ".jsonl":
            try:
                files = [f.path for f in read_jsonl(path)]
            except RegistryError as exc:
                raise SourceError(str(exc)) from None
            tests = [(p, 1) for p in files if _is_test_file(p, globs)]
            return tests, False, len(files) - len(tests)
        raw = _decode(path.read_bytes(), source)
        where = source
    lines, counted = _read_lines(raw, where, notes)
    if counted or any("::" in entry for entry, _ in lines):  # node ids, or `-qq` counts: items are known
        return lines, True, 0
    tests = [(p, n) for p, n in lines if _is_test_file(p, globs)]
    return tests, False, len(lines) - len(tests)


def read_sources(sources: list[str], globs: tuple[str, ...], notes: list[str]):
    """Every source's tests: ([(node id or path, count)], whether items are known, files set aside). Raises
    SourceError (or OSError) naming the source."""
    found, items_known, set_aside = [], True, 0
    for source in sources:
        entries, known, aside = _read_source(source, globs, notes)
        found += entries
        items_known = items_known and known
        set_aside += aside
    return found, items_known, set_aside


def run(args) -> int:
    from pytest_rocm.catalog.applicability import ApplicabilityError, load_applicability
    from pytest_rocm.catalog.groups import GROUPS, GroupMapError, load_group_map
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
        return EXIT_BAD_INPUT
    if not entries:
        print(f"rocm-gate groups: no tests in {', '.join(args.sources)} (test files are {' '.join(globs)}; "
              "give a checkout folder, a file list, or `pytest --collect-only -q` output)", file=sys.stderr)
        return EXIT_BAD_INPUT
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
            print(f"set aside: {set_aside} .py files that are not test files ({' '.join(globs)}): conftest, "
                  "helpers, __init__")
    problems = [p for p in report["unused_patterns"] if not p.get("unchecked")] + \
        report["rules_winning_nothing"] + report["overlaps"]
    for note in notes:
        print(f"rocm-gate groups: {note}", file=sys.stderr)
    return EXIT_MAP_PROBLEMS if args.strict and problems else 0
