"""Terminal summary: a per-group table and every reason a test did not run, with counts."""

from __future__ import annotations

# Statuses of the last attempt, then the verdicts of tests that failed first.
COLUMNS = (("passed", "passed"), ("failed", "failed"), ("error", "error"), ("crashed", "crashed"),
           ("skipped", "skipped"), ("xfailed", "xfail"), ("known_gap", "known gaps"), ("not_applicable", "n/a"),
           ("regression", "regression"), ("infra", "infra"), ("flaky", "flaky"))


def group_table(groups: dict[str, dict[str, int]]) -> list[str]:
    headers = ["group", *(label for _, label in COLUMNS), "total"]
    rows = [[group, *(str(c[key]) for key, _ in COLUMNS), str(c["total"])] for group, c in groups.items()]
    totals = ["all", *(str(sum(c[key] for c in groups.values())) for key, _ in COLUMNS),
              str(sum(c["total"] for c in groups.values()))]
    widths = [max(len(r[i]) for r in [headers, totals, *rows]) for i in range(len(headers))]

    def line(cells):
        return "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(cells))

    return [line(headers), *(line(r) for r in rows), line(totals)]


def reason_lines(reasons: list[dict]) -> list[str]:
    return [f"{r['count']:>5}  {r['status']}: {r['reason']}" for r in reasons]
