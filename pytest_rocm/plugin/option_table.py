"""Every pytest-rocm setting, declared once: its command-line option, its ini key, and what the
rest of the plugin needs to know of it.

From this table `options.add_options` registers the options and ini keys, `options.INI_SETTINGS`
lists the ini keys (a misspelt one is refused; any one set turns the plugin on), `PATH_OPTIONS`
lists the options whose value is a path (typed with a space, such a value can move pytest's
rootdir), `rules.RULES` lists the rules of the verdict (read from `--rocm-rules` alone),
`default_branch` takes every row from the default branch under `--rocm-rules` (the treatment of
each is its `under_rules`), and `fresh` leaves out of a fresh process's command line what
`NOT_PASSED_ON` names. Each row's `value` is the validator of what it takes
(pytest_rocm/schemas/values.py): argparse's `type` for the option, and `options.read_settings` checks
the ini key with it, so a bad value is refused by name before the run starts, whichever way it is
given (tests/test_hostile_values.py gives every row empty, NaN, infinite, negative, huge and garbage
values). A new setting is one row here (docs/extending.md, "An option").
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from pytest_rocm.schemas import values

# Settings with fixed values, the default first. Per-test JUnit properties: what tools read, or
# everything the plugin knows; the xdist scheduler: the gpu one on runners with GPUs, the gpu one,
# or xdist's own.
JUNIT_PROPERTIES = ("minimal", "full")
SCHEDULERS = ("auto", "gpu", "xdist")
# The bounds of the numbers the settings take: a count past them is a typo, not a request.
MOST_RERUNS = 20
MOST_SEED = 2**32 - 1  # the largest seed every random number generator takes
MOST_TIMEOUT_S = 7 * 86400.0
# What the settings take (values.Option): a path, a name or a command is any text but the empty one
# (kept as given: a path is resolved later, against where pytest started or the ini file).
PATH = values.Option(values.text, keep=True, what="a path")
FOLDER = values.Option(values.text, keep=True, what="a folder")
NAME = values.Option(values.text, keep=True, what="a name")
COMMAND = values.Option(values.command, keep=True)
ARGUMENTS = values.Option(values.arguments, keep=True)
RERUNS = values.Option(values.count, low=0, high=MOST_RERUNS, unit="reruns", hint="0: none")
SEED = values.Option(values.count, low=0, high=MOST_SEED)


@dataclass(frozen=True)
class Setting:
    """One setting: a command-line option (`flag`), an ini key (`ini`), or both.

    `kwargs` go to argparse as they are; `ini_type` and `ini_default` to `parser.addini`. `path`:
    the option's value is a file or folder. `rule`: a rule of the verdict (docs/architecture.md,
    "The rules of the verdict"), `names_files` where its value names files. `passed_on`: whether a
    fresh process (a rerun's, or one after a device fault) is given the option as the run had it.
    `records`: the option records reference data (golden outputs, baseline proposals) instead of
    judging against it. `command_line_only`: read from the run's own command line, never from an
    ini file's `addopts` (a process's role). `effect`: what the setting changes, in the words the
    check names it with under `--rocm-rules` (plugin/default_branch.py). `value`: what the option
    and the ini key take (`values.Option`), None for a flag, a choice (argparse's `choices`) or a
    list of lines (checked where it is read).
    """

    flag: str | None
    help: str
    ini: str | None = None
    ini_help: str | None = None
    ini_type: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    path: bool = False
    rule: bool = False
    names_files: bool = False
    passed_on: bool = True
    records: bool = False
    command_line_only: bool = False
    effect: str = ""
    value: values.Option | None = None

    @property
    def dest(self) -> str | None:
        return self.flag[2:].replace("-", "_") if self.flag else None

    @property
    def takes_value(self) -> bool:
        return self.kwargs.get("action") not in ("store_true", "store_false")

    @property
    def under_rules(self) -> str:
        """Where the setting comes from in a run under `--rocm-rules` (plugin/default_branch.py):
        `rule` (the default branch's ini file and `addopts` alone: the command line is a fork's text
        too, and the files it names are the default branch's), `set aside` (recording judges
        nothing: never, wherever given), `command line` (the run's own command line only), or
        `default branch` (the default branch's ini file and `addopts`, then the command line; never
        the PR's ini file, its `addopts` or $PYTEST_ADDOPTS)."""
        if self.rule:
            return "rule"
        if self.records:
            return "set aside"
        if self.command_line_only:
            return "command line"
        return "default branch"


def _default_for(flag: str, extra: str = "") -> str:
    return f"default for {flag}{extra}"


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "--rocm-platform",
        "simulate a platform: a built-in profile (cpu, mi300x-8, h100-8, ...) or a JSON file; "
        "default: $PYTEST_ROCM_PLATFORM, else detect the real one",
        kwargs={"metavar": "NAME|FILE"},
        path=True,
        passed_on=False,  # a fresh process is given the run's platform as a file
        effect="a simulated platform instead of the runner's",
        value=NAME,
    ),
    Setting(
        "--rocm-report-dir",
        "write per-process records, gate-report.json and manifest.json here (one run at a time: "
        "a second run on the same folder is refused)",
        ini="rocm_report_dir",
        ini_help=_default_for("--rocm-report-dir", " (relative to the ini file)"),
        kwargs={"metavar": "DIR"},
        path=True,
        passed_on=False,  # a fresh process writes into its own folder
        value=FOLDER,
    ),
    Setting(
        "--rocm-group-map",
        "map of test path patterns to groups for tests without rocm_gate (overrides the ini option); "
        "write it as --rocm-group-map=FILE: with a space pytest may take the file for a test path",
        ini="rocm_group_map",
        ini_help="TOML file mapping test path patterns to groups (relative to the ini file), or a map "
        "shipped with pytest-rocm by name (vllm, sglang; or pytest_rocm:vllm)",
        kwargs={"metavar": "TOML"},
        path=True,
        rule=True,
        names_files=True,
        value=PATH,
    ),
    Setting(
        "--rocm-reruns",
        "attempts after a failed blocking gate's first one (default 1; ini rocm_reruns)",
        ini="rocm_reruns",
        ini_help=_default_for("--rocm-reruns"),
        kwargs={"metavar": "N"},
        rule=True,
        passed_on=False,  # a fresh process runs the attempts it is given
        value=RERUNS,
    ),
    Setting(
        "--rocm-health-probe",
        "command run on the failed attempt's devices after an infrastructure-looking failure, and once "
        "at the start as a preflight; exit 0 means healthy. Split with shlex and run without a shell; "
        "{python} is this Python (default: python -m pytest_rocm.results.health_probe)",
        ini="rocm_health_probe",
        ini_help=_default_for("--rocm-health-probe"),
        kwargs={"metavar": "CMD"},
        rule=True,
        value=COMMAND,
    ),
    Setting(
        "--rocm-exit-by-conclusion",
        "pytest's exit status follows the run's conclusion: 0 success or neutral, 1 failure, "
        "3 incomplete, 5 skipped (ini rocm_exit_by_conclusion)",
        ini="rocm_exit_by_conclusion",
        ini_help="pytest's exit status follows the conclusion (true/false)",
        kwargs={"action": "store_true"},
        passed_on=False,  # the run's exit status is the first process's
    ),
    Setting(
        "--rocm-baselines",
        "baseline TOML file or folder for accuracy/performance gates (repeatable; ini rocm_baselines)",
        ini="rocm_baselines",
        ini_help="baseline TOML files or folders (relative to the ini file)",
        ini_type="linelist",
        kwargs={"action": "append", "metavar": "PATH"},
        path=True,
        rule=True,
        names_files=True,
        value=PATH,
    ),
    Setting(
        "--rocm-propose-baselines",
        "write a proposed baseline entry for every measured metric (baseline files are never changed)",
        kwargs={"metavar": "FILE"},
        path=True,
        passed_on=False,  # written once, from the whole run's manifest
        records=True,
        effect="baseline entries proposed from this run's measurements",
        value=PATH,
    ),
    Setting(
        "--rocm-quarantine",
        "the quarantine file (`rocm-gate history quarantine`, kept on the default branch): its tests for this "
        "platform's SKU still run, never block, and are reported as quarantined (ini rocm_quarantine)",
        ini="rocm_quarantine",
        ini_help=_default_for("--rocm-quarantine"),
        kwargs={"metavar": "FILE"},
        path=True,
        rule=True,
        names_files=True,
        value=PATH,
    ),
    Setting(
        "--rocm-golden",
        "compare golden outputs (token ids, top-k logprobs) with those recorded in DIR",
        ini="rocm_golden_dir",
        ini_help=_default_for("--rocm-golden", " (relative to the ini file)"),
        kwargs={"metavar": "DIR"},
        path=True,
        rule=True,
        names_files=True,
        value=FOLDER,
    ),
    Setting(
        "--rocm-golden-record",
        "record golden outputs into DIR (on the reference platform) instead of comparing",
        kwargs={"metavar": "DIR"},
        path=True,
        records=True,
        effect="golden outputs recorded instead of compared",
        value=FOLDER,
    ),
    Setting(
        "--rocm-junit-properties",
        "per-test JUnit properties: `minimal` (default) writes only what a reader cannot know otherwise "
        "(a marker's rocm_group; rocm_blocking and rocm_known_gap where they apply) and the platform once "
        "per file; `full` writes the map's groups, rocm_sku, rocm_arch, rocm_requires and "
        "rocm_blocking=false on every test case too (ini rocm_junit_properties)",
        ini="rocm_junit_properties",
        ini_help=_default_for("--rocm-junit-properties", " (minimal or full)"),
        kwargs={"choices": JUNIT_PROPERTIES, "metavar": "minimal|full"},
    ),
    Setting(
        "--rocm-scheduler",
        "with -n N: `gpu` hands tests out longest first under the runner's GPU capacity, from each test's "
        "GPU demand (hardware marker) and measured duration (--rocm-durations); `xdist` keeps xdist's own; "
        "`auto` (the default) is `gpu` on a runner with GPUs under --dist load, else `xdist` "
        "(ini rocm_scheduler)",
        ini="rocm_scheduler",
        ini_help=_default_for("--rocm-scheduler", " (auto, gpu or xdist)"),
        kwargs={"choices": SCHEDULERS, "metavar": "|".join(SCHEDULERS)},
    ),
    Setting(
        "--rocm-durations",
        "duration store: read for the gpu scheduler, updated from this run's records at the end "
        "(ini rocm_durations; a missing or unreadable file means durations are unknown)",
        ini="rocm_durations",
        ini_help=_default_for("--rocm-durations", " (relative to the ini file)"),
        kwargs={"metavar": "FILE"},
        path=True,
        value=PATH,
    ),
    # set by the controller only, for a fresh process
    Setting(
        "--rocm-rerun-helper",
        argparse.SUPPRESS,
        kwargs={"default": None},
        passed_on=False,
        command_line_only=True,  # in `addopts` it would make the run's own process a helper
    ),
    Setting(
        "--rocm-rules",
        "take the rules of the verdict (reruns, quarantine, health probe, infra signatures, "
        "timeouts, baselines, group map, golden outputs, groups) from DIR's ini file and files, the "
        "default branch's checkout, never from the tree under test; what the tree sets otherwise is "
        "listed in the report (also $PYTEST_ROCM_RULES; never read from addopts)",
        kwargs={"metavar": "DIR"},
        path=True,
        command_line_only=True,
        value=FOLDER,
    ),
    Setting(
        "--rocm-model",
        "serve these weights in the suites' servers (GPU runners); default: the tiny model built here",
        kwargs={"metavar": "PATH"},
        path=True,
        effect="other weights served",
        value=PATH,
    ),
    Setting(
        "--rocm-model-name",
        "the served model name for --rocm-model (default: its folder name)",
        kwargs={"metavar": "NAME"},
        effect="another served model name",
        value=NAME,
    ),
    Setting(
        "--rocm-model-vllm-args",
        "vLLM arguments that serving --rocm-model needs (e.g. '--tool-call-parser llama3_json')",
        kwargs={"default": "", "metavar": "ARGS"},
        effect="other vLLM arguments for the served model",
        value=ARGUMENTS,
    ),
    Setting(
        "--rocm-model-dir",
        "folder of real model weights by Hugging Face name, for the real-model accuracy configs "
        "($PYTEST_ROCM_MODEL_DIR)",
        kwargs={"metavar": "DIR"},
        path=True,
        effect="other real model weights",
        value=FOLDER,
    ),
    Setting(
        "--rocm-model-cache",
        "where tiny models are built once (ini rocm_model_cache; $PYTEST_ROCM_MODEL_CACHE; "
        "default ~/.cache/pytest-rocm/models)",
        ini="rocm_model_cache",
        ini_help=_default_for("--rocm-model-cache", " (relative to the ini file)"),
        kwargs={"metavar": "DIR"},
        path=True,
        value=FOLDER,
    ),
    Setting(
        "--rocm-tiny-model-seed",
        "weight seed of the tiny model (golden outputs are recorded with 0)",
        kwargs={"default": 0, "metavar": "N"},
        effect="other tiny-model weights",
        value=SEED,
    ),
    Setting(
        "--rocm-no-start-ahead",
        "start each server when a test asks for it, never ahead while earlier tests run "
        "(by default the next module's server starts ahead where the server configuration's "
        "start_ahead allows it)",
        kwargs={"action": "store_true", "default": False},
    ),
    Setting(
        "--rocm-server-config",
        "server arguments and environment per platform (ini rocm_server_config)",
        ini="rocm_server_config",
        ini_help=_default_for("--rocm-server-config", " (relative to the ini file)"),
        kwargs={"metavar": "TOML"},
        path=True,
        effect="other server arguments and environment",
        value=PATH,
    ),
    Setting(
        None,
        "",
        ini="rocm_groups",
        ini_help="extra group names allowed besides the built-in ones",
        ini_type="linelist",
        rule=True,
    ),
    Setting(
        None,
        "",
        ini="rocm_infra_signatures",
        ini_help="extra infrastructure signatures, `name=regex` per line; `!name` drops a built-in one",
        ini_type="linelist",
        rule=True,
    ),
    Setting(
        None,
        "",
        ini="rocm_timeouts",
        ini_help="per-group timeouts in seconds for gate tests, `group=seconds` per line "
        "(and `default=seconds`), applied through pytest-timeout",
        ini_type="linelist",
        rule=True,
    ),
)
