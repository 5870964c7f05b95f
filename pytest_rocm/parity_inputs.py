"""One side of a parity comparison: JUnit files and gate reports, merged into one result per test.

A side is what one platform ran: several JUnit files (xdist, shards, jobs)
and/or our `gate-report.json`, which adds verdict-level statuses (crashed,
known gap with its issue) and groups. Unreadable files raise, or with
`keep_going` are dropped and named in the report: never silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.junit import Case, JUnitError, iter_cases
from pytest_rocm.report import GATE_REPORT_SCHEMA

_GAP_MESSAGE = re.compile(r"^known gap: (?P<reason>.*) \((?P<issue>https?://\S+)\)$")


@dataclass
class Result:
    nodeid: str
    status: str  # passed failed error crashed skipped xfailed xpassed known_gap
    message: str = ""
    group: str | None = None
    blocking: bool | None = None
    known_gap_issue: str | None = None
    rerun: bool = False


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


def _result_from_case(case: Case) -> Result:
    props = case.properties
    result = Result(nodeid=case.nodeid, status=case.status, message=case.message, group=props.get("rocm_group"),
                    blocking=(props["rocm_blocking"] == "true") if "rocm_blocking" in props else None,
                    known_gap_issue=props.get("rocm_known_gap"), rerun=case.rerun)
    gap = _GAP_MESSAGE.match(case.message)
    if case.status in ("skipped", "xfailed") and (result.known_gap_issue or gap):
        result.status = "known_gap"
        if gap:
            result.message, result.known_gap_issue = gap.group("reason"), gap.group("issue")
    return result


def _read_junit(path: Path, side: Side) -> int:
    read = 0
    try:
        for case in iter_cases(path):
            result = _result_from_case(case)
            if result.nodeid in side.results:
                result.rerun = True  # a rerun (or a repeat across shards): the last one counts
            side.results[result.nodeid] = result
            read += 1
    except JUnitError as exc:
        # What was read before the break is kept, and the report says so.
        raise JUnitError(f"{exc} ({read} test case(s) before the error were kept)") from exc
    return read


def _read_gate_report(path: Path, side: Side) -> int:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise JUnitError(f"{path}: not a readable gate report ({exc})") from exc
    if data.get("schema") != GATE_REPORT_SCHEMA:
        raise JUnitError(f"{path}: schema is {data.get('schema')!r}, expected {GATE_REPORT_SCHEMA!r}")
    for nodeid, test in data.get("tests", {}).items():
        status = test["status"]
        gap = test.get("known_gap") or {}
        message = test.get("message") or test.get("detail", "")
        if status == "not_applicable":
            status, message = "skipped", f"not applicable: {message}"
        elif status == "known_gap":
            message = gap.get("reason", message)
        earlier = side.results.get(nodeid)
        side.results[nodeid] = Result(
            nodeid=nodeid, status=status, message=message.strip().splitlines()[0][:300] if message.strip() else "",
            group=test.get("group"), blocking=test.get("blocking"), known_gap_issue=gap.get("issue"),
            rerun=(earlier.rerun if earlier else False) or test.get("attempts", 1) > 1,
        )
    return len(data.get("tests", {}))


def load_side(label: str, paths: list[str], keep_going: bool) -> Side:
    side = Side(label)
    files = expand(paths)
    if not files:
        raise InputError(f"{label}: no JUnit XML or gate-report.json found in {', '.join(paths)}")
    # JUnit first, gate reports after: a gate report's status (crashed, known gap) is the richer one.
    for path in sorted(files, key=lambda p: p.name == "gate-report.json"):
        reader = _read_gate_report if path.name == "gate-report.json" else _read_junit
        try:
            reader(path, side)
            side.files.append(str(path))
        except JUnitError as exc:
            if not keep_going:
                raise
            side.dropped.append(str(exc))
    if not side.files:
        raise InputError(f"{label}: every input file was unreadable: " + "; ".join(side.dropped))
    return side
