"""Per-process state of a pytest-rocm run and the plain functions the hooks call.

One `RocmRun` lives in each process (controller and xdist workers). It knows
the options, the group map, the platform (detected once on the controller and
handed to workers), the record writer, the devices this process holds, and on
the controller the rerun planner. The work itself is done by the modules it
calls: markers, devices, gates, reruns, report.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import uuid
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_rocm import groups as groups_mod
from pytest_rocm.hw.model import Platform
from pytest_rocm.jsonio import write_json_atomic
from pytest_rocm.markers import (SERVER_MARKERS, Gate, Hardware, KnownGap, MarkerError, parse_gate, parse_hardware,
                                 parse_known_gap, parse_server)
from pytest_rocm.records import (FAILURE_HEAD_CHARS, OUTPUT_TAIL_CHARS, RecordWriter, clear_records,
                                 last_attempt_records, read_records)
from pytest_rocm.report import build_gate_report, evidence_texts
from pytest_rocm.reruns import DEFAULT_PROBE, RerunPlanner, describe_exit, worker_exit_code
from pytest_rocm.verdicts import SignatureError, build_signatures

LOG_SECTION = "pytest-rocm server log"  # report sections attached by pytest_rocm.serving

# Imported where first needed, not at start-up (every pytest run in the environment loads the
# plugin): devices (filelock), gates and baselines, live detection, the manifest.


# xdist options (and ours) that a rerun subprocess must not repeat: it runs one test, alone.
_NOT_PASSED_ON = ("-n", "--numprocesses", "--dist", "-d", "--tx", "--maxprocesses", "--max-worker-restart",
                  "--junitxml", "--junit-xml", "--rocm-report-dir", "--rocm-platform", "--rocm-reruns",
                  "--rocm-propose-baselines", "--rocm-rerun-helper", "--basetemp")  # a rerun must not wipe its tmp dirs


def passthrough_args(config: pytest.Config) -> list[str]:
    """The run's own command line, less its test selection and what must not repeat in a rerun."""
    args, positional = list(config.invocation_params.args), set(config.args)
    kept, skip_value = [], False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in _NOT_PASSED_ON:
            skip_value = "=" not in arg
            continue
        if arg.startswith("-n") and arg[2:] and not arg.startswith("--"):  # -n2, -nauto
            continue
        if arg in positional:
            continue
        kept.append(arg)
    return kept


def rerun_helper_input(config: pytest.Config) -> dict | None:
    """`--rocm-rerun-helper SESSION:NAME:PLATFORM_FILE`: this process reruns a test for a run's controller,
    like one of its workers (the run's device locks, its platform, records of its own)."""
    value = config.getoption("rocm_rerun_helper", None)
    if not value:
        return None
    session, name, platform_file = value.split(":", 2)
    return {"workerid": name, "rocm_session": session,
            "rocm_platform": json.loads(Path(platform_file).read_text(encoding="utf-8"))}


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


OUR_MARKERS = ("rocm_gate", "hardware", "rocm_known_gap")
_READ_MARKERS = frozenset(OUR_MARKERS + SERVER_MARKERS)



