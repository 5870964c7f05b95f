"""The gate report: per-test attempts, status and verdict from the records, per-group counts, the
conclusion.

Built from records alone, so rebuilding it from the same records gives the same
file (`rocm-gate verdict DIR`). A test may have several attempts (the
main pass and reruns); each attempt starts with a setup record, and a crash
record from the xdist controller ends the attempt its worker died in (with the
test's spec from the collection record where the worker wrote none).

Statuses (of an attempt, and of a test: its last attempt): passed, failed (the
test body failed), error (setup or teardown failed), crashed (the process
running it died), interrupted (the run stopped while it ran: never blamed on
the test), skipped (with reason), xfailed, xpassed, known_gap (declared ROCm gap,
with its issue), not_applicable (hardware requirement not met here).
Verdicts: see `pytest_rocm.results.verdicts`.

Completeness and the conclusion: see `pytest_rocm.results.conclusion`.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pytest_rocm.catalog.groups import UNGROUPED
from pytest_rocm.results.conclusion import STOPPED_EXIT, completeness, conclusion
from pytest_rocm.results.records import PLAIN_PASS, RUN_KINDS, phase_seconds, split_attempts
from pytest_rocm.results.verdicts import build_signatures, decide, failure_evidence, find_signature
from pytest_rocm.schemas.artifacts import schema

GATE_REPORT_SCHEMA = schema("gate-report")
STATUSES = (
    "passed",
    "failed",
    "error",
    "crashed",
    "interrupted",
    "skipped",
    "xfailed",
    "xpassed",
    "known_gap",
    "not_applicable",
)
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
    if PLAIN_PASS in phases:  # the call and the teardown, both passed
        call = teardown = phases[PLAIN_PASS]
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
) -> dict:
    """Attempts, final status, verdict and evidence of one test from its records (in time order)."""
    first = records[0]
    # most tests: one attempt, every phase passed (the call and teardown in one record, or three
    # phase records as in record/1)
    if (
        len(records) == 2
        and records[1]["when"] == PLAIN_PASS
        and first["when"] == "setup"
        and first["outcome"] == "passed"
        and "wasxfail" not in first
    ) or (
        len(records) == 3 and all(r["outcome"] == "passed" and "wasxfail" not in r for r in records)
    ):
        return _plain_pass(records)
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


def _plain_pass(records: list[dict]) -> dict:
    first = records[0]
    gpus = first.get("gpus")
    duration = round(sum(phase_seconds(records)), 6)
    return {
        "group": first.get("group"),
        "blocking": bool(first.get("blocking")),
        "gate": bool(first.get("gate")),
        "requires": first.get("requires"),
        "known_gap": first.get("known_gap"),
        "status": "passed",
        "detail": "",
        "message": "",
        "duration": duration,
        "worker": first.get("worker"),
        "attempts": [
            {"status": "passed", "worker": first.get("worker"), "gpus": gpus, "duration": duration}
        ],
        "probes": [],
        "verdict": "pass",
        "verdict_reason": "",
        **({"quarantine": first["quarantine"]} if "quarantine" in first else {}),
    }


def summarise(
    records: list[dict],
    group_of=None,
    signatures=None,
    run_ended: bool = True,
) -> dict[str, dict]:
    """nodeid -> test status, in the order tests first appear. `group_of(nodeid)` fills missing
    groups."""
    signatures = signatures if signatures is not None else build_signatures()
    by_test: dict[str, list[dict]] = defaultdict(list)
    probes: dict[str, list[dict]] = defaultdict(list)
    # stable: same-time records keep file order
    for record in sorted(records, key=lambda r: r.get("t", 0.0)):
        if record.get("kind") in RUN_KINDS:
            continue
        (probes if record.get("kind") == "probe" else by_test)[record["nodeid"]].append(record)
    tests = {}
    for nodeid, recs in by_test.items():
        tests[nodeid] = status_of_test(
            recs,
            [_probe_summary(p) for p in probes.get(nodeid, [])],
            signatures,
            run_ended,
        )
        if tests[nodeid]["group"] is None and group_of is not None:
            tests[nodeid]["group"] = group_of(nodeid)
    return tests


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


def frameworks_against_reference(records: list[dict]) -> list[dict]:
    """The live-reference golden measurements (each framework's greedy tokens against transformers'
    on the same prompts), the last attempt's of each test, in run order: the frameworks side by
    side."""
    rows: dict[tuple[str, str], dict] = {}
    for record in sorted(records, key=lambda r: r.get("t", 0.0)):
        for measured in record.get("measurements") or ():
            if measured.get("kind") == "golden" and measured.get("framework"):
                rows[(record["nodeid"], measured["metric"])] = {
                    "nodeid": record["nodeid"],
                    **measured,
                }
    return list(rows.values())


def build_gate_report(
    records: list[dict], manifest: dict, problems: list[str], group_of=None, signatures=None
) -> dict:
    signatures = signatures if signatures is not None else build_signatures()
    # one each (servers: the manifest)
    run_records = {r["kind"]: r for r in records if r.get("kind") in RUN_KINDS}
    session, preflight = run_records.get("session"), run_records.get("preflight")
    run_ended = session is not None and session.get("exitstatus") not in STOPPED_EXIT
    tests = summarise(records, group_of, signatures, run_ended)
    run = completeness(session, run_records.get("collection"), tests, signatures)
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
        "skip_reasons": [{"status": s, "reason": r, "count": n} for s, r, n in skip_reasons(tests)],
        "tests": tests,
        "frameworks_against_reference": frameworks_against_reference(records),
        "record_problems": problems,
        "manifest": manifest,
    }
