"""The plugin's command-line options and ini settings: declared once, read and checked once into
`Settings`.

One rule for relative paths: a value given on the command line is relative to
where pytest was started; a value from the ini file is relative to the ini file.
Every bad value is a `pytest.UsageError` naming the option and what is allowed: each row's
validator (`option_table`, pytest_rocm/schemas/values.py) checks the option as argparse reads it
and the ini key as `read_settings` does; an ini key set to nothing (`rocm_reruns =`) is refused, as
an empty option is (a list of lines set to nothing is no lines).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rocm.catalog.groups import GROUPS
from pytest_rocm.plugin import default_branch, rules
from pytest_rocm.plugin.option_table import JUNIT_PROPERTIES, MOST_TIMEOUT_S, SCHEDULERS, SETTINGS
from pytest_rocm.results.verdicts import Signature, SignatureError, build_signatures
from pytest_rocm.schemas import values

DEFAULT_PROBE = "{python} -m pytest_rocm.results.health_probe"
# the plugin's ini names (`plugin.activation` reads whether any is set)
INI_SETTINGS: frozenset[str] = frozenset(s.ini for s in SETTINGS if s.ini)
# options whose value is a path, as typed with a space (`--rocm-group-map FILE`)
PATH_OPTIONS: tuple[str, ...] = tuple(s.flag for s in SETTINGS if s.flag and s.path)


def add_options(parser: pytest.Parser) -> None:
    """Every option and ini key of `option_table.SETTINGS`, in its order."""
    group = parser.getgroup("rocm", "pytest-rocm: ROCm gates, hardware pinning and reports")
    for setting in SETTINGS:
        if setting.flag:
            checked = {"type": setting.value} if setting.value is not None else {}
            group.addoption(
                setting.flag, help=setting.help, **{"default": None, **setting.kwargs, **checked}
            )
    for setting in SETTINGS:
        if setting.ini:
            linelist = setting.ini_type == "linelist"
            parser.addini(
                setting.ini,
                setting.ini_help or "",
                **({"type": "linelist", "default": []} if linelist else {"default": ""}),
            )


if TYPE_CHECKING:
    from pytest_rocm.plugin.default_branch import DefaultBranch


class Source:
    """Where a setting's value is read: the option given (on the command line, or in the ini file's
    `addopts`), else the ini file. A relative path given as an option is relative to where pytest
    started, one from the ini file to the ini file's folder."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def option(self, dest: str) -> Any:
        return self.config.getoption(dest)

    def ini(self, name: str) -> Any:
        return self.config.getini(name)

    def ini_given(self, name: str) -> Any:
        """The ini key's value as written, None where it is not set."""
        from pytest_rocm.plugin.internals import raw_ini

        return raw_ini(self.config, name)

    def ini_dir(self, name: str) -> Path:
        """The folder the ini value `name` is relative to."""
        return self.config.inipath.parent if self.config.inipath else self.config.rootpath


class RulesSource(Source):
    """As `Source`, under `--rocm-rules` (plugin/default_branch.py has put the default branch's
    settings on the run's options and ini keys): every rule of the verdict (`rules.RULES`) from
    the default branch's configuration file and its `addopts` alone, its paths relative to that
    file (the default branch's checkout); the run's options, its `addopts` and its own ini file set
    none of them. The other ini keys are the default branch's values applied to the tree under
    test: relative to the place of its file there."""

    def __init__(self, config: pytest.Config, branch: DefaultBranch) -> None:
        super().__init__(config)
        self.values = rules.rules_values(branch.file.path, branch.options)
        ini_path = branch.file.path
        self.folder = ini_path.parent if ini_path is not None else branch.folder
        self.tree_folder = rules.tree_root(config) / self.folder.relative_to(branch.folder)
        self.dests = {dest for dest, _ in rules.RULES.values() if dest}

    def option(self, dest: str) -> Any:
        return None if dest in self.dests else super().option(dest)

    def ini(self, name: str) -> Any:
        if name not in rules.RULES:
            return super().ini(name)
        return self.values.get(name, [] if name in rules.LINELISTS else "")

    def ini_given(self, name: str) -> Any:
        return self.values.get(name) if name in rules.RULES else super().ini_given(name)

    def ini_dir(self, name: str) -> Path:
        if name in rules.RULES:
            return self.folder
        return self.tree_folder if name in INI_SETTINGS else super().ini_dir(name)


