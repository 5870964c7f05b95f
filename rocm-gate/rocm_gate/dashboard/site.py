"""The dashboard's pages, built from history into a folder of static HTML (`rocm-gate dashboard`).

`build` reads the store once (`data.read`) and renders each page from that data alone: a page's
function here turns the data into what its template (`dashboard/templates/`) shows, and the
template writes it, escaping every value (`render`: no value from the artifacts, a test id, a
runner, a reason, ever becomes markup). A link is made only of an https:// URL (a run's and a
commit's links only of a repository `owner/name`, a numeric run id and a 40-hex SHA) or of a page
of the site. The pages need nothing beyond their folder: no script, no font, no CDN. Every list is
capped (the count is always given), tables scroll sideways at phone width, and main runs are shown
apart from PR runs.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from rocm_gate.dashboard import charts
from rocm_gate.dashboard.data import SiteData, read
from rocm_gate.dashboard.render import Cell, Table, Text, link, render, table
from rocm_gate.history import queries
from rocm_gate.history.backends import Connection

PAGES = {
    "index.html": "Overview",
    "trunk.html": "Trunk health",
    "grid.html": "Runs x groups",
    "suspects.html": "Suspects and flaky tests",
    "stacks.html": "Accepted stacks",
}
CELL_TESTS = 50  # failing tests listed in one grid cell
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


@dataclass(frozen=True)
class Figure:
    """A chart with the table of its numbers beside it."""

    chart: charts.Chart
    table: Table


def run_link(run: dict) -> Text:
    """The run on GitHub (its log is one click further), when its repository and run id are
    known."""
    repository, number = str(run.get("repository") or ""), str(run.get("gh_run_id") or "")
    name = f"run {run.get('id') or run.get('run')}"
    if _REPOSITORY.match(repository) and number.isdigit():
        return link(f"https://github.com/{repository}/actions/runs/{number}", name)
    return Text(name)


def commit_link(run: dict) -> Text:
    repository, sha = str(run.get("repository") or ""), str(run.get("git_sha") or "")
    if _REPOSITORY.match(repository) and _SHA.match(sha):
        return link(f"https://github.com/{repository}/commit/{sha}", sha[:12])
    return Text(sha[:12])


def test_page_name(test: str) -> str:
    return f"test-{hashlib.sha256(test.encode()).hexdigest()[:16]}.html"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _hours(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:.1f} h"


# the overview ----------------------------------------------------------------------------------


def overview(data: SiteData) -> dict:
    """The front page: parity now, parity over time, the latest runs."""
    return {**_parity_now(data), "over_time": _parity_over_time(data), "latest": _latest(data)}


def _parity_now(data: SiteData) -> dict:
    """Each SKU's newest parity figure: a run that ran no test, or a group no test of which passed
    on the reference, gives none (history/queries.py: parity_now, parity_trend)."""
    latest: dict[tuple[str, str], dict] = {}
    for row in data.parity_trend:
        latest[(row["sku"], row["group"])] = row
    references = ", ".join(sorted({r["reference"] for r in latest.values()})) or "the reference"
    overall = table(
        "Overall parity per SKU (newest parity report)",
        ["SKU", "parity", "reference", "run"],
        [
            [sku, _pct(r["parity"]), r["reference"] or "", run_link(r)]
            for sku, r in sorted(data.parity_now.items())
        ],
    )
    headers = ["SKU", "group", "parity", "reference", "both pass / pass on the reference"]
    now = table(
        "Parity now",
        [*headers, "merge-blocking", "gaps"],
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
    chart = charts.bars(
        f"Parity with {references} now, per SKU and group",
        [f"{sku} {group}" for sku, group in sorted(latest)],
        [latest[k]["parity"] for k in sorted(latest)],
        1.0,
        "%",
    )
    return {"references": references, "overall": overall, "now": Figure(chart, now)}


def _parity_over_time(data: SiteData) -> list[Figure]:
    by_sku: dict[str, list[dict]] = defaultdict(list)
    for row in data.parity_trend:
        by_sku[row["sku"]].append(row)
    figures = []
    for sku, rows in sorted(by_sku.items()):
        run_ids = sorted({r["run"] for r in rows})
        when = {r["run"]: (r["started"] or f"run {r['run']}")[:10] for r in rows}
        groups = sorted({r["group"] for r in rows})
        cell = {(r["run"], r["group"]): r["parity"] for r in rows}
        series = {g: [cell.get((run, g)) for run in run_ids] for g in groups}
        numbers = table(
            f"Parity over time on {sku}",
            ["run", "date", *groups],
            [[run, when[run], *(_pct(cell.get((run, g))) for g in groups)] for run in run_ids],
        )
        reference = ", ".join(sorted({r["reference"] for r in rows}))
        chart = charts.lines(
            f"Parity with {reference} over time on {sku}",
            [when[r] for r in run_ids],
            series,
            1.0,
            "%",
        )
        figures.append(Figure(chart, numbers))
    return figures


def _latest(data: SiteData) -> Figure:
    """The latest runs and their run time (from the manifest: start to finish of the gate run)."""
    recent = data.latest
    timed = [r for r in reversed(recent) if r["seconds"] is not None]
    numbers = table(
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
    chart = charts.bars(
        "Run time of the latest runs, in seconds",
        [f"run {r['id']} {r['sku']}" for r in timed],
        [r["seconds"] for r in timed],
        unit=" s",
    )
    return Figure(chart, numbers)


# runs x groups ---------------------------------------------------------------------------------

GRID_TITLES = {
    "main": "Main runs (the default branch)",
    "pr": "PR runs",
    "other": "Other runs (no GitHub event, other branches)",
}


@dataclass(frozen=True)
class GridCell:
    """A group in a run: its worst verdict (and its colour), its counts, its failing tests (at
    most CELL_TESTS, then how many more)."""

    verdict: str
    colour: str
    counts: str
    failing: list[tuple[str, str]]
    more: int


@dataclass(frozen=True)
class GridRow:
    run: list[Cell]  # the run's link, its commit's, its SKU, PR and conclusion
    cells: list[GridCell | None]  # per group; None: the run has no test of it


@dataclass(frozen=True)
class Grid:
    origin: str
    title: str
    groups: list[str]
    rows: list[GridRow]


def grid_page(data: SiteData) -> dict:
    grids = [
        Grid(
            origin,
            GRID_TITLES[origin],
            grid["groups"],
            [_grid_row(grid, run) for run in grid["runs"]],
        )
        for origin, grid in data.grids.items()
        if grid["runs"]
    ]
    return {"legend": list(COLOURS.items()), "grids": grids}


def _grid_row(grid: dict, run: dict) -> GridRow:
    cells: list[GridCell | None] = []
    for group in grid["groups"]:
        cell = grid["cells"].get((run["id"], group))
        if cell is None:
            cells.append(None)
            continue
        failing = cell["failing"]
        cells.append(
            GridCell(
                cell["worst"],
                COLOURS[cell["worst"]],
                ", ".join(f"{n} {v}" for v, n in sorted(cell["counts"].items())),
                [(f["test"], f["verdict"]) for f in failing[:CELL_TESTS]],
                max(0, len(failing) - CELL_TESTS),
            )
        )
    pr = f" PR #{int(run['pr'])}" if isinstance(run.get("pr"), int) else ""
    label = f" {run['sku']}{pr} ({run['conclusion']})"
    return GridRow([run_link(run), ": ", commit_link(run), label], cells)


# trunk health and the tests that failed on main ------------------------------------------------


def trunk_page(data: SiteData) -> dict:
    health = table(
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
                h["sku"],
                h["group"],
                h["state"],
                str(h["streak"]),
                [
                    commit_link({"git_sha": h["last_green"]["sha"], "repository": None}),
                    " " + (h["last_green"]["started"] or ""),
                ]
                if h["last_green"]
                else "never in these runs",
                f"{h['flips']} of {h['runs']}",
                _hours(h["median_recovery_s"]),
                str(h["recoveries"]),
            ]
            for h in data.health
        ],
    )
    failures = table(
        "Tests that failed on main",
        ["test"],
        [[Text(t, test_page_name(t), code=True)] for t in data.failures],
    )
    return {"health": health, "failed": len(data.failures), "failures": failures}


def test_page(data: SiteData, test: str) -> dict:
    runs = data.test_runs[test]
    rows: list[list[Cell]] = [
        [
            run_link(r),
            r["started"] or "",
            r["origin"] + (f" #{r['pr']}" if r["pr"] else ""),
            r["sku"],
            commit_link(r),
            r["runner"] or "",
            r["verdict"],
            Text(r["fingerprint"] or "", code=True),
        ]
        for r in runs
    ]
    headers = ["run", "started", "origin", "SKU", "commit", "runner", "verdict", "failure"]
    return {"test": test, "count": len(runs), "runs": table("Runs of this test", headers, rows)}


# suspects, flaky tests, known gaps -------------------------------------------------------------


def suspects_page(data: SiteData) -> dict:
    flaky, stopped = data.flaky["flaky"], data.flaky["stopped"]
    return {
        "infra_min": queries.INFRA_MIN,
        "window": queries.WINDOW,
        "flaky_window": queries.FLAKY_WINDOW,
        "suspects": table(
            "Suspects",
            ["test", "SKU", "kind", "why", "last seen"],
            [
                [s["test"], s["sku"], s["kind"], s["reason"], s["last_seen"] or ""]
                for s in data.suspects
            ],
        ),
        "flaky": table(
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
                for f in flaky
            ],
        ),
        "stopped": table(
            "Tests that stopped being flaky",
            ["test", "last flake"],
            [[f["test"], f["last_seen"] or ""] for f in stopped],
        ),
        "gaps": table(
            "Known gaps, oldest first",
            ["test", "issue", "reason", "first seen", "age (days)", "state"],
            [
                [
                    Text(g["test"], code=True),
                    link(g["issue"]),
                    g["reason"] or "",
                    g["first_seen"] or "",
                    str(g["age_days"]),
                    _gap_state(g),
                ]
                for g in data.gaps
            ],
        ),
    }


def _gap_state(gap: dict) -> str:
    if gap["closed"]:
        return (
            "closed: its marker is gone (the newest runs on "
            + ", ".join(gap["closed_on"])
            + " have the test with no such gap)"
        )
    if gap["ready_to_close"]:
        return "yes: it passes on " + ", ".join(gap["passing_on"])
    return "no: still fails on " + (", ".join(gap["still_failing_on"]) or "its SKUs")


# accepted stacks and drift ---------------------------------------------------------------------


def _changes(changed: dict) -> str:
    return "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())


def stacks_page(data: SiteData) -> dict:
    accepted = []
    for sku, runs in sorted(data.accepted.items()):
        rows: list[list[Cell]] = [
            [
                r["run"],
                r["started"] or "",
                (r["git_sha"] or "")[:12],
                *(r["stack"][k] or "" for k in queries.STACK_FIELDS),
                _changes(r["changed"]) or "-",
            ]
            for r in reversed(runs)
        ]
        headers = ["run", "started", "commit", *queries.STACK_FIELDS, "changed since the previous"]
        stacks = table(f"Accepted stacks on {sku}", headers, rows)
        accepted.append({"sku": sku, "last": runs[-1]["run"], "table": stacks})
    drift = table(
        "Drift",
        ["run", "SKU", "started", "conclusion", "what differs"],
        [
            [d["run"], d["sku"], d["started"] or "", d["conclusion"], _changes(d["changed"])]
            for d in data.drift
        ],
    )
    return {"accepted": accepted, "drift": drift}


# the site --------------------------------------------------------------------------------------


def _page(name: str, template: str, data: SiteData, context: dict) -> str:
    return (
        render(
            template,
            title=PAGES.get(name, "Test"),
            pages=list(PAGES.items()),
            current=name,
            generated=data.generated,
            **context,
        )
        + "\n"
    )


def pages(data: SiteData) -> dict[str, str]:
    """{file name: page} of the whole site: the five pages, then a page per test that failed on
    main."""
    contexts = {
        "index.html": overview(data),
        "trunk.html": trunk_page(data),
        "grid.html": grid_page(data),
        "suspects.html": suspects_page(data),
        "stacks.html": stacks_page(data),
    }
    built = {name: _page(name, name, data, context) for name, context in contexts.items()}
    for test in data.failures:
        name = test_page_name(test)
        built[name] = _page(name, "test.html", data, test_page(data, test))
    return built


def write(data: SiteData, out: Path) -> dict[str, int]:
    """Write the site into `out`; returns {file: bytes}."""
    out.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, text in pages(data).items():
        (out / name).write_text(text, encoding="utf-8")
        sizes[name] = len(text.encode())
    (out / "style.css").write_text(STYLE + "\n", encoding="utf-8")
    sizes["style.css"] = len(STYLE) + 1
    return sizes


def build(conn: Connection, out: Path, landed: frozenset | None = None) -> dict[str, int]:
    """Read the store (`data.read`), then write the site into `out`; returns {file: bytes}.
    `landed`: main's commits (a merge queue's runs count where it holds their commit)."""
    return write(read(conn, landed), out)
