"""The dashboard's pages, built from history into a folder of static HTML (`rocm-gate dashboard`).

Every name from the artifacts (test ids, runners, reasons) is escaped; a link is made only of an
https:// URL (a run's and a commit's links only of a repository `owner/name`, a numeric run id and a
40-hex SHA). The pages need nothing beyond their folder: no script, no font, no CDN. Every list is
capped (the count is always given), tables scroll sideways at phone width, and main runs are shown
apart from PR runs.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from pathlib import Path

from pytest_rocm.dashboard import charts
from pytest_rocm.history import queries
from pytest_rocm.history.backends import Connection
from pytest_rocm.schemas.markdown import html_text as escape
from pytest_rocm.trunk.health import trunk_health

PAGES = {
    "index.html": "Overview",
    "trunk.html": "Trunk health",
    "grid.html": "Runs x groups",
    "suspects.html": "Suspects and flaky tests",
    "stacks.html": "Accepted stacks",
}
ROWS = 1000  # rows of one table; the rest are counted
CELL_TESTS = 50  # failing tests listed in one grid cell
TEST_PAGES = 300  # tests that failed on main with a page of their own (the most recent)
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
COLOURS = {
    "regression": "#d62728",
    "unconfirmed": "#ff9896",
    "infra": "#ff7f0e",
    "flaky": "#ffd92f",
    "pass": "#2ca02c",
    "other": "#c7c7c7",
}
STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 2em;color:#222}nav{margin:1em 0;padding:.5em 0;
border-bottom:1px solid #ccc}nav a{margin-right:1.2em}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f4f4f4}
.chart{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}figure{margin:0}td.cell{min-width:5em}
.muted{color:#666}details summary{cursor:pointer}code{font-size:12px;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}svg{max-width:100%;height:auto}
@media (max-width:600px){body{margin:0 .5em 1em;font-size:13px}h1{font-size:1.3em}nav a{display:inline-block;margin:.2em .8em .2em 0}}"""


def _link(url: str | None, text: str | None = None) -> str:
    if url and url.startswith("https://"):
        return f'<a href="{escape(url)}">{escape(text or url)}</a>'
    return escape(text or url or "")


def _table(
    caption: str, headers: list[str], rows: list[list[str]], raw: bool = False, limit: int = ROWS
) -> str:
    """A table of at most `limit` rows (then one saying how many more); cells are escaped unless
    `raw` (cells already built from escaped parts). It scrolls sideways inside its own box on a
    narrow screen."""
    head = "".join(f'<th scope="col">{escape(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw else escape(str(c))}</td>" for c in row) + "</tr>"
        for row in rows[:limit]
    )
    more = (
        f'<tr class="more"><td colspan="{len(headers)}" class="muted">and {len(rows) - limit} more</td></tr>'
        if len(rows) > limit
        else ""
    )
    empty = "" if rows else f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return (
        f'<div class="scroll"><table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}{more}{empty}</tbody></table></div>"
    )


def run_link(run: dict) -> str:
    """The run on GitHub (its log is one click further), when its repository and run id are
    known."""
    repository, number = str(run.get("repository") or ""), str(run.get("gh_run_id") or "")
    if _REPOSITORY.match(repository) and number.isdigit():
        return _link(
            f"https://github.com/{repository}/actions/runs/{number}",
            f"run {run.get('id') or run.get('run')}",
        )
    return escape(f"run {run.get('id') or run.get('run')}")


def commit_link(run: dict) -> str:
    repository, sha = str(run.get("repository") or ""), str(run.get("git_sha") or "")
    if _REPOSITORY.match(repository) and _SHA.match(sha):
        return _link(f"https://github.com/{repository}/commit/{sha}", sha[:12])
    return escape(sha[:12])


def test_page_name(test: str) -> str:
    return f"test-{hashlib.sha256(test.encode()).hexdigest()[:16]}.html"


def _figure(svg: str, table: str) -> str:
    return f'<div class="chart"><figure>{svg}</figure>{table}</div>'