class PathRule:
    """Where a relative path from the command line or the ini file points."""

    def __init__(self, config: pytest.Config, source: Source | None = None) -> None:
        self.config = config
        self.source = source or Source(config)

    def from_ini(self, value: str, name: str = "") -> Path:
        path = Path(value)
        if path.is_absolute():
            return path
        return self.source.ini_dir(name) / path

    def from_command_line(self, value: str) -> Path:
        return self.config.invocation_params.dir / value

    def setting(self, option: str, ini: str) -> Path | None:
        """The option's path (relative to where pytest started), else the ini's (relative to the ini
        file)."""
        given = self.source.option(option)
        if given:
            return self.from_command_line(given)
        value = self.source.ini(ini)
        return self.from_ini(value, ini) if value else None

    def map_setting(self, option: str, ini: str) -> Path | None:
        """A map's setting: a shipped map's name (`vllm`, `pytest_rocm:vllm`) or a path, as
        `setting` reads it."""
        from pytest_rocm import maps

        given = self.source.option(option)
        value = given or str(self.source.ini(ini)).strip()
        if not value:
            return None
        base = self.config.invocation_params.dir if given else self.source.ini_dir(ini)
        try:
            return maps.resolve(value, base)
        except maps.UnknownMapError as exc:
            raise pytest.UsageError(
                f"{'--' + option.replace('_', '-') if given else ini}: {exc}"
            ) from None

    def settings(self, option: str, ini: str) -> list[Path]:
        """A repeatable option's paths, then the ini list's."""
        return [self.from_command_line(p) for p in self.source.option(option) or []] + [
            self.from_ini(p, ini) for p in self.source.ini(ini)
        ]


@dataclass
class Settings:
    """Every pytest-rocm setting of a run, read and checked once."""

    report_dir: Path | None
    group_map_path: Path | None
    allowed_groups: frozenset[str]
    reruns: int
    probe_command: str
    probe_argv: list[str]
    signatures: list[Signature]
    timeouts: dict[str, float]
    baseline_files: list[Path]
    exit_by_conclusion: bool
    junit_properties: str
    scheduler: str  # --rocm-scheduler: auto, gpu or xdist
    durations_path: Path | None
    paths: PathRule = field(repr=False)
    quarantine: dict[str, Any] | None = None  # the quarantine file's document (trunk/quarantine.py)
    # under --rocm-rules: where the rules came from, and what the tree under test sets otherwise
    rules: dict[str, Any] | None = None


def _bool_ini(config: pytest.Config, name: str) -> bool:
    value = str(config.getini(name)).strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise pytest.UsageError(f"{name}: {value!r} is not true or false")


def _choice(config: pytest.Config, name: str, choices: tuple[str, ...]) -> str:
    """A setting with fixed values: the option (argparse checked it), else the ini value, else the
    first choice."""
    value = config.getoption(name) or str(config.getini(name)).strip() or choices[0]
    if value not in choices:
        raise pytest.UsageError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value


def probe_argv(command: str) -> list[str]:
    """The health probe as an argument list: split with shlex (no shell), `{python}` is this Python,
    and the program must exist. Raises ValueError saying what is wrong."""
    try:
        argv = [sys.executable if part == "{python}" else part for part in shlex.split(command)]
    except ValueError as exc:
        raise ValueError(
            f"cannot split {command!r} into arguments ({exc}); it is split with shlex, not run "
            "by a shell"
        ) from None
    if not argv:
        raise ValueError("the command is empty")
    if shutil.which(argv[0]) is None:
        raise ValueError(f"{argv[0]!r} is not an executable file or a program on PATH")
    return argv


