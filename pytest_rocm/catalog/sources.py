"""Reading a test tree's paths for `rocm-gate groups` and `rocm-gate shard`: a checkout folder
(named as pytest names its files), SGLang's registrations (.jsonl), or a list of paths or node ids
(a file list, or the output of `pytest --collect-only -q` / `-qq`), from a file or standard input.

`read_sources` gives (node id or path, count) entries; SourceError names the source that cannot be
read.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from pathlib import Path

from pytest_rocm.errors import BadInput

SKIPPED_FOLDERS = {
    ".git",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    "build",
    "dist",
    ".tox",
    ".eggs",
}
# pytest's own lines around the node ids of `--collect-only -q`: counts and section rules, never
# tests.
_PYTEST_TRAILER = re.compile(
    r"^(\d+(/\d+)? tests? (collected|deselected)|no tests (collected|ran)|collected \d+ item)"
)
_QQ_LINE = re.compile(r"^(\S.*?\.py): (\d+)$")
_SECTION = re.compile(r"^(={3,}|_{3,}|!{3,})")


class SourceError(BadInput):
    pass


def _is_test_file(path: str, globs: tuple[str, ...]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _decode(data: bytes, where: str) -> list[str]:
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{where}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "give a list of paths or node ids, one per line"
        ) from None


def _read_lines(
    lines: list[str], where: str, notes: list[str]
) -> tuple[list[tuple[str, int]], bool]:
    """(path or node id, count) from a file list or pytest's `--collect-only -q/-qq` output, and
    whether the counts came from `-qq` lines."""
    found, counted = [], False
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n").strip()
        if not text or _PYTEST_TRAILER.match(text):
            continue
        # a pytest section ("==== ERRORS ====", "!!! Interrupted"): the list has ended
        if _SECTION.match(text):
            if "error" in text.lower() or "interrupted" in text.lower():
                notes.append(
                    f"{where}: pytest reported errors while collecting (line {number}: {text.strip('=! ')}); "
                    "the tree below is incomplete"
                )
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
    """Where node ids start for a folder's files, as pytest would name them: the nearest folder at
    or above it that marks a checkout's root (`vllm` from its parent, `test/registered` inside an
    SGLang checkout); with none, the current folder when the folder is inside it, else the folder
    itself."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    cwd = Path.cwd().resolve()
    return cwd if folder.is_relative_to(cwd) else folder


def _read_source(source: str, globs: tuple[str, ...], notes: list[str]):
    """(entries as (nodeid, count), items_known, files set aside as not test files)."""
    from pytest_rocm.catalog.sglang import RegistryError, read_jsonl

    if source == "-":
        where = "standard input"
        raw = _decode(sys.stdin.buffer.read(), where)
    else:
        path = Path(source)
        if path.is_dir():
            base = _tree_root(path.resolve())
            found = []
            for folder, dirs, files in os.walk(path.resolve()):
                dirs[:] = sorted(
                    d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith(".")
                )
                found += [
                    Path(folder, f).relative_to(base).as_posix()
                    for f in sorted(files)
                    if f.endswith(".py")
                ]
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
    # node ids, or `-qq` counts: items are known
    if counted or any("::" in entry for entry, _ in lines):
        return lines, True, 0
    tests = [(p, n) for p, n in lines if _is_test_file(p, globs)]
    return tests, False, len(lines) - len(tests)


def read_sources(sources: list[str], globs: tuple[str, ...], notes: list[str]):
    """Every source's tests: ([(node id or path, count)], whether items are known, files set aside).
    Raises SourceError (or OSError) naming the source."""
    found, items_known, set_aside = [], True, 0
    for source in sources:
        entries, known, aside = _read_source(source, globs, notes)
        found += entries
        items_known = items_known and known
        set_aside += aside
    return found, items_known, set_aside
