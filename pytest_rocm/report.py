"""The gate report: per-test status from the records, per-group counts, and the run's conclusion.

Built from records alone, so rebuilding it from the same records gives the same
file (`rocm-gate report --records DIR`). Statuses:

passed, failed (the test body failed), error (setup or teardown failed),
crashed (the process running it died), skipped (with reason), xfailed, xpassed,
known_gap (declared ROCm gap, with its issue), not_applicable (hardware
requirement not met on this runner).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pytest_rocm.jsonio import schema

GATE_REPORT_SCHEMA = schema("gate-report")
STATUSES = ("passed", "failed", "error", "crashed", "skipped", "xfailed", "xpassed", "known_gap", "not_applicable")
EXECUTED = {"passed", "failed", "error", "crashed", "xpassed"}
UNGROUPED = "(no group)"


def _last_attempt(records: list[dict]) -> list[dict]:
    last = max(r.get("rerun", 0) for r in records)
    return [r for r in records if r.get("rerun", 0) == last]


def status_of_test(records: list[dict]) -> dict:
    """Status and evidence of one test from all its phase records (in the order written)."""
    crash = next((r for r in records if r.get("crashed")), None)
    phases = {r["when"]: r for r in _last_attempt([r for r in records if not r.get("crashed")] or records)
              if not r.get("crashed")}
    first = next(iter(phases.values()), crash)
    result = {
        "group": next((r.get("group") for r in records if r.get("group")), None),
        "blocking": any(r.get("blocking") for r in records),
        "gate": any(r.get("gate") for r in records),
        "requires": first.get("requires"),
        "known_gap": next((r["known_gap"] for r in records if r.get("known_gap")), None),
        "duration": round(sum(r.get("duration", 0.0) for r in phases.values()), 6),
        "worker": first.get("worker"),
        "attempts": 1 + max(r.get("rerun", 0) for r in records),
    }
    call, setup, teardown = phases.get("call"), phases.get("setup"), phases.get("teardown")
    failed = [r for r in phases.values() if r["outcome"] == "failed"]
    if crash is not None:
        status, detail = "crashed", crash.get("failure") or "the worker running this test died"
        result["message"] = detail
    elif call is not None and call["outcome"] == "failed":
        status, detail = "failed", call.get("failure", "")
        result["message"] = call.get("message", "")
    elif failed:
        status, detail = "error", f"{failed[0]['when']} failed: {failed[0].get('failure', '')}"
        result["message"] = f"{failed[0]['when']} failed: {failed[0].get('message', '')}"
    elif call is not None and call.get("wasxfail") is not None:
        status = "xpassed" if call["outcome"] == "passed" else ("known_gap" if result["known_gap"] else "xfailed")
        detail = call["wasxfail"] or ""
        if status == "known_gap":
            detail = f"{result['known_gap']['reason']} ({result['known_gap']['issue']})"
        elif status == "xpassed" and result["known_gap"]:
            detail = f"known gap now passes, remove its marker: {detail}"
    elif setup is not None and setup["outcome"] == "skipped":
        if setup.get("not_applicable"):
            status, detail = "not_applicable", setup["not_applicable"]
        elif result["known_gap"]:
            status, detail = "known_gap", f"{result['known_gap']['reason']} ({result['known_gap']['issue']})"
        else:
            status, detail = "skipped", setup.get("skip_reason", "")
    elif call is not None and call["outcome"] == "skipped":
        status, detail = "skipped", call.get("skip_reason", "")
    elif call is not None and teardown is not None:
        status, detail = "passed", ""
    else:
        seen = ", ".join(sorted(phases)) or "nothing"
        status, detail = "crashed", f"the process died during the test (recorded phases: {seen})"
    result["status"] = status
    result["detail"] = detail
    return result


def summarise(records: list[dict], group_of=None) -> dict[str, dict]:
    """nodeid -> test status, in the order tests first appear. `group_of(nodeid)` fills missing groups."""
    by_test: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_test[record["nodeid"]].append(record)
    tests = {}
    for nodeid, recs in by_test.items():
        tests[nodeid] = status_of_test(recs)
        if tests[nodeid]["group"] is None and group_of is not None:
            tests[nodeid]["group"] = group_of(nodeid)
    return tests


def group_counts(tests: dict[str, dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for test in tests.values():
        counts[test["group"] or UNGROUPED][test["status"]] += 1
    return {group: {s: c[s] for s in STATUSES} | {"total": sum(c.values())} for group, c in sorted(counts.items())}


def skip_reasons(tests: dict[str, dict]) -> list[tuple[str, str, int]]:
    """(status, reason, count) for every test that did not run, most common first."""
    reasons = Counter((t["status"], t["detail"]) for t in tests.values()
                      if t["status"] in ("skipped", "known_gap", "not_applicable", "xfailed"))
    return [(status, reason, n) for (status, reason), n in reasons.most_common()]


def conclusion(tests: dict[str, dict]) -> tuple[str, str]:
    """failure on a blocking failure; neutral on a blocking crash (rerun it) or when no blocking gate ran."""
    blocking = {nodeid: t for nodeid, t in tests.items() if t["blocking"]}
    failing = sorted(n for n, t in blocking.items() if t["status"] in ("failed", "error"))
    crashed = sorted(n for n, t in blocking.items() if t["status"] == "crashed")
    executed = [n for n, t in blocking.items() if t["status"] in EXECUTED]
    if failing:
        return "failure", f"{len(failing)} blocking gate(s) failed: {', '.join(failing[:10])}"
    if crashed:
        return "neutral", (f"{len(crashed)} blocking gate(s) crashed (infrastructure suspected; rerun them): "
                           f"{', '.join(crashed[:10])}")
    if not executed:
        return "neutral", "no blocking gate ran on this runner"
    return "success", f"{len(executed)} blocking gate(s) ran, none failed"


def build_gate_report(records: list[dict], manifest: dict, problems: list[str], group_of=None) -> dict:
    tests = summarise(records, group_of)
    verdict, why = conclusion(tests)
    return {
        "schema": GATE_REPORT_SCHEMA,
        "conclusion": verdict,
        "conclusion_reason": why,
        "groups": group_counts(tests),
        "skip_reasons": [{"status": s, "reason": r, "count": n} for s, r, n in skip_reasons(tests)],
        "tests": tests,
        "record_problems": problems,
        "manifest": manifest,
    }
