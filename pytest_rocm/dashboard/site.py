"""The dashboard's pages, built from history into a folder of static HTML (`rocm-gate dashboard`).

Every name from the artifacts (test ids, runners, reasons) is escaped; a link is made only of an
https:// URL. The pages need nothing beyond their folder: no script, no font, no CDN.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from html import escape
from pathlib import Path

from pytest_rocm.dashboard import charts
from pytest_rocm.history import queries

PAGES = {"index.html": "Overview", "grid.html": "Runs x groups", "suspects.html": "Suspects and flaky tests",
         "stacks.html": "Accepted stacks"}
COLOURS = {"regression": "#d62728", "unconfirmed": "#ff9896", "infra": "#ff7f0e", "flaky": "#ffd92f",
           "pass": "#2ca02c", "other": "#c7c7c7"}
STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 2em;color:#222}nav{margin:1em 0;padding:.5em 0;
border-bottom:1px solid #ccc}nav a{margin-right:1.2em}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f4f4f4}
.chart{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}figure{margin:0}td.cell{min-width:5em}
.muted{color:#666}details summary{cursor:pointer}code{font-size:12px}"""


def _link(url: str | None, text: str | None = None) -> str:
    if url and url.startswith("https://"):
        return f'<a href="{escape(url)}">{escape(text or url)}</a>'
    return escape(text or url or "")


def _table(caption: str, headers: list[str], rows: list[list[str]], raw: bool = False) -> str:
    """A table; cells are escaped unless `raw` (cells already built from escaped parts)."""
    head = "".join(f"<th scope=\"col\">{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    empty = "" if rows else f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}{empty}</tbody></table>"


def _figure(svg: str, table: str) -> str:
    return f'<div class="chart"><figure>{svg}</figure>{table}</div>'


def _page(name: str, body: str, generated: str) -> str:
    nav = "".join(f'<a href="{page}"' + (' aria-current="page"' if page == name else "") + f">{escape(title)}</a>"
                  for page, title in PAGES.items())
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pytest-rocm: {escape(PAGES[name])}'
            f'</title><meta name="viewport" content="width=device-width"><link rel="stylesheet" href="style.css">'
            f'</head><body><header><h1>ROCm gate coverage: {escape(PAGES[name])}</h1><nav>{nav}</nav></header>'
            f'<main>{body}</main><footer class="muted">Built from the history store; newest run {escape(generated)}.'
            f'</footer></body></html>\n')


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def overview(conn: sqlite3.Connection) -> str:
    trend = queries.parity_trend(conn)
    latest: dict[tuple[str, str], dict] = {}
    for row in trend:
        latest[(row["sku"], row["group"])] = row
    parts = ["<h2>Parity with CUDA now</h2>",
             '<p class="muted">Share of the tests passing on CUDA that also pass on ROCm, per SKU and group, from '
             "each SKU's newest parity report.</p>"]
    labels = [f"{sku} {group}" for sku, group in sorted(latest)]
    values = [latest[k]["parity"] for k in sorted(latest)]
    table = _table("Parity now", ["SKU", "group", "parity", "both pass / pass on CUDA", "merge-blocking", "gaps"],
                   [[sku, group, _pct(r["parity"]), f"{r['both_passing']}/{r['reference_passing']}", r["blocking"], r["gaps"]]
                    for (sku, group), r in sorted(latest.items())])
    parts.append(_figure(charts.bars("Parity with CUDA now, per SKU and group", labels, values, 1.0, "%"), table))
    parts.append("<h2>Parity over time</h2>")
    by_sku: dict[str, list[dict]] = defaultdict(list)
    for row in trend:
        by_sku[row["sku"]].append(row)
    for sku, rows in sorted(by_sku.items()):
        run_ids = sorted({r["run"] for r in rows})
        when = {r["run"]: (r["started"] or f"run {r['run']}")[:10] for r in rows}
        groups = sorted({r["group"] for r in rows})
        cell = {(r["run"], r["group"]): r["parity"] for r in rows}
        series = {g: [cell.get((run, g)) for run in run_ids] for g in groups}
        table = _table(f"Parity over time on {sku}", ["run", "date", *groups],
                       [[run, when[run], *(_pct(cell.get((run, g))) for g in groups)] for run in run_ids])
        parts.append(_figure(charts.lines(f"Parity with CUDA over time on {sku}", [when[r] for r in run_ids], series,
                                          1.0, "%"), table))
    recent = queries.runs(conn, 20)
    parts.append("<h2>Latest runs and time to signal</h2>")
    parts.append('<p class="muted">Run time from the manifest (start to finish of the gate run); the queue time '
                 "before a runner took the job is not in the artifacts.</p>")
    timed = [r for r in reversed(recent) if r["seconds"] is not None]
    table = _table("Latest runs", ["run", "started", "SKU", "runner", "commit", "conclusion", "complete", "run time (s)"],
                   [[r["id"], r["started"] or "", r["sku"], r["runner"] or "", (r["git_sha"] or "")[:12], r["conclusion"],
                     "yes" if r["complete"] else "no", f"{r['seconds']:.0f}" if r["seconds"] is not None else "n/a"]
                    for r in recent])
    parts.append(_figure(charts.bars("Run time of the latest runs, in seconds", [f"run {r['id']} {r['sku']}" for r in timed],
                                     [r["seconds"] for r in timed], unit=" s"), table))
    return "".join(parts)


