"""Under `--rocm-rules=DIR`, what a run compares, records and selects is the default branch's
(docs/architecture.md, "The rules of the verdict").

The rules of the verdict (plugin/rules.py) were not enough: one line in a PR's own `pytest.ini`,
`addopts = --rocm-golden-record=.scratch`, made every golden test record instead of compare, and
`--deselect`, `-k`, `--ignore`, `testpaths` or `python_files` there dropped a failing blocking gate
from the run; the check said `success` and named nothing. So, under `--rocm-rules`, before any
other plugin reads them (`apply`, from the first `pytest_cmdline_main`):

- every pytest-rocm setting (`option_table.SETTINGS`) comes from DIR, by its row's `under_rules`:
  the rules from DIR's configuration file and its `addopts` alone; the recording options
  (`--rocm-golden-record`, `--rocm-propose-baselines`) are set aside wherever given, since a run
  that records judges nothing (a reference is recorded on the default branch without
  `--rocm-rules`); `--rocm-rerun-helper` and `--rocm-rules` from the run's own command line only;
  every other one from DIR's file and `addopts`, then the command line;
- pytest's own settings that change what runs or how an outcome counts (`PYTEST_SETTINGS`: the
  selection options, the collection patterns, runs that run nothing, pytest-rerunfailures' reruns)
  come from DIR's file and `addopts`, then the command line.

Neither the PR's configuration file, nor its `addopts`, nor $PYTEST_ADDOPTS sets any of them: each
one they set otherwise is ignored, and listed (`verdict_config.rules.changed`, as the rules' changes
are) with what it does, so the check names it: it applies after merge, in plain sight. Ignored
rather than refused: the run still judges the change with the default branch's settings, where a
refusal would leave the PR's author nothing but an error, and the reviewers no verdict.

The command line applies: it is the caller's `suites` input, which names what the run covers (its
paths, `-m`, `-k`), and a fork's caller that changes `.github/` is never approved by a label
(docs/reference.md, the attack table); a blocking gate it deselects is named and makes the run
`incomplete` (plugin/recording.py, results/conclusion.py). What this cannot set aside: options that
act before any plugin (`-p`, `--confcutdir`, `--noconftest`, `--import-mode`, `pythonpath`), which
end in errors or in no report at all (the check then blocks: no results); and a conftest's own code
(`collect_ignore`, its hooks), which is code a reviewer reads like the tests it drops.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_rocm.plugin import internals, rules
from pytest_rocm.plugin.option_table import SETTINGS

__all__ = ["PYTEST_SETTINGS", "DefaultBranch", "PytestSetting", "applied", "override_warnings"]


@dataclass(frozen=True)
class PytestSetting:
    """One of pytest's own settings (or an installed plugin's) that changes what a run selects, runs
    or counts: its option (`flag` as the check names it, `dest`), its ini key, and what it does."""

    flag: str | None
    dest: str | None
    ini: str | None
    effect: str


PYTEST_SETTINGS: tuple[PytestSetting, ...] = (
    PytestSetting("-k", "keyword", None, "runs only the tests whose names match"),
    PytestSetting("-m", "markexpr", None, "runs only the tests whose markers match"),
    PytestSetting("--deselect", "deselect", None, "deselects these tests"),
    PytestSetting("--ignore", "ignore", None, "never collects these paths"),
    PytestSetting("--ignore-glob", "ignore_glob", None, "never collects the paths that match"),
    PytestSetting(
        "test paths", "file_or_dir", None, "collects these (alone, where no path is given)"
    ),
    PytestSetting("--pyargs", "pyargs", None, "reads the test paths as Python packages"),
    PytestSetting("--collect-only", "collectonly", None, "collects and runs nothing"),
    PytestSetting("--setup-only", "setuponly", None, "sets fixtures up and runs no test"),
    PytestSetting("--setup-plan", "setupplan", None, "runs nothing"),
    PytestSetting(
        "--last-failed", "lf", None, "runs only what the cache (a PR can commit it) says failed"
    ),
    PytestSetting(
        "--last-failed-no-failures",
        "last_failed_no_failures",
        None,
        "runs nothing where the cache holds no failure",
    ),
    PytestSetting("--stepwise", "stepwise", None, "skips the tests before the cached failure"),
    PytestSetting("--stepwise-skip", "stepwise_skip", None, "skips the first failing test"),
    PytestSetting(
        "--reruns", "reruns", "reruns", "pytest-rerunfailures: a failed test runs until it passes"
    ),
    PytestSetting(
        "--force-reruns", "force_reruns", None, "pytest-rerunfailures: every test runs again"
    ),
    PytestSetting(
        "--reruns-mode", "reruns_mode", None, "pytest-rerunfailures: markers' reruns add up"
    ),
    PytestSetting(None, None, "testpaths", "where tests are collected when no path is given"),
    PytestSetting(None, None, "python_files", "which files are test modules"),
    PytestSetting(None, None, "python_classes", "which classes hold tests"),
    PytestSetting(None, None, "python_functions", "which functions are tests"),
    PytestSetting(None, None, "norecursedirs", "folders never collected"),
    PytestSetting(
        None, None, "collect_imported_tests", "whether tests imported into a module are collected"
    ),
)


@dataclass
class DefaultBranch:
    """The default branch's settings as applied to this run: its checkout (`folder`), its
    configuration file (`file`), the options its own `addopts` gives (`options`: where rules
    given as options come from), the rules as the tree under test set them before
    (`tree_rules`), and every other setting the tree under test set otherwise (`changed`)."""

    folder: Path
    file: rules.RulesFile
    options: object
    tree_rules: dict[str, Any]
    changed: list[dict[str, Any]] = field(default_factory=list)


_APPLIED = pytest.StashKey["DefaultBranch | None"]()


def applied(config: pytest.Config) -> DefaultBranch | None:
    """The default branch's settings on this run, applied once (None: no `--rocm-rules`). Raises
    rules.RulesError naming the file and the fix."""
    if _APPLIED in config.stash:
        return config.stash[_APPLIED]
    folder = rules.rules_dir(config)
    branch = None if folder is None else _apply(config, folder)
    config.stash[_APPLIED] = branch
    return branch


def _apply(config: pytest.Config, folder: Path) -> DefaultBranch:
    found = rules.find_rules_file(config, folder)
    addopts = _addopts(found)
    command_line = list(config.invocation_params.args)
    try:
        alone = internals.parse_options(config, addopts)
        given = internals.parse_options(config, addopts + command_line)
        typed = internals.parse_options(config, command_line)
    except pytest.UsageError as exc:
        raise rules.RulesError(
            f"{found.path}: its addopts are not options this run knows ({exc}); fix them on the "
            "default branch"
        ) from None
    branch = DefaultBranch(folder, found, alone, rules.tree_values(config))
    where = _where(config)
    wanted = wanted_options(
        {d: getattr(given, d, None) for d in _dests(config)},
        {d: getattr(typed, d, None) for d in _dests(config)},
    )
    before = {dest: getattr(config.option, dest) for dest in wanted}
    for dest, value in wanted.items():
        setattr(config.option, dest, value)
    ini_before = {key: _ini(config, key) for key in _ini_keys(config)}
    internals.replace_ini(config, _ini_values(config, found, alone))
    ini_after = {key: _ini(config, key) for key in ini_before}
    if before.get("file_or_dir") != wanted.get("file_or_dir") or ini_before.get(
        "testpaths"
    ) != ini_after.get("testpaths"):
        internals.set_test_args(
            config,
            internals.decide_test_args(config, list(given.file_or_dir or []), bool(given.pyargs)),
        )
    branch.changed = (
        file_change(rules.tree_root(config), config.inipath, found)
        + option_changes(before, wanted, where, typed)
        + ini_changes(ini_before, ini_after, where["ini"])
    )
    return branch


def _addopts(found: rules.RulesFile) -> list[str]:
    """The default branch's `addopts` as pytest splits them (a TOML list as it is)."""
    value = internals.config_value((found.section or {}).get("addopts", ""))
    return [str(v) for v in value] if isinstance(value, list) else shlex.split(str(value))


