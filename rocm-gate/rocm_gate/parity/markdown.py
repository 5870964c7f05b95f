"""parity.md: the parity report as GitHub markdown, for a PR comment or a check run summary.

The per-group table comes first, then the gaps. A check run summary holds at
most 65,535 characters, so long lists are cut ("and N more") with fewer items
shown until the page fits; every total stays exact because totals come from the
data, not from the lists. Test ids, reasons, group names and issue links come
from the inputs (a candidate run's JUnit is written by the PR's code), so they
are written through `schemas/markdown.py`: text, never markup or a live link.
"""

from __future__ import annotations

from pytest_rocm.catalog.groups import UNGROUPED
from pytest_rocm.schemas import markdown as md
from pytest_rocm.schemas.artifacts import describe_reference

GITHUB_SUMMARY_LIMIT = 65_535
LIST_LIMITS = (25, 10, 5, 2, 1, 0)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


_code = md.code


def _reason(gap: dict) -> str:
    if gap["status"] == "known_gap" and gap["reason"].endswith(")") and "(http" in gap["reason"]:
        text, _, url = gap["reason"][:-1].rpartition(" (")
        return f"{_code(text)} (issue {_code(url)})"
    return _code(gap["reason"])


def _cut(items: list, limit: int, show=str) -> str:
    """The first `limit` items as `show` writes them (only those are written: a list may hold
    100,000s), then how many more."""
    shown = ", ".join(show(item) for item in items[:limit])
    rest = len(items) - min(limit, len(items))
    if rest and shown:
        return f"{shown} and {rest} more"
    return shown or f"{rest} tests"


def render(report: dict, min_parity: float | None = None, limit: int = GITHUB_SUMMARY_LIMIT) -> str:
    # one pass, whatever the list limit
    failing = _reference_failures(report) if "overall" in report else {}
    for list_limit in LIST_LIMITS:
        text = _render(report, min_parity, list_limit, failing)
        if len(text) <= limit:
            return text
    return md.cut_page(
        text, limit, "\n\n(report cut to fit GitHub's limit; parity.json has everything)\n"
    )


def _render(
    report: dict, min_parity: float | None, n: int, failing: dict[str, list[tuple[str, dict]]]
) -> str:
    parts = []
    if "overall" in report:
        parts.append(_render_tests(report, min_parity, n, failing))
    if "sglang" in report:
        parts.append(_render_sglang(report["sglang"], n))
    return "\n".join(parts)