def _page(name: str, body: str, generated: str) -> str:
    nav = "".join(
        f'<a href="{page}"'
        + (' aria-current="page"' if page == name else "")
        + f">{escape(title)}</a>"
        for page, title in PAGES.items()
    )
    title = PAGES.get(name, "Test")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pytest-rocm: {escape(title)}'
        f'</title><meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" '
        f'href="style.css"></head><body><header><h1>ROCm gate coverage: {escape(title)}</h1><nav>{nav}</nav></header>'
        f'<main>{body}</main><footer class="muted">Built from the history store; newest run {escape(generated)}.'
        f"</footer></body></html>\n"
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def overview(conn: Connection, landed: frozenset | None = None) -> str:
    """The front page: parity now, parity over time, the latest runs."""
    trend = queries.parity_trend(conn)
    return "".join(
        [*_parity_now(conn, trend, landed), *_parity_over_time(trend), *_latest_runs(conn)]
    )


def _parity_now(conn: Connection, trend: list[dict], landed: frozenset | None) -> list[str]:
    """Each SKU's newest parity figure: a run that ran no test, or a group no test of which passed
    on the reference, gives none (history/queries.py: parity_now, parity_trend)."""
    latest: dict[tuple[str, str], dict] = {}
    for row in trend:
        latest[(row["sku"], row["group"])] = row
    references = ", ".join(sorted({r["reference"] for r in latest.values()})) or "the reference"
    parts = [
        f"<h2>Parity with {escape(references)} now</h2>",
        f'<p class="muted">Share of the tests passing on the reference ({escape(references)}) that also pass on '
        "ROCm, per SKU and group, from each SKU's newest parity report; the reference is named on every row.</p>",
    ]
    # main runs say what a SKU's parity is (a PR's results are written by its own code); without
    # any, every run
    overall = queries.parity_now(conn, landed)
    parts.append(
        _table(
            "Overall parity per SKU (newest parity report)",
            ["SKU", "parity", "reference", "run"],
            [
                [escape(sku), escape(_pct(r["parity"])), escape(r["reference"] or ""), run_link(r)]
                for sku, r in sorted(overall.items())
            ],
            raw=True,
        )
    )
    labels = [f"{sku} {group}" for sku, group in sorted(latest)]
    values = [latest[k]["parity"] for k in sorted(latest)]
    table = _table(
        "Parity now",
        [
            "SKU",
            "group",
            "parity",
            "reference",
            "both pass / pass on the reference",
            "merge-blocking",
            "gaps",
        ],
        [
            [
                sku,
                group,
                _pct(r["parity"]),
                r["reference"],
                f"{r['both_passing']}/{r['reference_passing']}",
                r["blocking"],
                r["gaps"],
            ]
            for (sku, group), r in sorted(latest.items())
        ],
    )
    parts.append(
        _figure(
            charts.bars(
                f"Parity with {references} now, per SKU and group", labels, values, 1.0, "%"
            ),
            table,
        )
    )
    return parts


def _parity_over_time(trend: list[dict]) -> list[str]:
    parts = ["<h2>Parity over time</h2>"]
    by_sku: dict[str, list[dict]] = defaultdict(list)
    for row in trend:
        by_sku[row["sku"]].append(row)
    for sku, rows in sorted(by_sku.items()):
        run_ids = sorted({r["run"] for r in rows})
        when = {r["run"]: (r["started"] or f"run {r['run']}")[:10] for r in rows}
        groups = sorted({r["group"] for r in rows})
        cell = {(r["run"], r["group"]): r["parity"] for r in rows}
        series = {g: [cell.get((run, g)) for run in run_ids] for g in groups}
        table = _table(
            f"Parity over time on {sku}",
            ["run", "date", *groups],
            [[run, when[run], *(_pct(cell.get((run, g))) for g in groups)] for run in run_ids],
        )
        reference = ", ".join(sorted({r["reference"] for r in rows}))
        parts.append(
            _figure(
                charts.lines(
                    f"Parity with {reference} over time on {sku}",
                    [when[r] for r in run_ids],
                    series,
                    1.0,
                    "%",
                ),
                table,
            )
        )
    return parts