def _dests(config: pytest.Config) -> list[str]:
    """The options this run has, of pytest-rocm's table (but `--rocm-rules`, read by rules.py) and
    of `PYTEST_SETTINGS`."""
    dests = [s.dest for s in SETTINGS if s.dest and s.flag != "--rocm-rules"]
    dests += [s.dest for s in PYTEST_SETTINGS if s.dest]
    return [d for d in dests if hasattr(config.option, d)]


def _ini(config: pytest.Config, key: str) -> Any:
    """The ini key's value as pytest reads it, or as written where pytest cannot read it (a PR's
    `collect_imported_tests = maybe`: set aside, it need not be readable)."""
    try:
        return config.getini(key)
    except (ValueError, TypeError):
        return internals.raw_ini(config, key)


def _ini_keys(config: pytest.Config) -> list[str]:
    keys = [s.ini for s in SETTINGS if s.ini] + [s.ini for s in PYTEST_SETTINGS if s.ini]
    return [k for k in keys if internals.ini_registered(config, k)]


def wanted_options(given: dict[str, Any], typed: dict[str, Any]) -> dict[str, Any]:
    """dest -> the value a run under `--rocm-rules` has (the module docstring): `given`, the
    options of the default branch's `addopts` and the command line; `typed`, of the command line
    alone."""
    rows = {s.dest: s for s in SETTINGS if s.dest}
    wanted: dict[str, object] = {}
    for dest, value in given.items():
        row = rows.get(dest)
        treatment = row.under_rules if row else "default branch"
        if treatment in ("rule", "set aside"):
            # rules: from the default branch's file and addopts (rules.rules_values), never as the
            # run's options; recording: never
            wanted[dest] = None
        elif treatment == "command line":
            wanted[dest] = typed.get(dest)
        else:
            wanted[dest] = value
    return wanted


