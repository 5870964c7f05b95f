"""CUDA-parity: of what passes on the reference (CUDA), how much also passes on the candidate
(ROCm).

Per test a parity status (candidate view of a reference-passing test); tests passing on
both sides are listed in `passing`, every other test is in `tests` with its evidence:
passed, failed, error, crashed, skipped (with reason), xfailed, xpassed,
known_gap (with issue), missing (in the reference, not in the candidate);
plus candidate_only, and not_applicable for tests the applicability config
takes out of the denominator. Per group and overall: reference passing,
passing on both, parity = both / reference passing, and the gaps by reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import and_, getitem, is_, is_not, not_

from pytest_rocm.catalog.applicability import Applicability
from pytest_rocm.catalog.groups import UNGROUPED, GroupMap
from pytest_rocm.catalog.identity import detect_prefixes, strip_prefix
from pytest_rocm.schemas.artifacts import schema
from rocm_gate.parity.inputs import Result, Side
from rocm_gate.parity.junit import PLAIN_PASS, merge_repeat

PARITY_SCHEMA = schema("parity")
PASSING = {"passed", "xpassed"}
GAP_STATUSES = ("failed", "error", "crashed", "skipped", "xfailed", "known_gap", "missing")
TOP_REASONS = 10


def strip_explicit(side: Side, prefixes: list[str]) -> None:
    """`--strip-prefix`: remove any of these leading paths from the node ids of a side."""
    if not prefixes:
        return

    def stripped(nodeid: str) -> str:
        for prefix in prefixes:
            if nodeid.startswith(prefix):
                return nodeid[len(prefix) :]
        return nodeid

    side.results = _renamed(side.results, stripped)


def _restrip(side: Side, prefix: str) -> dict[str, Result]:
    if not prefix:
        return side.results
    return _renamed(side.results, lambda nodeid: strip_prefix(nodeid, prefix))


def _renamed(results: dict[str, Result], rename) -> dict[str, Result]:
    """`results` under new node ids; two that become one (a test under its prefix in one file and
    without it in another) are merged as the same test seen twice across files, never one of them
    dropped."""
    renamed: dict[str, Result] = {}
    for nodeid, result in results.items():
        new = rename(nodeid)
        renamed[new] = (
            merge_repeat(renamed[new], result, ordered=False) if new in renamed else result
        )
    return renamed


def _gap_reason(status: str, result: Result | None) -> str:
    if status == "missing":
        return "not run on the candidate"
    if status == "known_gap":
        return (
            f"{result.message} ({result.known_gap_issue})"
            if result.known_gap_issue
            else result.message
        )
    return result.message if result and result.message else "(no message)"


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


def _compare_in_bulk(ref: dict[str, Result], cand: dict[str, Result]):
    """The plain passes compared in bulk, by C-level passes over the reference's ids. Returns the
    ids plain on both sides (in the reference's order, as the reference's own strings); every other
    test as (id, reference result, candidate result), the reference's in its order, then the
    candidate-only ones in the candidate's order; and each side's (id, result) that are not plain
    passes. Looking up an equal string that is another object compares the characters: one pass
    (each reference id in the candidate) does that for 100,000s of ids, another only when some
    candidate ids are not in the reference."""
    ref_plain = list(map(is_, ref.values(), repeat(PLAIN_PASS)))
    cand_of_ref = list(map(cand.get, ref))  # the candidate's result of each reference id, or None
    both_mask = list(map(and_, ref_plain, map(is_, cand_of_ref, repeat(PLAIN_PASS))))
    both = list(compress(ref, both_mask))
    rest_mask = list(map(not_, both_mask))
    rest_ids = list(compress(ref, rest_mask))
    rest_ref = list(compress(ref.values(), rest_mask))
    rest_cand = list(compress(cand_of_ref, rest_mask))
    rest = list(zip(rest_ids, rest_ref, rest_cand))
    # the reference's results that are not plain passes are all among these
    ref_others = list(compress(zip(rest_ids, rest_ref), map(is_not, rest_ref, repeat(PLAIN_PASS))))
    # reference ids the candidate has (by identity: `count(None)` would call Case.__eq__ per id)
    on_both = len(both) + sum(map(is_not, rest_cand, repeat(None)))
    if on_both < len(cand):  # ids only the candidate has
        cand_only = list(filterfalse(ref.__contains__, cand))
        rest += zip(cand_only, repeat(None), map(cand.__getitem__, cand_only))
    cand_others = list(compress(cand.items(), map(is_not, cand.values(), repeat(PLAIN_PASS))))
    return both, rest, ref_others, cand_others


@dataclass
class _Tally:
    """What the comparison finds, as it goes."""

    tests: dict[str, dict] = field(default_factory=dict)  # every test not passing on both sides
    passing_in: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    groups: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    gaps: dict[str, dict[tuple[str, str], list[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    not_applicable: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    candidate_only: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)


def _prefixes(reference: Side, candidate: Side, both, strip) -> tuple[str, str]:
    ref, cand = reference.results, candidate.results
    if strip is not None:
        return strip
    if len(both) * 2 >= min(len(ref), len(cand)):
        # what detect_prefixes decides without looking further: at least these ids are on both sides
        return "", ""
    return detect_prefixes(ref, cand)


def compute(
    reference: Side,
    candidate: Side,
    group_map: GroupMap | None = None,
    applicability: Applicability | None = None,
    strip: tuple[str, str] | None = None,
    previous: dict | None = None,
) -> dict:
    # The plain passes (most tests of a run) are compared in bulk, by C-level passes over the ids;
    # only the tests that are not a plain pass on both sides are looked at one by one. The report is
    # what a per-test pass writes.
    ref, cand = reference.results, candidate.results
    both, rest, ref_others, cand_others = _compare_in_bulk(ref, cand)
    ref_prefix, cand_prefix = _prefixes(reference, candidate, both, strip)
    if ref_prefix or cand_prefix:
        ref = _restrip(reference, ref_prefix)
        cand = _restrip(candidate, cand_prefix)
        both, rest, ref_others, cand_others = _compare_in_bulk(ref, cand)
    tally = _Tally()
    # The map and the applicability rules usually look at file paths only: classify once per file.
    per_file = (group_map is None or group_map.by_path) and (
        applicability is None or applicability.by_path
    )
    classified: dict[str, tuple[str | None, str | None]] = {}

    def classify(key: str, nodeid: str) -> tuple[str | None, str | None]:
        known = classified.get(key)
        if known is None:
            known = classified[key] = (
                group_map.group_of(nodeid) if group_map else None,
                applicability.reason_for(nodeid) if applicability else None,
            )
        return known

    for nodeid, r, c in rest:
        key = nodeid.partition("::")[0] if per_file else nodeid
        _one_test(tally, nodeid, r, c, *classify(key, nodeid))
    passing = _plain_passes(tally, both, per_file, classify)
    group_reports = _group_reports(tally)
    report = {
        "schema": PARITY_SCHEMA,
        "inputs": {
            "reference": _input(reference, ref_prefix, len(ref)),
            "candidate": _input(candidate, cand_prefix, len(cand)),
            "group_map": {"path": group_map.path, "source": group_map.source}
            if group_map
            else None,
        },
        "overall": _overall(tally, group_reports),
        "gating": _gating(group_reports),
        "groups": group_reports,
        "not_applicable": [
            {"reason": reason, "count": len(ids), "tests": ids}
            for reason, ids in sorted(tally.not_applicable.items(), key=lambda kv: -len(kv[1]))
        ],
        "candidate_only": tally.candidate_only,
        "unmatched": tally.unmatched,
        "skip_reasons": {
            "reference": _top_reasons(ref_others),
            "candidate": _top_reasons(cand_others),
        },
        "repeated": {"reference": _repeated(ref_others), "candidate": _repeated(cand_others)},
        "tests": tally.tests,
        "passing": passing,
    }
    if previous is not None:
        report["changes"] = _changes(previous, tally.tests, passing)
    return report


def _input(side: Side, prefix: str, count: int) -> dict:
    return {
        "label": side.label,
        "files": side.files,
        "dropped": side.dropped,
        "stripped_prefix": prefix,
        "tests": count,
    }


def _one_test(tally: _Tally, nodeid: str, r, c, map_group, na_reason) -> None:
    """A test that is not a plain pass on both sides: its group, counts and evidence."""
    group = (c is not None and c.group) or (r is not None and r.group) or map_group
    if group is None:
        group = UNGROUPED
        if not na_reason:  # a not-applicable test is listed once, as not applicable
            tally.unmatched.append(nodeid)
    if not na_reason and r is not None and c is not None and r.status in PASSING:
        if c.status in PASSING:
            tally.passing_in[group].append(nodeid)
            tally.groups[group]["blocking_tests"] += bool(c.blocking)
            return
    counts = tally.groups[group]
    entry = {
        "group": group,
        "reference": r.status if r else None,
        "candidate": c.status if c else None,
    }
    if r is not None and r.rerun or c is not None and c.rerun:
        entry["rerun"] = True
    if na_reason:
        entry["parity"], entry["reason"] = "not_applicable", na_reason
        tally.not_applicable[na_reason].append(nodeid)
        counts["not_applicable"] += 1
    elif r is None:
        entry["parity"] = "candidate_only"
        tally.candidate_only.append(nodeid)
        counts["candidate_only"] += 1
        counts["candidate_passing"] += c.status in PASSING
    else:
        counts["reference_total"] += 1
        counts["candidate_passing"] += c is not None and c.status in PASSING
        if r.status in PASSING:
            _gap(tally, group, nodeid, entry, c)
        else:
            entry["parity"] = "reference_not_passing"
            entry["reason"] = r.message or "(no message)"
            counts["reference_not_passing"] += 1
    tally.tests[nodeid] = entry


def _gap(tally: _Tally, group: str, nodeid: str, entry: dict, c) -> None:
    """A test that passes on the reference and not on the candidate."""
    counts = tally.groups[group]
    counts["reference_passing"] += 1
    # a blocking gate the candidate ran: a known gap, a skip or an xfail blocks nothing
    counts["blocking_tests"] += bool(c is not None and c.blocking and c.status not in NOT_GATING)
    status = "missing" if c is None else c.status
    entry["parity"] = status
    counts[status] += 1
    reason = _gap_reason(status, c)
    entry["reason"] = reason
    if status == "known_gap":
        entry["issue"] = c.known_gap_issue
    tally.gaps[group][(status, reason)].append(nodeid)


def _plain_passes(tally: _Tally, both, per_file: bool, classify) -> dict[str, list[str]]:
    """Plain passes on both sides (no properties, so no group of their own) are the bulk of a run:
    collected per file (in the reference's order, so the report is the same on every run),
    classified per file. Returns file -> the rest of each passing node id."""
    plain_both: dict[str, list[str]] = defaultdict(list)
    if per_file:
        for nodeid in both:
            plain_both[nodeid.partition("::")[0]].append(nodeid)
    else:
        for nodeid in both:
            plain_both[nodeid].append(nodeid)
    passing: dict[str, list[str]] = defaultdict(list)
    for key, ids in plain_both.items():
        map_group, na_reason = classify(key, ids[0])
        group = map_group or UNGROUPED
        if map_group is None and not na_reason:
            tally.unmatched.extend(ids)
        if na_reason:
            for nodeid in ids:
                tally.tests[nodeid] = {
                    "group": group,
                    "reference": "passed",
                    "candidate": "passed",
                    "parity": "not_applicable",
                    "reason": na_reason,
                }
            tally.not_applicable[na_reason].extend(ids)
            tally.groups[group]["not_applicable"] += len(ids)
            continue
        _count_passing(tally.groups[group], len(ids))
        if per_file:  # all of this file's: the rest of each id, cut at the same place
            passing[key].extend(map(getitem, ids, repeat(slice(len(key) + 2, None))))
        else:
            _add_by_file(passing, ids)
    for group, ids in tally.passing_in.items():
        _count_passing(tally.groups[group], len(ids))
        _add_by_file(passing, ids)
    return dict(passing)


def _group_reports(tally: _Tally) -> dict[str, dict]:
    out = {}
    for group in sorted(tally.groups, key=lambda g: (g == UNGROUPED, g)):
        counts = tally.groups[group]
        out[group] = {
            "reference_passing": counts["reference_passing"],
            "both_passing": counts["both_passing"],
            "parity": _ratio(counts["both_passing"], counts["reference_passing"]),
            **{status: counts[status] for status in GAP_STATUSES},
            "reference_not_passing": counts["reference_not_passing"],
            "candidate_only": counts["candidate_only"],
            "not_applicable": counts["not_applicable"],
            "blocking_tests": counts["blocking_tests"],
            "blocking": _blocking(counts["blocking_tests"], counts["reference_passing"]),
            "gaps": _gap_list(tally.gaps[group]),
        }
    return out


def _overall(tally: _Tally, group_reports: dict[str, dict]) -> dict:
    overall_ref = sum(g["reference_passing"] for g in group_reports.values())
    overall_both = sum(g["both_passing"] for g in group_reports.values())
    return {
        "reference_passing": overall_ref,
        "both_passing": overall_both,
        "parity": _ratio(overall_both, overall_ref),
        **{status: sum(g[status] for g in group_reports.values()) for status in GAP_STATUSES},
        "candidate_only": len(tally.candidate_only),
        "not_applicable": sum(len(v) for v in tally.not_applicable.values()),
        "reference_not_passing": sum(g["reference_not_passing"] for g in group_reports.values()),
        "tests_not_passing_on_both": len(tally.tests),
    }


NOT_GATING = ("known_gap", "skipped", "xfailed", "not_applicable")


def _blocking(blocking_tests: int, reference_passing: int) -> str:
    """A group is merge-blocking when every test of it that passes on the reference is a blocking
    gate on the candidate; `partly` when some are; `no` when none (or none passes on the
    reference)."""
    if not blocking_tests:
        return "no"
    return "all" if blocking_tests >= reference_passing else "partly"


def _gating(group_reports: dict[str, dict]) -> dict:
    """Gating coverage: how much of what passes on the reference blocks a merge on the candidate,
    counted in tests and in groups. `ungrouped` is not a group: its tests count, it does not."""
    counted = [
        name for name, g in group_reports.items() if name != UNGROUPED and g["reference_passing"]
    ]
    tests = sum(g["reference_passing"] for g in group_reports.values())
    blocking_tests = sum(g["blocking_tests"] for g in group_reports.values())
    return {
        "reference_passing_tests": tests,
        "blocking_tests": blocking_tests,
        "tests_share": _ratio(blocking_tests, tests),
        "groups": counted,
        "fully_blocking_groups": [n for n in counted if group_reports[n]["blocking"] == "all"],
        "partly_blocking_groups": [n for n in counted if group_reports[n]["blocking"] == "partly"],
        "groups_share": _ratio(
            sum(group_reports[n]["blocking"] == "all" for n in counted), len(counted)
        ),
    }


def _count_passing(counts: Counter, n: int) -> None:
    for key in ("reference_total", "reference_passing", "candidate_passing", "both_passing"):
        counts[key] += n


def _add_by_file(files: dict[str, list[str]], nodeids) -> None:
    """{'tests/x.py': ['test_a', 'TestB::test_c[p]']}: the passing list, without repeating file
    paths."""
    for nodeid in nodeids:
        path, _, rest = nodeid.partition("::")
        files[path].append(rest)


def read_previous(path) -> dict:
    """An earlier parity.json for `--previous`; ValueError saying what is wrong with it."""
    from pytest_rocm.schemas.loader import read_json_file

    data = read_json_file(path)  # a plain file, size, depth, no NaN (ArtifactError: a ValueError)
    if not isinstance(data, dict) or data.get("schema") != PARITY_SCHEMA:
        raise ValueError(
            f"not a {PARITY_SCHEMA} report (give the parity.json an earlier run wrote)"
        )
    passing = data.get("passing", {})
    if (
        not isinstance(passing, dict)
        or not all(
            isinstance(rests, list) and all(isinstance(rest, str) for rest in rests)
            for rests in passing.values()
        )
        or not isinstance(data.get("tests", {}), dict)
        or not all(isinstance(t, dict) and "parity" in t for t in data.get("tests", {}).values())
    ):
        raise ValueError("its `passing` and `tests` are not shaped as parity.json writes them")
    return data


def passing_ids(report: dict) -> set[str]:
    return {
        f"{path}::{rest}" if rest else path
        for path, rests in report.get("passing", {}).items()
        for rest in rests
    }


def _gap_list(by_reason: dict[tuple[str, str], list[str]]) -> list[dict]:
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [
        {"status": status, "reason": reason, "count": len(ids), "tests": ids}
        for (status, reason), ids in ordered
    ]


def _repeated(others: list[tuple[str, Result]]) -> list[dict]:
    """Tests seen more than once with different results (shards, rerun jobs): what counted, and
    every attempt (the rule is `rocm_gate.parity.junit.merge_repeat`). `others`: a side's results
    but its plain passes."""
    return [
        {"test": nodeid, "counted": r.status, "attempts": list(r.attempts)}
        for nodeid, r in others
        if r.attempts and len(set(r.attempts)) > 1
    ]


def _top_reasons(others: list[tuple[str, Result]]) -> list[dict]:
    """The most frequent skip reasons of a side (plain passes, left out of `others`, have none)."""
    reasons = Counter(
        (r.status, r.message or "(no message)")
        for _, r in others
        if r.status in ("skipped", "xfailed", "known_gap")
    )
    return [
        {"status": s, "reason": m, "count": n} for (s, m), n in reasons.most_common(TOP_REASONS)
    ]


def _changes(previous: dict, tests: dict[str, dict], passing: list[str]) -> dict:
    """Against an earlier parity.json: reference-passing tests that broke or got fixed on the
    candidate."""
    was_passing = passing_ids(previous)
    before = previous.get("tests", {})
    not_gaps = ("not_applicable", "candidate_only", "reference_not_passing")
    broken = [
        {"test": nodeid, "now": now["parity"], "reason": now.get("reason", "")}
        for nodeid, now in tests.items()
        if nodeid in was_passing and now["parity"] not in not_gaps
    ]
    fixed = [
        {"test": nodeid, "before": before[nodeid]["parity"]}
        for nodeid in passing_ids({"passing": passing})
        if nodeid in before and before[nodeid]["parity"] not in not_gaps
    ]
    return {"newly_broken": broken, "newly_fixed": fixed}
