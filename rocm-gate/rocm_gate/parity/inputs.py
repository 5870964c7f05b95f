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
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, gt, is_not
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.artifacts import manifest_stack
from rocm_gate.parity.junit import (
    PLAIN_PASS,
    Case,
    JUnitError,
    case_lists,
    iter_cases,
    merge_repeat,
    merge_repeats,
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


class InputError(BadInput):
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
    """One JUnit file's results: its node ids in document order (a test the file repeats, a rerun,
    once, where it first appears, with its attempts merged) and the few results that are not plain
    passes, by their index in `ids`."""

    ids: list[str]
    others: list[tuple[int, Case]]
    error: str | None = None


CASE_FIELDS = tuple(Case.__dataclass_fields__)


def _merge_repeats(ids: list[str], results: list[Result], ordered: bool) -> dict[str, Result]:
    """node id -> result, each test where it first appears; a test seen more than once has its
    results merged by `merge_repeat`, in the lists' order (`ordered`: attempts in one file). Only
    the repeated tests are looked at one by one."""
    merged = dict(zip(ids, results))
    if len(merged) == len(ids):
        return merged
    counts = Counter(ids)
    repeated = set(compress(counts, map(gt, counts.values(), repeat(1))))
    attempts: dict[str, list[Result]] = {}
    for index in compress(range(len(ids)), map(repeated.__contains__, ids)):
        attempts.setdefault(ids[index], []).append(results[index])
    for nodeid, found in attempts.items():
        merged[nodeid] = merge_repeats(found, ordered=ordered)
    return merged


def _parse_junit(path: Path) -> ParsedFile:
    """One file's cases, and the error if it broke (the cases before the break are kept)."""
    error = None
    try:
        # the bulk reader; a broken file is read again, case by case, below
        ids, results = case_lists(path)
    except JUnitError:
        ids, results = [], []
        try:
            for nodeid, case in iter_cases(path):
                ids.append(nodeid)
                results.append(case)
        except JUnitError as exc:
            error = f"{exc} ({len(dict.fromkeys(ids))} test case(s) before the error were kept)"
    for case in compress(results, map(is_not, results, repeat(PLAIN_PASS))):
        if case.status in ("skipped", "xfailed"):
            _mark_known_gap(case)
    # a test seen more than once in the file (a rerun): merged in document order
    cases = _merge_repeats(ids, results, ordered=True)
    if len(cases) < len(ids):
        ids, results = list(cases), list(cases.values())
    plain = map(is_not, results, repeat(PLAIN_PASS))
    return ParsedFile(ids, list(compress(enumerate(results), plain)), error)


class _Parsing:
    """Each JUnit file's ParsedFile, in the order given (iterate once). With many files, forked
    processes start reading some of them at once (`_Claims` shares them out as they go), and this
    process reads the others as it is iterated. `close` stops what is still reading."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.children: list[tuple[int, int]] = []
        self.claims: _Claims | None = None
        workers = min(os.cpu_count() or 1, len(paths))
        if len(paths) < PARALLEL_MIN_FILES or workers < 2 or not hasattr(os, "fork"):
            return
        try:
            self.claims = _Claims(len(paths))
            for _ in range(workers - 1):
                self.children.append(_fork_reader(paths, self.claims))
        except OSError:  # no process (or pipe) to spare: this one reads them all
            self.close()

    def __iter__(self) -> Iterator[ParsedFile]:
        if self.claims is None:
            yield from map(_parse_junit, self.paths)
            return
        # This process reads from the front (the reference, usually), and builds a side as soon as
        # its files are read, while the children go on reading.
        own = 0
        while (claim := self.claims.take(from_back=False)) is not None:
            for index in claim:
                yield _parse_junit(self.paths[index])
            own = claim.stop
        theirs: dict[int, ParsedFile] = {}
        while self.children:
            theirs.update(_collect(*self.children.pop()))
        for index in range(own, len(self.paths)):
            yield theirs.pop(index)

    def close(self) -> None:
        _stop(self.children)  # left early (an error): the rest are not needed
        if self.claims is not None:
            self.claims.close()
            self.claims = None


# At most this many claims, so that the pipes hold them all before any process reads (a pipe holds
# 4 KiB at least); with more files than that, a claim is several files.
MAX_CLAIMS = 1024
CLAIM = struct.Struct("<H")


class _Claims:
    """Which process reads which file, decided as they go, so that a process slowed by anything
    (a side to build, another job on the machine) reads fewer: this process claims files from the
    front, the children from the back. A claim is a read of one byte from a pipe that holds one
    byte per claim; a child then reads which claim from a second pipe that lists them from the
    back. A small read from a pipe is atomic: no file is read twice, and no lock is left held by a
    process that dies."""

    def __init__(self, count: int):
        self.count = count
        self.size = -(-count // MAX_CLAIMS)  # files per claim
        claims = -(-count // self.size)
        self._front = 0
        ends: list[int] = []
        try:
            ends += os.pipe()
            ends += os.pipe()
            self._tokens, tokens, self._backs, backs = ends
            os.write(tokens, bytes(claims))
            os.write(backs, b"".join(map(CLAIM.pack, reversed(range(claims)))))
        except OSError:
            for end in ends:
                os.close(end)
            raise
        os.close(tokens)  # all written: an empty pipe now reads as its end
        os.close(backs)

    def take(self, from_back: bool) -> range | None:
        """The indices of the files of the next claim, or None when every file is claimed."""
        if not os.read(self._tokens, 1):
            return None
        if from_back:
            (claim,) = CLAIM.unpack(os.read(self._backs, CLAIM.size))
        else:  # only this process claims from the front
            claim, self._front = self._front, self._front + 1
        return range(claim * self.size, min((claim + 1) * self.size, self.count))

    def close(self) -> None:
        os.close(self._tokens)
        os.close(self._backs)


def _stop(children: list[tuple[int, int]]) -> None:
    while children:
        pid, pipe = children.pop()
        os.close(pipe)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _fork_reader(paths: list[Path], claims: _Claims) -> tuple[int, int]:
    """A child process that reads the files it claims and sends back their ParsedFiles by index (or
    the exception it met) through a pipe, then exits: it never returns into the caller (a test run,
    say)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read)
            outcome: list[tuple[int, tuple]] | BaseException = []
            try:
                while (claim := claims.take(from_back=True)) is not None:
                    outcome += [(index, _to_wire(_parse_junit(paths[index]))) for index in claim]
            except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
                outcome = exc
            with os.fdopen(write, "wb") as pipe:
                pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return pid, read


