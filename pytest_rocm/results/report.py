"""The gate report: per-test attempts, status and verdict from the records, per-group counts, the
conclusion.

Built from records alone, so rebuilding it from the same records gives the same
file (`rocm-gate verdict DIR`; the controller writes it with `gate_report_json`).
A test may have several attempts (the main pass and reruns); each attempt starts
with a setup record (or is one record, a plain pass), and a crash record from
the xdist controller ends the attempt its worker died in (with the test's spec
from the collection record where the worker wrote none).

Statuses (of an attempt, and of a test: its last attempt): passed, failed (the
test body failed), error (setup or teardown failed), crashed (the process
running it died), interrupted (the run stopped while it ran: never blamed on
the test), skipped (with reason), xfailed, xpassed, known_gap (declared ROCm gap,
with its issue), not_applicable (hardware requirement not met here).
Verdicts: see `pytest_rocm.results.verdicts`.

Completeness and the conclusion: see `pytest_rocm.results.conclusion`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

from pytest_rocm.catalog.groups import UNGROUPED
from pytest_rocm.results.conclusion import STOPPED_EXIT, completeness, conclusion
from pytest_rocm.results.fingerprint import of_test as fingerprint_of
from pytest_rocm.results.fingerprint import quarantine_excuses
from pytest_rocm.results.poisoning import (
    async_culprit,
    first_faults,
    poisoned_before,
    process_of,
    sticky_fault,
)
from pytest_rocm.results.records import (
    CALL_TEARDOWN,
    PLAIN_PASS,
    RECORD_SCHEMA,
    RUN_KINDS,
    newer_formats,
    phase_seconds,
    split_attempts,
    starts_attempt,
)
from pytest_rocm.results.verdicts import build_signatures, decide, failure_evidence, find_signature
from pytest_rocm.schemas.artifacts import GATE_REPORT_SCHEMA, STATUSES

VERDICT_COLUMNS = ("regression", "unconfirmed", "infra", "flaky")
FAILED = {"failed", "error", "crashed"}


def attempt_status(
    records: list[dict], known_gap: dict | None, run_ended: bool = True
) -> tuple[str, str, str]:
    """(status, detail, one-line message) of one attempt. `run_ended`: the run reached its end
    normally, so an attempt without an end died with its process (crashed), not with the run
    (interrupted)."""
    crash = next((r for r in records if r.get("crashed")), None)
    phases = {r["when"]: r for r in records if not r.get("crashed")}
    call, setup, teardown = phases.get("call"), phases.get("setup"), phases.get("teardown")
    if PLAIN_PASS in phases:  # setup, call and teardown, each passed
        setup = call = teardown = phases[PLAIN_PASS]
    elif CALL_TEARDOWN in phases:  # record/2: the call and the teardown, both passed
        call = teardown = phases[CALL_TEARDOWN]
    failed = [r for r in phases.values() if r["outcome"] == "failed"]
    if crash is not None:
        detail = crash.get("failure") or "the worker running this test died"
        return "crashed", detail, detail
    if call is not None and call["outcome"] == "failed":
        return "failed", call.get("failure", ""), call.get("message", "")
    if failed:
        return (
            "error",
            f"{failed[0]['when']} failed: {failed[0].get('failure', '')}",
            f"{failed[0]['when']} failed: {failed[0].get('message', '')}",
        )
    if call is not None and call.get("wasxfail") is not None:
        if call["outcome"] == "passed":
            detail = call["wasxfail"] or ""
            return (
                "xpassed",
                f"known gap now passes, remove its marker: {detail}" if known_gap else detail,
                "",
            )
        if known_gap:
            return "known_gap", f"{known_gap['reason']} ({known_gap['issue']})", ""
        return "xfailed", call["wasxfail"] or "", ""
    if setup is not None and setup["outcome"] == "skipped":
        if setup.get("not_applicable"):
            return "not_applicable", setup["not_applicable"], ""
        if known_gap:
            return "known_gap", f"{known_gap['reason']} ({known_gap['issue']})", ""
        return "skipped", setup.get("skip_reason", ""), ""
    if call is not None and call["outcome"] == "skipped":
        return "skipped", call.get("skip_reason", ""), ""
    if call is not None and teardown is not None:
        return "passed", "", ""
    seen = ", ".join(sorted(phases)) or "nothing"
    if not run_ended:
        return "interrupted", f"the run stopped while this test ran (recorded phases: {seen})", ""
    detail = f"the process died during the test (recorded phases: {seen})"
    return "crashed", detail, detail


def evidence_texts(records: list[dict]) -> list[str]:
    """Where infrastructure signatures are looked for: what failed, and what the test and its
    servers printed."""
    texts = []
    for record in records:
        failure = record.get("failure", "")
        texts.append(
            failure if record.get("crashed") or record.get("hang") else failure_evidence(failure)
        )
        # pytest's one-line summary is the last exception of a chain; the failure's text is kept
        # from its head (FAILURE_HEAD_CHARS), so a long chain (huggingface_hub's, over httpx's)
        # loses it there
        message = record.get("message", "")
        if message and isinstance(message, str) and message not in failure:
            texts.append(message)
        texts += [record.get(key, "") for key in ("stdout_tail", "stderr_tail", "log_tail")]
    return [t for t in texts if t]


def status_of_test(
    records: list[dict],
    probes: list[dict],
    signatures,
    run_ended: bool = True,
    faults: dict[str, dict] | None = None,
) -> dict:
    """Attempts, final status, verdict and evidence of one test from its records (in time order).
    `faults`: the first device fault of each process of the run (`poisoning.first_faults`), so an
    attempt that failed in a process one had poisoned before it is told apart."""
    first = records[0]
    plain = _one_plain_attempt(records)
    if plain is not None:
        return plain
    known_gap = next((r["known_gap"] for r in records if r.get("known_gap")), None)
    result = {
        "group": next((r.get("group") for r in records if r.get("group")), None),
        "blocking": any(r.get("blocking") for r in records),
        "gate": any(r.get("gate") for r in records),
        "requires": first.get("requires"),
        "known_gap": known_gap,
    }
    quarantine = next((r["quarantine"] for r in records if r.get("quarantine")), None)
    if quarantine:
        result["quarantine"] = quarantine
    attempts = []
    for attempt_records in split_attempts(records):
        status, detail, message = attempt_status(attempt_records, known_gap, run_ended)
        gpus = next((r["gpus"] for r in attempt_records if r.get("gpus") is not None), None)
        attempt = {
            "status": status,
            "worker": attempt_records[0].get("worker"),
            "gpus": gpus,
            "duration": round(sum(phase_seconds(attempt_records)), 6),
        }
        attempt["started"] = attempt_records[0].get("t", 0.0)
        servers = next((r["servers"] for r in attempt_records if r.get("servers")), None)
        if servers:
            attempt["servers"] = servers
        fault = next((f for r in attempt_records if (f := sticky_fault(r))), None)
        if fault is not None:
            attempt["device_fault"] = fault["line"]
        if status in FAILED:
            attempt["signature"] = find_signature(evidence_texts(attempt_records), signatures)
            attempt["message"] = message
            attempt["phase"] = next(
                (r["when"] for r in attempt_records if r["outcome"] == "failed"), "call"
            )
            exit_code = next(
                (r["exit_code"] for r in attempt_records if r.get("exit_code") is not None), None
            )
            if exit_code is not None:
                attempt["exit_code"] = exit_code
            after = poisoned_before(
                process_of(attempt_records), attempt_records[0].get("t", 0.0), faults or {}
            )
            if after is not None:
                attempt["after_fault"] = after
        attempts.append((attempt, detail))
    final, detail = attempts[-1]
    result.update(
        status=final["status"],
        detail=detail,
        message=final.get("message", ""),
        duration=round(sum(a["duration"] for a, _ in attempts), 6),
        worker=final["worker"],
        attempts=[a for a, _ in attempts],
        probes=probes,
    )
    first_status = attempts[0][0]["status"]
    if first_status == "interrupted":
        result["verdict"], result["verdict_reason"] = "interrupted", detail
    elif first_status in FAILED:
        result["verdict"], result["verdict_reason"] = decide([a for a, _ in attempts], probes)
        first_failure = attempts[0]
        result["message"] = first_failure[0].get("message", "")
        result["detail"] = first_failure[1] if result["verdict"] != "flaky" else detail
    else:
        result["verdict"] = {
            "passed": "pass",
            "xpassed": "pass",
            "known_gap": "known_gap",
            "skipped": "skipped",
            "xfailed": "skipped",
            "not_applicable": "not_applicable",
        }[first_status]
        result["verdict_reason"] = ""
    return result


def _one_plain_attempt(records: list[dict]) -> dict | None:
    """Most tests: one attempt, every phase passed (one record; as record/2 wrote it, a setup and
    the call and teardown in one; as record/1, or with a server named, three phase records): its
    entry; None for any other test."""
    first = records[0]
    if len(records) == 1:
        if first["when"] == PLAIN_PASS:
            return _plain_pass(first, round(sum(first["durations"]), 6))
    elif (
        len(records) == 2
        and records[1]["when"] == CALL_TEARDOWN
        and first["when"] == "setup"
        and first["outcome"] == "passed"
        and "wasxfail" not in first
    ) or (
        len(records) == 3
        and [r["when"] for r in records] == ["setup", "call", "teardown"]
        and all(r["outcome"] == "passed" and "wasxfail" not in r for r in records)
    ):
        entry = _plain_pass(first, round(sum(phase_seconds(records)), 6))
        if records[1].get("servers"):  # the server it passed on (a rerun's: fresh or warm)
            entry["attempts"][0]["servers"] = records[1]["servers"]
        return entry
    return None


def _plain_pass(first: dict, duration: float) -> dict:
    """A test whose one attempt passed every phase, from its first record (every record of a test
    carries its spec). `duration`: its phases' seconds summed in order, as `phase_seconds` gives
    them (a `setup+call+teardown` record's `durations`: the same float)."""
    worker = first.get("worker")
    entry = {
        "group": first.get("group"),
        "blocking": bool(first.get("blocking")),
        "gate": bool(first.get("gate")),
        "requires": first.get("requires"),
        "known_gap": first.get("known_gap"),
        "status": "passed",
        "detail": "",
        "message": "",
        "duration": duration,
        "worker": worker,
        "attempts": [
            {"status": "passed", "worker": worker, "gpus": first.get("gpus"), "duration": duration}
        ],
        "probes": [],
        "verdict": "pass",
        "verdict_reason": "",
    }
    if "quarantine" in first:
        entry["quarantine"] = first["quarantine"]
    return entry


def summarise(
    records: list[dict],
    group_of=None,
    signatures=None,
    run_ended: bool = True,
    faults: dict[str, dict] | None = None,
) -> dict[str, dict]:
    """nodeid -> test status, in the order tests first appear. `group_of(nodeid)` fills missing
    groups; `faults`: each process's first device fault (`poisoning.first_faults`), found here
    where not given."""
    signatures = signatures if signatures is not None else build_signatures()
    by_test: dict[str, list[dict]] = defaultdict(list)
    probes: dict[str, list[dict]] = defaultdict(list)
    # stable: same-time records keep file order
    ordered = sorted(records, key=_time)
    # process -> (when, test) of each attempt it started, in order: what ran before what
    starts: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for record in ordered:
        kind = record.get("kind")
        if kind is None:
            by_test[record["nodeid"]].append(record)
            if starts_attempt(record):
                starts[record.get("worker") or "?"].append((record.get("t", 0.0), record["nodeid"]))
        elif kind == "probe":
            probes[record["nodeid"]].append(record)
    if faults is None:
        faults = first_faults(ordered)
    tests = {}
    for nodeid, recs in by_test.items():
        first = recs[0]
        if len(recs) == 1 and first["when"] == PLAIN_PASS:  # most tests (`status_of_test`)
            test = _plain_pass(first, round(sum(first["durations"]), 6))
        else:
            test = status_of_test(
                recs,
                [_probe_summary(p) for p in probes[nodeid]] if nodeid in probes else [],
                signatures,
                run_ended,
                faults,
            )
        if test["group"] is None and group_of is not None:
            test["group"] = group_of(nodeid)
        tests[nodeid] = test
    _blame_async_faults(tests, starts)
    for nodeid, test in tests.items():
        tests[nodeid] = _quarantine_kept(test)
    return tests


def _quarantine_kept(test: dict) -> dict:
    """A quarantined test that failed another way than it was quarantined for blocks as it would
    have (results/fingerprint.py: quarantine_excuses): the quarantine excuses main's known failure, not
    a new one of the same test."""
    held = test.get("quarantine")
    if (
        not held
        or test["verdict"] not in ("regression", "unconfirmed")
        or quarantine_excuses(held, fingerprint_of(test))
    ):
        return test
    return {
        **test,
        "blocking": bool(held.get("blocks")),
        "quarantine": {**held, "excused": False},
        "verdict_reason": (
            f"{test['verdict_reason']}; quarantined for another failure, so it blocks"
        ).lstrip("; "),
    }


def _blame_async_faults(tests: dict[str, dict], starts: dict[str, list]) -> None:
    """A device fault reported at a test's first call may be the test's before it (CUDA and HIP
    report a kernel's fault at a later call): where it came back only with that test before it
    (`poisoning.async_culprit`), that one regressed, and the test that showed it is collateral."""
    for nodeid, test in list(tests.items()):
        if test["verdict"] != "infra" or not any(a.get("device_fault") for a in test["attempts"]):
            continue
        found = async_culprit(nodeid, tests, starts)
        if found is None:
            continue
        culprit, why_culprit, why_collateral = found
        test["verdict_reason"] = why_collateral
        tests[culprit] = {
            **tests[culprit],
            "verdict": "regression",
            "verdict_reason": why_culprit,
        }


def _time(record: dict) -> float:
    return record.get("t", 0.0)


def _probe_summary(record: dict) -> dict:
    return {
        k: record.get(k)
        for k in ("ok", "devices", "detail", "exit_code", "command", "after_attempt")
    }


def group_counts(tests: dict[str, dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for test in tests.values():
        group = counts[test["group"] or UNGROUPED]
        group[test["status"]] += 1
        if test["verdict"] in VERDICT_COLUMNS:
            group[test["verdict"]] += 1
    return {
        group: {s: c[s] for s in STATUSES + VERDICT_COLUMNS}
        | {"total": sum(c[s] for s in STATUSES)}
        for group, c in sorted(counts.items())
    }


def skip_reasons(tests: dict[str, dict]) -> list[tuple[str, str, int]]:
    """(status, reason, count) for every test that did not run, most common first."""
    reasons = Counter(
        (t["status"], t["detail"])
        for t in tests.values()
        if t["status"] in ("skipped", "known_gap", "not_applicable", "xfailed")
    )
    return [(status, reason, n) for (status, reason), n in reasons.most_common()]


def skipped_modules(collection: dict | None) -> list[dict]:
    """The modules pytest skipped whole while collecting them (`pytest.importorskip`, a module-level
    `pytest.skip`): their tests were never collected, so they are not counted (count 0), but the
    reason is said."""
    found = (collection or {}).get("skipped_modules")
    return [
        {
            "status": "skipped",
            "reason": f"{entry['nodeid']}: {entry['reason']} (the whole module, at collection: "
            "its tests are not counted)",
            "count": 0,
        }
        for entry in (found if isinstance(found, list) else [])
        if isinstance(entry, dict)
        and isinstance(entry.get("nodeid"), str)
        and isinstance(entry.get("reason"), str)
    ]


def device_faults(faults: dict[str, dict], records: list[dict]) -> list[dict]:
    """The processes a device fault poisoned, in time order: which test faulted, its error, and the
    tests the process then did not run (its `deferred` records: each ran in a fresh process, or
    never)."""
    if not faults:
        return []
    moved: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.get("kind") == "deferred" and record.get("worker") in faults:
            moved[record["worker"]].append(record["nodeid"])
    return [
        {
            "process": process,
            "nodeid": fault["nodeid"],
            "line": fault["line"],
            "moved": moved.get(process, []),
        }
        for process, fault in sorted(faults.items(), key=lambda item: item[1]["t"])
    ]


def frameworks_against_reference(records: list[dict]) -> list[dict]:
    """The live-reference golden measurements (each framework's greedy tokens against transformers'
    on the same prompts), the last attempt's of each test, in run order: the frameworks side by
    side."""
    rows: dict[tuple[str, str], dict] = {}
    for record in sorted((r for r in records if r.get("measurements")), key=_time):
        for measured in record["measurements"]:
            if measured.get("kind") == "golden" and measured.get("framework"):
                rows[(record["nodeid"], measured["metric"])] = {
                    "nodeid": record["nodeid"],
                    **measured,
                }
    return list(rows.values())


def build_gate_report(
    records: list[dict],
    manifest: dict,
    problems: list[str],
    group_of=None,
    signatures=None,
    disk_full: tuple[str, ...] | list[str] = (),
) -> dict:
    """The gate report of a run's records. `disk_full`: what a full disk kept from the records
    (plugin/controller.py) that the end-of-run record could not say."""
    signatures = signatures if signatures is not None else build_signatures()
    # one each (servers: the manifest)
    run_records = {r["kind"]: r for r in records if r.get("kind") in RUN_KINDS}
    session, preflight = run_records.get("session"), run_records.get("preflight")
    # a session pytest stopped (-x, --maxfail, pytest.exit()) ended the test it stopped in too
    run_ended = (
        session is not None
        and session.get("exitstatus") not in STOPPED_EXIT
        and not session.get("stopped")
    )
    faults = first_faults(records)
    tests = summarise(records, group_of, signatures, run_ended, faults)
    poisoned = device_faults(faults, records)
    run = completeness(
        session,
        run_records.get("collection"),
        tests,
        signatures,
        list(dict.fromkeys(n for fault in poisoned for n in fault["moved"] if n not in tests)),
    )
    _records_lost(run, session, problems, disk_full)
    verdict, why = conclusion(tests, run, manifest.get("runner"), preflight)
    return {
        "schema": GATE_REPORT_SCHEMA,
        "conclusion": verdict,
        "conclusion_reason": why,
        **run,
        "preflight": {k: preflight.get(k) for k in ("ok", "devices", "detail", "command")}
        if preflight
        else None,
        "groups": group_counts(tests),
        "skip_reasons": [{"status": s, "reason": r, "count": n} for s, r, n in skip_reasons(tests)]
        + skipped_modules(run_records.get("collection")),
        "tests": tests,
        "device_faults": poisoned,
        "frameworks_against_reference": frameworks_against_reference(records),
        "record_problems": problems,
        "manifest": manifest,
    }


# how results/conclusion.py names a run with no end-of-run record (the controller killed)
_NO_SESSION = "the run did not finish: no end-of-run record"


def _records_lost(run: dict, session: dict | None, problems: list[str], disk_full) -> None:
    """Records the run wrote that are not here make it incomplete, named: records of a newer format
    than this reads (their version named, never taken for a killed controller: its end-of-run
    record is one of them), and records a full disk kept from the folder (the end-of-run record's
    `report_dir_full`, and `disk_full`: what the controller knows of that it could not write)."""
    causes = []
    newer = newer_formats(problems)
    if newer:
        causes.append(
            f"records of a newer format ({', '.join(newer)}) than this pytest-rocm reads (up to "
            f"{RECORD_SCHEMA}) were left out: rebuild the verdict with the pytest-rocm that wrote "
            "them, or a newer one"
        )
        if session is None:
            run["incomplete_causes"] = [
                c for c in run["incomplete_causes"] if not c.startswith(_NO_SESSION)
            ]
    said = (session or {}).get("report_dir_full")
    full = [*(said if isinstance(said, list) else [said] if said else []), *disk_full]
    if full:
        causes.append(
            "the report folder ran out of space, so records of the run are missing (an "
            "infrastructure fault, not the change's): "
            + "; ".join(dict.fromkeys(str(f) for f in full))
            + "; free space there, or give --rocm-report-dir a folder on a larger disk"
        )
    if causes:
        run["incomplete_causes"] = causes + run["incomplete_causes"]
        run["complete"] = False


def gate_report_json(report: dict) -> str:
    """`report` as JSON, as `write_json_atomic` writes it (`rocm-gate verdict` rebuilds the same
    bytes)."""
    return json.dumps(report, ensure_ascii=False, separators=(",", ":"))