def _ini_values(config: pytest.Config, found: rules.RulesFile, alone: Any) -> dict[str, Any]:
    """The default branch's value of each ini key this module takes from it (None: unset there),
    with its own `addopts`' `-o KEY=VALUE` over its file's, as pytest reads them (the command
    line's `-o` and the tree under test's set none of them)."""
    section = found.section or {}
    values = {key: section.get(key) for key in _ini_keys(config)}
    for text in getattr(alone, "override_ini", None) or []:
        key, sep, value = str(text).partition("=")
        if sep and key in values:
            values[key] = internals.override_value(value)
    return values


def _where(config: pytest.Config) -> dict[str, str]:
    """Where the tree under test's settings were read: its configuration file, and its `addopts`
    (or $PYTEST_ADDOPTS)."""
    name = config.inipath.name if config.inipath is not None else "no configuration file"
    env = os.environ.get("PYTEST_ADDOPTS", "").strip()
    return {
        "ini": name,
        "addopts": f"addopts in {name}" + (", $PYTEST_ADDOPTS" if env else ""),
    }


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "; ".join(map(str, value)) or "(not set)"
    if value is True:
        return "on"
    return str(value) if value not in (None, "", False) else "(not set)"


def _entry(setting: str, tree: Any, theirs: Any, where: str, effect: str = "") -> dict[str, Any]:
    return {
        "setting": f"{setting} ({effect})" if effect else setting,
        "tree": f"{_shown(tree)} ({where})",
        "rules": _shown(theirs),
    }


def _option_names() -> dict[str, tuple[str, str]]:
    """option dest -> (how the check names it, what it does)."""
    named = {s.dest: (s.flag or "", s.effect) for s in SETTINGS if s.dest}
    named.update({s.dest: (s.flag or "", s.effect) for s in PYTEST_SETTINGS if s.dest})
    return named


def _ini_effects() -> dict[str, str]:
    """ini key -> what it does."""
    effects = {s.ini: s.effect for s in SETTINGS if s.ini}
    effects.update({s.ini: s.effect for s in PYTEST_SETTINGS if s.ini})
    return effects