def _reference_failures(report: dict) -> dict[str, list[tuple[str, dict]]]:
    """Per group, the tests that did not pass on the reference (each with its entry), in report
    order."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for nodeid, entry in report["tests"].items():
        if entry["parity"] == "reference_not_passing":
            found.setdefault(entry["group"], []).append((nodeid, entry))
    return found


def _render_sglang(sglang: dict, n: int) -> str:
    lines = [
        f"## SGLang declared AMD coverage: {_pct(sglang['declared_parity'])}",
        "",
        f"{sglang['cuda_covered_on_amd']} of {sglang['cuda_applicable']} test files registered for CUDA "
        f"(and applicable to ROCm) have an enabled AMD registration. Files: {sglang['files']}; "
        f"registered for CUDA {sglang['cuda']}, for AMD {sglang['amd']}, both {sglang['both']}, AMD only "
        f"{sglang['amd_only']}; disabled AMD registrations {sglang['amd_disabled_registrations']}; "
        f"not applicable {len(sglang['not_applicable'])}.",
        "",
        "| stage | GPUs | CUDA files | with AMD enabled | parity | not applicable |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in sglang["by_stage_and_gpus"]:
        lines.append(
            f"| {row['stage']} | {row['gpus']} | {row['cuda']} | {row['amd_enabled']} | "
            f"{_pct(row['parity'])} | {row['not_applicable']} |"
        )
    if sglang["disabled"]:
        lines += ["", f"### Disabled AMD registrations ({len(sglang['disabled'])})"]
        shown = sglang["disabled"][: max(n, 1) * 2]
        lines += [f"- {_code(d['path'])} ({d['suite']}): {_code(str(d['reason']))}" for d in shown]
        if len(sglang["disabled"]) > len(shown):
            lines.append(f"- and {len(sglang['disabled']) - len(shown)} more")
    executed = sglang.get("executed")
    if executed:
        counts = executed["counts"]
        lines += [
            "",
            "### Declared (registrations) against executed (this run's results on the candidate)",
            "",
            "| | passes on the candidate | does not pass |",
            "|---|---:|---:|",
            f"| registered for AMD | {counts['declared_and_passing']} | {counts['declared_not_passing']} |",
            f"| not registered for AMD | {counts['passing_not_declared']} | {counts['neither']} |",
            "",
            f"Registered for CUDA but not run here: {counts['not_run']} file(s).",
        ]
        for kind, title in (
            (
                "passing_not_declared",
                "Pass on the candidate without an AMD registration (register them)",
            ),
            ("declared_not_passing", "Registered for AMD, not passing on the candidate"),
        ):
            if executed[kind]:
                lines += ["", f"{title}: " + _cut(executed[kind], max(n, 1) * 4, _code)]
    if sglang["missing_on_amd"]:
        lines += [
            "",
            f"### CUDA test files without an enabled AMD registration ({len(sglang['missing_on_amd'])})",
            _cut(sglang["missing_on_amd"], n * 4, lambda m: _code(m["path"])) if n else "",
        ]
    return "\n".join(lines) + "\n"


GROUP_COLUMNS = (
    "failed",
    "error",
    "crashed",
    "skipped",
    "xfailed",
    "known_gap",
    "missing",
    "reference_not_passing",
    "not_applicable",
)


def _render_tests(
    report: dict, min_parity: float | None, n: int, failing: dict[str, list[tuple[str, dict]]]
) -> str:
    """The parity report as markdown: its sections in order, each a function of the report."""
    lines = _headline(report, min_parity) + _group_table(report) + _gating_lines(report)
    lines += _changes_lines(report, n) + _gap_lines(report, n) + _failing_lines(report, failing, n)
    lines += _excluded_lines(report, n) + _repeated_lines(report, n) + _input_lines(report)
    return "\n".join(lines) + "\n"


def _headline(report: dict, min_parity: float | None) -> list[str]:
    overall, inputs = report["overall"], report["inputs"]
    target = ""
    if min_parity is not None and overall["parity"] is not None:
        met = "met" if overall["parity"] >= min_parity else "not met"
        target = f" (target {_pct(min_parity)}: **{met}**)"
    return [
        f"## ROCm parity against the reference: {_pct(overall['parity'])}{target}",
        "",
        f"{overall['both_passing']} of {overall['reference_passing']} tests that pass on the reference "
        f"({md.name(describe_reference(inputs['reference']))}) also pass on the candidate ({md.name(inputs['candidate']['label'])}). "
        f"Not applicable to ROCm, excluded: {overall['not_applicable']}. Candidate only: {overall['candidate_only']}.",
    ]


def _group_table(report: dict) -> list[str]:
    overall = report["overall"]
    lines = [
        "",
        "| group | passing on reference | passing on both | parity | failed | error | crashed | skipped "
        "| xfailed | known gaps | missing | not passing on reference | not applicable | blocking gates |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, group in report["groups"].items():
        lines.append(
            f"| {md.name(name, table=True)} | {group['reference_passing']} | {group['both_passing']} | {_pct(group['parity'])} | "
            + " | ".join(str(group[s]) for s in GROUP_COLUMNS)
            + f" | {group['blocking_tests']} ({group['blocking']}) |"
        )
    lines.append(
        f"| **all** | **{overall['reference_passing']}** | **{overall['both_passing']}** | "
        f"**{_pct(overall['parity'])}** | "
        + " | ".join(str(overall[s]) for s in GROUP_COLUMNS)
        + f" | {report['gating']['blocking_tests']} |"
    )
    return lines + [
        "",
        "Parity is `n/a` where no test of the group passes on the reference; the gap columns count tests "
        "that pass on the reference only. `blocking gates`: tests passing on the reference that block a "
        "merge on the candidate (`all` of the group, `partly`, or `no`).",
    ]


def _gating_lines(report: dict) -> list[str]:
    gating = report["gating"]
    partly = [
        f"{md.name(g)} ({report['groups'][g]['blocking_tests']} of {report['groups'][g]['reference_passing']})"
        for g in gating["partly_blocking_groups"]
    ]
    full = gating["fully_blocking_groups"]
    return [
        "",
        f"Gating coverage: {gating['blocking_tests']} of {gating['reference_passing_tests']} tests passing "
        f"on the reference are merge-blocking on the candidate ({_pct(gating['tests_share'])}); "
        f"{len(full)} of {len(gating['groups'])} groups are merge-blocking in "
        f"full ({_pct(gating['groups_share'])})"
        + (f": {', '.join(map(md.name, full))}" if full else "")
        + (f"; partly: {', '.join(partly)}" if partly else "")
        + f". `{UNGROUPED}` is not counted as a group.",
    ]


def _changes_lines(report: dict, n: int) -> list[str]:
    changes = report.get("changes")
    if changes is None:
        return []
    lines = [
        "",
        f"### Since the previous report: {len(changes['newly_broken'])} newly broken, "
        f"{len(changes['newly_fixed'])} newly fixed",
    ]
    if changes["newly_broken"]:
        lines.append(
            "- broken: "
            + _cut(changes["newly_broken"], n, lambda c: f"{_code(c['test'])} ({c['now']})")
        )
    if changes["newly_fixed"]:
        lines.append("- fixed: " + _cut(changes["newly_fixed"], n, lambda c: _code(c["test"])))
    return lines


def _gap_lines(report: dict, n: int) -> list[str]:
    lines = ["", "### Gaps (pass on the reference, not on the candidate)"]
    with_gaps = [(name, group) for name, group in report["groups"].items() if group["gaps"]]
    for name, group in with_gaps:
        total = sum(g["count"] for g in group["gaps"])
        lines += [
            "",
            f"<details><summary><b>{md.html_name(name)}</b>: {total} gap(s)</summary>",
            "",
        ]
        shown_reasons = group["gaps"][: max(n, 1) * 2]
        for gap in shown_reasons:
            lines.append(f"- **{md.name(gap['status'])}** ({gap['count']}): {_reason(gap)}")
            if n:
                lines.append(f"  - {_cut(gap['tests'], n, _code)}")
        hidden = group["gaps"][len(shown_reasons) :]
        if hidden:
            lines.append(
                f"- and {len(hidden)} more reasons covering {sum(g['count'] for g in hidden)} tests"
            )
        lines += ["", "</details>"]
    return lines if with_gaps else lines + ["None."]


def _failing_lines(report: dict, failing: dict[str, list[tuple[str, dict]]], n: int) -> list[str]:
    if not failing:
        return []
    lines = [
        "",
        f"### Not passing on the reference ({report['overall']['reference_not_passing']}: outside "
        "parity, shown so a group with few reference passes is explained)",
    ]
    for name, tests in failing.items():
        lines += [
            "",
            f"<details><summary><b>{md.html_name(name)}</b>: {len(tests)} not passing on the reference"
            "</summary>",
            "",
        ]
        shown = tests[: max(n, 1) * 2]
        lines += [
            f"- {_code(t)}: {md.name(entry['reference'])}"
            + (f" ({_code(entry['reason'][:200])})" if entry.get("reason") else "")
            for t, entry in shown
        ]
        if len(tests) > len(shown):
            lines.append(f"- and {len(tests) - len(shown)} more (parity.json lists all)")
        lines += ["", "</details>"]
    return lines


def _excluded_lines(report: dict, n: int) -> list[str]:
    lines = []
    if report["not_applicable"]:
        lines += ["", "### Not applicable to ROCm (excluded from parity)"]
        for entry in report["not_applicable"]:
            lines.append(
                f"- {_code(entry['reason'])} ({entry['count']})"
                + (f": {_cut(entry['tests'], n, _code)}" if n else "")
            )
    if report["unmatched"]:
        lines += [
            "",
            f"### `{UNGROUPED}`: tests no marker or map rule puts in a group ({len(report['unmatched'])})",
            _cut(report["unmatched"], n, _code) if n else "",
        ]
    return lines


def _repeated_lines(report: dict, n: int) -> list[str]:
    lines = []
    for side in ("reference", "candidate"):
        repeated = report.get("repeated", {}).get(side, [])
        if repeated:
            lines += [
                "",
                f"### Seen more than once with different results on the {side} ({len(repeated)})",
                "A test in several files counts as passing if any attempt passed, else as its worst result.",
                _cut(
                    repeated,
                    max(n, 1),
                    lambda r: (
                        f"{_code(r['test'])} (seen "
                        f"{', '.join(map(md.name, r['attempts']))}; counted {md.name(r['counted'])})"
                    ),
                ),
            ]
    return lines


def _input_lines(report: dict) -> list[str]:
    lines = []
    for side in ("reference", "candidate"):
        reasons = report["skip_reasons"][side]
        if reasons:
            lines += ["", f"### Top skip reasons on the {side}"]
            lines += [
                f"- {r['count']} {md.name(r['status'])}: {_code(r['reason'])}" for r in reasons
            ]
    inputs = report["inputs"]
    dropped = inputs["reference"]["dropped"] + inputs["candidate"]["dropped"]
    if dropped:
        lines += ["", "### Input files that could not be read (dropped)"] + [
            f"- {_code(d, 600)}" for d in dropped
        ]
    return lines
