"""One side of a parity comparison: JUnit files and gate reports, merged into one result per test.

A side is what one platform ran: several JUnit files (xdist, shards, jobs)
and/or our `gate-report.json`, which adds verdict-level statuses (crashed,
known gap with its issue) and groups. Unreadable files raise, or with
`keep_going` are dropped and named in the report: never silently.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, repeat
from operator import attrgetter, is_not
from pathlib import Path

from pytest_rocm.parity.junit import (
    PLAIN_PASS,
    Case,
    JUnitError,
    case_lists,
    iter_cases,
    merge_repeat,
)

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
            found += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and (p.suffix == ".xml" or p.name == "gate-report.json")
            )
        elif path.is_file():
            found.append(path)
        else:
            raise InputError(f"{raw}: no such file or folder")
    return found


def _mark_known_gap(case: Case) -> None:
    """A skip or xfail that our plugin wrote for a known gap (property, or 'known gap: reason
    (url)')."""
    gap = _GAP_MESSAGE.match(case.message)
    if case.known_gap_issue or gap:
        case.status = "known_gap"
        if gap:
            case.message, case.known_gap_issue = gap.group("reason"), gap.group("issue")


# Reading is most of parity's time at CI scale (100s of files, 100,000s of cases): with this
# many files or more they are parsed in parallel, this process and one forked child per other core.
PARALLEL_MIN_FILES = 8


@dataclass
class ParsedFile:
    """One JUnit file's results, shaped to cross a process boundary cheaply: every node id in one
    string, and only the few results that are not plain passes as plain tuples (a dataclass pickles
    slowly)."""

    # every node id in document order (a rerun's first attempt placing it), joined by NUL
    ids: str | list[str]
    # to cross from a child process (one string pickles fastest), else as the list
    count: int  # how many ids (joined, none and one empty id look the same)
    # (index in ids, the Case's fields) for each result that is not PLAIN_PASS
    others: list[tuple[int, tuple]]
    error: str | None = None


CASE_FIELDS = tuple(Case.__dataclass_fields__)


def _parse_junit(path: Path, joined: bool = False) -> ParsedFile:
    """One file's cases, and the error if it broke (the cases before the break are kept)."""
    cases: dict[str, Case] = {}
    error = None
    try:
        # the bulk reader; a broken file is read again, case by case, below
        ids, results = case_lists(path)
    except JUnitError:
        try:
            for nodeid, case in iter_cases(path):
                if case.status in ("skipped", "xfailed"):
                    _mark_known_gap(case)
                cases[nodeid] = (
                    merge_repeat(cases[nodeid], case, ordered=True) if nodeid in cases else case
                )
        except JUnitError as exc:
            error = f"{exc} ({len(cases)} test case(s) before the error were kept)"
    else:
        for case in filter(partial(is_not, PLAIN_PASS), results):
            if case.status in ("skipped", "xfailed"):
                _mark_known_gap(case)
        cases = dict(zip(ids, results))
        # a test seen more than once in the file (a rerun): merged in order
        if len(cases) < len(ids):
            cases = {}
            for nodeid, case in zip(ids, results):
                cases[nodeid] = (
                    merge_repeat(cases[nodeid], case, ordered=True) if nodeid in cases else case
                )
    fields = attrgetter(*CASE_FIELDS)
    values = cases.values()
    others = [
        (i, fields(c))
        for i, c in compress(enumerate(values), map(is_not, values, repeat(PLAIN_PASS)))
    ]
    return ParsedFile("\0".join(cases) if joined else list(cases), len(cases), others, error)


def _parse_all(paths: list[Path]) -> Iterator[ParsedFile]:
    """Each file's ParsedFile, in the order given. With many files, forked processes read the later
    ones while this one reads the first share itself (and builds its side while they finish)."""
    workers = min(os.cpu_count() or 1, len(paths))
    if len(paths) < PARALLEL_MIN_FILES or workers < 2 or not hasattr(os, "fork"):
        yield from map(_parse_junit, paths)
        return
    # This process reads the first share (the reference, usually), and adds it to its side while the
    # children read theirs.
    own = len(paths) // workers
    bounds = [own + (len(paths) - own) * k // (workers - 1) for k in range(workers)]
    children: list[tuple[int, int]] = []
    try:
        try:
            for start, end in zip(bounds, bounds[1:]):
                children.append(_fork_reader(paths[start:end]))
        except OSError:  # no process to spare: this one reads them all
            _stop(children)
            yield from map(_parse_junit, paths)
            return
        yield from map(_parse_junit, paths[:own])
        while children:
            yield from _collect(*children.pop(0))
    finally:
        _stop(children)  # left early (an error): the rest are not needed


def _stop(children: list[tuple[int, int]]) -> None:
    while children:
        pid, pipe = children.pop()
        os.close(pipe)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _fork_reader(paths: list[Path]) -> tuple[int, int]:
    """A child process that reads these files and sends back their ParsedFiles (or the exception it
    met) through a pipe, then exits: it never returns into the caller (a test run, say)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read)
            try:
                outcome: list[ParsedFile] | BaseException = [
                    _parse_junit(p, joined=True) for p in paths
                ]
            except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
                outcome = exc
            with os.fdopen(write, "wb") as pipe:
                pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return pid, read


def _collect(pid: int, pipe: int) -> list[ParsedFile]:
    with os.fdopen(pipe, "rb") as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError(f"a process reading JUnit files failed (wait status {status})")
    outcome = pickle.loads(data)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _ids(parsed: ParsedFile) -> list[str]:
    return parsed.ids.split("\0") if isinstance(parsed.ids, str) else parsed.ids


def _add_junit(side: Side, parsed_files: list[ParsedFile]) -> None:
    """A side's JUnit files, in order, onto the (empty) side: in one pass of C-level dict building
    when no test is in two of them, else file by file (`_add_cases`)."""
    ids: list[str] = []
    others: list[tuple[int, tuple]] = []
    for parsed in parsed_files:
        if parsed.count:
            offset = len(ids)
            ids += _ids(parsed)
            others += [(offset + index, values) for index, values in parsed.others]
    results = dict.fromkeys(ids, PLAIN_PASS)
    if side.results or len(results) < len(ids):  # a test in two files (shards, a rerun job): merged
        for parsed in parsed_files:
            _add_cases(side, parsed)
        return
    for index, values in others:
        results[ids[index]] = Case(*values)
    side.results = results


def _add_cases(side: Side, parsed: ParsedFile) -> None:
    """Add one file's results to its side: in bulk (C-level dict operations) when none of its tests
    is already on the side, else test by test through `merge_repeat` (a test in several files:
    shards, a rerun job)."""
    if not parsed.count:
        return
    ids = _ids(parsed)
    cases = dict.fromkeys(ids, PLAIN_PASS)
    for index, values in parsed.others:
        cases[ids[index]] = Case(*values)
    results = side.results
    if not results:
        side.results = cases
    elif results.keys().isdisjoint(cases):
        results.update(cases)
    else:
        for nodeid, case in cases.items():
            results[nodeid] = (
                merge_repeat(results[nodeid], case, ordered=False) if nodeid in results else case
            )


def _read_gate_report(path: Path, side: Side) -> None:
    # imported here: most runs compare JUnit files only
    from pytest_rocm.results.report import GATE_REPORT_SCHEMA
    from pytest_rocm.results.report import STATUSES as GATE_STATUSES

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
            raise JUnitError(
                f"{path}: test {nodeid!r} has no valid `status` (one of {', '.join(GATE_STATUSES)}); "
                "rebuild the report with `rocm-gate verdict DIR`"
            )
        status = test["status"]
        gap = test.get("known_gap") or {}
        message = test.get("message") or test.get("detail", "")
        if status == "not_applicable":
            status, message = "skipped", f"not applicable: {message}"
        elif status == "known_gap":
            message = gap.get("reason", message)
        result = Result(
            status=status,
            message=message.strip().splitlines()[0][:300] if message.strip() else "",
            group=test.get("group"),
            blocking=test.get("blocking"),
            known_gap_issue=gap.get("issue"),
            rerun=len(test.get("attempts", [])) > 1,
        )
        earlier = side.results.get(nodeid)
        if earlier is not None and (
            earlier.attempts or earlier.rerun or earlier.status != result.status
        ):
            # Also in JUnit, or in another gate report: the gate report's richer status for the same
            # run replaces a JUnit case of the same status; anything else is a repeat.
            result = merge_repeat(earlier, result, ordered=False)
        side.results[nodeid] = result


def load_sides(inputs: list[tuple[str, list[str]]], keep_going: bool) -> list[Side]:
    """Each (label, paths) as one Side. An unreadable file raises JUnitError, or with `keep_going`
    is named in the side's `dropped` list (with the cases read before the break kept)."""
    expanded = []
    for label, paths in inputs:
        files = expand(paths)
        if not files:
            raise InputError(
                f"{label}: no JUnit XML or gate-report.json found in {', '.join(paths)}"
            )
        expanded.append((label, files))
    junit = [p for _, files in expanded for p in files if p.name != "gate-report.json"]
    # The sides take the files in this same order (JUnit files first, in their given order): each
    # side is built as soon as its own files are read.
    reading = _parse_all(junit)
    try:
        return _make_sides(expanded, zip(junit, reading), keep_going)
    finally:
        reading.close()  # the workers are done (and joined) before the comparison starts


def _make_sides(expanded: list[tuple[str, list[Path]]], arriving, keep_going: bool) -> list[Side]:
    """The sides from their files; `arriving`: (path, ParsedFile) of each JUnit file, in the sides'
    order."""
    parsed: dict[Path, ParsedFile] = {}

    def parsed_file(path: Path) -> ParsedFile:
        while path not in parsed:
            done, result = next(arriving)
            parsed[done] = result
        return parsed[path]

    sides = []
    for label, files in expanded:
        side = Side(label)
        junit: list[ParsedFile] | None = []  # added all at once, before the first gate report
        # JUnit first, gate reports after: a gate report's status (crashed, known gap) is the richer
        # one.
        for path in sorted(files, key=lambda p: p.name == "gate-report.json"):
            if path.name == "gate-report.json":
                if junit is not None:
                    _add_junit(side, junit)
                    junit = None
                try:
                    _read_gate_report(path, side)
                    error = None
                except JUnitError as exc:
                    error = str(exc)
            else:
                result = parsed_file(path)
                error = result.error
                junit.append(result)  # a broken file's cases before the break count too
            if error is None:
                side.files.append(str(path))
            elif keep_going:
                side.dropped.append(error)
            else:
                raise JUnitError(error)
        if junit is not None:
            _add_junit(side, junit)
        if not side.files:
            raise InputError(
                f"{label}: every input file was unreadable: " + "; ".join(side.dropped)
            )
        sides.append(side)
    return sides
