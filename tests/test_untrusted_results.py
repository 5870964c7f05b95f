"""Results written by a PR's code, as an attacker writes them: text that tries to become markdown in
the check (rendered with cmark-gfm, GitHub's own renderer, HTML allowed through so an injection
shows), and documents that pass a loose schema but break a reader (wrong types, NaN, deep nesting).
Each must come out as text, or as a clear refusal naming the file and field (exit 2), never as
markup or a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from test_github import SHA, run_on_mi300x

HOSTILE = (
    "x\n\n# EVIL heading [EVIL link](https://evil.example/a) ![EVIL](https://evil.example/i.png) @evil-team "
    "<img src=x onerror=alert(1)> <details>EVIL</details> ```EVIL fence``` `tick` | EVIL | cell | #4242 "
    "www.evil.example evil@evil.example \u202eEVIL-bidi \x1b]52;c;EVIL\x07"
    # characters that show as nothing (Unicode's Default_Ignorable_Code_Point), or break a line
    " EVIL\u00adsoft EVIL\U000e0045\U000e0056tags EVIL\ufe0fvs16 EVIL\u180emvs EVIL\u2028ls "
    "EVIL\u2029ps EVIL\u3164\u115f\uffa0hangul"
)
# each must come out as a visible escape wherever a person reads the results
INVISIBLE = (
    "\u00ad",
    "\U000e0045",
    "\ufe0f",
    "\u180e",
    "\u2028",
    "\u2029",
    "\u3164",
    "\u115f",
    "\uffa0",
)

PASSING = """
import pytest

pytestmark = pytest.mark.rocm_gate(group="attention")

def test_fine():
    pass

@pytest.mark.skip(reason="skipped")
def test_skipped():
    pass

def test_bug():
    assert False, "x"