def _latest_runs(conn: Connection) -> list[str]:
    recent = queries.runs(conn, 20)
    parts = [
        "<h2>Latest runs and time to signal</h2>",
        '<p class="muted">Run time from the manifest (start to finish of the gate run); the queue '
        "time before a runner took the job is not in the artifacts.</p>",
    ]
    timed = [r for r in reversed(recent) if r["seconds"] is not None]
    table = _table(
        "Latest runs",
        ["run", "started", "SKU", "runner", "commit", "conclusion", "complete", "run time (s)"],
        [
            [
                r["id"],
                r["started"] or "",
                r["sku"],
                r["runner"] or "",
                (r["git_sha"] or "")[:12],
                r["conclusion"],
                "yes" if r["complete"] else "no",
                f"{r['seconds']:.0f}" if r["seconds"] is not None else "n/a",
            ]
            for r in recent
        ],
    )
    parts.append(
        _figure(
            charts.bars(
                "Run time of the latest runs, in seconds",
                [f"run {r['id']} {r['sku']}" for r in timed],
                [r["seconds"] for r in timed],
                unit=" s",
            ),
            table,
        )
    )
    return parts


ORIGINS = (
    ("main", "Main runs (the default branch)"),
    ("pr", "PR runs"),
    ("other", "Other runs (no GitHub event, other branches)"),
)


def grid_page(conn: Connection, landed: frozenset | None = None) -> str:
    legend = " ".join(
        f'<span style="background:{c}33;padding:0 .4em">{v}</span>' for v, c in COLOURS.items()
    )
    parts = [
        f"<p>Newest runs first; each cell is the worst verdict of the group in that run ({legend}); open a cell "
        "for its failing tests. Main runs are apart from PR runs: only main runs say what state main is in.</p>"
    ]
    for origin, title in ORIGINS:
        data = queries.grid(conn, 40, origin, landed)
        if data["runs"]:
            parts.append(
                f"<h2>{escape(title)} ({len(data['runs'])} newest)</h2>" + _grid_table(data, origin)
            )
    return "".join(parts)


