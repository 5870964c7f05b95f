"""The rules of the verdict: which settings decide verdicts and conclusions, and, in a run given
`--rocm-rules=DIR` (or $PYTEST_ROCM_RULES), where they come from: DIR, the default branch's checkout,
never the tree under test (docs/architecture.md, "The rules of the verdict").

A PR's tree is its author's: its `pytest.ini`, `pyproject.toml`, `setup.cfg` or `tox.ini` could
quarantine its own regression, call any failure infrastructure, probe with a command that always
fails, rerun until a test passes once, loosen a baseline or a golden output, or regroup tests. Under
`--rocm-rules` every rule (`RULES`) is read from DIR's ini file (the one at the same place in DIR as
the run's own ini file in its tree), and the files the rules name (quarantine, baselines, group map,
golden outputs) are DIR's; the run's command line, its `addopts` and its own ini file change none of
them. Where the tree under test sets a rule otherwise, or changes a file a rule names, the change is
listed (`changes`), the manifest carries the list, and the check names it: it applies after merge.

`--rocm-rules` itself is read from the command line or the environment only, never from an ini
file's `addopts` (which is the tree's).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path

import pytest

from pytest_rocm.errors import BadInput
from pytest_rocm.plugin.option_table import SETTINGS

__all__ = [
    "RULES",
    "RulesError",
    "changes",
    "digest",
    "files_of",
    "rules_dir",
    "rules_ini",
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


class RulesError(BadInput):
    pass


def given_on_command_line(config: pytest.Config) -> str | None:
    """`--rocm-rules` as the run's own command line gives it (not the ini file's `addopts`)."""
    args = list(config.invocation_params.args)
    given = None
    for index, arg in enumerate(args):
        if arg.startswith("--rocm-rules="):
            given = arg.split("=", 1)[1]
        elif arg == "--rocm-rules" and index + 1 < len(args):
            given = args[index + 1]
    return given


def rules_dir(config: pytest.Config) -> Path | None:
    """The rules' folder the run was started with: `--rocm-rules` on the command line, else
    $PYTEST_ROCM_RULES; never the ini file's `addopts`, which belongs to the tree under test."""
    given = given_on_command_line(config) or os.environ.get(ENVIRONMENT) or None
    return (config.invocation_params.dir / given).resolve() if given else None


def tree_root(config: pytest.Config) -> Path:
    """The top of the tree under test: the git checkout the rootdir is in, else the rootdir."""
    for folder in (config.rootpath, *config.rootpath.parents):
        if (folder / ".git").exists():
            return folder
    return config.rootpath


def rules_ini(config: pytest.Config, folder: Path) -> Path | None:
    """The rules' ini file in `folder`: at the place of the run's own ini file in its tree, else
    where pytest would look from the rootdir's place; None where the rules' tree has none (every
    rule at its default)."""
    if not folder.is_dir():
        raise RulesError(
            f"--rocm-rules / ${ENVIRONMENT}: {folder} is not a folder (give the default branch's "
            "checkout)"
        )
    root = tree_root(config)
    if config.inipath is not None:
        try:
            same = folder / config.inipath.relative_to(root)
        except ValueError:
            same = None
        if same is not None and same.is_file():
            return same
    try:
        start = folder / config.rootpath.relative_to(root)
    except ValueError:
        start = folder
    for place in (start, *[p for p in start.parents if folder in (p, *p.parents)]):
        for name in INI_NAMES:
            candidate = place / name
            if candidate.is_file() and _has_pytest_section(candidate):
                return candidate
    return None


def _has_pytest_section(path: Path) -> bool:
    try:
        return _read(path) is not None
    except RulesError:
        return True  # a broken file is reported when it is read


def _read(path: Path) -> dict | None:
    """The pytest section of an ini file as {key: str | list}, None where it has none."""
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            if path.name in ("pytest.toml", ".pytest.toml"):
                return data.get("pytest", {})
            tool = data.get("tool", {}).get("pytest")
            if not isinstance(tool, dict):
                return None
            section = tool.get("ini_options", {k: v for k, v in tool.items() if k != "ini_options"})
            return section if isinstance(section, dict) else None
        import iniconfig

        parsed = iniconfig.IniConfig(str(path))
        name = "tool:pytest" if path.suffix == ".cfg" else "pytest"
        if name not in parsed:
            return {} if path.name in ("pytest.ini", ".pytest.ini") else None
        return dict(parsed[name].items())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, Exception) as exc:  # noqa: BLE001
        raise RulesError(f"{path}: cannot read the rules ({exc})") from None


def rules_values(path: Path | None) -> dict[str, str | list[str]]:
    """The rules an ini file sets: str, or a list of lines for `LINELISTS`."""
    if path is None:
        return {}
    section = _read(path) or {}
    found: dict[str, str | list[str]] = {}
    for key in RULES:
        if key not in section:
            continue
        value = section[key]
        if key in LINELISTS:
            lines = value if isinstance(value, list) else str(value).splitlines()
            found[key] = [str(line).strip() for line in lines if str(line).strip()]
        else:
            found[key] = str(value).strip()
    return found


def _shown(value) -> str:
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


def changes(tree: dict, rules: dict, tree_files: dict, rules_files: dict) -> list[dict]:
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


def files_of(values: dict, base: Path) -> dict[str, list[Path]]:
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
