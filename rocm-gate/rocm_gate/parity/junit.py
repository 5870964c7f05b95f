"""Read JUnit XML as real producers write it.

Handles pytest (legacy/xunit1 and xunit2), reruns (pytest-rerunfailures
repeats a test case: the last counts, and the test is marked as rerun; Maven
style `rerunFailure`/`flakyFailure` children likewise), nested suites, a case
holding several results (pytest writes a failure and a teardown error into one
case), CDATA, entities, astral-plane Unicode and empty suites.

Each file is parsed whole by ElementTree's C parser, then only test cases are
visited: at CI scale (200,000 cases) per-element Python callbacks or junitparser's
wrapper objects cost more than everything else parity does
(benchmarks/parity_scale.py prints the figures, junitparser's beside). JUnit files
are per job or shard, so one file's tree is small. The tests check this reader
against junitparser's counts on the real samples.

`iter_cases` visits the cases one by one; `case_lists` gives the same results in
bulk (C-level iteration over the elements, Python code only for cases with
children), for parity; tests/test_parity_bulk.py checks the two agree.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import add, not_
from pathlib import Path

from pytest_rocm.catalog.identity import nodeid_from_junit, nodeid_prefix
from pytest_rocm.errors import BadInput

# The testcase properties pytest-rocm writes (pytest_rocm.plugin.collection) and reads back here.
GROUP_PROPERTY = "rocm_group"
BLOCKING_PROPERTY = "rocm_blocking"
KNOWN_GAP_PROPERTY = "rocm_known_gap"

RESULT_STATUS = {"failure": "failed", "error": "error", "skipped": "skipped"}
PRECEDENCE = {"failed": 3, "error": 2, "skipped": 1, "xfailed": 1}
RERUN_TAGS = {"rerunFailure", "rerunError", "flakyFailure", "flakyError"}
MESSAGE_CHARS = 300


class JUnitError(BadInput):
    """A file that is not readable JUnit XML; the message names the file and, where known, the
    line."""


@dataclass(slots=True)
class Case:
    status: str = "passed"  # passed, failed, error, skipped, xfailed (and, from gate reports, more)
    message: str = ""
    properties: dict[str, str] | None = None
    rerun: bool = False
    attempts: tuple[str, ...] = ()  # every status seen, where the test appears more than once
    group: str | None = None
    blocking: bool | None = None
    known_gap_issue: str | None = None


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0][:MESSAGE_CHARS] if text else ""


# Most cases passed and have no children: they all share this one result, never modified
# (a reader that needs to mark one, as a rerun say, makes its own copy).
PLAIN_PASS = Case()


def _case(element: ET.Element) -> tuple[str, Case]:
    classname, name = element.get("classname", ""), element.get("name", "")
    nodeid = (
        nodeid_prefix(classname, element.get("file")) + name
        if classname
        else nodeid_from_junit("", name)
    )
    if not len(element):
        return nodeid, _not_run_case() if _not_run(element) else PLAIN_PASS
    case = Case()
    _read_children(case, element)
    return nodeid, case


# GoogleTest writes a disabled test as a case without children: `status="notrun"` (older) or
# `result="suppressed"` / `"skipped"` (GoogleTest 1.10+); pytest writes neither attribute.
def _not_run_case() -> Case:
    return Case(status="skipped", message="not run (GoogleTest: disabled or skipped)")


def _not_run(element: ET.Element) -> bool:
    return element.get("status") == "notrun" or element.get("result") in ("suppressed", "skipped")


def _read_children(case: Case, element: ET.Element) -> None:
    best = 0
    for child in element:
        tag = child.tag
        if tag in RESULT_STATUS:
            status = (
                "xfailed"
                if tag == "skipped" and child.get("type") == "pytest.xfail"
                else RESULT_STATUS[tag]
            )
            # One case may carry several results (a failed call and a failed teardown):
            # the body's failure decides, then an error, then a skip.
            if PRECEDENCE[status] > best:
                best = PRECEDENCE[status]
                case.status = status
                case.message = _first_line(child.get("message") or child.text or "")
        elif tag in RERUN_TAGS:
            case.rerun = True
        elif tag == "properties":
            case.properties = {
                p.get("name"): p.get("value", "") for p in child if p.get("name") is not None
            }
            case.group = case.properties.get(GROUP_PROPERTY)
            if BLOCKING_PROPERTY in case.properties:
                case.blocking = case.properties[BLOCKING_PROPERTY] == "true"
            case.known_gap_issue = case.properties.get(KNOWN_GAP_PROPERTY)


def iter_cases(path: str | Path) -> Iterator[tuple[str, Case]]:
    """Yield (node id, result) for every test case in the file, in document order; raise JUnitError
    on a broken file, after yielding the complete cases before the break."""
    source = str(path)
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as exc:
        line, column = exc.position
        yield from _cases_before_break(source)
        raise JUnitError(
            f"{source}: not well-formed XML at line {line}, column {column + 1} "
            f"({str(exc).split(':')[0]}); the file is truncated or not JUnit. "
            "Re-download the artifact, or pass --keep-going to read the other files"
        ) from exc
    except OSError as exc:
        raise JUnitError(f"{source}: cannot read it ({exc.strerror})") from exc
    except (LookupError, ValueError) as exc:
        raise JUnitError(_undecodable(source, exc)) from exc
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(
            f"{source}: the root element is <{root.tag}>, not <testsuites> or <testsuite>: "
            "this is not a JUnit XML file"
        )
    for element in root.iter("testcase"):
        yield _case(element)


def _undecodable(source: str, exc: Exception) -> str:
    """An encoding the XML declaration names that the parser has not (`x-nonexistent`), or cannot
    read (expat: no multi-byte encodings but UTF-8 and UTF-16)."""
    return (
        f"{source}: its encoding cannot be read ({exc}); JUnit XML is UTF-8 or UTF-16: "
        "re-download the artifact, or pass --keep-going to read the other files"
    )


def case_lists(path: str | Path) -> tuple[list[str], list[Case]]:
    """Every test case of the file as two lists in document order, node ids and results (PLAIN_PASS
    for a case without children): `iter_cases` in bulk. Per case only C-level calls run (map over
    the elements), except for the few cases with children. Raises JUnitError on a file `iter_cases`
    rejects, without its partial results (read those with `iter_cases`)."""
    source = str(path)
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as exc:
        raise JUnitError(f"{source}: not well-formed XML") from exc
    except OSError as exc:
        raise JUnitError(f"{source}: cannot read it ({exc.strerror})") from exc
    except (LookupError, ValueError) as exc:
        raise JUnitError(_undecodable(source, exc)) from exc
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(
            f"{source}: the root element is <{root.tag}>, not <testsuites> or <testsuite>"
        )
    elements = list(root.iter("testcase"))
    count = len(elements)
    # Element.get straight over the elements: C calls only, no attribute dict fetched per case
    get = ET.Element.get
    classnames = list(map(get, elements, repeat("classname"), repeat("")))
    names = map(get, elements, repeat("name"), repeat(""))
    files = list(map(get, elements, repeat("file")))
    # each distinct class (and file) gets its node id prefix once
    if files.count(None) == count:
        prefixes = {
            classname: nodeid_prefix(classname, None) for classname in dict.fromkeys(classnames)
        }
        keys = classnames
        distinct = prefixes
    else:
        keys = list(zip(classnames, files))
        prefixes = {key: nodeid_prefix(*key) for key in dict.fromkeys(keys)}
        distinct = {classname for classname, _ in prefixes}
    ids = list(map(add, map(prefixes.__getitem__, keys), names))
    if "" in distinct:  # cases without a classname: pytest's collection errors
        for index in compress(range(count), map(not_, classnames)):
            ids[index] = nodeid_from_junit("", elements[index].get("name", ""))
    results = [PLAIN_PASS] * count
    for index in compress(range(count), map(len, elements)):  # the few cases with children
        case = results[index] = Case()
        _read_children(case, elements[index])
    # GoogleTest's cases carry `status` and `result` (pytest's never): only then is each looked at
    if count and (elements[0].get("status") is not None or elements[0].get("result") is not None):
        for index in range(count):
            if results[index] is PLAIN_PASS and _not_run(elements[index]):
                results[index] = _not_run_case()
    return ids, results


def _cases_before_break(source: str) -> Iterator[tuple[str, Case]]:
    """The complete test cases of a broken file, read up to where it broke (nothing is lost): fed
    in pieces, not lines (pytest writes a whole file on one line), and the cases the parser ended
    before the error are kept."""
    parser = ET.XMLPullParser(events=("end",))
    with open(source, "rb") as handle:
        while piece := handle.read(1 << 16):
            parser.feed(piece)  # (a parse error is queued with the events, and raised from there)
            events = parser.read_events()
            try:
                for _, element in events:
                    if element.tag == "testcase":
                        yield _case(element)
            except ET.ParseError:
                return


SEVERITY = {"crashed": 5, "failed": 4, "error": 3, "known_gap": 2, "xfailed": 1, "skipped": 1}


def merge_repeat(earlier: Case, later: Case, ordered: bool) -> Case:
    """`merge_repeats` of two results."""
    return merge_repeats([earlier, later], ordered)


def merge_repeats(cases: list[Case], ordered: bool) -> Case:
    """The one rule for a test seen more than once. In one file (`ordered`), document order is time
    order (pytest-rerunfailures writes each attempt): the last attempt counts, and a case that is
    only a teardown's error joins the case before it (pytest writes a failed call and its failed
    teardown as two cases: one attempt, the call's failure first). Across files (shards, a rerun
    job) there is no order: the test counts as passing if any attempt passed, else its most severe
    status. Either way it is marked rerun and keeps every status it had, so no failure vanishes.
    Linear in the attempts (a file may repeat one id 100,000s of times)."""
    if ordered:
        joined: list[Case] = []
        for case in cases:
            if joined and _teardown_error_only(case):
                joined[-1] = _with_teardown_error(joined[-1], case)
            else:
                joined.append(case)
        if len(joined) == 1:
            return joined[0]
        cases, chosen = joined, joined[-1]
    else:
        passing = [c for c in cases if c.status in ("passed", "xpassed")]
        chosen = passing[-1] if passing else max(cases, key=lambda c: SEVERITY.get(c.status, 0))
    attempts = tuple(status for c in cases for status in (c.attempts or (c.status,)))
    return replace(chosen, rerun=True, attempts=attempts)


_TEARDOWN = "failed on teardown"  # pytest's message of a teardown's error


def _teardown_error_only(case: Case) -> bool:
    return case.status == "error" and case.message.startswith(_TEARDOWN) and not case.attempts


def _with_teardown_error(case: Case, teardown: Case) -> Case:
    """One attempt: its call's failure (or setup's error) decides, as in one case (PRECEDENCE)."""
    if PRECEDENCE.get(case.status, 0) >= PRECEDENCE["error"]:
        return case
    return replace(case, status="error", message=teardown.message)


def read_cases(path: str | Path) -> dict[str, Case]:
    """nodeid -> Case for one file; a repeated case is merged by `merge_repeat` (in one file: a
    rerun)."""
    seen: dict[str, list[Case]] = {}
    for nodeid, case in iter_cases(path):
        seen.setdefault(nodeid, []).append(case)
    return {
        nodeid: found[0] if len(found) == 1 else merge_repeats(found, ordered=True)
        for nodeid, found in seen.items()
    }