"""


@pytest.fixture(scope="module")
def real_results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("run")
    (root / "test_attention.py").write_text(PASSING)
    run_on_mi300x(root, "test_attention.py")
    return root / "out"


def hostile_copy(real: Path, to: Path) -> Path:
    """The real results with every string a reader shows replaced by HOSTILE (still
    schema-valid)."""
    shutil.copytree(real, to)
    report = json.loads((to / "gate-report.json").read_text())
    manifest = json.loads((to / "manifest.json").read_text())
    tests = {}
    for nodeid, test in report["tests"].items():
        test = {
            **test,
            "message": HOSTILE,
            "detail": HOSTILE + "\n" + HOSTILE,
            "verdict_reason": HOSTILE,
            "group": HOSTILE,
        }
        if test["verdict"] == "skipped":
            test.update(
                verdict="known_gap",
                status="known_gap",
                known_gap={
                    "reason": HOSTILE,
                    "issue": "https://evil.example/issue",
                    "mode": "skip",
                },
            )
        tests[f"{nodeid}[{HOSTILE}]"] = test
    report.update(
        tests=tests,
        conclusion_reason=HOSTILE,
        never_ran=[HOSTILE],
        incomplete_causes=[HOSTILE],
        collection_errors=[{"nodeid": HOSTILE, "cause": "change", "detail": HOSTILE}],
        skip_reasons=[{"status": HOSTILE, "reason": HOSTILE, "count": 1}],
    )
    manifest.update(runner=HOSTILE, container_image=HOSTILE)
    report["manifest"] = manifest
    (to / "gate-report.json").write_text(json.dumps(report))
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to


class Rendered(HTMLParser):
    """What GitHub would show: each text run with the elements around it, and every link and
    image."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.texts, self.links, self.images, self.tags, self.rows = (
            [],
            [],
            [],
            [],
            [],
            [],
        )

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "a":
            self.links.append(attrs.get("href"))
        if tag == "img":
            self.images.append(attrs.get("src"))
        if tag == "tr":
            self.rows.append(0)
        if tag in ("td", "th") and self.rows:
            self.rows[-1] += 1
        if tag not in ("img", "br", "hr", "input"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        self.texts.append((data, tuple(self.stack)))


def render(markdown: str) -> Rendered:
    html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    parsed = Rendered()
    parsed.feed(html)
    return parsed


def test_text_from_the_results_stays_text_in_the_check(real_results, tmp_path):
    results = hostile_copy(real_results, tmp_path / "hostile")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rocm_gate.cli",
            "publish",
            str(results),
            "--sha",
            SHA,
            "--runner-class",
            "mi300x-8",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    check = json.loads(done.stdout)
    for field in ("summary", "text"):
        page = render(check["output"][field])
        assert not [src for src in page.images], field  # no image from the results
        assert not [href for href in page.links if "evil" in (href or "")], (field, page.links)
        assert not {"details", "h1", "h4", "h5", "h6"} & set(page.tags), (field, set(page.tags))
        for text, around in page.texts:
            if "EVIL" in text or "@evil" in text or "#4242" in text:
                # never outside code
                assert "code" in around or "pre" in around, (field, text, around)
            assert "\u202e" not in text and "\x1b" not in text, (field, text)  # escaped, visibly
            assert not [c for c in INVISIBLE if c in text], (field, text)
        headings = [text for text, around in page.texts if {"h2", "h3"} & set(around)]
        assert not [h for h in headings if "EVIL" in h], headings
    stack = render(check["output"]["summary"])
    # every row of the stack table has its two cells
    assert stack.rows and set(stack.rows) == {2}, stack.rows
    for annotation in check["output"].get("annotations", []):
        assert "\n" not in annotation["title"] and "\x1b" not in annotation["title"]
        assert not [c for c in INVISIBLE if c in annotation["title"]]
    assert not [c for c in INVISIBLE if c in check["output"]["title"]]


def test_text_from_the_results_stays_visible_in_the_terminal_and_the_dashboard(
    real_results, tmp_path
):
    from pytest_rocm.results.summary import terminal_lines
    from pytest_rocm.schemas.markdown import html_text

    results = hostile_copy(real_results, tmp_path / "hostile")
    report = json.loads((results / "gate-report.json").read_text())
    for line, _ in terminal_lines(report):
        assert not [c for c in (*INVISIBLE, "\x1b", "\u202e") if c in line], line
    page = html_text(HOSTILE)
    assert "<" not in page and not [c for c in INVISIBLE if c in page]


class Cells(HTMLParser):
    """A rendered table's rows: per cell, its text and the text that was inside `<code>`."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[list[str]]] = []
        self.inside: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append(["", ""])
        self.inside.append(tag)

    def handle_endtag(self, tag):
        while self.inside and self.inside.pop() != tag:
            pass

    def handle_data(self, data):
        if self.rows and self.rows[-1] and {"td", "th"} & set(self.inside):
            self.rows[-1][-1][0] += data
            if "code" in self.inside:
                self.rows[-1][-1][1] += data


def rendered_cell(text: str) -> tuple[list[int], str, str]:
    """A table whose row holds `cell(text)` and a cell after it, through GitHub's renderer:
    (cells per row, the first cell's text, the part of it inside code)."""
    from pytest_rocm.schemas import markdown as md

    page = f"| test | after |\n|---|---|\n| {md.cell(text)} | after |\n"
    parsed = Cells()
    parsed.feed(cmarkgfm.github_flavored_markdown_to_html(page, options=Options.CMARK_OPT_UNSAFE))
    return [len(r) for r in parsed.rows], *parsed.rows[1][0]


IDS = [
    "tests/t.py::test_x[a|b]",
    "tests/t.py::test_x[a||b|]",
    "tests/t.py::test_x[a\\|b]",  # a backslash before a pipe
    "tests/t.py::test_x[a\\\\|b]",
    "tests/t.py::test_x[`a|b`]",
    "tests/t.py::test_x[a|b\\]",  # a backslash at the end
    "| a pipe first",
    "a pipe last |",
    "|",
    "\\",
    "tests/t.py::test_x[**not bold**|[not a link](https://evil.example)|<b>x</b>]",
]


@pytest.mark.parametrize("text", IDS)
def test_a_table_cell_holds_the_id_exactly(text):
    """A `|` of a parametrized id is written `\\|` in a cell (GFM's table extension: a cell's `\\|`
    is a `|` of its content, inside a code span too): the cell shows, and a maintainer copies,
    the id as it is; nothing of it leaves the cell or the code span."""
    rows, shown, in_code = rendered_cell(text)
    assert rows == [2, 2]
    assert in_code == text and shown.strip() == text.strip()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="|\\`ab *_[]<>#@!", min_size=1, max_size=24).filter(str.strip))
