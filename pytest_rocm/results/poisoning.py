"""A device fault poisons its process: which failures are such faults, and which attempts ran in a
process that one had poisoned before them.

On CUDA and on ROCm a kernel fault (a device-side assert, an illegal memory access, a launch
failure, a misaligned address, an illegal instruction) is sticky for the process: every later call
on the device in that process raises the same error, while a fresh process is fine (a real H100
showed it: docs/architecture.md, "A device fault poisons its process"). A failure that came after
such a fault in the same process says nothing about its own test, and only a rerun in a process no
fault had poisoned proves anything about the test that faulted.

The process that runs tests asks `sticky_fault` of each failure record it writes, and runs nothing
more once one answers; the report asks the same of the same records (`process_faults`,
`poisoned_before`), so `rocm-gate verdict` rebuilds the same verdicts, also from records of runs
that went on in a poisoned process. The wording is fixed here, not configurable: whether a runtime
error leaves the process unusable is a fact of CUDA and HIP, not a policy of the run.
"""

from __future__ import annotations

import re

from pytest_rocm.results.verdicts import DEVICE_FAULT, failure_evidence

_STICKY = re.compile(DEVICE_FAULT)
NAME = "device_fault"
# The report property of a failure whose device fault poisoned the process that ran it (that
# process decided, from the record it wrote): the controller replaces an xdist worker and reruns
# the test in a fresh process only.
DEVICE_FAULT_PROPERTY = "rocm_device_fault"


def sticky_fault(record: dict) -> dict | None:
    """{"name", "line"} when a record says its process's device context is poisoned: the error
    raised in the test's own process (the failure's `E` lines and its one-line message), not what it
    printed or what a server's log says (a fault in a server or a child process poisons that
    process, not this one). The process that wrote the record decided from the whole failure text
    and wrote it down (`device_fault`, on a failure, an xfail or a skip); a record without that field
    is read from its text (the head it keeps: a record written before the field existed). None for
    anything else, and for a crash (the process is gone)."""
    if record.get("crashed") or record.get("hang"):
        return None
    if isinstance(record.get("device_fault"), str):
        return {"name": NAME, "line": record["device_fault"]}
    if record.get("outcome") != "failed":
        return None
    for text in (record.get("message"), failure_evidence(record.get("failure") or "")):
        match = _STICKY.search(text) if isinstance(text, str) else None
        if match is not None:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start : end if end >= 0 else None]
            # pytest's `E   ` marks the line as the error's, which it is known to be here
            line = line[1:] if line.startswith("E ") else line
            return {"name": NAME, "line": line.strip()[:300]}
    return None


def process_of(attempt_records: list[dict]) -> str | None:
    """The process an attempt ran in: the worker that wrote its records (a crash record is written
    by the controller and names the worker that died)."""
    first = attempt_records[0]
    if first.get("crashed"):
        return first.get("crashed_worker") or first.get("worker")
    return first.get("worker")


def first_faults(records: list[dict]) -> dict[str, dict]:
    """process -> the first sticky fault in it, {"t", "nodeid", "process", "line"}: once poisoned,
    a process stays so. `records`: each process's in the order it wrote them (as `read_records`
    gives them; a process writes its own file only)."""
    faults: dict[str, dict] = {}
    for record in records:
        if "kind" in record or record.get("outcome") == "passed":
            continue
        process = record.get("worker")
        if not isinstance(process, str) or process in faults:
            continue
        fault = sticky_fault(record)
        if fault is not None:
            faults[process] = {
                "t": record.get("t", 0.0),
                "nodeid": record["nodeid"],
                "process": process,
                "line": fault["line"],
            }
    return faults


def poisoned_before(process: str | None, start: float, faults: dict[str, dict]) -> dict | None:
    """The fault that had poisoned `process` before an attempt that started at `start` (its first
    record's time): {"nodeid", "process", "line"}, or None where the process was clean then."""
    fault = faults.get(process or "")
    if fault is None or not fault["t"] < start:
        return None
    return {key: fault[key] for key in ("nodeid", "process", "line")}


def async_culprit(
    nodeid: str, tests: dict[str, dict], starts: dict[str, list[tuple[float, str]]]
) -> tuple[str, str, str] | None:
    """Whose device fault `nodeid` showed, when it is not its own: CUDA and HIP report a kernel's
    fault at a later call, so a test that launched a faulty kernel and ended without waiting for it
    passes, and the next test in its process fails. `nodeid` failed with a device fault in a clean
    process P right after test A there, then passed alone in a fresh process, and faulted again
    (A's attempt, or its own) in a fresh process where A ran just before it: A is the culprit. Returns
    (A, A's reason, `nodeid`'s reason), or None. `starts`: per process, (when, test) of each attempt
    it started, in order."""
    attempts = tests[nodeid]["attempts"]
    first = next((a for a in attempts if a.get("device_fault") and a["status"] != "passed"), None)
    if first is None or first.get("after_fault") or "started" not in first:
        return None
    process = first["worker"]
    before = [test for when, test in starts.get(process, ()) if when < first["started"]]
    culprit = before[-1] if before else None
    if culprit is None or culprit == nodeid or culprit not in tests:
        return None
    alone = next(
        (
            a
            for a in attempts
            if a["status"] == "passed"
            and (starts.get(a["worker"]) or [(None, None)])[0][1] == nodeid
        ),
        None,
    )
    for process_q, order in starts.items():
        if process_q == process or [test for _, test in order[:2]] != [culprit, nodeid]:
            continue
        again = [
            a
            for name in (culprit, nodeid)
            for a in tests[name]["attempts"]
            if a["worker"] == process_q and a.get("device_fault")
        ]
        if alone is not None and again:
            line = first["device_fault"]
            return (
                culprit,
                f"its kernel's device fault surfaced in the next test, {nodeid}, in {process} and "
                f"again in a fresh process ({process_q}) where it ran before it ({line!r}); {nodeid} "
                f"alone passed ({alone['worker']})",
                f"{line!r}: the fault is {culprit}'s, which ran before it: it came back after "
                f"{culprit} in a fresh process ({process_q}), never when this test ran alone "
                f"({alone['worker']}); CUDA and HIP report a kernel's fault at a later call",
            )
    return None
