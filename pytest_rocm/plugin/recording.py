"""Recording on the process that runs tests (an xdist worker, a rerun subprocess, or the only
process).

A test whose setup, call and teardown each pass with nothing to add (no GPUs,
no measurements, no xfail) is one record, written at its teardown; until then
its phases wait in memory, and its setup record in the running slot that names
the test if the process is killed (docs/architecture.md, "Artifacts"). Every
other phase outcome is a record of its own the moment pytest reports it, with
the test's spec, the devices it held, what its gates measured and, for a
failure, the text where infrastructure signatures are looked for; the plain
phases that waited before it are written first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

import pytest

from pytest_rocm.plugin import internals
from pytest_rocm.plugin.collection import Annotator, dropped_gates
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.results.poisoning import DEVICE_FAULT_PROPERTY, sticky_fault
from pytest_rocm.results.records import FAILURE_HEAD_CHARS, OUTPUT_TAIL_CHARS, RecordWriter
from pytest_rocm.results.reruns import QUARANTINE_BREACHED_PROPERTY
from pytest_rocm.results.stack import imported as imported_stack


@dataclass(slots=True)
class _Waiting:
    """The running test's plain phases, kept in memory until its teardown (or until a phase with
    more to say writes them as phase records): the JSON-encoded node id and spec, its setup's
    duration and report time, and its call's (duration, time) once it passed."""

    nodeid: str
    encoded_nodeid: str
    encoded_spec: str
    setup: float
    t: float
    call: tuple[float, float] | None = None