def grid_page(conn: sqlite3.Connection) -> str:
    data = queries.grid(conn, 40)
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
            failing = "".join(f"<li><code>{escape(f['test'])}</code> {escape(f['verdict'])}</li>" for f in cell["failing"])
            detail = f"<details><summary>{escape(counts)}</summary><ul>{failing}</ul></details>" if failing \
                else escape(counts)
            cells.append(f'<td class="cell" style="background:{COLOURS[cell["worst"]]}33" '
                         f'data-verdict="{cell["worst"]}">{detail}</td>')
        label = f"{escape((run['git_sha'] or '')[:12])} {escape(run['sku'])} ({escape(run['conclusion'])})"
        rows.append(f'<tr><th scope="row">run {run["id"]}: {label}</th>{"".join(cells)}</tr>')
    legend = " ".join(f'<span style="background:{c}33;padding:0 .4em">{v}</span>' for v, c in COLOURS.items())
    return (f"<p>Newest runs first; each cell is the worst verdict of the group in that run ({legend}); open a cell "
            "for its failing tests.</p>"
            f'<table id="grid"><caption>Runs x groups</caption><thead><tr><th scope="col">run</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def suspects_page(conn: sqlite3.Connection) -> str:
    found = queries.suspects(conn)
    flaky = queries.flaky(conn)
    gaps = queries.known_gaps(conn)
    parts = [f"<h2>Suspects from history ({len(found)})</h2>",
             f'<p class="muted">Infra in at least {queries.INFRA_MIN} of a test\'s last {queries.WINDOW} runs: on two '
             "or more runners it is a suspected real bug; on one runner the machine is the suspect.</p>",
             _table("Suspects", ["test", "kind", "why", "last seen"],
                    [[s["test"], s["kind"], s["reason"], s["last_seen"] or ""] for s in found]),
             f"<h2>Flaky now ({len(flaky['flaky'])})</h2>",
             _table("Flaky tests", ["test", "flaky runs", "runs looked at", "pass rate", "first seen", "last seen"],
                    [[f["test"], f["flaky_runs"], f["runs"], f"{f['pass_rate']:.0%}", f["first_seen"] or "",
                      f["last_seen"] or ""] for f in flaky["flaky"]]),
             f"<h2>No longer flaky ({len(flaky['stopped'])})</h2>",
             _table("Tests that stopped being flaky", ["test", "last flake"],
                    [[f["test"], f["last_seen"] or ""] for f in flaky["stopped"]]),
             f"<h2>Known gaps ({len(gaps)})</h2>",
             _table("Known gaps, oldest first", ["test", "issue", "reason", "first seen", "age (days)", "ready to close"],
                    [[f"<code>{escape(g['test'])}</code>", _link(g["issue"]), escape(g["reason"] or ""),
                      escape(g["first_seen"] or ""), escape(str(g["age_days"])),
                      "yes: it passes now" if g["ready_to_close"] else "no"] for g in gaps], raw=True)]
    return "".join(parts)


def stacks_page(conn: sqlite3.Connection) -> str:
    accepted = queries.accepted_stacks(conn)
    parts = ['<p class="muted">An accepted stack: a complete run that concluded success. Per SKU, the newest first, '
             "with what changed since the one before it.</p>"]
    for sku, runs in sorted(accepted.items()):
        rows = [[r["run"], r["started"] or "", (r["git_sha"] or "")[:12],
                 *(r["stack"][k] or "" for k in queries.STACK_FIELDS),
                 "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in r["changed"].items()) or "-"] for r in reversed(runs)]
        parts.append(f"<h2>{escape(sku)}: last accepted stack (run {runs[-1]['run']})</h2>")
        parts.append(_table(f"Accepted stacks on {sku}", ["run", "started", "commit", *queries.STACK_FIELDS,
                                                          "changed since the previous"], rows))
    drifted = queries.drift(conn)
    parts.append(f"<h2>Runs on a stack that differs from the last accepted one ({len(drifted)})</h2>")
    parts.append(_table("Drift", ["run", "SKU", "started", "conclusion", "what differs"],
                        [[d["run"], d["sku"], d["started"] or "", d["conclusion"],
                          "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in d["changed"].items())] for d in drifted]))
    return "".join(parts)


def build(conn: sqlite3.Connection, out: Path) -> dict[str, int]:
    """Write the site into `out`; returns {file: bytes}."""
    out.mkdir(parents=True, exist_ok=True)
    newest = queries.runs(conn, 1)
    generated = (newest[0]["started"] or f"run {newest[0]['id']}") if newest else "none yet"
    bodies = {"index.html": overview(conn), "grid.html": grid_page(conn), "suspects.html": suspects_page(conn),
              "stacks.html": stacks_page(conn)}
    sizes = {}
    for name, body in bodies.items():
        text = _page(name, body, generated)
        (out / name).write_text(text, encoding="utf-8")
        sizes[name] = len(text.encode())
    (out / "style.css").write_text(STYLE + "\n", encoding="utf-8")
    sizes["style.css"] = len(STYLE) + 1
    return sizes
