"""Rerun planning: failed blocking gates run again, after a health probe where the failure looks
like the hardware's.

The planner lives in the process that sees every report (the xdist controller,
or the only process). When an attempt of a blocking gate ends failed (its
teardown report arrives, or the process running it died) and attempts remain, it:
1. looks for an infrastructure signature in the failure, and if there is one runs
   the health probe on the devices that attempt used, recording the result;
2. asks the next attempt to use other devices (`allocation.write_avoid`);
3. hands the rerun over (`hand_over(nodeid)`: to a live xdist worker) or, where
   nothing can take it now or the failure was a device fault that poisoned its process
   (`results/poisoning.py`: only a fresh process proves anything) or happened on a server (a fresh
   process starts a fresh one: a warm server's state may be what failed it), queues it for after
   the main pass.
It knows nothing of pytest or xdist: the plugin gives it callbacks. The verdict is
decided later from the records (`pytest_rocm.results.verdicts`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_rocm.hw.allocation import visible_devices_env, write_avoid
from pytest_rocm.results.poisoning import DEVICE_FAULT_PROPERTY, sticky_fault
from pytest_rocm.results.records import ends_attempt, starts_attempt
from pytest_rocm.results.verdicts import Signature, failure_evidence, find_signature

PROBE_TIMEOUT_S = 300


@dataclass
class Attempt:
    failed: bool = False
    texts: list[str] = field(default_factory=list)
    devices: list[int] | None = None
    # a device fault poisoned the process it ran in: rerun only in a fresh process
    poisoned: bool = False
    # the test that ran just before it in its process (CUDA and HIP report a kernel's fault at a
    # later call: maybe this one's)
    predecessor: str | None = None
    # it used a server: rerun only on a fresh one (a fresh process starts its own), never the warm
    # one whose state may be what failed it
    on_server: bool = False


# a report property: this failure of a quarantined test is not the one it was quarantined for
# (results/fingerprint.py: quarantine_excuses), so it is rerun as a blocking gate is (the report then
# makes it block, results/report.py)
QUARANTINE_BREACHED_PROPERTY = "rocm_quarantine_breached"
# a report property: the servers the test used (plugin/hooks.py: note_servers)
SERVERS_PROPERTY = "rocm_servers"


def property_of(report, name: str) -> str | None:
    for key, value in getattr(report, "user_properties", ()):
        if key == name:
            return value
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


def run_probe(argv: list[str], devices: list[int], vendor: str) -> dict:
    """Run the health probe with `devices` visible; {"ok", "detail", "exit_code"}. Never raises."""
    env = dict(
        os.environ,
        PYTEST_ROCM_PROBE_DEVICES=",".join(map(str, devices)),
        **visible_devices_env(vendor, devices),
    )
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
            errors="replace",
            stdin=subprocess.DEVNULL,
        )
        output = (done.stdout + done.stderr).strip()
        ok, code = done.returncode == 0, done.returncode
        detail = output.splitlines()[-1] if output else f"exit code {code}"
    except subprocess.TimeoutExpired:
        ok, code, detail = False, None, f"the probe did not finish in {PROBE_TIMEOUT_S} s"
    except OSError as exc:
        ok, code, detail = False, None, f"the probe could not start: {exc}"
    return {"ok": ok, "devices": devices, "detail": detail[:300], "exit_code": code}


class RerunPlanner:
    def __init__(
        self,
        *,
        reruns: int,
        probe_argv: list[str],
        signatures: list[Signature],
        session_id: str,
        all_devices: list[int],
        vendor: str,
        write_probe: Callable[[str, dict], None],
        hand_over: Callable[[str], bool] = lambda nodeid: False,
        process_of: Callable[[object], str] = lambda report: "controller",
    ):
        self.reruns = reruns
        self.probe_argv = probe_argv
        self.signatures = signatures
        self.session_id = session_id
        self.all_devices = all_devices
        self.vendor = vendor
        self.write_probe = write_probe
        self.hand_over = hand_over
        self.current: dict[str, Attempt] = {}
        self.finished: dict[str, int] = defaultdict(int)  # attempts completed per test
        self.queue: list[str] = []  # reruns nothing could take yet: run after the main pass
        # reruns that only a fresh process may run (a failure on a server: it starts a fresh one),
        # even where the process that ran the pass runs queued reruns itself
        self.fresh_only: set[str] = set()
        self.awaiting: set[str] = set()  # handed to a live worker, not started yet
        self.process_of = process_of  # the process a report comes from
        # process -> (the test it started last, the one it started before that)
        self.started: dict[str, tuple[str, str | None]] = {}
        # a test whose device fault did not come back alone in a fresh process -> the test that ran
        # before it where it faulted: the two run again together, in that order (`take_pairs`)
        self.fault_after: dict[str, str] = {}
        self.pairs: list[tuple[str, str]] = []
        self.paired: set[str] = set()

    # -- reports --------------------------------------------------------------------------------
    def on_report(self, report) -> None:
        # Called for every phase of every test: only failures and attempt ends matter.
        if report.when == "setup":
            self._started(report.nodeid, self.process_of(report))
        fault = property_of(report, DEVICE_FAULT_PROPERTY) is not None
        # pytest-rerunfailures' `rerun`: an attempt it runs again in the same process, which a device
        # fault poisoned: that attempt's fresh rerun is ours to make
        failed = report.failed or (fault and report.outcome == "rerun")
        blocks = (
            property_of(report, "rocm_blocking") == "true"
            or property_of(report, QUARANTINE_BREACHED_PROPERTY) is not None
        )
        if failed and blocks:
            gpus = property_of(report, "rocm_gpus")
            self._note_failure(
                report.nodeid,
                [int(d) for d in gpus.split(",") if d] if gpus is not None else None,
                [failure_evidence(report.longreprtext), report.capstdout, report.capstderr],
                fault,  # the process that ran it decided (plugin/recording.py)
                self._predecessor(report.nodeid, self.process_of(report)),
                on_server=property_of(report, SERVERS_PROPERTY) is not None,
            )
        if report.when == "setup":
            self.awaiting.discard(report.nodeid)
        elif report.when == "teardown" and (
            property_of(report, "rocm_blocking") == "true" or report.nodeid in self.current
        ):
            self._attempt_done(report.nodeid, self.current.pop(report.nodeid, Attempt()))

    def on_record(self, record: dict) -> None:
        """A record from a rerun subprocess, read back after it ended: feeds the same decisions as a
        report."""
        if starts_attempt(record):
            self._started(record["nodeid"], record.get("worker") or "?")
        if not record.get("blocking"):
            return
        if record["outcome"] == "failed":
            self._note_failure(
                record["nodeid"],
                record.get("gpus"),
                [
                    failure_evidence(record.get("failure", "")),
                    record.get("stdout_tail", ""),
                    record.get("stderr_tail", ""),
                ],
                sticky_fault(record) is not None,
                self._predecessor(record["nodeid"], record.get("worker") or "?"),
                on_server=bool(record.get("servers")),
            )
        if ends_attempt(record):
            self._attempt_done(record["nodeid"], self.current.pop(record["nodeid"], Attempt()))

    def _started(self, nodeid: str, process: str) -> None:
        last = self.started.get(process)
        self.started[process] = (nodeid, last[0] if last else None)

    def _predecessor(self, nodeid: str, process: str) -> str | None:
        """The test `process` ran before `nodeid` (the one it runs now)."""
        now, before = self.started.get(process) or (None, None)
        return before if now == nodeid and before != nodeid else None

    def _note_failure(
        self,
        nodeid: str,
        devices: list[int] | None,
        texts: list[str],
        poisoned: bool,
        predecessor: str | None = None,
        on_server: bool = False,
    ) -> None:
        attempt = self.current.setdefault(nodeid, Attempt())
        attempt.failed = True
        attempt.poisoned = attempt.poisoned or poisoned
        attempt.on_server = attempt.on_server or on_server
        attempt.predecessor = attempt.predecessor or predecessor
        if devices is not None:
            attempt.devices = devices
        attempt.texts += texts

    def on_crash(
        self, nodeid: str, texts: list[str], devices: list[int] | None, blocking: bool
    ) -> None:
        self.current.pop(nodeid, None)
        self.awaiting.discard(nodeid)
        if blocking:
            self._attempt_done(nodeid, Attempt(failed=True, texts=texts, devices=devices))

    def _attempt_done(self, nodeid: str, attempt: Attempt) -> None:
        self.finished[nodeid] += 1
        if attempt.failed and attempt.poisoned and attempt.predecessor:
            self.fault_after.setdefault(nodeid, attempt.predecessor)
        if not attempt.failed:
            # a device fault that did not come back alone in a fresh process: with the test that
            # ran before it there, once (results/poisoning.py: async_culprit)
            before = self.fault_after.get(nodeid)
            if before is not None and nodeid not in self.paired:
                self.paired.add(nodeid)
                self.pairs.append((before, nodeid))
            return
        devices = attempt.devices if attempt.devices is not None else self.all_devices
        if find_signature(attempt.texts, self.signatures) is not None:
            self.probe(nodeid, devices)
        if self.finished[nodeid] > self.reruns:
            return
        if devices:
            write_avoid(self.session_id, nodeid, devices)
        # a device fault's rerun proves something only in a fresh process: never handed to a live
        # worker (it may be the poisoned one), queued for one (plugin/fresh.py); so does the rerun
        # of a failure on a server: a fresh process starts a fresh server, where a live worker's
        # is warm (its state may be what failed the test)
        if attempt.on_server:
            self.fresh_only.add(nodeid)
        if not attempt.poisoned and not attempt.on_server and self.hand_over(nodeid):
            self.awaiting.add(nodeid)
        else:
            self.queue.append(nodeid)

    def take_pairs(self) -> list[tuple[str, str]]:
        """(the test that ran before, the test whose device fault did not come back alone): each to
        run once more, together and in that order, in a fresh process."""
        pairs, self.pairs = self.pairs, []
        return pairs

    def leftovers(self) -> list[str]:
        """Reruns that no worker ran: still queued, or handed over and never started."""
        left = self.queue + sorted(self.awaiting - set(self.queue))
        self.queue, self.awaiting = [], set()
        return left

    # -- the health probe -----------------------------------------------------------------------
    def probe(self, nodeid: str, devices: list[int]) -> None:
        result = run_probe(self.probe_argv, devices, self.vendor)
        self.write_probe(
            nodeid,
            {
                **result,
                "command": " ".join(self.probe_argv),
                "after_attempt": self.finished[nodeid] - 1,
            },
        )
