"""Tests run in fresh pytest processes for the controller, after the main pass: reruns that no live
worker could take or that must not run where their failure happened (a device fault poisons its
process: docs/architecture.md, "A device fault poisons its process"), and the tests a poisoned
process did not run (its `deferred` records).

A fresh process is pytest on a list of node ids with the run's own options, less xdist's, the
selection and what must not repeat (`passthrough_args`), as a helper of the run
(`--rocm-rerun-helper`: the run's device locks, its platform, records of its own). A rerun gets a
process of its own (`rerun<N>`); the tests one poisoned process did not run go on together, in their
order, in one (`fresh<N>`, so a module's servers start once). A test whose device fault did not come
back alone runs once more right after the test that ran before it where it faulted (`pair<N>`: CUDA
and HIP report a kernel's fault at a later call, maybe the next test's). What a helper ran is read back from
its records: the planner decides further reruns from them, and a helper that died in a test gets
that test's crash record. The reports of the tests a poisoned process did not run are replayed into
this process's hooks, so the terminal and the JUnit file show them as they show a worker's
(`ReportRelay` writes them in the helper); a rerun's, as before, are in the gate report only (pytest
would count a rerun that failed again as a second failed test). A helper
that a fault poisons in turn moves its remaining tests to the next one; rounds go on while they run
something, and a helper that ran none of its tests ends them, said in the notes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import execnet
import pytest

from pytest_rocm.plugin.context import RunContext
from pytest_rocm.plugin.option_table import SETTINGS
from pytest_rocm.results.poisoning import sticky_fault
from pytest_rocm.results.records import ends_attempt, last_attempts, process_records
from pytest_rocm.results.reruns import RerunPlanner, describe_exit
from pytest_rocm.schemas.artifacts import write_json_atomic

# xdist options (and ours) that a fresh process must not repeat: it runs its tests alone, and must
# not wipe the run's tmp dirs -> whether the option takes a value
_NOT_PASSED_ON = {
    **dict.fromkeys(("-n", "--numprocesses", "--dist", "--tx", "--maxprocesses"), True),
    **dict.fromkeys(("--max-worker-restart", "--junitxml", "--junit-xml", "--basetemp"), True),
    # ours: what plugin/option_table.py says a fresh process is not given
    **{s.flag: s.takes_value for s in SETTINGS if s.flag and not s.passed_on},
    "--maxfail": True,
    **dict.fromkeys(("-d", "-x", "--exitfirst", "--lf"), False),
    **dict.fromkeys(("--last-failed", "--ff", "--failed-first", "--sw", "--stepwise"), False),
    # files the run writes once: a helper would write them again from the start
    **dict.fromkeys(("--log-file", "--report-log", "--html", "--json-report-file"), True),
    "--debug": False,
}
# a helper's serialized reports, beside its records (not a records file: the report reads none)
RELAY_PREFIX = ".reports-"
# fresh processes in a row whose first test a device fault ended: then the fault is likely in a
# shared fixture's setup, and every test would cost two processes more; the rest are left unrun
# (the run says so, and is incomplete)
MOST_FAULTS_IN_A_ROW = 5


def passthrough_args(config: pytest.Config) -> list[str]:
    """The run's own command line, less its test selection and what must not repeat in a fresh
    process."""
    args, positional = list(config.invocation_params.args), set(config.args)
    kept, skip_value = [], False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in _NOT_PASSED_ON:
            skip_value = "=" not in arg and _NOT_PASSED_ON[name]
            continue
        if arg.startswith("-n") and arg[2:] and not arg.startswith("--"):  # -n2, -nauto
            continue
        if arg in positional:
            continue
        kept.append(arg)
    return kept


def is_replayed(report: Any) -> bool:
    """A report a fresh process made and this process replays: recorded and planned there."""
    return getattr(report, "rocm_replayed", False)


def _report_dir(context: RunContext) -> Path:
    """The run's report folder: fresh processes exist only in a run that writes records (the
    controller makes none without a folder, and gives a helper the run's)."""
    folder = context.settings.report_dir
    if folder is None:
        raise ValueError("a fresh process needs the run's report folder (--rocm-report-dir)")
    return folder