class RocmRun:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.workerinput = getattr(config, "workerinput", None) or rerun_helper_input(config)
        self.worker = self.workerinput["workerid"] if self.workerinput else "controller"
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        report_dir = config.getoption("rocm_report_dir") or config.getini("rocm_report_dir")
        self.report_dir = Path(report_dir).resolve() if report_dir else None
        self.allowed_groups = set(groups_mod.GROUPS) | set(config.getini("rocm_groups"))
        self.group_map = self._load_group_map()
        self._platform: Platform | None = None
        self._writer: RecordWriter | None = None
        self.specs: dict[str, TestSpec] = {}  # nodeid -> spec, for the reports of this process
        self.spec_json: dict[str, str] = {}  # nodeid -> its spec's record fields, encoded once
        self.nodeid_json: dict[str, str] = {}
        self.allocations: dict[str, list[int]] = {}  # nodeid -> devices its latest attempt got here
        self.measurements: dict[str, list[dict]] = {}  # nodeid -> what its gates measured (this attempt)
        self._baselines: dict | None = None
        self._serving = None  # pytest_rocm.serving.Serving, made when a suite first asks for a server
        self.distributing = False  # the xdist controller: workers write the records, not us
        self.gate_report: dict | None = None
        self.report_paths: list[Path] = []
        self.notes: list[str] = []  # problems of the run itself, shown in the summary and the manifest
        # Devices are locked per run: the controller names the run, workers take its name.
        self.session_id = self.workerinput["rocm_session"] if self.workerinput else uuid.uuid4().hex[:12]
        self.timeouts = self._parse_timeouts()
        try:
            self.signatures = build_signatures(config.getini("rocm_infra_signatures"))
        except SignatureError as exc:
            raise pytest.UsageError(str(exc)) from exc
        reruns = config.getoption("rocm_reruns")
        try:
            self.reruns = int(reruns if reruns is not None else config.getini("rocm_reruns") or 1)
        except ValueError:
            raise pytest.UsageError(f"rocm_reruns: {config.getini('rocm_reruns')!r} is not a whole number") from None
        self.probe_command = (config.getoption("rocm_health_probe") or config.getini("rocm_health_probe")
                              or DEFAULT_PROBE)
        self.planner = None if self.workerinput else RerunPlanner(
            self, self.reruns, self.probe_command, self.signatures, self.session_id)
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

    def _parse_timeouts(self) -> dict[str, float]:
        """`rocm_timeouts` lines `group=seconds` (and `default=seconds`) for gate tests."""
        table = {}
        for line in self.config.getini("rocm_timeouts"):
            group, sep, seconds = line.partition("=")
            try:
                table[group.strip()] = float(seconds)
                if not sep or float(seconds) <= 0:
                    raise ValueError
            except ValueError:
                raise pytest.UsageError(f"rocm_timeouts: {line!r} is not `group=seconds` with seconds > 0") from None
            if group.strip() not in self.allowed_groups | {"default"}:
                raise pytest.UsageError(f"rocm_timeouts: unknown group {group.strip()!r}; allowed: default, "
                                        + ", ".join(sorted(self.allowed_groups)))
        return table

    @property
    def platform(self) -> Platform:
        """Detected on first use; workers take the controller's so every process agrees."""
        if self._platform is None:
            if self.workerinput and "rocm_platform" in self.workerinput:
                self._platform = Platform.from_dict(self.workerinput["rocm_platform"])
            else:
                from pytest_rocm.hw import detect as detect_mod
                from pytest_rocm.hw.profiles import ProfileError

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
            if mark.name in _READ_MARKERS:
                closest.setdefault(mark.name, mark)
        gate_mark, hardware_mark, gap_mark = (closest.get(name) for name in OUR_MARKERS)
        for name in SERVER_MARKERS:
            if name in closest:
                parse_server(closest[name], name)
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
        self.specs[item.nodeid] = spec
        timeout = self.timeouts.get(spec.group or "", self.timeouts.get("default"))
        if timeout and not item.get_closest_marker("timeout") and self.config.pluginmanager.hasplugin("timeout"):
            item.add_marker(pytest.mark.timeout(timeout))  # pytest-timeout applies it; a hang becomes infra
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
        nodeid = report.nodeid
        # The common case, a phase that passed with nothing to add, is formatted directly (3 per test).
        if (report.outcome == "passed" and "wasxfail" not in report.__dict__ and nodeid not in self.allocations
                and nodeid not in self.measurements):
            encoded = self.spec_json.get(nodeid)
            if encoded is None:
                encoded = self._encoded_spec(nodeid)
            (self._writer or self.writer).write_phase(self.nodeid_json[nodeid], report.when, "passed",
                                                      report.duration, encoded)
            return
        record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "duration": round(report.duration, 6)}
        if report.nodeid in self.allocations:
            record["gpus"] = self.allocations[report.nodeid]
        if report.when == "call" and report.nodeid in self.measurements:
            record["measurements"] = self.measurements.pop(report.nodeid)
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
            logs = "\n".join(text for title, text in report.sections if title.startswith(LOG_SECTION))
            if logs:
                record["log_tail"] = logs[-OUTPUT_TAIL_CHARS:]
        self.writer.write(record, self._encoded_spec(report.nodeid))

    def _encoded_spec(self, nodeid: str) -> str:
        """The spec's record fields (group, blocking, requirement, known gap) as JSON, once per test."""
        encoded = self.spec_json.get(nodeid)
        if encoded is None:
            self.nodeid_json[nodeid] = json.dumps(nodeid, ensure_ascii=False)
            spec = self.specs.get(nodeid)
            fields = {}
            if spec is not None:
                fields = {"group": spec.group, "blocking": spec.blocking, "gate": spec.gate}
                if spec.hardware:
                    fields["requires"] = spec.hardware.to_dict()
                if spec.known_gap:
                    fields["known_gap"] = {"reason": spec.known_gap.reason, "issue": spec.known_gap.issue,
                                           "mode": spec.known_gap.mode}
                if spec.not_applicable:
                    fields["not_applicable"] = spec.not_applicable
            encoded = self.spec_json[nodeid] = ("," + json.dumps(fields, ensure_ascii=False)[1:-1]) if fields else ""
        return encoded

    def write_probe(self, nodeid: str, result: dict) -> None:
        if self.writer is not None:
            self.writer.write({"kind": "probe", "nodeid": nodeid, **result})

    def write_server(self, nodeid: str, started: dict) -> None:
        """A server this process started for `nodeid` (its module or test): the manifest lists them."""
        if self.writer is not None:
            self.writer.write({"kind": "server", "nodeid": nodeid, **started})

    def plan(self, report: pytest.TestReport) -> None:
        """Controller (or only process): decide on reruns as attempts end."""
        if self.planner is not None:
            self.planner.on_report(report, self._scheduler())

    def _scheduler(self):
        dsession = self.config.pluginmanager.get_plugin("dsession") if self.distributing else None
        return getattr(dsession, "sched", None)

    def record_crash(self, nodeid: str, report, scheduler) -> None:
        """xdist lost the worker running `nodeid`: record it (crashed, not lost), probe, reschedule."""
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        exit_code = worker_exit_code(node)
        earlier = (last_attempt_records(self.report_dir / f"records-{worker}.jsonl", nodeid)
                   if worker and self.report_dir else [])
        failure = f"{report.longrepr} ({describe_exit(exit_code)})"
        self._record_crash(nodeid, worker, exit_code, failure, earlier, scheduler)

    def _record_crash(self, nodeid: str, process: str | None, exit_code: int | None, failure: str,
                      earlier: list[dict], scheduler) -> None:
        """A process died running `nodeid` (an xdist worker, or a rerun subprocess): write the crash record
        and hand the planner the evidence of the attempt it ended (its records survive the process)."""
        if self.writer is not None:
            self.writer.write({"nodeid": nodeid, "when": "call", "outcome": "failed", "duration": 0.0,
                               "crashed": True, "crashed_worker": process, "failure": failure,
                               "exit_code": exit_code,
                               "group": self.group_map.group_of(nodeid) if self.group_map else None})
        if self.planner is not None:
            devices = next((r["gpus"] for r in reversed(earlier) if r.get("gpus") is not None), None)
            self.planner.on_crash(nodeid, [failure, *evidence_texts(earlier)], devices,
                                  any(r.get("blocking") for r in earlier), scheduler)

    # -- timeouts (pytest-timeout's thread method) --------------------------------------------------
    def start_hang_timer(self, item: pytest.Item, settings) -> bool:
        from pytest_rocm import hangs

        def record(entry: dict) -> None:
            if self.writer is not None:
                self.writer.write({**entry, "gpus": self.allocations.get(item.nodeid)})

        return hangs.start_timer(item, settings, record)

    # -- devices -----------------------------------------------------------------------------------
    def allocate_gpus(self, request) -> list[int]:
        """The `gpus` fixture: exclusive devices for this test, visible to its subprocesses."""
        from pytest_rocm import devices as devices_mod

        item = request.node
        spec = self.specs.get(item.nodeid)
        platform = self.platform
        wanted = spec.hardware.gpus if spec and spec.hardware else (1 if platform.gpus else 0)
        pool = [gpu.index for gpu in platform.gpus if spec is None or spec.hardware is None
                or spec.hardware.accepts(gpu)]
        allocation = devices_mod.allocate(self.session_id, pool, wanted, platform.vendor,
                                          devices_mod.read_avoid(self.session_id, item.nodeid))
        saved = {name: os.environ.get(name) for name in allocation.env}
        os.environ.update(allocation.env)

        def release():
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            allocation.release()

        request.addfinalizer(release)
        self.allocations[item.nodeid] = allocation.devices
        item.user_properties[:] = [p for p in item.user_properties if p[0] != "rocm_gpus"]
        item.user_properties.append(("rocm_gpus", ",".join(map(str, allocation.devices))))
        return allocation.devices

    # -- servers -------------------------------------------------------------------------------------
    @property
    def serving(self):
        if self._serving is None:
            from pytest_rocm.serving import Serving

            self._serving = Serving(self)
        return self._serving

    def attach_server_logs(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A failed test's report carries the last lines of every server running here (they reach the
        records as `log_tail`, where infrastructure signatures are looked for); the test's JUnit
        properties name the logs (pytest writes the properties of the teardown report, the item's)."""
        if self._serving is None:
            return
        for title, path, text in self._serving.log_sections():
            report.sections.append((title, text))
            if ("rocm_server_log", path) not in item.user_properties:
                item.user_properties.append(("rocm_server_log", path))

    # -- gates ----------------------------------------------------------------------------------------
    def _relative(self, value: str) -> Path:
        """An ini setting's path: relative to the ini file."""
        path = Path(value)
        if path.is_absolute():
            return path
        base = self.config.inipath.parent if self.config.inipath else self.config.rootpath
        return base / path

    def setting_path(self, option: str, ini: str) -> Path | None:
        """A path from the command line (relative to where pytest was started), else from the ini file
        (relative to the ini file), else None."""
        given = self.config.getoption(option)
        if given:
            return self.config.invocation_params.dir / given
        value = self.config.getini(ini)
        return self._relative(value) if value else None

    def baseline_files(self) -> list[Path]:
        given = self.config.getoption("rocm_baselines") or []
        return [Path(p) for p in given] + [self._relative(p) for p in self.config.getini("rocm_baselines")]

    @property
    def baselines(self) -> dict:
        from pytest_rocm import baselines as baselines_mod

        if self._baselines is None:
            try:
                self._baselines = baselines_mod.load(self.baseline_files())
            except baselines_mod.BaselineError as exc:
                raise pytest.UsageError(str(exc)) from exc
        return self._baselines

    def gate_context(self, request):
        from pytest_rocm import baselines as baselines_mod
        from pytest_rocm.gates import GateContext

        nodeid = request.node.nodeid
        key = self.platform.key()
        keys = [key["sku"], key["arch"], key["vendor"]]
        measurements = self.measurements.setdefault(nodeid, [])
        return GateContext(nodeid, keys, self.baselines, [str(p) for p in baselines_mod.expand(self.baseline_files())],
                           measurements)

    def accuracy_gate(self, request):
        from pytest_rocm.gates import AccuracyGate

        return AccuracyGate(self.gate_context(request))

    def perf_gate(self, request):
        from pytest_rocm.gates import PerfGate

        return PerfGate(self.gate_context(request))

    def golden(self, request):
        from pytest_rocm.gates import GoldenGate

        compare = self.setting_path("rocm_golden", "rocm_golden_dir")
        record = self.config.getoption("rocm_golden_record")
        return GoldenGate(self.gate_context(request), compare,
                          Path(record).resolve() if record else None, self.platform.describe())

    def write_proposals(self, records: list[dict], manifest: dict) -> Path | None:
        """--rocm-propose-baselines FILE: an entry per measured metric, sourced from this run's manifest."""
        target = self.config.getoption("rocm_propose_baselines")
        if not target:
            return None
        from pytest_rocm import baselines as baselines_mod

        key = self.platform.key()
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(baselines_mod.proposals(records, key["sku"] or key["arch"] or key["vendor"], manifest))
        return path

    # -- reruns without xdist --------------------------------------------------------------------
    def run_queued_reruns(self, session: pytest.Session) -> None:
        """After the main pass. Without xdist: in this process. With xdist: reruns that came after the
        workers were told to stop, each in a pytest subprocess of its own (never in the controller, which
        a crashing test would take down with the whole report)."""
        from _pytest.runner import runtestprotocol

        if self.planner is None or session.shouldstop:
            return
        if self.distributing:
            self._rerun_in_subprocesses()
            return
        items = {item.nodeid: item for item in session.items}
        while self.planner.queue and not session.shouldstop:
            item = items.get(self.planner.queue.pop(0))
            if item is not None:
                runtestprotocol(item, nextitem=None, log=True)

    def _rerun_in_subprocesses(self) -> None:
        import subprocess
        import sys

        if self.report_dir is None:
            return  # without records no verdict reads the rerun
        platform_file = self.report_dir / f".platform-{self.session_id}.json"
        write_json_atomic(platform_file, self.platform.to_dict())
        number = 0
        while leftovers := self.planner.leftovers():
            for nodeid in leftovers:
                number += 1
                name = f"rerun{number}"
                command = [sys.executable, "-m", "pytest", nodeid, *passthrough_args(self.config), "-n", "0",
                           "-p", "no:cacheprovider", f"--rocm-report-dir={self.report_dir}",
                           f"--rocm-rerun-helper={self.session_id}:{name}:{platform_file}"]
                done = subprocess.run(command, cwd=self.config.invocation_params.dir, capture_output=True, text=True)
                attempt = last_attempt_records(self.report_dir / f"records-{name}.jsonl", nodeid)
                if not attempt and done.returncode in (2, 3, 4, 5):  # interrupted, internal/usage error, nothing run
                    last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
                    self.notes.append(f"could not rerun {nodeid}: pytest exited {done.returncode} before the test "
                                      f"ran ({last[:300]}); its verdict stands on the attempts it had")
                    continue
                for record in attempt:  # what a worker's reports would have told the planner
                    self.planner.on_record(record)
                if not any(r["when"] == "teardown" for r in attempt):
                    failure = f"rerun process {name!r} died while running {nodeid!r} ({describe_exit(done.returncode)})"
                    self._record_crash(nodeid, name, done.returncode, failure, attempt, None)
        platform_file.unlink(missing_ok=True)

    # -- session end -----------------------------------------------------------------------------
    def finish(self) -> None:
        """Close this process's records; on the controller merge them into the gate report and manifest."""
        if self._serving is not None:
            self._serving.close()
        if self._writer is not None:
            self._writer.close()
        if self.workerinput:
            return
        from pytest_rocm.devices import lock_root
        from pytest_rocm.manifest import build_manifest, now

        shutil.rmtree(lock_root(self.session_id), ignore_errors=True)
        if self.report_dir is None:
            return
        manifest = build_manifest(self.platform, self.config.rootpath, self.started, now(),
                                  list(self.config.invocation_params.args))
        manifest["verdict_config"] = {"reruns": self.reruns, "health_probe": self.probe_command,
                                      "infra_signatures": {s.name: s.pattern.pattern for s in self.signatures}}
        manifest["notes"] = self.notes
        # Reading records and building the report make 100,000s of small objects; with the whole test
        # session still alive, the collector's full passes over it cost more than the work (4x measured).
        gc.disable()
        try:
            loaded = read_records(self.report_dir)
            manifest["servers"] = [{k: v for k, v in r.items() if k not in ("schema", "kind")}
                                   for r in loaded.records if r.get("kind") == "server"]
            proposals = self.write_proposals(loaded.records, manifest)
            group_of = self.group_map.group_of if self.group_map else None
            self.gate_report = build_gate_report(loaded.records, manifest, loaded.problems, group_of,
                                                 self.signatures)
        finally:
            gc.enable()
        self.report_paths = [write_json_atomic(self.report_dir / "manifest.json", manifest),
                             write_json_atomic(self.report_dir / "gate-report.json", self.gate_report)]
        if proposals is not None:
            self.report_paths.append(proposals)
