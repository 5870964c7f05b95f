"""Recording on the process that runs tests (an xdist worker, a rerun subprocess, or the only
process).

Each phase outcome becomes one record line the moment pytest reports it, with
the test's spec, the devices it held, what its gates measured and, for a
failure, the text where infrastructure signatures are looked for. The setup
is always written at once (a process killed in the body still names its test);
a call that passed with nothing to add waits in memory for the teardown, and
where that passes too both are one record (docs/architecture.md, "Artifacts").
"""

from __future__ import annotations

import json
import time

import pytest

from pytest_rocm.plugin import internals
from pytest_rocm.plugin.collection import Annotator
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.results.records import FAILURE_HEAD_CHARS, OUTPUT_TAIL_CHARS, RecordWriter


class Recorder:
    def __init__(self, context: RunContext, annotator: Annotator):
        self.context = context
        self.annotator = annotator
        self._writer: RecordWriter | None = None
        self.spec_json: dict[str, str] = {}  # nodeid -> its spec's record fields, encoded once
        self.nodeid_json: dict[str, str] = {}
        self.allocations: dict[str, list[int]] = {}  # nodeid -> devices its latest attempt got here
        # nodeid -> seconds its latest attempt waited for them
        self.gpu_waits: dict[str, float] = {}
        # nodeid -> what its gates measured (this attempt)
        self.measurements: dict[str, list[dict]] = {}
        # nodeid -> (duration, time reported) of its call that passed with nothing to add, not
        # written yet: its teardown decides whether both are one record
        self.unwritten: dict[str, tuple[float, float]] = {}

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

    def write(self, record: dict) -> None:
        if self.writer is not None:
            self.writer.write(record)

    def record_report(self, report: pytest.TestReport) -> None:
        """Write one phase outcome, or keep it until the test's end where it is a plain pass."""
        if self._writer is None and self.writer is None:  # no report folder
            return
        nodeid = report.nodeid
        when = report.when
        if (
            report.outcome == "passed"
            and "wasxfail" not in report.__dict__
            and nodeid not in self.allocations
            and nodeid not in self.measurements
        ):
            encoded = self.spec_json.get(nodeid)
            if encoded is None:
                encoded = self._encoded_spec(nodeid)
            if when == "call":
                self.unwritten[nodeid] = (report.duration, time.time())
                return
            if when == "teardown" and nodeid in self.unwritten:
                call, _ = self.unwritten.pop(nodeid)
                self._writer.write_plain_pass(
                    self.nodeid_json[nodeid], call, report.duration, encoded
                )
                return
            self._writer.write_phase(
                self.nodeid_json[nodeid], when, report.duration, time.time(), encoded
            )
            return
        self.write_unwritten(nodeid)
        record = {
            "nodeid": nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "duration": round(report.duration, 6),
        }
        if nodeid in self.allocations:
            record["gpus"] = self.allocations[nodeid]
            if report.when == "setup" and self.gpu_waits.get(nodeid):
                record["gpu_wait_s"] = self.gpu_waits[nodeid]
        if report.when == "call" and nodeid in self.measurements:
            record["measurements"] = self.measurements.pop(nodeid)
        if hasattr(report, "wasxfail"):
            record["wasxfail"] = report.wasxfail
        elif report.skipped and isinstance(report.longrepr, tuple):
            record["skip_reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        if report.failed:
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
        self.writer.write(record, self._encoded_spec(nodeid))

    def write_unwritten(self, nodeid: str | None = None) -> None:
        """Write the kept call of `nodeid` (every kept call when None) as the phase record it is:
        its teardown did not pass plainly, or the session ends before it."""
        if self._writer is None:
            return
        for name in [nodeid] if nodeid is not None else list(self.unwritten):
            kept = self.unwritten.pop(name, None)
            if kept is not None:
                self._writer.write_phase(
                    self.nodeid_json[name], "call", kept[0], kept[1], self.spec_json[name]
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
        from pytest_rocm.hw.allocation import lock_root
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

    def _encoded_spec(self, nodeid: str) -> str:
        """The spec's record fields (group, blocking, requirement, known gap) as JSON, once per
        test."""
        encoded = self.spec_json.get(nodeid)
        if encoded is None:
            self.nodeid_json[nodeid] = json.dumps(nodeid, ensure_ascii=False)
            spec = self.annotator.specs.get(nodeid)
            encoded = self.spec_json[nodeid] = spec.encoded_fields() if spec is not None else ""
        return encoded

    def start_hang_timer(self, item: pytest.Item, settings) -> bool:
        """pytest-timeout's thread method exits the process: record the hang (with stacks) first."""
        from pytest_rocm.plugin import hangs

        def record(entry: dict) -> None:
            self.write({**entry, "gpus": self.allocations.get(item.nodeid)})

        return hangs.start_timer(item, settings, record)

    def close(self) -> None:
        if self._writer is not None:
            self.write_unwritten()
            self._writer.close()
