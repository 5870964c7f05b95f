"""Reruns decide: failed blocking gates run again, after a health probe where the failure looks like the hardware's.

The planner lives in the process that sees every report (the xdist controller,
or the only process). When an attempt of a blocking gate ends failed (its
teardown report arrives, or its worker crashed) and attempts remain, it:
1. looks for an infrastructure signature in the failure, and if there is one runs
   the health probe on the devices that attempt used, recording the result;
2. asks the next attempt to use other devices (`devices.write_avoid`);
3. queues the rerun for after the main pass: with xdist it goes to the scheduler
   (`mark_test_pending`, the hook xdist documents for rescheduling) once the
   scheduler has no other test left to hand out, so it runs on a live worker;
   without xdist it runs in this process after the main loop.
The verdict is decided later from the records (`pytest_rocm.verdicts`).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field

from pytest_rocm.devices import VISIBLE_DEVICES_VARIABLE, write_avoid
from pytest_rocm.verdicts import failure_evidence, find_signature

DEFAULT_PROBE = "{python} -m pytest_rocm.probe"
PROBE_TIMEOUT_S = 300


@dataclass
class Attempt:
    failed: bool = False
    texts: list[str] = field(default_factory=list)
    devices: list[int] | None = None


def property_of(report, name: str) -> str | None:
    for key, value in getattr(report, "user_properties", ()):
        if key == name:
            return value
    return None


def worker_exit_code(node) -> int | None:
    """The exit status of a dead xdist worker (execnet keeps its Popen on the gateway's io)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return popen.wait(timeout=5)
    except (subprocess.TimeoutExpired, OSError):
        return None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"worker exit code {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"worker exit code {code}"
    return f"worker exit code {code}"


class RerunPlanner:
    def __init__(self, run, reruns: int, probe_command: str, signatures, session_id: str):
        self.run = run
        self.reruns = reruns
        self.probe_command = probe_command
        self.signatures = signatures
        self.session_id = session_id
        self.current: dict[str, Attempt] = {}
        self.finished: dict[str, int] = defaultdict(int)  # attempts completed per test
        self.queue: list[str] = []  # reruns waiting for the end of the main pass
        self.awaiting: set[str] = set()  # given to xdist's scheduler, not started yet

    # -- reports --------------------------------------------------------------------------------
    def on_report(self, report, scheduler=None) -> None:
        # Called for every phase of every test: only failures and attempt ends matter.
        if report.failed and property_of(report, "rocm_blocking") == "true":
            gpus = property_of(report, "rocm_gpus")
            self._note_failure(report.nodeid, [int(d) for d in gpus.split(",") if d] if gpus is not None else None,
                               [failure_evidence(report.longreprtext), report.capstdout, report.capstderr])
        if report.when == "setup":
            self.awaiting.discard(report.nodeid)
        elif report.when == "teardown":
            if property_of(report, "rocm_blocking") == "true":
                self._attempt_done(report.nodeid, self.current.pop(report.nodeid, Attempt()), scheduler)
            if self.queue:
                self.release(scheduler, self.shutting_down())

    def on_record(self, record: dict) -> None:
        """A record from a rerun subprocess, read back after it ended: feeds the same decisions as a report."""
        if not record.get("blocking"):
            return
        if record["outcome"] == "failed":
            self._note_failure(record["nodeid"], record.get("gpus"),
                               [failure_evidence(record.get("failure", "")), record.get("stdout_tail", ""),
                                record.get("stderr_tail", "")])
        if record["when"] == "teardown":
            self._attempt_done(record["nodeid"], self.current.pop(record["nodeid"], Attempt()), None)

    def _note_failure(self, nodeid: str, devices: list[int] | None, texts: list[str]) -> None:
        attempt = self.current.setdefault(nodeid, Attempt())
        attempt.failed = True
        if devices is not None:
            attempt.devices = devices
        attempt.texts += texts

    def on_crash(self, nodeid: str, texts: list[str], devices: list[int] | None, blocking: bool, scheduler) -> None:
        self.current.pop(nodeid, None)
        if blocking:
            self._attempt_done(nodeid, Attempt(failed=True, texts=texts, devices=devices), scheduler)
        if self.queue:
            self.release(scheduler, self.shutting_down())

    def _attempt_done(self, nodeid: str, attempt: Attempt, scheduler) -> None:
        self.finished[nodeid] += 1
        if not attempt.failed:
            return
        devices = attempt.devices if attempt.devices is not None else [g.index for g in self.run.platform.gpus]
        if find_signature(attempt.texts, self.signatures) is not None:
            self._probe(nodeid, devices)
        if self.finished[nodeid] > self.reruns:
            return
        if devices:
            write_avoid(self.session_id, nodeid, devices)
        self.queue.append(nodeid)

    def release(self, scheduler, shutting_down: bool = False) -> None:
        """With xdist: once the main pass has nothing left to hand out, give the reruns to the scheduler
        (`mark_test_pending`, the hook xdist documents for rescheduling). Reruns that come after xdist
        began shutting its workers down (a worker runs its last test only once told to stop), and all
        reruns without xdist, stay queued for `RocmRun.run_queued_reruns` after the main loop."""
        if scheduler is None or shutting_down or not self.queue or getattr(scheduler, "pending", None):
            return
        queued, self.queue = self.queue, []
        for nodeid in queued:
            try:
                scheduler.mark_test_pending(nodeid)
                self.awaiting.add(nodeid)
            except (NotImplementedError, ValueError, AttributeError):
                self.queue.append(nodeid)  # e.g. --dist loadscope cannot reschedule: run after the pass

    def leftovers(self) -> list[str]:
        """Reruns that no worker ran: still queued, or given to a scheduler that had shut down."""
        left = self.queue + sorted(self.awaiting - set(self.queue))
        self.queue, self.awaiting = [], set()
        return left

    def shutting_down(self) -> bool:
        dsession = self.run.config.pluginmanager.get_plugin("dsession")
        return bool(getattr(dsession, "shuttingdown", False))

    # -- the health probe -----------------------------------------------------------------------
    def _probe(self, nodeid: str, devices: list[int]) -> None:
        command = self.probe_command.replace("{python}", shlex.quote(sys.executable))
        env = dict(os.environ, PYTEST_ROCM_PROBE_DEVICES=",".join(map(str, devices)))
        variable = VISIBLE_DEVICES_VARIABLE.get(self.run.platform.vendor)
        if variable and devices:
            env[variable] = ",".join(map(str, devices))
        try:
            done = subprocess.run(shlex.split(command), capture_output=True, text=True, env=env,
                                  timeout=PROBE_TIMEOUT_S, errors="replace")
            output = (done.stdout + done.stderr).strip()
            ok, code = done.returncode == 0, done.returncode
            detail = output.splitlines()[-1] if output else f"exit code {code}"
        except subprocess.TimeoutExpired:
            ok, code, detail = False, None, f"the probe did not finish in {PROBE_TIMEOUT_S} s"
        except OSError as exc:
            ok, code, detail = False, None, f"the probe could not start: {exc}"
        self.run.write_probe(nodeid, {"ok": ok, "devices": devices, "detail": detail[:300], "exit_code": code,
                                      "command": command, "after_attempt": self.finished[nodeid] - 1})

