"""What a person reads at the end of a run: the per-group table, why tests did not run, and the
conclusion.

The pytest terminal summary and `rocm-gate verdict` print the same lines, from
`terminal_lines`, with the project's one plain-text table formatter (schemas/markdown.py: `table`).
"""

from __future__ import annotations

from pytest_rocm.catalog.groups import UNGROUPED
from pytest_rocm.schemas.markdown import table, visible

# Statuses of the last attempt, then the verdicts of tests that failed first.
COLUMNS = (
    ("passed", "passed"),
    ("failed", "failed"),
    ("error", "error"),
    ("crashed", "crashed"),
    ("interrupted", "interrupted"),
    ("skipped", "skipped"),
    ("xfailed", "xfail"),
    ("xpassed", "xpass"),
    ("known_gap", "known gaps"),
    ("not_applicable", "n/a"),
    ("regression", "regression"),
    ("unconfirmed", "unconfirmed"),
    ("infra", "infra"),
    ("flaky", "flaky"),
)


def group_table(
    groups: dict[str, dict[str, int]], tests: dict[str, dict] | None = None
) -> list[str]:
    """The per-group table: each group's gates and blocking gates (from `tests`, where given), then
    only the columns some group has a count in (a column of zeros says nothing), and the total."""
    marked: dict[str, list[int]] = {group: [0, 0] for group in groups}
    for test in (tests or {}).values():
        counts = marked.setdefault(test.get("group") or UNGROUPED, [0, 0])
        counts[0] += bool(test.get("gate") or test.get("blocking"))
        counts[1] += bool(test.get("blocking"))
    shown = [(k, label) for k, label in COLUMNS if any(c.get(k, 0) for c in groups.values())]
    gated = [("gates", 0), ("blocking", 1)] if tests is not None else []
    headers = ["group", *(label for label, _ in gated), *(label for _, label in shown), "total"]
    rows = [
        [
            group,
            *(str(marked.get(group, [0, 0])[i]) for _, i in gated),
            *(str(c.get(key, 0)) for key, _ in shown),
            str(c["total"]),
        ]
        for group, c in groups.items()
    ]
    totals = [
        "all",
        *(str(sum(marked.get(g, [0, 0])[i] for g in groups)) for _, i in gated),
        *(str(sum(c.get(key, 0) for c in groups.values())) for key, _ in shown),
        str(sum(c["total"] for c in groups.values())),
    ]
    return table(headers, [*rows, totals])


def platform_title(report: dict) -> str:
    """The run's platform as the summary's title names it; a simulated one says so (its tests ran
    on this machine, not on that hardware)."""
    platform = (report.get("manifest") or {}).get("platform") or {}
    described = platform.get("description") or "no GPU (cpu)"
    profile = platform.get("profile")
    if profile:
        return f"pytest-rocm on {profile}, SIMULATED ({described}): the tests ran on this machine"
    return f"pytest-rocm on this runner: {described}"


def reference_table(rows: list[dict]) -> list[str]:
    body = [
        [
            row["framework"],
            row["metric"],
            row["reference"],
            f"{row['agreeing_tokens']}/{row['tokens']}",
            "pass" if row["passed"] else "FAIL",
            row["first_difference"] or "none",
        ]
        for row in rows
    ]
    return table(
        ["framework", "golden", "reference", "same tokens", "gate", "first difference"],
        body,
        numeric_from=6,
    )


def reason_lines(reasons: list[dict]) -> list[str]:
    return [f"{r['count']:>5}  {r['status']}: {r['reason']}" for r in reasons]


def terminal_lines(report: dict) -> list[tuple[str, str]]:
    """(line, kind) for the end of a run; kind is `text`, `problem` or `conclusion`."""
    lines = []
    if report.get("interrupted"):  # before anything else: nothing below is the whole run
        lines.append(
            (
                f"run interrupted ({report['interrupted']}): what follows is what ran before it",
                "problem",
            )
        )
    lines += [(line, "text") for line in group_table(report["groups"], report.get("tests"))]
    if report["skip_reasons"]:
        lines += [("", "text"), ("tests that did not run, by reason:", "text")]
        lines += [(line, "text") for line in reason_lines(report["skip_reasons"])]
    if report.get("frameworks_against_reference"):
        lines += [
            ("", "text"),
            (
                "greedy tokens of each framework against the same reference (same weights, same "
                "prompts):",
                "text",
            ),
        ]
        lines += [
            (line, "text") for line in reference_table(report["frameworks_against_reference"])
        ]
    for fault in report.get("device_faults", []):
        if fault["moved"]:  # (the verdicts name the fault in any case)
            lines.append(
                (
                    f"device fault in {fault['process']} ({fault['nodeid']}: {fault['line']}): that "
                    f"process ran no test after it; the {len(fault['moved'])} test(s) it had been "
                    "given were moved to fresh processes",
                    "text",
                )
            )
    for problem in report["record_problems"]:
        lines.append((f"record problem: {problem}", "problem"))
    for note in report.get("manifest", {}).get("notes", []):
        lines.append((f"pytest-rocm: {note}", "problem"))
    if not report.get("complete", True):
        lines.append(("run incomplete: " + "; ".join(report["incomplete_causes"]), "problem"))
        if report.get("never_ran"):
            shown = ", ".join(report["never_ran"][:10])
            more = (
                f" and {len(report['never_ran']) - 10} more"
                if len(report["never_ran"]) > 10
                else ""
            )
            lines.append((f"gates that never ran: {shown}{more}", "problem"))
    lines += [
        ("", "text"),
        (f"conclusion: {report['conclusion']} ({report['conclusion_reason']})", "conclusion"),
    ]
    # test ids, reasons and messages are the tests' text: no escape sequence or invisible character
    # of theirs reaches the terminal
    return [(visible(line), kind) for line, kind in lines]
