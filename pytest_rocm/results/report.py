"""The gate report: per-test attempts, status and verdict from the records, per-group counts, the conclusion.

Built from records alone, so rebuilding it from the same records gives the same
file (`rocm-gate verdict --records DIR`). A test may have several attempts (the
main pass and reruns); each attempt starts with a setup record, and a crash
record from the xdist controller ends the attempt its worker died in.

Statuses (of an attempt, and of a test: its last attempt): passed, failed (the
test body failed), error (setup or teardown failed), crashed (the process
running it died), interrupted (the run stopped while it ran: never blamed on
the test), skipped (with reason), xfailed, xpassed, known_gap (declared ROCm gap,
with its issue), not_applicable (hardware requirement not met here).
Verdicts: see `pytest_rocm.results.verdicts`.

Completeness: the controller ends its records with a `session` record (exit
status, why it stopped, collection errors, what was collected). A run without
it (the controller was killed), stopped early (-x, --maxfail, Ctrl-C, an
INTERNALERROR), with collection errors, or with collected gates that never ran
is incomplete: `complete: false`, the causes, and the gates that never ran.

Conclusions (README "Conclusions", DESIGN section 3), first that applies:
- failure: a blocking gate regressed (confirmed), a blocking gate failed and was
  never rerun without an infrastructure signature, or a test file failed to
  collect for a reason of its own (a syntax error reproduces: the change broke it);
- incomplete: the run did not execute what it collected (see above);
- neutral: a blocking gate hit an infrastructure fault (evidence attached, reruns
  exhausted), or the health probe failed before any test ran;
- skipped: the run finished and no blocking gate executed (none collected, or all
  not applicable / known gaps here);
- success: blocking gates ran and none regressed.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from pytest_rocm.catalog.groups import UNGROUPED
from pytest_rocm.results.verdicts import build_signatures, decide, failure_evidence, find_signature
from pytest_rocm.schemas.artifacts import schema

GATE_REPORT_SCHEMA = schema("gate-report")
STATUSES = ("passed", "failed", "error", "crashed", "interrupted", "skipped", "xfailed", "xpassed", "known_gap",
            "not_applicable")
VERDICT_COLUMNS = ("regression", "unconfirmed", "infra", "flaky")
CONCLUSIONS = ("success", "neutral", "failure", "incomplete", "skipped")
EXECUTED = {"passed", "failed", "error", "crashed", "xpassed"}
FAILED = {"failed", "error", "crashed"}
RUN_KINDS = ("server", "collection", "session", "preflight")  # records about the run, not one test's phases
# pytest's exit statuses of a run that stopped before its end: interrupted, internal error.
STOPPED_EXIT = {2: "interrupted (Ctrl-C, or pytest stopped the session)", 3: "INTERNALERROR"}
# A collection error caused by the runner, not by the change: an import of a package not installed here.
_MISSING_PACKAGE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '?([\w.]+)")


def split_attempts(records: list[dict]) -> list[list[dict]]:
    """Phase records of one test (in time order) into attempts: a setup starts one, a crash ends one."""
    attempts: list[list[dict]] = []
    current: list[dict] | None = None
    for record in records:
        if record.get("crashed"):
            if current is None:
                attempts.append([record])  # the worker died before it wrote anything for this attempt
            else:
                current.append(record)
            current = None
        elif record["when"] == "setup" or current is None:
            current = [record]
            attempts.append(current)
        else:
            current.append(record)
    return attempts


def attempt_status(records: list[dict], known_gap: dict | None, run_ended: bool = True) -> tuple[str, str, str]:
    """(status, detail, one-line message) of one attempt. `run_ended`: the run reached its end normally, so an
    attempt without an end died with its process (crashed), not with the run (interrupted)."""
    crash = next((r for r in records if r.get("crashed")), None)
    phases = {r["when"]: r for r in records if not r.get("crashed")}
    call, setup, teardown = phases.get("call"), phases.get("setup"), phases.get("teardown")
    failed = [r for r in phases.values() if r["outcome"] == "failed"]
    if crash is not None:
        detail = crash.get("failure") or "the worker running this test died"
        return "crashed", detail, detail
    if call is not None and call["outcome"] == "failed":
        return "failed", call.get("failure", ""), call.get("message", "")
    if failed:
        return ("error", f"{failed[0]['when']} failed: {failed[0].get('failure', '')}",
                f"{failed[0]['when']} failed: {failed[0].get('message', '')}")
    if call is not None and call.get("wasxfail") is not None:
        if call["outcome"] == "passed":
            detail = call["wasxfail"] or ""
            return "xpassed", f"known gap now passes, remove its marker: {detail}" if known_gap else detail, ""
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
    """Where infrastructure signatures are looked for: what failed, and what the test and its servers printed."""
    texts = []
    for record in records:
        failure = record.get("failure", "")
        texts.append(failure if record.get("crashed") or record.get("hang") else failure_evidence(failure))
        texts += [record.get(key, "") for key in ("stdout_tail", "stderr_tail", "log_tail")]
    return [t for t in texts if t]


def status_of_test(records: list[dict], probes: list[dict], signatures, run_ended: bool = True) -> dict:
    """Attempts, final status, verdict and evidence of one test from its records (in time order)."""
    first = records[0]
    if len(records) == 3 and all(r["outcome"] == "passed" and "wasxfail" not in r for r in records):
        return _plain_pass(records)  # most tests: one attempt, every phase passed
    known_gap = next((r["known_gap"] for r in records if r.get("known_gap")), None)
    result = {
        "group": next((r.get("group") for r in records if r.get("group")), None),
        "blocking": any(r.get("blocking") for r in records),
        "gate": any(r.get("gate") for r in records),
        "requires": first.get("requires"),
        "known_gap": known_gap,
    }
    attempts = []
    for attempt_records in split_attempts(records):
        status, detail, message = attempt_status(attempt_records, known_gap, run_ended)
        gpus = next((r["gpus"] for r in attempt_records if r.get("gpus") is not None), None)
        attempt = {"status": status, "worker": attempt_records[0].get("worker"), "gpus": gpus,
                   "duration": round(sum(r.get("duration", 0.0) for r in attempt_records), 6)}
        if status in FAILED:
            attempt["signature"] = find_signature(evidence_texts(attempt_records), signatures)
            attempt["message"] = message
            attempt["phase"] = next((r["when"] for r in attempt_records if r["outcome"] == "failed"), "call")
            exit_code = next((r["exit_code"] for r in attempt_records if r.get("exit_code") is not None), None)
            if exit_code is not None:
                attempt["exit_code"] = exit_code
        attempts.append((attempt, detail))
    final, detail = attempts[-1]
    result.update(status=final["status"], detail=detail, message=final.get("message", ""),
                  duration=round(sum(a["duration"] for a, _ in attempts), 6), worker=final["worker"],
                  attempts=[a for a, _ in attempts], probes=probes)
    first_status = attempts[0][0]["status"]
    if first_status == "interrupted":
        result["verdict"], result["verdict_reason"] = "interrupted", detail
    elif first_status in FAILED:
        result["verdict"], result["verdict_reason"] = decide([a for a, _ in attempts], probes)
        first_failure = attempts[0]
        result["message"] = first_failure[0].get("message", "")
        result["detail"] = first_failure[1] if result["verdict"] != "flaky" else detail
    else:
        result["verdict"] = {"passed": "pass", "xpassed": "pass", "known_gap": "known_gap", "skipped": "skipped",
                             "xfailed": "skipped", "not_applicable": "not_applicable"}[first_status]
        result["verdict_reason"] = ""
    return result


def _plain_pass(records: list[dict]) -> dict:
    first = records[0]
    gpus = first.get("gpus")
    duration = round(sum(r.get("duration", 0.0) for r in records), 6)
    return {"group": first.get("group"), "blocking": bool(first.get("blocking")), "gate": bool(first.get("gate")),
            "requires": first.get("requires"), "known_gap": first.get("known_gap"), "status": "passed", "detail": "",
            "message": "", "duration": duration, "worker": first.get("worker"),
            "attempts": [{"status": "passed", "worker": first.get("worker"), "gpus": gpus, "duration": duration}],
            "probes": [], "verdict": "pass", "verdict_reason": ""}


def summarise(records: list[dict], group_of=None, signatures=None, run_ended: bool = True) -> dict[str, dict]:
    """nodeid -> test status, in the order tests first appear. `group_of(nodeid)` fills missing groups."""
    signatures = signatures if signatures is not None else build_signatures()
    by_test: dict[str, list[dict]] = defaultdict(list)
    probes: dict[str, list[dict]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.get("t", 0.0)):  # stable: same-time records keep file order
        if record.get("kind") in RUN_KINDS:
            continue
        (probes if record.get("kind") == "probe" else by_test)[record["nodeid"]].append(record)
    tests = {}
    for nodeid, recs in by_test.items():
        tests[nodeid] = status_of_test(recs, [_probe_summary(p) for p in probes.get(nodeid, [])], signatures,
                                       run_ended)
        if tests[nodeid]["group"] is None and group_of is not None:
            tests[nodeid]["group"] = group_of(nodeid)
    return tests


def _probe_summary(record: dict) -> dict:
    return {k: record.get(k) for k in ("ok", "devices", "detail", "exit_code", "command", "after_attempt")}


def group_counts(tests: dict[str, dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for test in tests.values():
        group = counts[test["group"] or UNGROUPED]
        group[test["status"]] += 1
        if test["verdict"] in VERDICT_COLUMNS:
            group[test["verdict"]] += 1
    return {group: {s: c[s] for s in STATUSES + VERDICT_COLUMNS} | {"total": sum(c[s] for s in STATUSES)}
            for group, c in sorted(counts.items())}


def skip_reasons(tests: dict[str, dict]) -> list[tuple[str, str, int]]:
    """(status, reason, count) for every test that did not run, most common first."""
    reasons = Counter((t["status"], t["detail"]) for t in tests.values()
                      if t["status"] in ("skipped", "known_gap", "not_applicable", "xfailed"))
    return [(status, reason, n) for (status, reason), n in reasons.most_common()]


def completeness(records: list[dict], tests: dict[str, dict], signatures) -> dict:
    """Whether the run executed what it collected: causes, collection errors, and the gates that never ran."""
    session = next((r for r in reversed(records) if r.get("kind") == "session"), None)
    collection = next((r for r in records if r.get("kind") == "collection"), None)
    causes: list[str] = []
    errors = []
    if session is None:
        causes.append("the run did not finish: no end-of-run record (the controller was killed, or the run is "
                      "still going)")
    else:
        exit_status = session.get("exitstatus")
        if exit_status in STOPPED_EXIT and not session.get("collection_errors"):
            causes.append(f"pytest stopped: {STOPPED_EXIT[exit_status]}")
        if session.get("stopped"):
            causes.append(f"pytest stopped early: {session['stopped']}")
        for error in session.get("collection_errors") or []:
            cause = collection_error_cause(error.get("text", ""), signatures)
            errors.append({"nodeid": error.get("nodeid"), "cause": cause["kind"], "detail": cause["detail"]})
        if errors:
            causes.append(f"{len(errors)} collection error(s): " + "; ".join(
                f"{e['nodeid']} ({e['cause']}: {e['detail']})" for e in errors[:5]))
    specs = (collection or {}).get("specs") or {}
    never_ran = sorted(n for n, spec in specs.items() if (spec.get("gate") or spec.get("blocking"))
                       and (n not in tests or tests[n]["status"] == "interrupted"))
    if never_ran:
        causes.append(f"{len(never_ran)} gate(s) collected but never ran to the end")
    interrupted = sorted(n for n, t in tests.items() if t["status"] == "interrupted")
    if interrupted and not never_ran:
        causes.append(f"{len(interrupted)} test(s) interrupted")
    return {"complete": not causes, "incomplete_causes": causes, "collection_errors": errors,
            "never_ran": never_ran, "collected": (collection or {}).get("tests")}


def collection_error_cause(text: str, signatures) -> dict:
    """Why a file failed to collect: `infra` (an infrastructure signature, or a package this runner lacks)
    or `change` (anything else: a syntax error, a bad marker, an import of the project's own code that
    broke, which reproduces on any runner)."""
    signature = find_signature([text], signatures)
    if signature is not None:
        return {"kind": "infra", "detail": f"{signature['name']}: {signature['line']}"}
    missing = _MISSING_PACKAGE.search(text)
    if missing:
        return {"kind": "infra", "detail": f"package {missing.group(1)!r} is not installed on this runner"}
    lines = [line for line in text.strip().splitlines() if line.startswith("E ")] or text.strip().splitlines()
    return {"kind": "change", "detail": (lines[-1] if lines else "no detail").removeprefix("E").strip()[:300]}


def conclusion(tests: dict[str, dict], run: dict, runner: str | None = None,
               preflight: dict | None = None) -> tuple[str, str]:
    """The run's conclusion and why (the rules are in this module's docstring)."""
    blocking = {nodeid: t for nodeid, t in tests.items() if t["blocking"]}
    regressions = sorted(n for n, t in blocking.items() if t["verdict"] == "regression")
    unconfirmed = sorted(n for n, t in blocking.items() if t["verdict"] == "unconfirmed")
    unconfirmed_plain = [n for n in unconfirmed if not _signature_of(blocking[n])]
    broken_files = [e for e in run["collection_errors"] if e["cause"] == "change"]
    infra = sorted(n for n, t in blocking.items() if t["verdict"] == "infra") + \
        [n for n in unconfirmed if n not in unconfirmed_plain]
    executed = [n for n, t in blocking.items() if t["attempts"][0]["status"] in EXECUTED]
    if regressions or unconfirmed_plain or broken_files:
        parts = []
        if regressions:
            parts.append(f"{len(regressions)} blocking gate(s) regressed: {', '.join(regressions[:10])}")
        if unconfirmed_plain:
            parts.append(f"{len(unconfirmed_plain)} blocking gate(s) failed and were not rerun: "
                         f"{', '.join(unconfirmed_plain[:10])}")
        if broken_files:
            parts.append(f"{len(broken_files)} test file(s) failed to collect (a defect of the change: it "
                         f"reproduces): " + "; ".join(f"{e['nodeid']}: {e['detail']}" for e in broken_files[:5]))
        return "failure", "; ".join(parts)
    if not run["complete"]:
        return "incomplete", "the run did not execute what it collected: " + "; ".join(run["incomplete_causes"])
    if infra or (preflight is not None and not preflight.get("ok")):
        where = f" on runner {runner}" if runner else ""
        if not infra:
            return "neutral", (f"the health probe failed{where} before any test ran on devices "
                               f"{','.join(map(str, preflight.get('devices', [])))} ({preflight.get('detail')}); "
                               "rerun on another runner")
        devices = sorted({str(d) for n in infra for a in blocking[n]["attempts"] for d in (a.get("gpus") or [])})
        on = f" (devices {','.join(devices)})" if devices else ""
        return "neutral", (f"{len(infra)} blocking gate(s) hit infrastructure faults{where}{on}; "
                           f"rerun them on another runner: {', '.join(infra[:10])}")
    if not executed:
        return "skipped", "no blocking gate ran on this runner (none collected, or none applicable here)"
    flaky = [n for n, t in blocking.items() if t["verdict"] == "flaky"]
    note = f" ({len(flaky)} flaky, reported)" if flaky else ""
    return "success", f"{len(executed)} blocking gate(s) ran, none regressed{note}"


def _signature_of(test: dict) -> dict | None:
    return next((a["signature"] for a in test["attempts"] if a.get("signature")), None)


def build_gate_report(records: list[dict], manifest: dict, problems: list[str], group_of=None,
                      signatures=None) -> dict:
    signatures = signatures if signatures is not None else build_signatures()
    session = next((r for r in records if r.get("kind") == "session"), None)
    run_ended = session is not None and session.get("exitstatus") not in STOPPED_EXIT
    tests = summarise(records, group_of, signatures, run_ended)
    run = completeness(records, tests, signatures)
    preflight = next((r for r in records if r.get("kind") == "preflight"), None)
    verdict, why = conclusion(tests, run, manifest.get("runner"), preflight)
    return {
        "schema": GATE_REPORT_SCHEMA,
        "conclusion": verdict,
        "conclusion_reason": why,
        **run,
        "preflight": {k: preflight.get(k) for k in ("ok", "devices", "detail", "command")} if preflight else None,
        "groups": group_counts(tests),
        "skip_reasons": [{"status": s, "reason": r, "count": n} for s, r, n in skip_reasons(tests)],
        "tests": tests,
        "record_problems": problems,
        "manifest": manifest,
    }