def _grid_table(data: dict, origin: str) -> str:
    groups = data["groups"]
    head = "".join(f'<th scope="col">{escape(g)}</th>' for g in groups)
    rows = []
    for run in data["runs"]:
        cells = []
        for group in groups:
            cell = data["cells"].get((run["id"], group))
            if cell is None:
                cells.append('<td class="cell muted">-</td>')
                continue
            counts = ", ".join(f"{n} {v}" for v, n in sorted(cell["counts"].items()))
            shown = cell["failing"][:CELL_TESTS]
            failing = "".join(
                f"<li><code>{escape(f['test'])}</code> {escape(f['verdict'])}</li>" for f in shown
            )
            if len(cell["failing"]) > CELL_TESTS:
                failing += f'<li class="muted">and {len(cell["failing"]) - CELL_TESTS} more</li>'
            detail = (
                f"<details><summary>{escape(counts)}</summary><ul>{failing}</ul></details>"
                if failing
                else escape(counts)
            )
            cells.append(
                f'<td class="cell" style="background:{COLOURS[cell["worst"]]}33" '
                f'data-verdict="{cell["worst"]}">{detail}</td>'
            )
        pr = f" PR #{int(run['pr'])}" if isinstance(run.get("pr"), int) else ""
        label = f"{commit_link(run)} {escape(run['sku'])}{pr} ({escape(run['conclusion'])})"
        rows.append(f'<tr><th scope="row">{run_link(run)}: {label}</th>{"".join(cells)}</tr>')
    return (
        f'<div class="scroll"><table class="grid" id="grid-{origin}"><caption>Runs x groups: {escape(origin)} runs'
        f'</caption><thead><tr><th scope="col">run</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _hours(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:.1f} h"


def trunk_page(conn: Connection, failures: list[str], landed: frozenset | None = None) -> str:
    health = trunk_health(conn, landed=landed)
    parts = [
        "<h2>Main, per SKU and group</h2>",
        '<p class="muted">From main runs only. A group is red in a run when one of its blocking gates regressed '
        "there, and quarantined when only quarantined gates failed (main still fails them: not green, and no "
        "recovery); the streak counts runs; time to recovery is the median from a group's first failing run to "
        "its next green one.</p>",
        _table(
            "Trunk health",
            [
                "SKU",
                "group",
                "now",
                "streak (runs)",
                "last green",
                "flips (last runs)",
                "median time to recovery",
                "recoveries",
            ],
            [
                [
                    escape(h["sku"]),
                    escape(h["group"]),
                    escape(h["state"]),
                    str(h["streak"]),
                    (
                        commit_link({"git_sha": h["last_green"]["sha"], "repository": None})
                        + " "
                        + escape(h["last_green"]["started"] or "")
                    )
                    if h["last_green"]
                    else "never in these runs",
                    f"{h['flips']} of {h['runs']}",
                    escape(_hours(h["median_recovery_s"])),
                    str(h["recoveries"]),
                ]
                for h in health
            ],
            raw=True,
        ),
        f"<h2>Tests that failed on main ({len(failures)}, newest first)</h2>",
        '<p class="muted">Each has a page with its runs across SKUs and commits.</p>',
        _table(
            "Tests that failed on main",
            ["test"],
            [[f'<a href="{test_page_name(t)}"><code>{escape(t)}</code></a>'] for t in failures],
            raw=True,
        ),
    ]
    return "".join(parts)


def test_page(conn: Connection, test: str, landed: frozenset | None = None) -> str:
    runs = queries.test_runs(conn, test, landed=landed)
    return (
        f"<h2><code>{escape(test)}</code></h2>"
        f'<p class="muted">Its newest {len(runs)} run(s), across SKUs and commits; main and PR runs are marked. '
        "A run's link opens its GitHub run (and its log).</p>"
        + _table(
            "Runs of this test",
            ["run", "started", "origin", "SKU", "commit", "runner", "verdict", "failure"],
            [
                [
                    run_link(r),
                    escape(r["started"] or ""),
                    escape(r["origin"] + (f" #{r['pr']}" if r["pr"] else "")),
                    escape(r["sku"]),
                    commit_link(r),
                    escape(r["runner"] or ""),
                    escape(r["verdict"]),
                    f"<code>{escape(r['fingerprint'] or '')}</code>",
                ]
                for r in runs
            ],
            raw=True,
        )
    )


def suspects_page(conn: Connection, landed: frozenset | None = None) -> str:
    found = queries.suspects(conn, landed=landed)
    flaky = queries.flaky(conn, landed=landed)
    gaps = queries.known_gaps(conn, landed)
    parts = [
        f"<h2>Suspects from history ({len(found)})</h2>",
        f'<p class="muted">Infra in at least {queries.INFRA_MIN} of a test\'s last {queries.WINDOW} runs on a SKU '
        "(no PR's runs): on two or more runners it is a suspected real bug; on one runner the machine is the "
        "suspect.</p>",
        _table(
            "Suspects",
            ["test", "SKU", "kind", "why", "last seen"],
            [[s["test"], s["sku"], s["kind"], s["reason"], s["last_seen"] or ""] for s in found],
        ),
        f"<h2>Flaky now ({len(flaky['flaky'])})</h2>",
        f'<p class="muted">A pass and a fail on the same commit and SKU, or failures of one shape on '
        "alternate commits between passes (three or more), within the SKU's last "
        f"{queries.FLAKY_WINDOW} tested commits (the window and the rule PR checks are judged by; no "
        "PR's runs).</p>",
        _table(
            "Flaky tests",
            ["test", "flaky runs", "runs looked at", "SKUs", "first seen", "last seen"],
            [
                [
                    f["test"],
                    f["flaky_runs"],
                    f["runs"],
                    ", ".join(f["skus"]),
                    f["first_seen"] or "",
                    f["last_seen"] or "",
                ]
                for f in flaky["flaky"]
            ],
        ),
        f"<h2>No longer flaky ({len(flaky['stopped'])})</h2>",
        _table(
            "Tests that stopped being flaky",
            ["test", "last flake"],
            [[f["test"], f["last_seen"] or ""] for f in flaky["stopped"]],
        ),
        f"<h2>Known gaps ({len(gaps)})</h2>",
        _table(
            "Known gaps, oldest first",
            ["test", "issue", "reason", "first seen", "age (days)", "state"],
            [
                [
                    f"<code>{escape(g['test'])}</code>",
                    _link(g["issue"]),
                    escape(g["reason"] or ""),
                    escape(g["first_seen"] or ""),
                    escape(str(g["age_days"])),
                    _gap_state(g),
                ]
                for g in gaps
            ],
            raw=True,
        ),
    ]
    return "".join(parts)


def _gap_state(gap: dict) -> str:
    if gap["closed"]:
        return (
            "closed: its marker is gone (the newest runs on "
            + escape(", ".join(gap["closed_on"]))
            + " have the test with no such gap)"
        )
    if gap["ready_to_close"]:
        return "yes: it passes on " + escape(", ".join(gap["passing_on"]))
    return "no: still fails on " + escape(", ".join(gap["still_failing_on"]) or "its SKUs")


def stacks_page(conn: Connection) -> str:
    accepted = queries.accepted_stacks(conn)
    parts = [
        '<p class="muted">An accepted stack: a complete run that concluded success. Per SKU, the newest first, '
        "with what changed since the one before it.</p>"
    ]
    for sku, runs in sorted(accepted.items()):
        rows = [
            [
                r["run"],
                r["started"] or "",
                (r["git_sha"] or "")[:12],
                *(r["stack"][k] or "" for k in queries.STACK_FIELDS),
                "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in r["changed"].items()) or "-",
            ]
            for r in reversed(runs)
        ]
        parts.append(f"<h2>{escape(sku)}: last accepted stack (run {runs[-1]['run']})</h2>")
        parts.append(
            _table(
                f"Accepted stacks on {sku}",
                ["run", "started", "commit", *queries.STACK_FIELDS, "changed since the previous"],
                rows,
            )
        )
    drifted = queries.drift(conn)
    parts.append(
        f"<h2>Runs on a stack that differs from the last accepted one ({len(drifted)})</h2>"
    )
    parts.append(
        _table(
            "Drift",
            ["run", "SKU", "started", "conclusion", "what differs"],
            [
                [
                    d["run"],
                    d["sku"],
                    d["started"] or "",
                    d["conclusion"],
                    "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in d["changed"].items()),
                ]
                for d in drifted
            ],
        )
    )
    return "".join(parts)


def build(conn: Connection, out: Path, landed: frozenset | None = None) -> dict[str, int]:
    """Write the site into `out`; returns {file: bytes}. `landed`: main's commits (a merge queue's
    runs count where it holds their commit)."""
    out.mkdir(parents=True, exist_ok=True)
    newest = queries.runs(conn, 1)
    generated = (newest[0]["started"] or f"run {newest[0]['id']}") if newest else "none yet"
    failures = queries.main_failures(conn, TEST_PAGES, landed)
    bodies = {
        "index.html": overview(conn, landed),
        "trunk.html": trunk_page(conn, failures, landed),
        "grid.html": grid_page(conn, landed),
        "suspects.html": suspects_page(conn, landed),
        "stacks.html": stacks_page(conn),
    }
    bodies.update({test_page_name(test): test_page(conn, test, landed) for test in failures})
    sizes = {}
    for name, body in bodies.items():
        text = _page(name, body, generated)
        (out / name).write_text(text, encoding="utf-8")
        sizes[name] = len(text.encode())
    (out / "style.css").write_text(STYLE + "\n", encoding="utf-8")
    sizes["style.css"] = len(STYLE) + 1
    return sizes