def test_any_text_stays_whole_in_its_cell(text):
    rows, shown, in_code = rendered_cell(text)
    assert rows == [2, 2] and in_code == text and shown.strip() == text.strip()


def test_the_tracker_writes_hostile_ids_as_text_in_their_cells():
    """The tracker's table of main's failures, with hostile test ids and failures: every row keeps
    its seven cells, each id shown whole in its code span, nothing of the results outside code."""
    from rocm_gate.github import tracker

    name = f"tests/t.py::test_x[{HOSTILE}|a|b]"
    entry = {
        "state": "failing", "flaky_commits": [], "flaky_count": 0, "flips": 1,
        "since": {"sha": "a" * 40, "started": None}, "last_green": None, "suspects": None,
        "suspect_count": None, "red_seconds": 7200.0, "fingerprints": [HOSTILE], "last_failed": HOSTILE,
    }  # fmt: skip
    trunk = {"sku": "MI300X", "tests": {name: entry, "tests/t.py::test_y[|]": entry},
             "main_runs": 1, "main_commits": 1, "newest": {"sha": "b" * 40}}  # fmt: skip
    page = render(tracker.render(trunk, "vllm")[1])
    assert set(page.rows) == {7}, page.rows
    for text, around in page.texts:
        if "EVIL" in text or "@evil" in text or "#4242" in text:
            assert "code" in around, (text, around)
    cells = Cells()
    cells.feed(cmarkgfm.github_flavored_markdown_to_html(tracker.render(trunk, "vllm")[1]))
    assert "tests/t.py::test_y[|]" in [row[0][1] for row in cells.rows if row]


@pytest.mark.parametrize(
    "damage, where",
    [
        (lambda r, m: m["platform"].update(gpus=["MI300X"] * 8), "platform/gpus/"),
        (lambda r, m: next(iter(r["tests"].values())).update(message=7), "message"),
        (lambda r, m: next(iter(r["tests"].values())).update(detail={"a": 1}), "detail"),
        (
            lambda r, m: r["collection_errors"].append(
                {"nodeid": "x", "cause": "change", "detail": 5}
            ),
            "detail",
        ),
        (
            lambda r, m: r["skip_reasons"].append(
                {"status": "skipped", "reason": None, "count": 1}
            ),
            "reason",
        ),
        (
            lambda r, m: next(iter(r["tests"].values()))["attempts"][0].update(
                signature={"name": 1, "line": 2}
            ),
            "signature",
        ),
    ],
    ids=[
        "gpus as strings",
        "message a number",
        "detail an object",
        "collection detail a number",
        "skip reason null",
        "signature numbers",
    ],
)
def test_odd_but_once_schema_valid_results_are_refused_naming_the_field(
    real_results, tmp_path, damage, where
):
    results = tmp_path / "odd"
    shutil.copytree(real_results, results)
    report = json.loads((results / "gate-report.json").read_text())
    manifest = json.loads((results / "manifest.json").read_text())
    damage(report, manifest)
    (results / "gate-report.json").write_text(json.dumps(report))
    (results / "manifest.json").write_text(json.dumps(manifest))
    done = publish_dry_run(results)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "not a valid" in done.stderr and where in done.stderr, done.stderr
    # and the check says why, blocking
    assert json.loads(done.stdout)["conclusion"] == "action_required"


