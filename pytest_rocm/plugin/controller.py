"""The controller role: the process that sees every report (the xdist controller, or the only
process).

It claims the report folder for the run (`report_folder`: two runs never mix
their files), checks the devices with the health probe before any test runs,
plans reruns of blocking gates as attempts end, records dead workers, replaces an xdist worker a
device fault poisoned, runs the reruns nothing took during the pass (in this process without xdist
while no fault poisoned it; else in fresh pytest processes, `fresh`, as many at a time as there are
workers, with the tests a poisoned process did not run), and at the end writes the manifest and the
gate report, saying whether the run was complete. Records a full disk kept from the folder (its own,
and each xdist worker's, which says so as it ends) make the run `incomplete`, naming the folder and
its free space: the folder's reserve is freed first, so the end-of-run record and the report fit
(plugin/report_folder.py), and a report that still cannot be written is said in the terminal, the
exit status `incomplete`'s, never an INTERNALERROR.
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_rocm.plugin import internals
from pytest_rocm.plugin.activation import carries_marker
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.plugin.locks import as_usage_error
from pytest_rocm.plugin.options import DEFAULT_PROBE
from pytest_rocm.plugin.recording import Recorder
from pytest_rocm.plugin.report_folder import ReportFolder
from pytest_rocm.results import health_probe
from pytest_rocm.results.conclusion import EXIT_BY_CONCLUSION, deselected_gates
from pytest_rocm.results.poisoning import DEVICE_FAULT_PROPERTY
from pytest_rocm.results.records import (
    DISK_FULL,
    RecordWriter,
    collected_specs,
    free_space,
    last_attempt_records,
    process_records,
    read_records,
)
from pytest_rocm.results.report import build_gate_report, evidence_texts, gate_report_json
from pytest_rocm.results.reruns import RerunPlanner, describe_exit, property_of, run_probe
from pytest_rocm.schemas.artifacts import write_json_atomic, write_text_atomic


class Controller:
    def __init__(self, context: RunContext, recorder: Recorder | None = None) -> None:
        self.context = context
        self.config = context.config
        settings = context.settings
        self._own_writer: RecordWriter | None = None
        self._collected_specs: dict[str, Any] | None = (
            None  # the collection record's, once a crash needs it
        )
        # the process's recorder where this process also runs tests (no xdist)
        self.recorder = recorder
        # xdist workers a device fault poisoned (each replaced when its fault was reported)
        self.poisoned_workers: list[str] = []
        # problems of the run itself, shown in the summary and the manifest
        self.notes: list[str] = []
        self.collection_errors: dict[str, str] = {}
        self.exited: str | None = None  # `pytest.exit()` ended the session: what it said
        self.collected: list[str] | None = None
        self.gate_report: dict[str, Any] | None = None
        self.report_paths: list[Path] = []
        # what a full disk cost the records of each process (results/records.py: disk_full)
        self.disk_full: list[str] = []
        self.unwritten: str | None = None  # the report a full disk kept out of the folder
        self.planner: RerunPlanner | None = None
        self.report_folder: ReportFolder | None = None
        # a listing writes nothing
        if settings.report_dir is not None and not self.config.option.collectonly:
            # Claimed before any worker starts, so no worker's records are ever removed.
            self.report_folder = ReportFolder(settings.report_dir)
            self.report_folder.claim(
                f"run {context.session_id} (pid {os.getpid()} on {socket.gethostname()}, "
                f"started {context.started})"
            )

    def write(self, record: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.write(record)
            return
        if self.report_folder is None:
            return
        folder = self.report_folder.folder
        if self._own_writer is None:
            self._own_writer = RecordWriter(folder, "controller")
        self._own_writer.write(record)

    # -- start --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Before any test of a run that asked for the plugin: the planner, and the health probe
        once on every device of the platform. A run that did not ask makes its planner when a marked
        test first reports."""
        if not self.context.activation.asked:
            return
        devices = self._make_planner()
        settings = self.context.settings
        if devices and not self.config.option.collectonly:
            if settings.probe_command == DEFAULT_PROBE and not health_probe.has_device_nodes():
                # What the default probe would answer here (a simulated platform): no process to
                # start.
                result = {
                    "ok": True,
                    "devices": devices,
                    "detail": health_probe.NO_DEVICES,
                    "exit_code": 0,
                }
            else:
                result = run_probe(settings.probe_argv, devices, self.context.platform.vendor)
            self.write(
                {"kind": "preflight", "nodeid": "", **result, "command": settings.probe_command}
            )
            if not result["ok"]:
                self.notes.append(
                    f"the health probe failed on devices {','.join(map(str, devices))} before any "
                    f"test ran: {result['detail']}; verdicts on this runner are not trusted"
                )

    def _make_planner(self) -> list[int]:
        context, settings = self.context, self.context.settings
        platform = context.platform
        devices = [gpu.index for gpu in platform.gpus]
        self.planner = RerunPlanner(
            reruns=settings.reruns,
            probe_argv=settings.probe_argv,
            signatures=settings.signatures,
            session_id=context.session_id,
            all_devices=devices,
            vendor=platform.vendor,
            write_probe=lambda nodeid, result: self.write(
                {"kind": "probe", "nodeid": nodeid, **result}
            ),
            hand_over=lambda nodeid: internals.hand_to_live_worker(self.config, nodeid),
            process_of=lambda report: (
                internals.worker_id(getattr(report, "node", None)) or self.context.worker
            ),
        )
        return devices

    def make_scheduler(self, log: Any) -> Any:
        """The project's xdist scheduler for `--rocm-scheduler=gpu`, and for `auto` on a runner with
        GPUs (real or simulated) under `--dist load`; None leaves xdist's own."""
        settings = self.context.settings
        if not self.context.activation.asked or getattr(self.config.option, "dist", "no") != "load":
            return None  # (xdist asks before any test is collected: markers cannot ask for it)
        platform = self.context.platform
        if not (
            settings.scheduler == "gpu" or (settings.scheduler == "auto" and bool(platform.gpus))
        ):
            return None
        from pytest_rocm.plugin.locks import lock_root
        from pytest_rocm.scheduling.durations import DurationStore
        from pytest_rocm.scheduling.xdist_scheduler import GpuScheduling

        store = DurationStore.load(settings.durations_path)
        if store.problem:
            self.notes.append(store.problem)
        workers = internals.expected_workers(self.config)
        capacity = len(platform.gpus) or workers  # a CPU runner: its worker slots
        return GpuScheduling(
            self.config,
            log,
            capacity,
            store.expected(platform.keys()[0]),
            lock_root(self.context.session_id),
            workers,
            store.module_starts(platform.keys()[0]),
        )

    # -- during the run ------------------------------------------------------------------------------
    def on_collect_report(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collection_errors.setdefault(report.nodeid or "(session)", report.longreprtext)

    def on_collected(self, nodeids: Iterable[str]) -> None:
        if self.collected is None:
            self.collected = list(nodeids)

    def on_report(self, report: pytest.TestReport) -> None:
        if self.planner is None:
            if not carries_marker(report.keywords):
                return
            self.context.activation.marked = (
                True  # under xdist the controller learns it from the reports
            )
            self._make_planner()
        planner = self.planner
        assert planner is not None  # (made above, or at the start of a run that asked for it)
        with as_usage_error():  # a rerun asks for other devices in the lock folder
            planner.on_report(report)
        if property_of(report, DEVICE_FAULT_PROPERTY) is not None:  # (an xfail's fault too)
            self._retire(getattr(report, "node", None))

    def _retire(self, node: Any) -> None:
        """A device fault poisoned the xdist worker `node`: it gets no test more, and a fresh worker
        takes its place (without xdist the only process defers the rest itself)."""
        worker = internals.worker_id(node)
        if worker is None or worker in self.poisoned_workers:
            return
        self.poisoned_workers.append(worker)
        internals.replace_worker(self.config, node)

    def on_crash(self, nodeid: str, report: pytest.TestReport) -> None:
        """xdist lost the worker running `nodeid`: record it (crashed, not lost), probe,
        reschedule."""
        node = getattr(report, "node", None)
        worker = internals.worker_id(node)
        exit_code = internals.worker_exit_code(node)
        folder = self.report_folder.folder if self.report_folder else None
        earlier = (
            last_attempt_records(folder / f"records-{worker}.jsonl", nodeid)
            if worker and folder
            else []
        )
        self._record_crash(
            nodeid, worker, exit_code, f"{report.longrepr} ({describe_exit(exit_code)})", earlier
        )

    def _record_crash(
        self,
        nodeid: str,
        process: str | None,
        exit_code: int | None,
        failure: str,
        earlier: list[dict[str, Any]],
    ) -> None:
        """A process died running `nodeid` (an xdist worker, or a rerun subprocess): write the crash
        record and hand the planner the evidence of the attempt it ended (its records survive the
        process)."""
        # A process that died in a test's setup wrote nothing for it: its spec is the collection's.
        spec = {} if any("blocking" in r for r in earlier) else self._collected_spec(nodeid)
        self.write(
            {
                "nodeid": nodeid,
                "when": "call",
                "outcome": "failed",
                "duration": 0.0,
                "crashed": True,
                "crashed_worker": process,
                "failure": failure,
                "exit_code": exit_code,
                "group": spec.get("group") or self.context.group_of(nodeid),
                **{key: spec[key] for key in ("blocking", "gate") if key in spec},
            }
        )
        if self.planner is not None:
            devices = next(
                (r["gpus"] for r in reversed(earlier) if r.get("gpus") is not None), None
            )
            self.planner.on_crash(
                nodeid,
                [failure, *evidence_texts(earlier)],
                devices,
                bool(spec.get("blocking")) or any(r.get("blocking") for r in earlier),
            )

    def _collected_spec(self, nodeid: str) -> dict[str, Any]:
        """`nodeid`'s group, blocking and gate from the run's collection record (read once)."""
        if self._collected_specs is None:
            folder = self.report_folder.folder if self.report_folder else None
            self._collected_specs = collected_specs(folder) if folder else {}
        spec = self._collected_specs.get(nodeid)
        return spec if isinstance(spec, dict) else {}

    # -- reruns after the main pass ------------------------------------------------------------------
    def run_queued_reruns(self, session: pytest.Session) -> None:
        """Reruns nothing took during the pass, and the tests a poisoned process did not run: in this
        process where it runs tests and no device fault poisoned it, else in fresh processes; a
        rerun of a failure on a server always in a fresh process (a fresh server)."""
        if session.shouldstop or session.shouldfail:
            return
        fresh_only: list[str] = []
        if self.planner is not None and not self._runs_nothing_more():
            items = {item.nodeid: item for item in session.items}
            while (queued := self.planner.leftovers()) and not (
                session.shouldstop or session.shouldfail
            ):
                for nodeid in queued:
                    item = items.get(nodeid)
                    if nodeid in self.planner.fresh_only:
                        # failed on a server: this process's pool would hand the warm one back
                        fresh_only.append(nodeid)
                    elif item is not None:
                        # Through the hook, as pytest runs any test: pytest-timeout's timer and
                        # every plugin's wrappers apply to a rerun as to a first attempt (and a
                        # process a rerun poisoned defers the rest: they go on below).
                        item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
        # without records no verdict reads a fresh process's run (and no process is poisoned: the
        # records are where a fault is seen)
        if self.planner is None or self.report_folder is None:
            return
        self.planner.queue += fresh_only
        if (self._runs_nothing_more() or fresh_only) and not (
            session.shouldstop or session.shouldfail
        ):
            from pytest_rocm.plugin.fresh import FreshProcesses  # only a run with reruns needs it

            FreshProcesses(
                self.context,
                self.planner,
                self._record_crash,
                self.notes,
                internals.worker_count(self.config),
            ).run(self._moved_tests())

    def _runs_nothing_more(self) -> bool:
        """This process runs no test after the pass: the xdist controller (a crashing test would take
        it down), or the only process once a device fault poisoned it."""
        return internals.is_controller(self.config) or (
            self.recorder is not None and self.recorder.poisoned is not None
        )

    def _moved_tests(self) -> list[list[str]]:
        """Per poisoned process, the tests it did not run, in order (its `deferred` records)."""
        if self.recorder is not None:
            return [list(self.recorder.deferred)] if self.recorder.deferred else []
        if self.report_folder is None:
            return []
        moved = []
        for worker in self.poisoned_workers:
            records = process_records(self.report_folder.folder / f"records-{worker}.jsonl")
            tests = [r["nodeid"] for r in records if r.get("kind") == "deferred"]
            if tests:
                moved.append(tests)
        return moved

    # -- the end -------------------------------------------------------------------------------------
    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the end of the run, then merge every record into the manifest and the gate
        report."""
        from pytest_rocm.hw.allocation import LockFolderError, lock_root
        from pytest_rocm.results.manifest import build_manifest, now

        try:
            shutil.rmtree(lock_root(self.context.session_id), ignore_errors=True)
        except LockFolderError:
            pass  # no folder of this run's locks to remove (the run said why when it needed one)
        if self.report_folder is None:  # no folder, or --collect-only: no verdict to give
            self._release()
            return
        folder = self.report_folder.folder
        full = self._disk_faults()
        if full:  # the end needs room: the reserve the claim set aside
            self.report_folder.free_reserve()
        self.write(
            {
                "kind": "session",
                "nodeid": "",
                "exitstatus": int(exitstatus),
                "stopped": str(session.shouldfail or session.shouldstop or self.exited or "")
                or None,
                "collection_errors": [
                    {"nodeid": n, "text": t[-2000:]} for n, t in self.collection_errors.items()
                ],
                "collected": self.collected,
                **({"report_dir_full": full} if full else {}),
            }
        )
        settings = self.context.settings
        self._check_group_map()
        manifest = build_manifest(
            self.context.platform,
            self.config.rootpath,
            self.context.started,
            now(),
            list(self.config.invocation_params.args),
        )
        manifest["verdict_config"] = {
            "reruns": settings.reruns,
            "health_probe": settings.probe_command,
            "infra_signatures": {s.name: s.pattern.pattern for s in settings.signatures},
            # under --rocm-rules: the default branch's ini file the rules came from, and what the
            # tree under test sets otherwise (it applies after merge)
            "rules": settings.rules,
        }
        manifest["notes"] = self.notes
        # Reading records and building the report make 100,000s of small objects; with the whole
        # test session still alive, the collector's full passes over it cost more than the work (4x
        # measured).
        gc.disable()
        try:
            loaded = read_records(folder)
            manifest["servers"] = [
                {k: v for k, v in r.items() if k not in ("schema", "kind")}
                for r in loaded.records
                if r.get("kind") == "server"
            ]
            # the blocking gates collected and then deselected (results/conclusion.py): named in
            # the manifest too, beside what the tree under test set otherwise
            manifest["deselected"] = deselected_gates(
                next((r for r in reversed(loaded.records) if r.get("kind") == "collection"), None)
            )
            proposals = self._write_proposals(loaded.records, manifest)
            self._update_durations(loaded.records)
            self.gate_report = build_gate_report(
                loaded.records,
                manifest,
                loaded.problems,
                self.context.group_of if self.context.group_map else None,
                settings.signatures,
                # the end-of-run record says these, where it could be written
                self._disk_faults(),
            )
        finally:
            gc.enable()
        self._write_report(folder, manifest)
        if proposals is not None:
            self.report_paths.append(proposals)
        if settings.exit_by_conclusion:
            session.exitstatus = EXIT_BY_CONCLUSION[self.gate_report["conclusion"]]
        self._release()

    def _disk_faults(self) -> list[str]:
        """What a full disk cost the records of every process of the run, so far."""
        own = [w.disk_full() for w in (self._own_writer,) if w is not None]
        own += [self.recorder.disk_full()] if self.recorder is not None else []
        return list(dict.fromkeys([*self.disk_full, *(f for f in own if f)]))

    def _write_report(self, folder: Path, manifest: dict[str, Any]) -> None:
        """The manifest and the gate report; a filesystem that refuses them (full) leaves the run
        `incomplete`, said in the terminal and the exit status, never an INTERNALERROR."""
        assert self.gate_report is not None
        try:
            self.report_paths = [
                write_json_atomic(folder / "manifest.json", manifest),
                # the bytes `rocm-gate verdict` writes from the same records (write_json_atomic)
                write_text_atomic(
                    folder / "gate-report.json", gate_report_json(self.gate_report) + "\n"
                ),
            ]
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self.unwritten = (
                f"{folder}: cannot write the manifest and gate-report.json ({exc.strerror}; "
                f"{free_space(folder)}): the run concludes incomplete, and its records are all "
                "there is; free space there and rebuild the report with `rocm-gate verdict "
                f"{folder}`"
            )
            self.gate_report["complete"] = False
            self.gate_report["incomplete_causes"].append(self.unwritten)
            self.gate_report["conclusion"] = "incomplete"
            self.gate_report["conclusion_reason"] = self.unwritten

    def _release(self) -> None:
        if self._own_writer is not None:
            self._own_writer.close()
        if self.report_folder is not None:
            self.report_folder.release()

    def _check_group_map(self) -> None:
        """A group map that sorts none of the collected tests, and no file under the rootdir either,
        is a mistake, never a silent `ungrouped`: most often pytest took the map's path for a test
        path (`--rocm-group-map FILE` with a space, before the tests), settled on another rootdir,
        and the node ids no longer start with the paths the map names. A map that sorts files of the
        tree is right, and a run of tests it leaves ungrouped is only that (the table shows them as
        `ungrouped`)."""
        group_map = self.context.group_map
        if (
            group_map is None
            or not self.collected
            or any(group_map.rule_for(n) for n in self.collected)
        ):
            return
        if _sorts_a_file_under(group_map, self.config.rootpath):
            return
        self.notes.append(
            f"group map {group_map.path} matched none of the {len(self.collected)} collected test(s) (the first is "
            f"{self.collected[0]!r}, rootdir {self.config.rootpath}): its paths are relative to the tree's root. "
            "Give the map as --rocm-group-map=FILE (with '=') or the ini option rocm_group_map, and run pytest "
            "from the tree's root"
        )

    def _update_durations(self, records: list[dict[str, Any]]) -> None:
        """--rocm-durations FILE: this run's measured durations join the store, for the next run's scheduler."""
        path = self.context.settings.durations_path
        if path is None:
            return
        from filelock import Timeout

        from pytest_rocm.scheduling.durations import (
            add_run,
            durations_from_records,
            server_starts_from_records,
        )

        try:
            add_run(
                path,
                self.context.platform.keys()[0],
                durations_from_records(records),
                server_starts_from_records(records),
            )
        except (OSError, Timeout) as exc:
            self.notes.append(f"could not update the duration store {path}: {exc}")

    def _write_proposals(
        self, records: list[dict[str, Any]], manifest: dict[str, Any]
    ) -> Path | None:
        """--rocm-propose-baselines FILE: an entry per measured metric, sourced from this run's manifest."""
        target = self.config.getoption("rocm_propose_baselines")
        if not target:
            return None
        from pytest_rocm.gates import baselines as baselines_mod

        path = self.context.settings.paths.from_command_line(target)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                baselines_mod.proposals(records, self.context.platform.keys()[0], manifest)
            )
        except OSError as exc:  # a full disk, a folder in its place: the run's verdict stands
            self.notes.append(f"could not write the baseline proposals {path}: {exc}")
            return None
        return path


_NOT_WALKED = {
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
_MOST_FILES_WALKED = 200_000


def _sorts_a_file_under(group_map: Any, root: Path) -> bool:
    """Whether any Python file under `root` (as its path relative to the rootdir, the way node ids
    start) is sorted by a rule of the map: stops at the first one."""
    walked = 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in _NOT_WALKED and not d.startswith(".")]
        relative = os.path.relpath(folder, root).replace(os.sep, "/")
        for name in files:
            walked += 1
            if walked > _MOST_FILES_WALKED:
                return False
            if name.endswith(".py") and group_map.rule_for(
                name if relative == "." else f"{relative}/{name}"
            ):
                return True
    return False