def _to_wire(parsed: ParsedFile) -> tuple:
    """A ParsedFile as it pickles fastest: the node ids in one string (joined by NUL, which XML
    cannot hold), with their count (no id and one empty id join alike), and each other result's
    fields as a tuple (a dataclass pickles slowly)."""
    fields = attrgetter(*CASE_FIELDS)
    others = [(index, fields(case)) for index, case in parsed.others]
    return "\0".join(parsed.ids), len(parsed.ids), others, parsed.error


def _from_wire(joined: str, count: int, others: list[tuple[int, tuple]], error) -> ParsedFile:
    ids = joined.split("\0") if count else []
    return ParsedFile(ids, [(index, Case(*values)) for index, values in others], error)


def _collect(pid: int, pipe: int) -> dict[int, ParsedFile]:
    with os.fdopen(pipe, "rb") as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError(f"a process reading JUnit files failed (wait status {status})")
    outcome = pickle.loads(data)
    if isinstance(outcome, BaseException):
        raise outcome
    return {index: _from_wire(*wire) for index, wire in outcome}


def _junit_results(parsed_files: list[ParsedFile]) -> dict[str, Result]:
    """A side's JUnit files, in order, as node id -> result, in C-level passes over the node ids: a
    test in several files (shards, a rerun job) is merged by `merge_repeat` across them."""
    ids: list[str] = []
    results: list[Result] = []
    for parsed in parsed_files:
        offset = len(ids)
        ids += parsed.ids
        results += repeat(PLAIN_PASS, len(parsed.ids))
        for index, case in parsed.others:
            results[offset + index] = case
    return _merge_repeats(ids, results, ordered=False)


# The fields of a gate report's test entry parity reads -> (the types it may have, as said)
_TEST_FIELDS = {
    "message": ((str, type(None)), "text"),
    "detail": ((str, type(None)), "text"),
    "group": ((str, type(None)), "a group name or null"),
    "blocking": ((bool, type(None)), "true or false"),
    "known_gap": ((dict, type(None)), "an object (reason, issue) or null"),
    "attempts": ((list,), "a list"),
}


def _wrong_field(test: dict) -> tuple[str, str] | None:
    """The first field of a test entry whose type parity cannot read, with what it must be."""
    for key, (types, said) in _TEST_FIELDS.items():
        if key in test and not isinstance(test[key], types):
            return key, said
    gap = test.get("known_gap") or {}
    for key in ("reason", "issue"):
        if not isinstance(gap.get(key, ""), str | None):
            return f"known_gap.{key}", "text"
    return None


def _read_gate_report(path: Path, side: Side) -> None:
    # imported here: most runs compare JUnit files only
    from pytest_rocm.schemas.artifacts import GATE_REPORT_SCHEMA
    from pytest_rocm.schemas.artifacts import STATUSES as GATE_STATUSES
    from pytest_rocm.schemas.loader import ArtifactError, read_json_file

    try:
        # a plain file under the size cap, UTF-8 JSON, no NaN, not nested too deep
        data = read_json_file(path)
    except ArtifactError as exc:
        raise JUnitError(f"{exc} (read as a gate report)") from exc
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
        if (wrong := _wrong_field(test)) is not None:
            # the candidate's report is written by a job that ran the change's code
            raise JUnitError(
                f"{path}: test {nodeid!r}: `{wrong[0]}` must be {wrong[1]}; rebuild the report "
                "with `rocm-gate verdict DIR`"
            )
        status = test["status"]
        # no column of its own: the run stopped in it, it did not pass
        if status == "interrupted":
            status, test = "error", {**test, "message": "interrupted: the run stopped in it"}
        gap = test.get("known_gap") or {}
        message = test.get("message") or test.get("detail") or ""
        if status == "not_applicable":
            status, message = "skipped", f"not applicable: {message}"
        elif status == "known_gap":
            message = gap.get("reason") or message
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