class Recorder:
    def __init__(self, context: RunContext, annotator: Annotator) -> None:
        self.context = context
        self.annotator = annotator
        self._writer: RecordWriter | None = None
        self.spec_json: dict[str, str] = {}  # nodeid -> its spec's record fields, encoded once
        self.allocations: dict[str, list[int]] = {}  # nodeid -> devices its latest attempt got here
        self.servers: dict[str, list[str]] = {}  # nodeid -> servers its running attempt used
        # nodeid -> seconds its latest attempt waited for them
        self.gpu_waits: dict[str, float] = {}
        # nodeid -> what its gates measured (this attempt)
        self.measurements: dict[str, list[dict[str, Any]]] = {}
        # nodeid -> seconds its current phase waited for servers to start (the server fixtures add
        # to it; the phase's record takes it: the duration store keeps it apart from test time)
        self.server_waits: dict[str, float] = {}
        # The running test's plain phases, not written yet: [nodeid, its JSON, its spec's fields,
        # setup seconds, when the setup ended, (call seconds, when it ended) or None]; its teardown
        # decides whether they are one record.
        self.waiting: _Waiting | None = None
        # module -> why pytest skipped it whole while collecting it (its tests were never collected)
        self.collection_skips: dict[str, str] = {}
        # the device fault that poisoned this process ({"nodeid", "name", "line"}), once one did:
        # it runs no test after it (plugin/poisoned.py), and those it did not run
        self.poisoned: dict[str, Any] | None = None
        self.deferred: list[str] = []
        # the tests pytest's deselection hook took out of the run (-k, -m, --deselect, ...)
        self.deselected: set[str] = set()

    @property
    def writer(self) -> RecordWriter | None:
        # a listing never writes into the folder
        if (
            self._writer is None
            and self.context.settings.report_dir is not None
            and not self.context.config.option.collectonly
        ):
            self._writer = RecordWriter(self.context.settings.report_dir, self.context.worker)
        return self._writer

    def write(self, record: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.write(record)

    def record_report(self, report: pytest.TestReport) -> None:
        """Keep a plain phase until the test's end, or write the phase outcome (after the phases
        that waited). Runs for every phase of every test: the plain ones take the first branch."""
        writer = self._writer
        if writer is None and (writer := self.writer) is None:  # no report folder
            return
        nodeid = report.nodeid
        if (
            report.outcome == "passed"
            and "wasxfail" not in report.__dict__
            and nodeid not in self.allocations
            and nodeid not in self.measurements
            and nodeid not in self.server_waits
            and nodeid not in self.servers
        ):
            self._plain_phase(report, writer)
        else:
            self._phase_record(report, writer)

    def _plain_phase(self, report: pytest.TestReport, writer: RecordWriter) -> None:
        """A phase that passed with nothing to add: most tests' setup, call and teardown are
        written as one record at the teardown."""
        nodeid = report.nodeid
        when = report.when
        waiting = self.waiting
        if when == "setup":
            if waiting is not None:  # the last test never reported its teardown
                self.write_unwritten()
            spec = self.annotator.specs.get(nodeid)
            encoded_spec = "" if spec is None else self._encoded_spec(nodeid, spec)
            encoded_nodeid = encode_basestring(nodeid)
            duration, t = report.duration, report.stop  # (when the phase ended)
            self.waiting = _Waiting(nodeid, encoded_nodeid, encoded_spec, duration, t)
            writer.set_running(encoded_nodeid, encoded_spec, duration, t)
            return
        if waiting is not None and waiting.nodeid == nodeid:
            if when == "call":
                waiting.call = (report.duration, report.stop)
                return
            if waiting.call is not None:
                self.waiting = None
                writer.write_plain_pass(
                    waiting.encoded_nodeid,
                    waiting.setup,
                    waiting.call[0],
                    report.duration,
                    waiting.t,
                    waiting.encoded_spec,
                )
                return
        self.write_unwritten()
        spec = self.annotator.specs.get(nodeid)
        writer.write_phase(
            encode_basestring(nodeid),
            when,
            report.duration,
            report.stop,
            "" if spec is None else self._encoded_spec(nodeid, spec),
        )

    def _phase_record(self, report: pytest.TestReport, writer: RecordWriter) -> None:
        """A phase with something to say: a failure, a skip, an xfail, devices, measurements."""
        nodeid = report.nodeid
        self.write_unwritten()
        # pytest-rerunfailures marks an attempt it runs again `rerun`: a failed attempt, its failure
        # text the evidence (the next attempt's records follow)
        rerun = str(report.outcome) == "rerun"  # not one of pytest's own outcomes
        record = {
            "nodeid": nodeid,
            "when": report.when,
            "outcome": "failed" if rerun else report.outcome,
            "duration": round(report.duration, 6),
        }
        if nodeid in self.allocations:
            record["gpus"] = self.allocations[nodeid]
            if report.when == "setup" and self.gpu_waits.get(nodeid):
                record["gpu_wait_s"] = self.gpu_waits[nodeid]
        if nodeid in self.server_waits:
            record["server_wait_s"] = self.server_waits.pop(nodeid)
        if nodeid in self.servers:
            if report.when == "call":
                record["servers"] = self.servers[nodeid]
            elif report.when == "teardown":
                del self.servers[nodeid]
        if report.when == "call" and nodeid in self.measurements:
            record["measurements"] = self.measurements.pop(nodeid)
        if hasattr(report, "wasxfail"):
            record["wasxfail"] = report.wasxfail
        elif report.skipped and isinstance(report.longrepr, tuple):
            record["skip_reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        if report.failed or rerun:
            # pytest's one-line summary of the failure
            crash = getattr(report.longrepr, "reprcrash", None)
            text = report.longreprtext
            record["message"] = (
                crash.message if crash else text.strip().splitlines()[-1] if text.strip() else ""
            )[:500]
            record["failure"] = text[:FAILURE_HEAD_CHARS]
            record["stdout_tail"] = report.capstdout[-OUTPUT_TAIL_CHARS:]
            record["stderr_tail"] = report.capstderr[-OUTPUT_TAIL_CHARS:]
            from pytest_rocm.serving.process import LOG_SECTION  # loaded once a test fails

            logs = "\n".join(
                text for title, text in report.sections if title.startswith(LOG_SECTION)
            )
            if logs:
                record["log_tail"] = logs[-OUTPUT_TAIL_CHARS:]
        if report.outcome != "passed":  # a failure, or an xfail or skip that swallowed one
            self._note_device_fault(report, record)
        spec = self.annotator.specs.get(nodeid)
        if spec is not None and spec.quarantine and "message" in record:
            self._note_quarantine_breach(report, record, spec.quarantine)
        # when the phase ended, as a plain phase's record says (pytest-rerunfailures logs an
        # attempt's reports after its teardown ran: the time of writing would order them wrongly)
        writer.write(record, "" if spec is None else self._encoded_spec(nodeid, spec), report.stop)

    @staticmethod
    def _note_quarantine_breach(
        report: pytest.TestReport, record: dict[str, Any], held: dict[str, Any]
    ) -> None:
        """A quarantined gate that would block, failing another way than it was quarantined for:
        the controller reruns it as a blocking gate (the report then makes it block)."""
        from pytest_rocm.results.fingerprint import fingerprint, quarantine_excuses

        if held.get("blocks") and not quarantine_excuses(held, fingerprint(record["message"])):
            report.user_properties.append((QUARANTINE_BREACHED_PROPERTY, "true"))

    def _note_device_fault(self, report: pytest.TestReport, record: dict[str, Any]) -> None:
        """An outcome whose error poisons this process's device context (results/poisoning.py),
        looked for in the whole failure text (the record keeps only its head: a long chain puts the
        cause past it), with an xfail's or a skip's too: the record says so (`device_fault`), the
        report tells the controller, and the process runs no test after it (the first one poisons
        it)."""
        fault = sticky_fault({**record, "outcome": "failed", "failure": report.longreprtext})
        if fault is None:
            return
        record["device_fault"] = fault["line"]
        report.user_properties.append((DEVICE_FAULT_PROPERTY, fault["line"]))
        if self.poisoned is None:
            self.poisoned = {"nodeid": report.nodeid, **fault}

    def defer(self, nodeid: str, note: str | None = None) -> None:
        """`nodeid` is not run in this poisoned process: recorded, for a fresh process to run."""
        self.deferred.append(nodeid)
        poisoned = self.poisoned or {}  # (deferred only once a fault poisoned the process)
        record = {
            "kind": "deferred",
            "nodeid": nodeid,
            "after": poisoned.get("nodeid"),
            "line": poisoned.get("line"),
        }
        if note:
            record["note"] = note[:500]
        self.write(record)

    def write_unwritten(self) -> None:
        """Write the running test's plain phases that wait in memory as the phase records they are:
        a later phase had more to say, or the session ends before its teardown."""
        waiting, self.waiting = self.waiting, None
        if waiting is None:
            return
        writer = self._writer
        assert writer is not None  # a test's phases wait only once the writer is open
        writer.write_phase(
            waiting.encoded_nodeid, "setup", waiting.setup, waiting.t, waiting.encoded_spec
        )
        if waiting.call is not None:
            duration, t = waiting.call
            writer.write_phase(waiting.encoded_nodeid, "call", duration, t, waiting.encoded_spec)

    def note_collection_skip(self, report: pytest.CollectReport) -> None:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        self.collection_skips[report.nodeid] = reason.removeprefix("Skipped: ")

    def note_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update(item.nodeid for item in items)

    def dropped_gates(self, items: list[pytest.Item]) -> dict[str, str]:
        """The blocking gates collected here that the session will not run (`dropped_gates`)."""
        config = self.context.config
        narrowed = set()
        for arg in config.args:
            if "::" in str(arg):
                path = config.invocation_params.dir / str(arg).split("::", 1)[0]
                narrowed.add(os.path.relpath(path, config.rootpath).replace(os.sep, "/"))
        return dropped_gates(
            self.annotator.specs, {item.nodeid for item in items}, self.deselected, narrowed
        )

    def record_collection(self, items: list[pytest.Item]) -> None:
        """What this run set out to run: the gates and grouped tests collected, with their specs.
        One process writes it (the only one, or the first xdist worker: they all collect the same
        tests), so the report can name the tests that never ran when a run stops early."""
        if not internals.writes_collection(self.context.worker) or self.writer is None:
            return
        specs = self.annotator.specs
        self.write(
            {
                "kind": "collection",
                "nodeid": "",
                "tests": len(items),
                "specs": {
                    item.nodeid: {
                        "group": specs[item.nodeid].group,
                        "blocking": specs[item.nodeid].blocking,
                        "gate": specs[item.nodeid].gate,
                    }
                    for item in items
                    if item.nodeid in specs
                },
                "skipped_modules": [
                    {"nodeid": nodeid, "reason": reason}
                    for nodeid, reason in self.collection_skips.items()
                ],
                # the framework the tests imported, and the checkout under test
                "stack": imported_stack(self.context.config.rootpath),
                # blocking gates collected that will not run: never success by omission
                "deselected": self.dropped_gates(items),
            }
        )

    def write_gpu_demands(self, items: list[pytest.Item]) -> None:
        """For the gpu scheduler: each test's GPU demand, beside the run's device locks, before the
        controller schedules (a test that cannot run here needs none: it is skipped as not
        applicable). Written by every xdist worker unless `--rocm-scheduler=xdist`: the controller
        decides whether it uses them."""
        context = self.context
        # only a run that asked can have the gpu scheduler
        if (
            not context.activation.asked
            or context.settings.scheduler == "xdist"
            or not context.is_worker
            or not context.platform.gpus
        ):
            return
        from pytest_rocm.plugin.locks import lock_root
        from pytest_rocm.scheduling.xdist_scheduler import write_demands

        demands = {}
        for item in items:
            spec = self.annotator.specs.get(item.nodeid)
            gpus = (
                0
                if spec is not None and spec.not_applicable
                else (spec.hardware.gpus if spec is not None and spec.hardware else 1)
            )
            if gpus != 1:
                demands[item.nodeid] = gpus
        write_demands(lock_root(self.context.session_id), self.context.worker, demands)

    def _encoded_spec(self, nodeid: str, spec: Any) -> str:
        """The spec's record fields (group, blocking, requirement, known gap) as JSON, once per
        test."""
        encoded = self.spec_json.get(nodeid)
        if encoded is None:
            encoded = self.spec_json[nodeid] = spec.encoded_fields()
        return encoded

    def start_hang_timer(
        self, item: pytest.Item, settings: Any, kill_servers: Callable[[], None]
    ) -> bool:
        """pytest-timeout's thread method exits the process: record the hang (with stacks) and
        kill the process's servers first."""
        from pytest_rocm.plugin import hangs

        def record(entry: dict[str, Any]) -> None:
            self.write({**entry, "gpus": self.allocations.get(item.nodeid)})

        return hangs.start_timer(item, settings, record, kill_servers)

    def disk_full(self) -> str | None:
        """What a full disk cost this process's records (`RecordWriter.disk_full`), or None."""
        return self._writer.disk_full() if self._writer is not None else None

    def close(self) -> None:
        if self._writer is not None:
            self.write_unwritten()
            self._writer.close()