class ReportRelay:
    """In a fresh process: each report, serialized as xdist sends a worker's, for the controller to
    replay (last: after the plugin's own hooks added the servers' logs and the device fault)."""

    def __init__(self, context: RunContext) -> None:
        self.config = context.config
        self.path = _report_dir(context) / f"{RELAY_PREFIX}{context.worker}.bin"

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        if data is not None:
            # execnet's own format, as xdist sends a report: it keeps tuples (JSON would not, and
            # pytest's JUnit writer asserts a skip's tuple), and loads no code
            with self.path.open("ab") as out:
                execnet.dump(out, data)


class FreshProcesses:
    """The controller's fresh processes: `run` takes the reruns queued and the tests poisoned
    processes did not run, and goes on until nothing is left."""

    def __init__(
        self,
        context: RunContext,
        planner: RerunPlanner,
        record_crash: Callable[[str, str, int | None, str, list[dict[str, Any]]], None],
        notes: list[str],
        parallel: int,
    ) -> None:
        self.context = context
        self.config = context.config
        self.planner = planner
        self.record_crash = record_crash
        self.notes = notes
        self.parallel = max(1, parallel)
        self.folder = _report_dir(context)
        self.number = 0

    def run(self, moved: list[list[str]]) -> None:
        """Run the planner's queued reruns, each in a process of its own, and each list of `moved`
        tests (what one poisoned process did not run, in order) in one process; then what those
        queue or move in turn."""
        platform_file = self.folder / f".platform-{self.context.session_id}.json"
        write_json_atomic(platform_file, self.context.platform.to_dict())
        try:
            with ThreadPoolExecutor(max_workers=self.parallel) as pool:
                faulted_first = 0
                while True:
                    reruns = self.planner.leftovers()
                    batches = [("rerun", [n]) for n in reruns]
                    # a rerun a poisoned worker was handed and did not run is a rerun, not moved
                    moved = [[n for n in tests if n not in reruns] for tests in moved]
                    batches += [("fresh", tests) for tests in moved if tests]
                    batches += [("pair", list(pair)) for pair in self.planner.take_pairs()]
                    if not batches:
                        break
                    runs = []
                    for kind, tests in batches:
                        self.number += 1
                        name = f"{kind}{self.number}"
                        runs.append(
                            (
                                kind,
                                tests,
                                name,
                                pool.submit(self._start, tests, name, platform_file),
                            )
                        )
                    moved = []
                    for kind, tests, name, future in runs:  # in submission order: read the same way
                        left = self._read_back(kind, tests, name, future.result())
                        if kind == "fresh":
                            faulted_first = (
                                faulted_first + 1 if self._faulted_first(name, tests) else 0
                            )
                        if left and faulted_first >= MOST_FAULTS_IN_A_ROW:
                            self.notes.append(
                                f"a device fault ended the first test of {faulted_first} fresh processes "
                                f"in a row (the last: {tests[0]}): the {len(left)} test(s) left were not "
                                "run (a fault in the setup of a fixture they share, as likely)"
                            )
                        elif left:
                            moved.append(left)
        finally:
            platform_file.unlink(missing_ok=True)

    def _start(
        self, tests: list[str], name: str, platform_file: Path
    ) -> subprocess.CompletedProcess[str]:
        # the node ids in a file (pytest reads `@FILE` as arguments): a poisoned worker of xdist's
        # own scheduler may leave thousands
        selection = self.folder / f".tests-{name}.txt"
        selection.write_text("\n".join(self._as_invoked(n) for n in tests) + "\n", encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "pytest",
            f"@{selection}",
            *passthrough_args(self.config),
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            f"--rocm-report-dir={self.folder}",
            f"--rocm-rerun-helper={self.context.session_id}:{name}:{platform_file}",
        ]
        try:
            return subprocess.run(
                command,
                cwd=self.config.invocation_params.dir,
                capture_output=True,
                text=True,
                errors="replace",
                stdin=subprocess.DEVNULL,
            )
        finally:
            selection.unlink(missing_ok=True)

    def _as_invoked(self, nodeid: str) -> str:
        """The node id with its file relative to where pytest was started: node ids are relative to
        the rootdir, and a run started elsewhere (`pytest -c suites/pytest.ini suites` from the
        repository) would otherwise run a path that does not exist there."""
        file, sep, rest = nodeid.partition("::")
        path = os.path.relpath(self.config.rootpath / file, self.config.invocation_params.dir)
        return path + sep + rest

    def _faulted_first(self, name: str, tests: list[str]) -> bool:
        """Whether a device fault ended the first test a fresh process ran."""
        records = process_records(self.folder / f"records-{name}.jsonl")
        return any(r.get("nodeid") == tests[0] and sticky_fault(r) for r in records)

    def _read_back(
        self, kind: str, tests: list[str], name: str, done: subprocess.CompletedProcess[str]
    ) -> list[str]:
        """Feed what the helper ran to the planner and replay its reports; the tests it did not run
        (it was poisoned, or died), for the next helper."""
        attempts = last_attempts(process_records(self.folder / f"records-{name}.jsonl"))
        died = None
        if not any(n in attempts for n in tests):
            if done.returncode in (2, 3, 4, 5):  # pytest ended itself: interrupted, usage, none
                last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
                what = "rerun" if kind == "rerun" else "run in a fresh process"
                self.notes.append(
                    f"could not {what} {', '.join(tests[:10])}{' and more' if len(tests) > 10 else ''}: "
                    f"pytest exited {done.returncode} before the test ran ({last[:300]}); "
                    + (
                        "its verdict stands on the attempts it had"
                        if kind == "rerun"
                        else "they never ran"
                    )
                )
                self._replay(kind, name)
                return []
            attempts = {tests[0]: []}  # it died in its first test's setup, before writing anything
        for nodeid in tests:
            attempt = attempts.get(nodeid)
            if attempt is None:
                continue
            for record in attempt:  # what a worker's reports would have told the planner
                self.planner.on_record(record)
            if not any(ends_attempt(r) for r in attempt):
                failure = (
                    f"{kind} process {name!r} died while running {nodeid!r} "
                    f"({describe_exit(done.returncode)})"
                )
                self.record_crash(nodeid, name, done.returncode, failure, attempt)
                died = (nodeid, failure)
        self._replay(kind, name, died if kind == "fresh" else None)
        if kind == "pair":  # a question asked once: what it did not reach is not moved on
            return []
        # moved out (a fault poisoned the helper) or never reached (it died): the next helper's
        return [n for n in tests if n not in attempts]

    def _replay(self, kind: str, name: str, died: tuple[str, str] | None = None) -> None:
        """A `fresh` helper's reports, through this process's hooks (the terminal, JUnit, pytest's
        own count of failures), marked so the plugin's own hooks pass them by; for the test it died
        in (`died`: node id, why), a failed report as xdist makes for a crashed worker's test."""
        relay = self.folder / f"{RELAY_PREFIX}{name}.bin"
        try:
            relayed = relay.read_bytes()
        except OSError:
            relayed = b""  # it died before its first report, or ran none
        relay.unlink(missing_ok=True)
        if kind != "fresh":
            return
        hook = self.config.hook
        stream = io.BytesIO(relayed)
        while stream.tell() < len(relayed):
            try:
                data = execnet.load(stream)
            except (execnet.DataFormatError, EOFError):
                break  # cut short by the helper's death: its records tell the rest
            report = hook.pytest_report_from_serializable(config=self.config, data=data)
            if not isinstance(report, pytest.TestReport):
                continue
            self._log(report)
        if died is not None:
            nodeid, why = died
            file = nodeid.split("::")[0]
            # the report of a test whose process died, as pytest-xdist writes one for a crashed
            # worker (`when` "???", outside pytest's declared phases: terminal reporters show it)
            crashed: Any = "???"
            self._log(pytest.TestReport(nodeid, (file, None, file), {}, "failed", why, crashed))

    def _log(self, report: pytest.TestReport) -> None:
        hook = self.config.hook
        vars(report)["rocm_replayed"] = True  # read by is_replayed; pytest's reports take extras
        if report.when == "setup":
            hook.pytest_runtest_logstart(nodeid=report.nodeid, location=report.location)
        hook.pytest_runtest_logreport(report=report)
        if report.when in ("teardown", "???"):
            hook.pytest_runtest_logfinish(nodeid=report.nodeid, location=report.location)