class ReadingSides:
    """Each (label, paths) as one Side: their files start being read when this is made (by forked
    processes, with many files), so the caller can prepare the comparison meanwhile (its maps, an
    earlier report); `sides()` returns them, and leaving the `with` block stops what is still
    reading."""

    def __init__(self, inputs: list[tuple[str, list[str]]], keep_going: bool):
        self.keep_going = keep_going
        self.expanded: list[tuple[str, list[Path]]] = []
        self.error: InputError | None = None
        self.parsing: _Parsing | None = None
        try:
            for label, paths in inputs:
                files = expand(paths)
                if not files:
                    raise InputError(
                        f"{label}: no JUnit XML or gate-report.json found in {', '.join(paths)}"
                    )
                self.expanded.append((label, files))
        except InputError as exc:
            self.error = exc  # raised by sides(): after whatever the caller checks first
            return
        # The sides take the files in this same order (JUnit files first, in their given order):
        # each side is built as soon as its own files are read.
        self.junit = [
            p for _, files in self.expanded for p in files if p.name != "gate-report.json"
        ]
        self.parsing = _Parsing(self.junit)

    def sides(self) -> list[Side]:
        """The sides. An unreadable file raises JUnitError, or with `keep_going` is named in the
        side's `dropped` list (with the cases read before the break kept)."""
        if self.error is not None:
            raise self.error
        return _make_sides(self.expanded, zip(self.junit, self.parsing), self.keep_going)

    def close(self) -> None:
        if self.parsing is not None:
            self.parsing.close()

    def __enter__(self) -> ReadingSides:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def load_sides(inputs: list[tuple[str, list[str]]], keep_going: bool) -> list[Side]:
    """Each (label, paths) as one Side (`ReadingSides`, read at once)."""
    with ReadingSides(inputs, keep_going) as reading:
        return reading.sides()


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
        junit: list[ParsedFile] | None = []  # the side's results, before the first gate report
        # JUnit first, gate reports after: a gate report's status (crashed, known gap) is the richer
        # one.
        for path in sorted(files, key=lambda p: p.name == "gate-report.json"):
            if path.name == "gate-report.json":
                if junit is not None:
                    side.results = _junit_results(junit)
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
            side.results = _junit_results(junit)
        if not side.files:
            raise InputError(
                f"{label}: every input file was unreadable: " + "; ".join(side.dropped)
            )
        sides.append(side)
    return sides


_PROPERTY = re.compile(rb'<property\s+name="rocm_sku"\s+value="([^"<>]{1,200})"')
_TIMESTAMP = re.compile(rb'<testsuite\b[^>]*\btimestamp="([0-9T:.+\-Z ]{10,40})"')
HEAD_BYTES = 64 * 1024  # a JUnit file's global properties and its suite's timestamp come first


def identify(
    files: list[Path], commit: str | None, date: str | None, sku: str | None
) -> dict[str, str | None]:
    """The reference's commit, date and SKU: as given, else from the first gate report's manifest
    beside it, else from the head of the first JUnit file that says (its `rocm_sku` property, its
    suite's timestamp). A parity figure with no commit, date or SKU cannot be compared with
    another."""
    found: dict[str, str | None] = {"commit": None, "date": None, "sku": None}
    for path in files:
        if path.name == "gate-report.json" and (path.parent / "manifest.json").is_file():
            try:
                manifest = json.loads((path.parent / "manifest.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict):
                try:
                    skus = manifest_stack(manifest)["skus"]
                except (AttributeError, TypeError):  # a manifest that is not one
                    skus = []
                found["commit"] = found["commit"] or _text(manifest.get("git_sha"))
                found["date"] = found["date"] or _text(manifest.get("started"))
                found["sku"] = found["sku"] or _text("/".join(map(str, skus)))
        elif path.suffix == ".xml":
            try:
                with path.open("rb") as handle:
                    head = handle.read(HEAD_BYTES)
            except OSError:
                continue
            if found["sku"] is None and (hit := _PROPERTY.search(head)):
                found["sku"] = _text(hit.group(1).decode("utf-8", "replace"))
            if found["date"] is None and (hit := _TIMESTAMP.search(head)):
                found["date"] = _text(hit.group(1).decode())
        if all(found.values()):
            break
    given = {"commit": commit, "date": date, "sku": sku}
    return {k: _text(given[k]) or found[k] for k in found}


def _text(value) -> str | None:
    text = str(value or "").strip()
    return text[:200] if text and text != "none" else None