def publish_dry_run(results: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rocm_gate.cli",
            "publish",
            str(results),
            "--sha",
            SHA,
            "--runner-class",
            "mi300x-8",
            "--dry-run",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize(
    "text, why",
    [
        (
            '{"schema": "pytest-rocm/gate-report/1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nested too deep",
        ),
        (
            '{"schema": "pytest-rocm/gate-report/1", "x": ' + "[" * 70 + "]" * 70 + "}",
            "nested deeper than 64",
        ),
        ('{"schema": "pytest-rocm/gate-report/1", "x": NaN}', "NaN is not a JSON number"),
        ('{"schema": "pytest-rocm/gate-report/1", "x": 1e999}', "not finite"),
        (b'{"schema": "\xff"}', "not UTF-8"),
    ],
    ids=["100000 deep", "70 deep", "NaN", "1e999", "not UTF-8"],
)
def test_a_gate_report_that_breaks_a_json_reader_is_refused_cleanly(
    real_results, tmp_path, text, why
):
    results = tmp_path / "broken"
    shutil.copytree(real_results, results)
    path = results / "gate-report.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    done = publish_dry_run(results)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert str(path) in done.stderr and why in done.stderr, done.stderr


@pytest.mark.parametrize(
    "base, why",
    [
        ("[]", "(top level)"),
        (
            '{"schema": "pytest-rocm/parity/1", "groups": {"api": {"reference_passing": 1, "both_passing": 1, '
            '"parity": "1.0", "reference_not_passing": 0, "blocking_tests": 0, "blocking": "no", "gaps": []}}}',
            "parity",
        ),
    ],
)
def test_a_base_parity_report_of_the_wrong_shape_is_a_clear_error(
    real_results, tmp_path, base, why
):
    path = tmp_path / "base.json"
    path.write_text(base)
    done = publish_dry_run(real_results, "--base-parity", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"--base-parity {path}" in done.stderr and why in done.stderr, done.stderr


def test_results_that_once_crashed_the_check_builder_make_a_check(real_results, tmp_path):
    results = tmp_path / "odd"
    shutil.copytree(real_results, results)
    report = json.loads((results / "gate-report.json").read_text())
    for test in report["tests"].values():
        test["detail"] = "test_attention.py:" + "9" * 5000 + ": in test_bug\n    assert False"
    (results / "gate-report.json").write_text(json.dumps(report))
    (results / "parity.json").write_text('{"schema": "pytest-rocm/parity/1"}')  # no groups: valid
    done = publish_dry_run(results)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "has no groups" in json.loads(done.stdout)["output"]["summary"]
    row = {
        "reference_passing": 1,
        "both_passing": 1,
        "parity": 1.0,
        "reference_not_passing": 0,
        "blocking_tests": 0,
        "blocking": "no",
        "gaps": [],
    }
    groups = {f"group-{i:04d}-{'x' * 30}": row for i in range(2000)}
    (results / "parity.json").write_text(
        json.dumps({"schema": "pytest-rocm/parity/1", "groups": groups})
    )
    done = publish_dry_run(results)
    summary = json.loads(done.stdout)["output"]["summary"]
    assert done.returncode == 0 and len(summary) <= 65535 and "and 1960 more groups" in summary


def test_a_results_zip_that_cannot_be_read_is_an_artifact_error(tmp_path):
    """A tampered or truncated upload (a bad CRC) is refused naming the artifact, never a
    traceback."""
    import io
    import zipfile

    from rocm_gate.github.artifacts import ArtifactError
    from rocm_gate.github.provenance import GateRun, fetch_results

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("gate-report.json", "{}" * 1000)
    data = bytearray(buffer.getvalue())
    data[data.index(b"{}") + 10] ^= 0xFF

    class Storage:  # the two API calls fetch_results makes, answering with that upload
        def paged(self, path, key, params=None):
            return [{"id": 1, "name": "rocm-gate-results-mi300x-8", "expired": False}]

        def download(self, path):
            return bytes(data)

    run = GateRun(
        run_id=7,
        event="pull_request",
        head_sha="a" * 40,
        status="completed",
        conclusion="success",
        html_url=None,
    )
    with pytest.raises(ArtifactError, match="rocm-gate-results-mi300x-8 of run 7: cannot be read"):
        fetch_results(Storage(), run, "mi300x-8", tmp_path)
