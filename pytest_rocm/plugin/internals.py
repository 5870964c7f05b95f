"""Every use of pytest's and pytest-xdist's (and execnet's) internals, in one place: an upgrade is
this file to read.

What the plugin needs beyond their documented hooks: of pytest, the JUnit writer
(to add the platform once per file, as `record_testsuite_property` does), the test behind a
fixture request, whether a test's skip markers skip it (to plan the servers the run will ask
for), the rootdir its own rule picks for a list of test paths, the ini keys no plugin
registered, tearing down every fixture of a process at once (a device fault poisoned it), and,
under `--rocm-rules` (plugin/default_branch.py), its reading of a configuration file, its parser
on another command line, and the run's ini values and initial paths replaced by the default
branch's; of xdist, the controller's scheduler (to hand it a rerun), whether any worker can
still take a test (a worker that has been told to shut down runs its last test
and exits, so a rerun given to the scheduler then would never run), replacing a worker (a device
fault poisoned it), the name of the worker that writes the run's collection, and a dead worker's
exit status (execnet keeps the worker's Popen on the gateway).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest


def rootdir_for(config: pytest.Config, test_paths: list[str]) -> Path | None:
    """The rootdir pytest's own rule (`determine_setup`, its arguments differ between pytest 8 and
    9) picks for these test paths and this run's `-c`, `--rootdir` and `-o`; None where it cannot
    be asked."""
    import inspect

    from _pytest.config.findpaths import determine_setup

    given = {
        "inifile": config.option.inifilename,
        "override_ini": config.option.override_ini,
        "args": test_paths,
        "rootdir_cmd_arg": config.option.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    try:
        wanted = inspect.signature(determine_setup).parameters
        return determine_setup(**{k: v for k, v in given.items() if k in wanted})[0]
    except Exception:  # another pytest's rule: the check it serves is skipped
        return None


def unknown_ini_keys(config: pytest.Config) -> set[str]:
    """The ini file's keys no plugin registered (pytest itself only warns of them, unless
    `--strict-config`)."""
    try:
        return set(config._get_unknown_ini_keys())
    except Exception:  # another pytest: nothing to check against
        return set()


def requesting_test(request: pytest.FixtureRequest) -> str:
    """The node id of the test whose setup or call asked for a fixture, also for a module-scoped one
    (whose `request.node` is the module): pytest keeps it on every fixture request."""
    return str(getattr(request, "_pyfuncitem", request.node).nodeid)


def will_skip(item: pytest.Item) -> bool:
    """Whether pytest will end `item` at its setup, before its fixtures, by its `skip` and `skipif`
    markers (the plugin's not-applicable and known-gap skips are such markers) or an
    `xfail(run=False)` (unless `--runxfail`); a condition that cannot be evaluated counts as a skip
    (the test then errors at its setup, and asks for nothing either)."""
    from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks

    try:
        if evaluate_skip_marks(item) is not None:
            return True
        if item.config.option.runxfail:
            return False
        xfailed = evaluate_xfail_marks(item)
        return xfailed is not None and not xfailed.run
    except BaseException:  # noqa: BLE001 (pytest's own error for a bad condition is an outcome)
        return True


def tear_down_all(item: pytest.Item) -> None:
    """Every fixture set up in this process, torn down now, as pytest does at the session's end
    (`SetupState.teardown_exact(None)`): a process a device fault poisoned runs nothing more."""
    item.session._setupstate.teardown_exact(None)


def is_controller(config: pytest.Config) -> bool:
    """This process is the xdist controller (it runs no test itself). Known at configure time,
    before xdist registers its `dsession` plugin: xdist decides it the same way (its
    `pytest_cmdline_main` has already turned `-n N` into a `--dist` mode, and `-n 0` into `no`)."""
    return (
        getattr(config.option, "dist", "no") != "no"
        and not getattr(config.option, "collectonly", False)
        and not hasattr(config, "workerinput")
    )


def hand_to_live_worker(config: pytest.Config, nodeid: str) -> bool:
    """Give `nodeid` to xdist's scheduler for a worker that is not shutting down; False when none
    can take it (all told to stop, the session is stopping, or the `--dist` mode cannot
    reschedule)."""
    dsession = config.pluginmanager.get_plugin("dsession")
    sched = getattr(dsession, "sched", None)
    if (
        sched is None
        or getattr(dsession, "shuttingdown", True)
        or getattr(dsession, "shouldstop", False)
    ):
        return False
    live = [
        node for node in getattr(sched, "nodes", ()) if not getattr(node, "shutting_down", True)
    ]
    # xdist's load schedulers and ours: the tests they hand out
    collection = getattr(sched, "collection", None)
    if not live or collection is None or nodeid not in collection:
        return False
    try:
        sched.mark_test_pending(nodeid)
    # the protocol's "cannot": --dist each/loadscope/loadfile never reschedule one test
    except NotImplementedError:
        return False
    return True


def replace_worker(config: pytest.Config, node: Any) -> bool:
    """Stop giving the xdist worker `node` tests (it ends the ones it was sent, and exits) and start a
    fresh worker in its place, as xdist replaces a crashed one (`DSession._clone_node`, given a copy
    of the spec: xdist renames the spec it is given). False when the session is ending anyway."""
    import copy
    from types import SimpleNamespace

    dsession = config.pluginmanager.get_plugin("dsession")
    if dsession is None or getattr(dsession, "shuttingdown", True) or node.shutting_down:
        return False
    node.shutdown()
    dsession._clone_node(
        SimpleNamespace(gateway=SimpleNamespace(spec=copy.copy(node.gateway.spec)))
    )
    return True


def writes_collection(worker: str) -> bool:
    """The process that records what the run collected: the only one, or xdist's first worker (they
    all collect the same tests; xdist names its workers gw0, gw1, ... and a restarted worker gets a
    new name)."""
    return worker in ("controller", "gw0")


def junit_writer(config: pytest.Config) -> Any:
    """pytest's JUnit writer of this process (`--junitxml`), or None: `add_global_property` adds a
    `<testsuite><property>` as the public `record_testsuite_property` fixture does."""
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def worker_id(node: Any) -> str | None:
    return getattr(getattr(node, "gateway", None), "id", None)


def worker_exit_code(node: Any) -> int | None:
    """The exit status of a dead xdist worker (execnet keeps its Popen on the gateway's io)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return int(popen.wait(timeout=5))
    except (subprocess.TimeoutExpired, OSError):
        return None


def runs_every_test(config: pytest.Config) -> bool:
    """Whether this process runs every collected test: no xdist, or an xdist worker that is the
    only one (xdist's `workerinput["workercount"]`)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workercount", 0) == 1


def worker_count(config: pytest.Config) -> int:
    """How many workers the run asked for (reruns after the pass run that many at a time)."""
    value = getattr(config.option, "numprocesses", None)
    return value if isinstance(value, int) and value > 0 else 1


def expected_workers(config: pytest.Config) -> int:
    """How many workers xdist starts (its scheduler's `numnodes`: `-n N`, or the `--tx` specs)."""
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))