def read_settings(config: pytest.Config) -> Settings:
    _check_rootdir_not_taken_from(config)
    _check_ini_keys(config)
    source, verdict_rules = _rules_source(config)
    _check_ini_values(source)
    paths = PathRule(config, source)
    allowed = frozenset(GROUPS) | frozenset(source.ini("rocm_groups"))
    report_dir = paths.setting("rocm_report_dir", "rocm_report_dir")
    group_map = paths.map_setting("rocm_group_map", "rocm_group_map")
    try:
        signatures = build_signatures(source.ini("rocm_infra_signatures"))
    except SignatureError as exc:
        raise pytest.UsageError(str(exc)) from exc
    reruns = source.option("rocm_reruns")
    if reruns is None:
        reruns = _ini_value(source, "rocm_reruns", 1)
    command = source.option("rocm_health_probe") or source.ini("rocm_health_probe") or DEFAULT_PROBE
    try:
        argv = probe_argv(command)
    except ValueError as exc:
        raise pytest.UsageError(f"--rocm-health-probe / rocm_health_probe: {exc}") from None
    exit_by = config.getoption("rocm_exit_by_conclusion") or _bool_ini(
        config, "rocm_exit_by_conclusion"
    )
    if exit_by and report_dir is None:
        raise pytest.UsageError(
            "--rocm-exit-by-conclusion / rocm_exit_by_conclusion: the exit status follows the gate "
            "report's conclusion, and without --rocm-report-dir there is none; give the folder"
        )
    scheduler = _choice(config, "rocm_scheduler", SCHEDULERS)
    if scheduler == "gpu" and getattr(config.option, "dist", "no") not in ("no", "load"):
        raise pytest.UsageError(
            f"--rocm-scheduler=gpu schedules test by test; it cannot be combined with "
            f"--dist {config.option.dist} (use -n N alone, or --dist load)"
        )
    junit = _choice(config, "rocm_junit_properties", JUNIT_PROPERTIES)
    quarantine = _quarantine(paths.setting("rocm_quarantine", "rocm_quarantine"))
    return Settings(
        quarantine=quarantine,
        report_dir=report_dir.resolve() if report_dir else None,
        group_map_path=group_map,
        allowed_groups=allowed,
        reruns=reruns,
        probe_command=command,
        probe_argv=argv,
        signatures=signatures,
        timeouts=_timeouts(source.ini("rocm_timeouts"), allowed),
        baseline_files=paths.settings("rocm_baselines", "rocm_baselines"),
        exit_by_conclusion=exit_by,
        junit_properties=junit,
        scheduler=scheduler,
        durations_path=paths.setting("rocm_durations", "rocm_durations"),
        paths=paths,
        rules=verdict_rules,
    )


def _rules_source(config: pytest.Config) -> tuple[Source, dict[str, Any] | None]:
    """Where the rules of the verdict come from, and, under `--rocm-rules`, what the tree under test
    sets otherwise (docs/architecture.md, "The rules of the verdict"; plugin/default_branch.py)."""
    try:
        branch = default_branch.applied(config)
        if branch is None:
            return Source(config), None
        source = RulesSource(config, branch)
    except rules.RulesError as exc:
        raise pytest.UsageError(str(exc)) from None
    found: dict[str, Any] = {
        "from": branch.file.describe(),
        "file": branch.file.relative,
        "changed": [],
    }
    if hasattr(config, "workerinput") or is_rerun_helper(config):
        return source, found  # the controller compares the trees, once
    tree = branch.tree_rules
    tree_base = config.inipath.parent if config.inipath else config.rootpath
    found["changed"] = rules.changes(
        tree,
        source.values,
        _digests(rules.files_of(tree, tree_base), rules.tree_root(config)),
        _digests(rules.files_of(source.values, source.folder), branch.folder),
    )
    found["changed"] += branch.changed
    if config.getoption("rocm_rules") and not rules.given_on_command_line(config):
        found["changed"].append(
            {"setting": "addopts", "tree": "names other rules (--rocm-rules)", "rules": ""}
        )
    return source, found


def is_rerun_helper(config: pytest.Config) -> bool:
    """This process is a fresh process of a run (plugin/fresh.py): `--rocm-rerun-helper` on its own
    command line, never in an ini file's `addopts`."""
    return rules.command_line_value(config, "--rocm-rerun-helper") is not None


def _digests(named: dict[str, list[Path]], top: Path) -> dict[str, dict[str, str]]:
    return {key: rules.digest(paths, top) for key, paths in named.items()}


def _check_ini_keys(config: pytest.Config) -> None:
    """A misspelt `rocm_*` key in the ini file (`rocm_report_dri = out`) would be read as nothing,
    and pytest only warns: the run would go on without what it asked for. (The rules' own file
    under `--rocm-rules`: `rules.rules_values`.)"""
    from pytest_rocm.plugin.internals import unknown_ini_keys

    for key in sorted(unknown_ini_keys(config)):
        # `rocm-reruns`, `ROCM_RERUNS`: ours but for case and separators, read as nothing
        problem = values.setting_name(key, INI_SETTINGS)
        if problem is not None:
            raise pytest.UsageError(f"{config.inipath}: {problem}")


