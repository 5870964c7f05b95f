"""Per-process state of a pytest-rocm run and the plain functions the hooks call.

One `RocmRun` lives in each process (controller and xdist workers). It knows
the options, the group map, the platform (detected once on the controller and
handed to workers), and the record writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_rocm import groups as groups_mod
from pytest_rocm.hw import detect as detect_mod
from pytest_rocm.hw.model import Platform
from pytest_rocm.hw.profiles import ProfileError
from pytest_rocm.jsonio import write_json_atomic
from pytest_rocm.manifest import build_manifest, now
from pytest_rocm.markers import Gate, Hardware, KnownGap, MarkerError, parse_gate, parse_hardware, parse_known_gap
from pytest_rocm.records import FAILURE_HEAD_CHARS, OUTPUT_TAIL_CHARS, RecordWriter, clear_records, read_records
from pytest_rocm.report import build_gate_report


@dataclass(frozen=True)
class TestSpec:
    """What the markers and the group map say about one test, and how they apply on this platform."""

    __test__ = False  # not a pytest test class

    group: str | None = None
    blocking: bool = False
    gate: bool = False
    hardware: Hardware | None = None
    known_gap: KnownGap | None = None  # set only where the gap applies (AMD platforms)
    not_applicable: str | None = None  # the both-sided reason, where the hardware requirement is not met


SPEC = pytest.StashKey[TestSpec]()
OUR_MARKERS = ("rocm_gate", "hardware", "rocm_known_gap")


class RocmRun:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.workerinput = getattr(config, "workerinput", None)
        self.worker = self.workerinput["workerid"] if self.workerinput else "controller"
        self.started = now()
        report_dir = config.getoption("rocm_report_dir") or config.getini("rocm_report_dir")
        self.report_dir = Path(report_dir).resolve() if report_dir else None
        self.allowed_groups = set(groups_mod.GROUPS) | set(config.getini("rocm_groups"))
        self.group_map = self._load_group_map()
        self._platform: Platform | None = None
        self._writer: RecordWriter | None = None
        self.specs: dict[str, TestSpec] = {}  # nodeid -> spec, for the reports of this process
        self.distributing = False  # the xdist controller: workers write the records, not us
        self.gate_report: dict | None = None
        self.report_paths: list[Path] = []
        if self.report_dir and not self.workerinput:
            clear_records(self.report_dir)  # workers start after this, so they never lose records

    # -- configuration -------------------------------------------------------------------------
    def _load_group_map(self) -> groups_mod.GroupMap | None:
        value = self.config.getoption("rocm_group_map") or self.config.getini("rocm_group_map")
        if not value:
            return None
        path = Path(value)
        if not path.is_absolute() and not self.config.getoption("rocm_group_map"):
            base = self.config.inipath.parent if self.config.inipath else self.config.rootpath
            path = base / path
        try:
            return groups_mod.cached_group_map(str(path), frozenset(self.allowed_groups))
        except groups_mod.GroupMapError as exc:
            raise pytest.UsageError(str(exc)) from exc

    @property
    def platform(self) -> Platform:
        """Detected on first use; workers take the controller's so every process agrees."""
        if self._platform is None:
            if self.workerinput and "rocm_platform" in self.workerinput:
                self._platform = Platform.from_dict(self.workerinput["rocm_platform"])
            else:
                try:
                    self._platform = detect_mod.detect(self.config.getoption("rocm_platform"))
                except ProfileError as exc:
                    raise pytest.UsageError(str(exc)) from exc
        return self._platform

    # -- collection ------------------------------------------------------------------------------
    def annotate(self, item: pytest.Item) -> None:
        """Read and check the markers of one test, apply skips and known gaps; raise MarkerError."""
        closest = {}
        for mark in item.iter_markers():  # closest first; one walk instead of one per marker name
            if mark.name in OUR_MARKERS:
                closest.setdefault(mark.name, mark)
        gate_mark, hardware_mark, gap_mark = (closest.get(name) for name in OUR_MARKERS)
        gate: Gate | None = parse_gate(gate_mark, self.allowed_groups) if gate_mark else None
        hardware = parse_hardware(hardware_mark) if hardware_mark else None
        gap = parse_known_gap(gap_mark) if gap_mark else None
        rule = self.group_map.rule_for(item.nodeid) if self.group_map and gate is None else None
        if gate is None and rule is None and hardware is None and gap is None:
            return
        not_applicable = hardware.unmet_reason(self.platform) if hardware else None
        applied_gap = gap if gap and not not_applicable and self.platform.is_amd else None
        spec = TestSpec(
            group=gate.group if gate else (rule.group if rule else None),
            blocking=gate.blocking if gate else (rule.blocking if rule else False),
            gate=gate is not None, hardware=hardware, known_gap=applied_gap, not_applicable=not_applicable,
        )
        item.stash[SPEC] = spec
        self.specs[item.nodeid] = spec
        if not_applicable:
            item.add_marker(pytest.mark.skip(reason=f"not applicable: {not_applicable}"))
        elif applied_gap and applied_gap.mode == "skip":
            item.add_marker(pytest.mark.skip(reason=applied_gap.label()))
        elif applied_gap:
            item.add_marker(pytest.mark.xfail(reason=applied_gap.label(), strict=False))
        self._add_junit_properties(item, spec)

    def _add_junit_properties(self, item: pytest.Item, spec: TestSpec) -> None:
        # user_properties ride on every report (through xdist too) into pytest's --junitxml.
        props = item.user_properties
        if spec.group:
            props.append(("rocm_group", spec.group))
            props.append(("rocm_blocking", str(spec.blocking).lower()))
        platform = self.platform
        props.append(("rocm_sku", ",".join(platform.skus()) or "none"))
        props.append(("rocm_arch", ",".join(platform.archs()) or "none"))
        if spec.known_gap:
            props.append(("rocm_known_gap", spec.known_gap.issue))
        if spec.hardware:
            props.append(("rocm_requires", spec.hardware.describe()))

    def check_collected(self, items: list) -> str | None:
        """Annotate collected items; return the collection error text (every bad test) or None."""
        errors = []
        for item in items:
            if not isinstance(item, pytest.Item):
                continue
            try:
                self.annotate(item)
            except MarkerError as exc:
                errors.append(f"{item.nodeid}: {exc}")
        return "\n".join(errors) if errors else None

    # -- records ---------------------------------------------------------------------------------
    @property
    def writer(self) -> RecordWriter | None:
        if self._writer is None and self.report_dir is not None:
            self._writer = RecordWriter(self.report_dir, self.worker)
        return self._writer

    def start(self, distributing: bool) -> None:
        self.distributing = distributing

    def record_report(self, report: pytest.TestReport) -> None:
        """Write one phase outcome, in the process that ran the test (never the xdist controller)."""
        if self.distributing or self.report_dir is None:
            return
        # pytest-rerunfailures numbers its attempts on the report.
        record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "duration": round(report.duration, 6), "rerun": getattr(report, "rerun", 0)}
        spec = self.specs.get(report.nodeid)
        if spec is not None:
            record.update(group=spec.group, blocking=spec.blocking, gate=spec.gate)
            if spec.hardware:
                record["requires"] = spec.hardware.to_dict()
            if spec.known_gap:
                record["known_gap"] = {"reason": spec.known_gap.reason, "issue": spec.known_gap.issue,
                                       "mode": spec.known_gap.mode}
            if spec.not_applicable:
                record["not_applicable"] = spec.not_applicable
        if hasattr(report, "wasxfail"):
            record["wasxfail"] = report.wasxfail
        elif report.skipped and isinstance(report.longrepr, tuple):
            record["skip_reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)  # pytest's one-line summary of the failure
            text = report.longreprtext
            record["message"] = (crash.message if crash else text.strip().splitlines()[-1] if text.strip() else "")[:500]
            record["failure"] = text[:FAILURE_HEAD_CHARS]
            record["stdout_tail"] = report.capstdout[-OUTPUT_TAIL_CHARS:]
            record["stderr_tail"] = report.capstderr[-OUTPUT_TAIL_CHARS:]
        self.writer.write(record)

    def record_crash(self, nodeid: str, report) -> None:
        """xdist lost the worker running `nodeid`: record it so the test is reported crashed, not lost."""
        writer = self.writer
        if writer is None:
            return
        node = getattr(report, "node", None)
        crashed_worker = getattr(getattr(node, "gateway", None), "id", None)
        writer.write({"nodeid": nodeid, "when": "call", "outcome": "failed", "duration": 0.0, "crashed": True,
                      "crashed_worker": crashed_worker, "failure": str(report.longrepr),
                      "group": self.group_map.group_of(nodeid) if self.group_map else None})

    # -- session end -----------------------------------------------------------------------------
    def finish(self) -> None:
        """Close this process's records; on the controller merge them into the gate report and manifest."""
        if self._writer is not None:
            self._writer.close()
        if self.workerinput or self.report_dir is None:
            return
        manifest = build_manifest(self.platform, self.config.rootpath, self.started, now(),
                                  list(self.config.invocation_params.args))
        loaded = read_records(self.report_dir)
        group_of = self.group_map.group_of if self.group_map else None
        self.gate_report = build_gate_report(loaded.records, manifest, loaded.problems, group_of)
        self.report_paths = [write_json_atomic(self.report_dir / "manifest.json", manifest),
                             write_json_atomic(self.report_dir / "gate-report.json", self.gate_report)]