# -- the default branch's settings on a run (plugin/default_branch.py) ---------------------------------
def load_config_file(path: Path) -> dict[str, Any] | None:
    """pytest's own reading of a configuration file (`findpaths.load_config_dict_from_file`): its
    pytest section as {key: value as pytest keeps it}, or None where the file has none (a
    `pyproject.toml` without a pytest table, a `tox.ini` without `[pytest]`). Raises ValueError with
    pytest's words for a file pytest refuses (a `[pytest]` section in `setup.cfg`, bad TOML)."""
    from _pytest.config.findpaths import load_config_dict_from_file

    try:
        return load_config_dict_from_file(path)
    except (Exception, pytest.fail.Exception) as exc:  # noqa: BLE001 (pytest's fail() for setup.cfg)
        raise ValueError(str(exc).strip() or type(exc).__name__) from None


def config_value(value: Any) -> Any:
    """A value `load_config_file` gave, as the file wrote it (pytest 9 wraps it in a ConfigValue)."""
    return getattr(value, "value", value)


def override_value(text: str) -> Any:
    """An `-o KEY=VALUE` value as pytest keeps it."""
    try:
        from _pytest.config.findpaths import ConfigValue
    except ImportError:  # pytest 8 keeps the text
        return text
    return ConfigValue(text, origin="override", mode="ini")


def parse_options(config: pytest.Config, args: list[str]) -> Any:
    """`args` as pytest parses a command line (its parser, with every plugin's options; `@FILE`
    read): an argparse namespace with each option not given at its default. A bad value raises
    pytest.UsageError."""
    import argparse

    return config._parser.parse_known_args(list(args), namespace=argparse.Namespace())


def ini_registered(config: pytest.Config, key: str) -> bool:
    """Whether a plugin (or pytest) registered the ini key (pytest 8.4 added
    `collect_imported_tests`; pytest-rerunfailures its `reruns`)."""
    return key in config._parser._inidict


def raw_ini(config: pytest.Config, key: str) -> Any:
    """The ini key's value as the configuration file (or an `-o`) wrote it, unread."""
    inicfg = config._inicfg if hasattr(config, "_inicfg") else config.inicfg
    return config_value(inicfg.get(key))


def replace_ini(config: pytest.Config, values: dict[str, Any]) -> None:
    """Every later `config.getini(key)` reads these values (as pytest keeps a configuration file's;
    None: unset, the key's default), in place of the ini file's and any `-o` override (pytest 9
    keeps those beside the file's; pytest 8 reads `-o` before them)."""
    inicfg = config._inicfg if hasattr(config, "_inicfg") else config.inicfg
    for key, value in values.items():
        if value is None:
            inicfg.pop(key, None)
        else:
            inicfg[key] = value
        config._inicache.pop(key, None)


def decide_test_args(
    config: pytest.Config, args: list[str], pyargs: bool
) -> tuple[list[str], pytest.Config.ArgsSource]:
    """The paths and node ids the session collects from, and their source, by pytest's own rule
    (`Config._decide_args`): `args`, else the ini's `testpaths` from the rootdir, else the
    invocation folder."""
    return config._decide_args(
        args=list(args),
        pyargs=pyargs,
        testpaths=config.getini("testpaths"),
        invocation_dir=config.invocation_params.dir,
        rootpath=config.rootpath,
        warn=False,
    )


def set_test_args(
    config: pytest.Config, decided: tuple[list[str], pytest.Config.ArgsSource]
) -> None:
    """What the session collects from (`config.args`, read by `Session.perform_collect`), and its
    source."""
    config.args, config.args_source = list(decided[0]), decided[1]
