"""One side of a parity comparison: JUnit files and gate reports, merged into one result per test.

A side is what one platform ran: several JUnit files (xdist, shards, jobs)
and/or our `gate-report.json`, which adds verdict-level statuses (crashed,
known gap with its issue) and groups. Unreadable files raise, or with
`keep_going` are dropped and named in the report: never silently.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.parity.junit import (
    PLAIN_PASS,
    Case,
    JUnitError,
    iter_cases,
    merge_repeat,
)
from pytest_rocm.results.report import GATE_REPORT_SCHEMA
from pytest_rocm.results.report import STATUSES as GATE_STATUSES

_GAP_MESSAGE = re.compile(r"^known gap: (?P<reason>.*) \((?P<issue>https?://\S+)\)$")


# One result per test: JUnit cases as read, gate-report tests converted to the same shape.
Result = Case


@dataclass
class Side:
    label: str
    results: dict[str, Result] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # "file: why"


class InputError(ValueError):
    pass


def expand(paths: list[str]) -> list[Path]:
    """Files as given; folders searched for *.xml and gate-report.json, in a stable order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix == ".xml" or p.name == "gate-report.json"))
        elif path.is_file():
            found.append(path)
        else:
            raise InputError(f"{raw}: no such file or folder")
    return found


def _mark_known_gap(case: Case) -> None:
    """A skip or xfail that our plugin wrote for a known gap (property, or 'known gap: reason (url)')."""
    gap = _GAP_MESSAGE.match(case.message)
    if case.known_gap_issue or gap:
        case.status = "known_gap"
        if gap:
            case.message, case.known_gap_issue = gap.group("reason"), gap.group("issue")


# Reading is most of parity's time at CI scale (100s of files, 100,000s of cases): with this
# many files or more they are parsed in parallel processes, one per core.
PARALLEL_MIN_FILES = 8


@dataclass
class ParsedFile:
    """One JUnit file's results, shaped to cross a process boundary cheaply: the many plain passes
    as bare node ids, everything else with its Case."""

    plain_passes: str  # node ids joined by NUL (which XML cannot hold): one string pickles fastest
    others: list[tuple[str, Case]]
    order: list[str]  # every node id in document order, the last attempt of a rerun counting
    error: str | None = None


def _parse_junit(path: Path) -> ParsedFile:
    """One file's cases, and the error if it broke (the cases before the break are kept)."""
    cases: dict[str, Case] = {}
    error = None
    try:
        for nodeid, case in iter_cases(path):
            if case.status in ("skipped", "xfailed"):
                _mark_known_gap(case)
            cases[nodeid] = merge_repeat(cases[nodeid], case, ordered=True) if nodeid in cases else case
    except JUnitError as exc:
        error = f"{exc} ({len(cases)} test case(s) before the error were kept)"
    plain = "\0".join(n for n, c in cases.items() if c is PLAIN_PASS)
    others = [(n, c) for n, c in cases.items() if c is not PLAIN_PASS]
    return ParsedFile(plain, others, list(cases) if others else [], error)


def _parse_all(paths: list[Path]) -> list[ParsedFile]:
    workers = min(os.cpu_count() or 1, len(paths))
    if len(paths) < PARALLEL_MIN_FILES or workers < 2:
        return [_parse_junit(p) for p in paths]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_parse_junit, paths, chunksize=max(1, len(paths) // (workers * 4))))


def _add_cases(side: Side, parsed: ParsedFile) -> None:
    results = side.results
    plain = parsed.plain_passes.split("\0") if parsed.plain_passes else []
    repeated = results.keys() & set(plain) if results else ()
    others = dict(parsed.others)
    if not others and not repeated:  # the common case: a file of plain passes, new to this side
        results.update(dict.fromkeys(plain, PLAIN_PASS))
        return
    for nodeid in parsed.order or plain:
        case = others.get(nodeid, PLAIN_PASS)
        results[nodeid] = merge_repeat(results[nodeid], case, ordered=False) if nodeid in results else case


def _read_gate_report(path: Path, side: Side) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # also not UTF-8
        raise JUnitError(f"{path}: not a readable gate report ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != GATE_REPORT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise JUnitError(f"{path}: schema is {found!r}, expected {GATE_REPORT_SCHEMA!r}")
    tests = data.get("tests", {})
    if not isinstance(tests, dict):
        raise JUnitError(f"{path}: `tests` must be an object of node id -> test")
    for nodeid, test in tests.items():
        if not isinstance(test, dict) or test.get("status") not in GATE_STATUSES:
            raise JUnitError(f"{path}: test {nodeid!r} has no valid `status` (one of {', '.join(GATE_STATUSES)}); "
                             "rebuild the report with `rocm-gate verdict DIR`")
        status = test["status"]
        gap = test.get("known_gap") or {}
        message = test.get("message") or test.get("detail", "")
        if status == "not_applicable":
            status, message = "skipped", f"not applicable: {message}"
        elif status == "known_gap":
            message = gap.get("reason", message)
        result = Result(
            status=status, message=message.strip().splitlines()[0][:300] if message.strip() else "",
            group=test.get("group"), blocking=test.get("blocking"), known_gap_issue=gap.get("issue"),
            rerun=len(test.get("attempts", [])) > 1,
        )
        earlier = side.results.get(nodeid)
        if earlier is not None and (earlier.attempts or earlier.rerun or earlier.status != result.status):
            # Also in JUnit, or in another gate report: the gate report's richer status for the same run
            # replaces a JUnit case of the same status; anything else is a repeat.
            result = merge_repeat(earlier, result, ordered=False)
        side.results[nodeid] = result


def load_sides(inputs: list[tuple[str, list[str]]], keep_going: bool) -> list[Side]:
    """Each (label, paths) as one Side. An unreadable file raises JUnitError, or with `keep_going`
    is named in the side's `dropped` list (with the cases read before the break kept)."""
    expanded = []
    for label, paths in inputs:
        files = expand(paths)
        if not files:
            raise InputError(f"{label}: no JUnit XML or gate-report.json found in {', '.join(paths)}")
        expanded.append((label, files))
    junit = [p for _, files in expanded for p in files if p.name != "gate-report.json"]
    parsed = dict(zip(junit, _parse_all(junit)))
    sides = []
    for label, files in expanded:
        side = Side(label)
        # JUnit first, gate reports after: a gate report's status (crashed, known gap) is the richer one.
        for path in sorted(files, key=lambda p: p.name == "gate-report.json"):
            if path.name == "gate-report.json":
                try:
                    _read_gate_report(path, side)
                    error = None
                except JUnitError as exc:
                    error = str(exc)
            else:
                error = parsed[path].error
                _add_cases(side, parsed[path])
            if error is None:
                side.files.append(str(path))
            elif keep_going:
                side.dropped.append(error)
            else:
                raise JUnitError(error)
        if not side.files:
            raise InputError(f"{label}: every input file was unreadable: " + "; ".join(side.dropped))
        sides.append(side)
    return sides