def option_changes(
    before: dict[str, Any], wanted: dict[str, Any], where: dict[str, Any], typed: Any
) -> list[dict[str, Any]]:
    """The options the tree under test (its `addopts`, $PYTEST_ADDOPTS) or, for a setting set
    aside, the command line set otherwise than the run now has them; the rules' own are
    plugin/rules.py's (`changes`)."""
    rows = {s.dest: s for s in SETTINGS if s.dest}
    names = _option_names()
    found = []
    for dest, value in wanted.items():
        row = rows.get(dest)
        if (row is not None and row.rule) or _shown(before[dest]) == _shown(value):
            continue
        typed_here = getattr(typed, dest, None) not in (None, [], False)
        place = "the command line" if row is not None and row.records and typed_here else None
        flag, effect = names[dest]
        found.append(_entry(flag, before[dest], value, place or where["addopts"], effect))
    return found


def ini_changes(before: dict[str, Any], after: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The ini keys the tree under test's configuration file (or an `-o`) set otherwise than the
    default branch's; the rules' own are plugin/rules.py's."""
    effects = _ini_effects()
    found = []
    for key, value in before.items():
        if key in rules.RULES or _shown(value) == _shown(after[key]):
            continue
        found.append(_entry(key, value, after[key], where, effects.get(key, "")))
    return found


def file_change(root: Path, inipath: Path | None, found: rules.RulesFile) -> list[dict[str, Any]]:
    """The configuration file the tree under test has otherwise than the default branch (a PR that
    moves its settings into another file, or the default branch without one)."""
    mine = None
    if inipath is not None and internals.load_config_file(inipath) is not None:
        try:
            mine = inipath.relative_to(root).as_posix()
        except ValueError:
            mine = str(inipath)
    theirs = found.relative if found.section is not None else None
    if mine == theirs:
        return []
    return [
        {
            "setting": "pytest configuration file",
            "tree": mine or "(none)",
            "rules": theirs or f"(none: {found.describe()})",
        }
    ]


def _command_line_rules(config: pytest.Config) -> list[tuple[str, object]]:
    """The options of rules and of recording the run's own command line gives, (dest, value): under
    `--rocm-rules` neither is read from there."""
    try:
        typed = internals.parse_options(config, list(config.invocation_params.args))
    except pytest.UsageError:
        return []
    return [
        (s.dest, getattr(typed, s.dest, None))
        for s in SETTINGS
        if s.dest
        and s.under_rules in ("rule", "set aside")
        and getattr(typed, s.dest, None) not in (None, [], False, "")
    ]


def override_warnings(config: pytest.Config, record: dict[str, Any] | None) -> list[str]:
    """One line per setting of this run that `--rocm-rules` overrides, for the terminal (the check
    names them too, from `record`: the manifest's `verdict_config.rules`): first each rule or
    recording option typed on the command line (a maintainer's `--rocm-group-map=vllm` is not the
    map the run uses), then what the tree under test sets otherwise. Empty without `--rocm-rules`."""
    branch = applied(config)
    if branch is None or not isinstance(record, dict):
        return []
    where = record.get("from") or branch.file.describe()
    theirs = rules.rules_values(branch.file.path, branch.options)
    rows = {s.dest: s for s in SETTINGS if s.dest}
    lines, named = [], set()
    for dest, value in _command_line_rules(config):
        row = rows[dest]
        if row.rule:
            key = row.ini or dest
            if _shown(value) == _shown(theirs.get(key)):
                continue  # the same either way
            named.add(key)
            lines.append(
                f"{row.flag}={_shown(value)} on the command line is ignored: under --rocm-rules "
                f"{key} is a rule of the verdict, read only from the default branch's {where}, "
                f"where it is {_shown(theirs.get(key))}; set it there"
            )
        else:
            named.add(row.flag or dest)
            lines.append(
                f"{row.flag} on the command line is ignored: under --rocm-rules a run that records "
                f"judges nothing ({row.effect})"
            )
    for entry in record.get("changed") or []:
        setting = str(entry.get("setting", ""))
        if setting.split(" ")[0] in named:
            continue
        if entry.get("file"):
            said = f"{setting}: {entry['file']} ({entry.get('tree')}) in the tree under test"
        else:
            said = f"{setting}: {entry.get('tree')} in the tree under test"
        value = str(entry.get("rules") or where)
        if value.startswith("(") and value.endswith(")"):
            value = value[1:-1]
        lines.append(
            f"{said} is ignored under --rocm-rules (the default branch's: {value}); it applies "
            "after merge"
        )
    return [f"pytest-rocm: warning: {line}" for line in lines]