def _check_ini_values(source: Source) -> None:
    """Every ini key the run reads that is set, checked by its row's validator before the run
    starts; one set to nothing is refused (a list of lines set to nothing is no lines)."""
    for setting in SETTINGS:
        if not setting.ini or setting.ini_type == "linelist":
            continue
        given = source.ini_given(setting.ini)
        if given is None:
            continue
        if not str(given).strip():
            raise pytest.UsageError(
                f"{setting.ini}: set to nothing; give it a value, or remove the line (its default "
                "applies)"
            )
        if setting.value is not None:
            _ini_value(source, setting.ini, None)


def _ini_value(source: Source, name: str, default: Any) -> Any:
    """The ini key `name` checked by its row's validator; `default` where it is not set."""
    given = str(source.ini(name)).strip()
    if not given:
        return default
    [validator] = [s.value for s in SETTINGS if s.ini == name and s.value is not None]
    try:
        return validator.check(given, name)
    except values.BadValue as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_rootdir_not_taken_from(config: pytest.Config) -> None:
    """A path option typed with a space (`--rocm-report-dir out tests/`): before plugins' options
    are known, pytest takes the value for a test path too, and picks the rootdir (and ini file) from
    it and the tests together. Node ids then carry another prefix, so baselines, maps, quarantine
    and golden outputs no longer match them (and only once the value's path exists: the next run
    into the same folder differs from the first). Refuse the run where the rootdir is not the one
    the tests alone give.

    A value that does not exist yet counts as its nearest folder that does: the report folder the
    run creates exists when xdist starts its workers, which parse the same command line again and
    would take another rootdir than this process (so the check is this process's alone; a worker or
    a rerun helper is given what it was)."""
    if hasattr(config, "workerinput") or is_rerun_helper(config):
        return
    args = list(config.invocation_params.args)
    # the value's place in the command line -> (option, value)
    spaced = {
        index + 1: (arg, args[index + 1])
        for index, arg in enumerate(args[:-1])
        if arg in PATH_OPTIONS and not args[index + 1].startswith("-")
    }
    if not spaced:
        return
    from pytest_rocm.plugin.internals import rootdir_for

    tests = list(config.option.file_or_dir or [])
    alone = rootdir_for(config, tests)
    if alone is None:
        return
    for at, (arg, value) in spaced.items():
        existing = config.invocation_params.dir / value
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        # where pytest's first parse sees it: among the test paths, in the command line's order
        # (the first ini file found from them decides)
        positional = [
            str(existing) if index == at else given
            for index, given in enumerate(args)
            if index == at or (given in tests and index not in spaced)
        ]
        taken = rootdir_for(config, positional)
        if taken is not None and taken != alone:
            raise pytest.UsageError(
                f"{arg} {value}: pytest takes this path for a test path too and chooses the rootdir "
                f"{taken} instead of {alone}, so every node id changes; write {arg}={value} with "
                "'=', or set it in the tree's own ini file"
            )


def _quarantine(path: Path | None) -> dict[str, Any] | None:
    """The quarantine file through the strict loader (it decides what blocks): a bad one stops the
    run."""
    if path is None:
        return None
    from pytest_rocm.schemas.loader import ArtifactError, load_artifact

    try:
        return load_artifact(path, "quarantine")
    except ArtifactError as exc:
        raise pytest.UsageError(
            f"--rocm-quarantine / rocm_quarantine: {exc}; fix the file or write it again with "
            "`rocm-gate history quarantine`"
        ) from None


def _timeouts(lines: list[str], allowed: frozenset[str]) -> dict[str, float]:
    """`rocm_timeouts` lines `group=seconds` (and `default=seconds`) for gate tests."""
    table = {}
    for line in lines:
        group, sep, seconds = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"rocm_timeouts: {line!r} is not `group=seconds`")
        try:
            value = values.seconds(seconds, None, high=MOST_TIMEOUT_S, above=True)
        except values.BadValue as exc:
            raise pytest.UsageError(
                f"rocm_timeouts: {line!r} is not `group=seconds`: {exc}"
            ) from None
        if group.strip() not in allowed | {"default"}:
            raise pytest.UsageError(
                f"rocm_timeouts: unknown group {group.strip()!r}; allowed: default, "
                + ", ".join(sorted(allowed))
            )
        table[group.strip()] = value
    return table
