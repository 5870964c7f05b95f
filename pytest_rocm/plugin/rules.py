"""The rules of the verdict: which settings decide verdicts and conclusions, and, in a run given
`--rocm-rules=DIR` (or $PYTEST_ROCM_RULES), where they come from: DIR, the default branch's checkout,
never the tree under test (docs/architecture.md, "The rules of the verdict").

A PR's tree is its author's: its `pytest.ini`, `pyproject.toml`, `setup.cfg` or `tox.ini` could
quarantine its own regression, call any failure infrastructure, probe with a command that always
fails, rerun until a test passes once, loosen a baseline or a golden output, or regroup tests. Under
`--rocm-rules` every rule (`RULES`) is read from DIR's pytest configuration file and its `addopts`
(the file pytest would find in DIR for this run: `find_rules_file`), and the files the rules name
(quarantine, baselines, group map, golden outputs) are DIR's; the run's command line, its `addopts`
and its own ini file change none of them. (Every other setting that changes what a gate compares,
records or selects is the default branch's too: plugin/default_branch.py.) Where the tree under test sets a rule otherwise, or changes a file a rule names, the change is
listed (`changes`), the manifest carries the list, and the check names it: it applies after merge.

`--rocm-rules` itself is read from the command line or the environment only, never from an ini
file's `addopts` (which is the tree's).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_rocm.errors import BadInput
from pytest_rocm.plugin import internals
from pytest_rocm.plugin.option_table import SETTINGS
from pytest_rocm.schemas import values

__all__ = [
    "RULES",
    "RulesError",
    "RulesFile",
    "changes",
    "command_line_value",
    "digest",
    "files_of",
    "find_rules_file",
    "rules_dir",
    "rules_values",
    "tree_values",
]

# ini key -> the dest of the option that sets it too (None: the ini key alone), and whether its
# value names files (read from the rules' tree, and compared with the tree under test's)
RULES: dict[str, tuple[str | None, bool]] = {
    s.ini: (s.dest, s.names_files) for s in SETTINGS if s.rule and s.ini
}
# the ini keys read as a list of lines
LINELISTS = frozenset(s.ini for s in SETTINGS if s.rule and s.ini and s.ini_type == "linelist")
# where pytest looks for its configuration in a folder, in its order
INI_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
ENVIRONMENT = "PYTEST_ROCM_RULES"
RULES_DIR_FIX = (
    "give the default branch's checkout, outside the tree under test, as an absolute path (the "
    'reusable workflow passes --rocm-rules="$GITHUB_WORKSPACE/rules")'
)


class RulesError(BadInput):
    pass


def command_line_value(config: pytest.Config, flag: str) -> str | None:
    """`flag`'s value as the run's own command line gives it (`--flag=VALUE` or `--flag VALUE`,
    the last one), never an ini file's `addopts` or $PYTEST_ADDOPTS; None where it is not given."""
    args = list(config.invocation_params.args)
    given = None
    for index, arg in enumerate(args):
        if arg.startswith(flag + "="):
            given = arg.split("=", 1)[1]
        elif arg == flag and index + 1 < len(args):
            given = args[index + 1]
    return given


def given_on_command_line(config: pytest.Config) -> str | None:
    """`--rocm-rules` as the run's own command line gives it (not the ini file's `addopts`)."""
    return command_line_value(config, "--rocm-rules")


def rules_dir(config: pytest.Config) -> Path | None:
    """The rules' folder the run was started with: `--rocm-rules` on the command line, else
    $PYTEST_ROCM_RULES; never the ini file's `addopts`, which belongs to the tree under test. A
    relative path is resolved once, from where pytest was started (every process of the run is
    started there). Refused (`values.rules_folder`): an empty value, given (`--rocm-rules=`, or the
    variable set to nothing: an unset workflow input), which is never taken as not given (the PR's
    own rules would judge it); a path that is not a folder; one in the tree under test, as given or
    once its links are followed, or reached through a link in that tree (a PR can commit a folder
    or a symlink named like the rules' folder: the docs' old `--rocm-rules=rules`, run from the
    PR's checkout, read the PR's own `rules/`; `--rocm-rules=.` from its checkout is the tree
    itself); a folder that holds the tree under test."""
    given = given_on_command_line(config)
    where = "--rocm-rules"
    if given is None:
        given, where = os.environ.get(ENVIRONMENT), f"${ENVIRONMENT}"
    if given is None:
        return None
    try:
        return values.rules_folder(
            given,
            where,
            start=config.invocation_params.dir,
            tree=tree_root(config),
            fix=RULES_DIR_FIX,
        )
    except values.BadValue as exc:
        raise RulesError(str(exc)) from None


