"""Read JUnit XML as real producers write it, one test case at a time.

Handles pytest (legacy/xunit1 and xunit2), reruns (pytest-rerunfailures
repeats a test case: the last counts, and the test is marked as rerun; Maven
style `rerunFailure`/`flakyFailure` children likewise), nested suites, a case
holding several results (pytest writes a failure and a teardown error into one
case), CDATA, entities, astral-plane Unicode and empty suites.

Streaming with `xml.etree.ElementTree.iterparse` rather than loading the tree
through junitparser: on 200,000 cases junitparser's full tree was too slow and
too big for CI (benchmarks/parity_scale.py prints both). The tests check this
reader against junitparser's own counts on the real samples.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.identity import nodeid_from_junit

RESULT_TAGS = {"failure": "failed", "error": "error", "skipped": "skipped"}
RERUN_TAGS = {"rerunFailure", "rerunError", "flakyFailure", "flakyError"}
MESSAGE_CHARS = 300


class JUnitError(ValueError):
    """A file that is not readable JUnit XML; the message names the file and, where known, the line."""


@dataclass
class Case:
    nodeid: str
    status: str  # passed, failed, error, skipped, xfailed, xpassed
    message: str = ""
    time: float = 0.0
    properties: dict[str, str] = field(default_factory=dict)
    rerun: bool = False
    source: str = ""  # the file it was read from


def _message(element: ET.Element) -> str:
    text = element.get("message") or (element.text or "").strip()
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:MESSAGE_CHARS]


def _case_from_element(element: ET.Element, source: str) -> Case:
    results = {}
    properties = {}
    rerun = False
    for child in element:
        tag = child.tag
        if tag in RESULT_TAGS:
            results.setdefault(tag, child)
        elif tag in RERUN_TAGS:
            rerun = True
        elif tag == "properties":
            for prop in child:
                if prop.get("name") is not None:
                    properties[prop.get("name")] = prop.get("value", prop.text or "")
    # One case may carry several results (a failed call and a failed teardown): the body's
    # failure decides, then an error, then a skip.
    if "failure" in results:
        status, message = "failed", _message(results["failure"])
    elif "error" in results:
        status, message = "error", _message(results["error"])
    elif "skipped" in results:
        skipped = results["skipped"]
        status = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        message = _message(skipped)
    else:
        status, message = "passed", ""
    try:
        seconds = float(element.get("time") or 0.0)
    except ValueError:
        seconds = 0.0
    nodeid = nodeid_from_junit(element.get("classname", ""), element.get("name", ""), element.get("file"))
    return Case(nodeid=nodeid, status=status, message=message, time=seconds, properties=properties,
                rerun=rerun, source=source)


def iter_cases(path: str | Path) -> Iterator[Case]:
    """Yield every test case in the file, in document order; raise JUnitError on a broken file."""
    source = str(path)
    stack: list[ET.Element] = []
    try:
        for event, element in ET.iterparse(source, events=("start", "end")):
            if event == "start":
                if not stack and element.tag not in ("testsuites", "testsuite"):
                    raise JUnitError(f"{source}: the root element is <{element.tag}>, not <testsuites> or "
                                     "<testsuite>: this is not a JUnit XML file")
                stack.append(element)
                continue
            stack.pop()
            if element.tag == "testcase":
                yield _case_from_element(element, source)
                element.clear()
                if stack:  # drop the finished case so a huge suite never sits in memory
                    stack[-1].remove(element)
    except ET.ParseError as exc:
        line, column = exc.position
        raise JUnitError(f"{source}: not well-formed XML at line {line}, column {column} "
                         f"({str(exc).split(':')[0]}); the file is truncated or not JUnit. "
                         "Re-download the artifact, or pass --keep-going to read the other files") from exc
    except OSError as exc:
        raise JUnitError(f"{source}: cannot read it ({exc.strerror})") from exc
    if stack:
        raise JUnitError(f"{source}: ends inside <{stack[-1].tag}>: the file is truncated")


def read_cases(path: str | Path) -> dict[str, Case]:
    """nodeid -> Case for one file; a repeated case (a rerun) replaces the earlier one and is marked rerun."""
    cases: dict[str, Case] = {}
    for case in iter_cases(path):
        earlier = cases.get(case.nodeid)
        if earlier is not None:
            case.rerun = True
        cases[case.nodeid] = case
    return cases
