"""CUDA-parity: of what passes on the reference (CUDA), how much also passes on the candidate (ROCm).

Per test a parity status (candidate view of a reference-passing test):
passed, failed, error, crashed, skipped (with reason), xfailed, xpassed,
known_gap (with issue), missing (in the reference, not in the candidate);
plus candidate_only, and not_applicable for tests the applicability config
takes out of the denominator. Per group and overall: reference passing,
passing on both, parity = both / reference passing, and the gaps by reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pytest_rocm.applicability import Applicability
from pytest_rocm.groups import OTHER, GroupMap
from pytest_rocm.identity import detect_prefixes, strip_prefix
from pytest_rocm.jsonio import schema
from pytest_rocm.parity_inputs import Result, Side

PARITY_SCHEMA = schema("parity")
PASSING = {"passed", "xpassed"}
GAP_STATUSES = ("failed", "error", "crashed", "skipped", "xfailed", "known_gap", "missing")
TOP_REASONS = 10


def strip_explicit(side: Side, prefixes: list[str]) -> None:
    """`--strip-prefix`: remove any of these leading paths from the node ids of a side."""
    if not prefixes:
        return
    stripped = {}
    for nodeid, result in side.results.items():
        for prefix in prefixes:
            if nodeid.startswith(prefix):
                nodeid = nodeid[len(prefix):]
                result.nodeid = nodeid
                break
        stripped[nodeid] = result
    side.results = stripped


def _restrip(side: Side, prefix: str) -> dict[str, Result]:
    if not prefix:
        return side.results
    return {strip_prefix(nodeid, prefix): result for nodeid, result in side.results.items()}


def _gap_reason(status: str, result: Result | None) -> str:
    if status == "missing":
        return "not run on the candidate"
    if status == "known_gap":
        return f"{result.message} ({result.known_gap_issue})" if result.known_gap_issue else result.message
    return result.message if result and result.message else "(no message)"


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


def compute(reference: Side, candidate: Side, group_map: GroupMap | None = None,
            applicability: Applicability | None = None, strip: tuple[str, str] | None = None,
            previous: dict | None = None) -> dict:
    ref_prefix, cand_prefix = strip if strip is not None else detect_prefixes(reference.results, candidate.results)
    ref = _restrip(reference, ref_prefix)
    cand = _restrip(candidate, cand_prefix)

    tests: dict[str, dict] = {}
    groups: dict[str, Counter] = defaultdict(Counter)
    gaps: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    blocking_groups: set[str] = set()
    not_applicable: dict[str, list[str]] = defaultdict(list)
    candidate_only: list[str] = []
    unmatched: list[str] = []

    for nodeid in list(ref) + [n for n in cand if n not in ref]:
        r, c = ref.get(nodeid), cand.get(nodeid)
        group = (c and c.group) or (r and r.group) or (group_map.group_of(nodeid) if group_map else None)
        if group is None:
            group = OTHER
            unmatched.append(nodeid)
        if c is not None and c.blocking:
            blocking_groups.add(group)
        na_reason = applicability.reason_for(nodeid) if applicability else None
        entry = {"group": group, "reference": r.status if r else None, "candidate": c.status if c else None}
        if r is not None and r.rerun or c is not None and c.rerun:
            entry["rerun"] = True
        counts = groups[group]
        if na_reason:
            entry["parity"] = "not_applicable"
            entry["reason"] = na_reason
            not_applicable[na_reason].append(nodeid)
            counts["not_applicable"] += 1
        elif r is None:
            entry["parity"] = "candidate_only"
            candidate_only.append(nodeid)
            counts["candidate_only"] += 1
            counts["candidate_passing"] += c.status in PASSING
        else:
            counts["reference_total"] += 1
            counts["candidate_passing"] += c is not None and c.status in PASSING
            if r.status in PASSING:
                counts["reference_passing"] += 1
                status = "missing" if c is None else ("passed" if c.status in PASSING else c.status)
                entry["parity"] = status
                if status == "passed":
                    counts["both_passing"] += 1
                else:
                    counts[status] += 1
                    reason = _gap_reason(status, c)
                    entry["reason"] = reason
                    if status == "known_gap":
                        entry["issue"] = c.known_gap_issue
                    gaps[group][(status, reason)].append(nodeid)
            else:
                entry["parity"] = "reference_not_passing"
                counts["reference_not_passing"] += 1
        tests[nodeid] = entry

    group_reports = {}
    for group in sorted(groups, key=lambda g: (g == OTHER, g)):
        counts = groups[group]
        group_reports[group] = {
            "reference_passing": counts["reference_passing"],
            "both_passing": counts["both_passing"],
            "parity": _ratio(counts["both_passing"], counts["reference_passing"]),
            **{status: counts[status] for status in GAP_STATUSES},
            "reference_not_passing": counts["reference_not_passing"],
            "candidate_only": counts["candidate_only"],
            "not_applicable": counts["not_applicable"],
            "blocking": group in blocking_groups,
            "gaps": _gap_list(gaps[group]),
        }
    overall_ref = sum(g["reference_passing"] for g in group_reports.values())
    overall_both = sum(g["both_passing"] for g in group_reports.values())
    overall = {
        "reference_passing": overall_ref,
        "both_passing": overall_both,
        "parity": _ratio(overall_both, overall_ref),
        **{status: sum(g[status] for g in group_reports.values()) for status in GAP_STATUSES},
        "candidate_only": len(candidate_only),
        "not_applicable": sum(len(v) for v in not_applicable.values()),
        "tests": len(tests),
    }
    groups_with_tests = [g for g, r in group_reports.items() if r["reference_passing"]]
    report = {
        "schema": PARITY_SCHEMA,
        "inputs": {
            "reference": {"label": reference.label, "files": reference.files, "dropped": reference.dropped,
                          "stripped_prefix": ref_prefix, "tests": len(ref)},
            "candidate": {"label": candidate.label, "files": candidate.files, "dropped": candidate.dropped,
                          "stripped_prefix": cand_prefix, "tests": len(cand)},
            "group_map": {"path": group_map.path, "source": group_map.source} if group_map else None,
        },
        "overall": overall,
        "gating": {"blocking_groups": sorted(blocking_groups & set(groups_with_tests)),
                   "groups": sorted(groups_with_tests),
                   "gating_parity": _ratio(len(blocking_groups & set(groups_with_tests)), len(groups_with_tests))},
        "groups": group_reports,
        "not_applicable": [{"reason": reason, "count": len(ids), "tests": ids} for reason, ids in
                           sorted(not_applicable.items(), key=lambda kv: -len(kv[1]))],
        "candidate_only": candidate_only,
        "unmatched": unmatched,
        "skip_reasons": {"reference": _top_reasons(ref), "candidate": _top_reasons(cand)},
        "tests": tests,
    }
    if previous is not None:
        report["changes"] = _changes(previous, tests)
    return report


def _gap_list(by_reason: dict[tuple[str, str], list[str]]) -> list[dict]:
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [{"status": status, "reason": reason, "count": len(ids), "tests": ids} for (status, reason), ids in ordered]


def _top_reasons(results: dict[str, Result]) -> list[dict]:
    reasons = Counter((r.status, r.message or "(no message)") for r in results.values()
                      if r.status in ("skipped", "xfailed", "known_gap"))
    return [{"status": s, "reason": m, "count": n} for (s, m), n in reasons.most_common(TOP_REASONS)]


def _changes(previous: dict, tests: dict[str, dict]) -> dict:
    """Against an earlier parity.json: reference-passing tests that broke or got fixed on the candidate."""
    before = previous.get("tests", {})
    broken, fixed = [], []
    for nodeid, now in tests.items():
        then = before.get(nodeid)
        if then is None or now["parity"] in ("not_applicable", "candidate_only", "reference_not_passing"):
            continue
        was_ok, is_ok = then.get("parity") == "passed", now["parity"] == "passed"
        if was_ok and not is_ok:
            broken.append({"test": nodeid, "now": now["parity"], "reason": now.get("reason", "")})
        elif is_ok and not was_ok and then.get("parity") not in ("reference_not_passing", "candidate_only"):
            fixed.append({"test": nodeid, "before": then.get("parity")})
    return {"newly_broken": broken, "newly_fixed": fixed}