def tree_root(config: pytest.Config) -> Path:
    """The top of the tree under test: the git checkout the rootdir is in, else the rootdir."""
    for folder in (config.rootpath, *config.rootpath.parents):
        if (folder / ".git").exists():
            return folder
    return config.rootpath


@dataclass(frozen=True)
class RulesFile:
    """The default branch's pytest configuration file, as pytest would find it in the rules'
    folder (`find_rules_file`): `path` None where the folder has none; `section` its pytest section
    as pytest keeps it, None for a `pyproject.toml` without a pytest table (which pytest then takes
    for the rootdir's file, with nothing set) or no file."""

    folder: Path
    path: Path | None
    section: dict[str, Any] | None

    @property
    def relative(self) -> str | None:
        return self.path.relative_to(self.folder).as_posix() if self.path is not None else None

    def describe(self) -> str:
        """Where the rules came from, for the manifest (`verdict_config.rules.from`)."""
        if self.path is None:
            return f"{self.folder} (no pytest configuration file: every setting at its default)"
        if self.section is None:
            return f"{self.path} (no pytest table: every setting at its default)"
        return str(self.path)


def find_rules_file(config: pytest.Config, folder: Path) -> RulesFile:
    """The default branch's configuration file as pytest would find it there for this run
    (pytest's `determine_setup`, in config/findpaths.py): the run's test paths on its command line, mapped
    from the tree under test into `folder` (those that exist there), their common ancestor, and
    from there up to `folder` (never above it) the first of `pytest.toml`, `.pytest.toml`,
    `pytest.ini`, `.pytest.ini` (any), `pyproject.toml` with a `[tool.pytest.ini_options]` or
    `[tool.pytest]` table, `tox.ini` with `[pytest]`, `setup.cfg` with `[tool:pytest]`; never a
    same-named file without a pytest section, nor the place of the PR's own file (a PR that moved
    its settings into a file the default branch has without a pytest section had every rule at its
    default). The command line's `-c` chooses nothing here: it is a fork's text too. Then, as
    pytest does: without one, and no `setup.py` on the way, each test path's own folders; at last
    the first `pyproject.toml` seen, with nothing set."""
    root = tree_root(config)
    start = _mapped(config.invocation_params.dir, root, folder) or folder
    try:
        positional = (
            internals.parse_options(config, list(config.invocation_params.args)).file_or_dir or []
        )
    except pytest.UsageError:
        positional = []
    places = []
    for arg in positional:
        path = Path(os.path.abspath(config.invocation_params.dir / str(arg).split("::")[0]))
        mapped = _mapped(path, root, folder)
        if mapped is not None and mapped.exists():
            places.append(mapped if mapped.is_dir() else mapped.parent)
    ancestor = _common_ancestor(start, places)
    found, pyproject = _locate(folder, [ancestor])
    if found is None and not _has_setup_py(ancestor, folder) and places and places != [ancestor]:
        found, _ = _locate(folder, places)
    if found is not None:
        return RulesFile(folder, found[0], found[1])
    return RulesFile(folder, pyproject, None)


def _mapped(path: Path, root: Path, folder: Path) -> Path | None:
    """`path` of the tree under test at the same place in the rules' folder; None outside the
    tree."""
    for top in (root, root.resolve()):
        try:
            return folder / Path(os.path.abspath(path)).relative_to(top)
        except ValueError:
            continue
    return None


def _common_ancestor(start: Path, places: list[Path]) -> Path:
    """pytest's `get_common_ancestor`: the deepest folder that holds every place, else `start`."""
    common: Path | None = None
    for place in places:
        if common is None or place in common.parents:
            common = place
        elif common != place and common not in place.parents:
            common = Path(os.path.commonpath([common, place]))
    return common or start


def _within(folder: Path, place: Path) -> list[Path]:
    """`place` and its parents, up to `folder` (never above it)."""
    return [p for p in (place, *place.parents) if p == folder or folder in p.parents]


def _locate(
    folder: Path, places: list[Path]
) -> tuple[tuple[Path, dict[str, Any]] | None, Path | None]:
    """pytest's `locate_config` within `folder`: the first configuration file with a pytest
    section, with that section, and the first `pyproject.toml` seen on the way."""
    pyproject = None
    for place in places:
        for base in _within(folder, place):
            for name in INI_NAMES:
                candidate = base / name
                if not candidate.is_file():
                    continue
                if name == "pyproject.toml" and pyproject is None:
                    pyproject = candidate
                section = _section(candidate)
                if section is not None:
                    return (candidate, section), pyproject
    return None, pyproject


def _has_setup_py(place: Path, folder: Path) -> bool:
    return any((p / "setup.py").is_file() for p in _within(folder, place))


def _section(path: Path) -> dict[str, Any] | None:
    """The file's pytest section as pytest keeps it; None where it has none."""
    try:
        return internals.load_config_file(path)
    except ValueError as exc:
        raise RulesError(
            f"{path}: pytest cannot read this configuration file of the default branch ({exc}); "
            "fix it on the default branch"
        ) from None


def _read(path: Path) -> dict[str, Any] | None:
    """The pytest section of a configuration file as {key: str | list | its TOML value}, None
    where it has none (pytest's own reading: `internals.load_config_file`)."""
    section = _section(path)
    return None if section is None else {k: internals.config_value(v) for k, v in section.items()}


def rules_values(path: Path | None, options: Any = None) -> dict[str, str | list[str]]:
    """The rules an ini file sets: str, or a list of lines for `LINELISTS`; with `options` (the
    namespace of that file's own `addopts`), the rules its options set too, as the plugin reads an
    option and an ini key together (the option first, a repeatable option's values before the ini
    list's)."""
    section = (_read(path) or {}) if path is not None else {}
    known = {s.ini for s in SETTINGS if s.ini}
    for key in sorted(section):
        # a misspelt key in the rules' own file is refused as one in the tree under test is
        problem = values.setting_name(key, known)
        if problem is not None:
            raise RulesError(f"{path}: {problem}; fix it on the default branch")
    found: dict[str, str | list[str]] = {}
    for key, (dest, _) in RULES.items():
        given = getattr(options, dest, None) if options is not None and dest else None
        value = section.get(key)
        if key in LINELISTS:
            lines = value if isinstance(value, list) else str(value or "").splitlines()
            listed = [str(v) for v in given or []] + [str(v).strip() for v in lines]
            if any(listed):
                found[key] = [line for line in listed if line]
        elif given not in (None, "", []):
            found[key] = str(given)
        elif key in section:
            found[key] = str(value).strip()
    return found


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "; ".join(map(str, value)) or "(none)"
    return str(value) if value not in (None, "") else "(default)"


def digest(paths: list[Path], top: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under `paths` (files, or folders walked)."""
    found = {}
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            try:
                key = str(file.resolve().relative_to(top.resolve()))
            except ValueError:
                key = str(file)
            try:
                found[key] = hashlib.sha256(file.read_bytes()).hexdigest()
            except OSError:
                found[key] = "unreadable"
    return found


def changes(
    tree: dict[str, Any],
    rules: dict[str, Any],
    tree_files: dict[str, Any],
    rules_files: dict[str, Any],
) -> list[dict[str, Any]]:
    """What the tree under test sets otherwise than the rules: per rule, its value in each
    (`tree`, `rules`: {key: value}), and the files a rule names that differ between the two trees
    (`*_files`: {key: {relative path: digest}})."""
    found = []
    for key in RULES:
        mine, theirs = tree.get(key), rules.get(key)
        if _shown(mine) != _shown(theirs):
            found.append({"setting": key, "tree": _shown(mine), "rules": _shown(theirs)})
        mine_files, their_files = tree_files.get(key, {}), rules_files.get(key, {})
        for path in sorted(set(mine_files) | set(their_files)):
            if mine_files.get(path) != their_files.get(path):
                what = (
                    "added"
                    if path not in their_files
                    else "removed"
                    if path not in mine_files
                    else "changed"
                )
                found.append({"setting": key, "file": path, "tree": what, "rules": ""})
    return found


def tree_values(config: pytest.Config) -> dict[str, str | list[str]]:
    """The rules as the tree under test and the run's command line set them (what they would be
    without `--rocm-rules`)."""
    found: dict[str, str | list[str]] = {}
    for key, (dest, _) in RULES.items():
        given = config.getoption(dest) if dest else None
        value = given if given not in (None, [], "") else config.getini(key)
        if value in (None, [], ""):
            continue
        found[key] = [str(v) for v in value] if isinstance(value, list) else str(value)
    return found


def files_of(values: dict[str, Any], base: Path) -> dict[str, list[Path]]:
    """The files each path rule names, relative to `base` (its ini file's folder); a shipped map's
    name names no file."""
    from pytest_rocm import maps

    named: dict[str, list[Path]] = {}
    for key, (_, is_path) in RULES.items():
        value = values.get(key)
        if not is_path or not value:
            continue
        paths = []
        for item in value if isinstance(value, list) else [value]:
            if key == "rocm_group_map":
                try:
                    path = maps.resolve(item, base)
                except maps.UnknownMapError:
                    continue
                if path.parent == maps.FOLDER:
                    continue  # a map shipped with pytest-rocm: the same on both sides
            else:
                path = Path(item) if Path(item).is_absolute() else base / item
            paths.append(path)
        named[key] = [p for p in paths if p.exists()]
    return named
