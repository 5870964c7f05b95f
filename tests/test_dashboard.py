"""The dashboard's pages are text a pull request wrote (test ids, reasons, runners, SKUs), shown and
never run: a store holding hostile text gives pages where none of it is live, read back as a browser
would (Python's HTML parser), and nothing in the package can turn escaping off. The site is
rendered from the data the store was read into, with the store closed."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import truth

from rocm_gate import cli
from rocm_gate.dashboard import data, render, site
from rocm_gate.history import store

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
TEMPLATE = "{{7*7}}"
SVG = "</svg><script>alert(2)</script>"
BIDI = "\u202eEVIL"  # shown as its escape, never as a reversal of the text after it
HOSTILE = [SCRIPT, IMG, TEMPLATE, SVG, BIDI]
TESTS = [f"tests/test_api.py::test_api_{i}[{text}]" for i, text in enumerate(HOSTILE)]
# every element the site writes; an element out of the data would be another
ELEMENTS = {
    *("html", "head", "meta", "title", "link", "body", "header", "h1", "nav", "a", "main"),
    *("footer", "h2", "p", "div", "span", "table", "caption", "thead", "tbody", "tr", "th", "td"),
    *("code", "details", "summary", "ul", "li", "figure"),
    *("svg", "text", "rect", "line", "polyline", "circle"),
}


def _run(root: Path, name: str, sha: str, plan: dict, run_id: int, runner: str, pr=None) -> Path:
    """A run's results folder whose every text a reader sees is hostile: test ids, groups, the
    runner, the SKU, the stack, a known gap's reason and issue, the conclusion's reason."""
    folder = root / name
    folder.mkdir()
    repository = {"full_name": truth.REPO, "default_branch": "main"}
    if pr:
        payload = {"pull_request": {"number": pr, "head": {"sha": f"{pr:040x}"}, "base": {"sha": sha}}, "repository": repository}  # fmt: skip
        prov = truth._event(folder, "pull_request", payload, f"refs/pull/{pr}/merge", f"{10**6 + pr:040x}", run_id)  # fmt: skip
    else:
        prov = truth._event(folder, "push", {"after": sha, "before": "0" * 40, "repository": repository}, "refs/heads/main", sha, run_id)  # fmt: skip
    manifest = truth._manifest("MI300X", runner, prov, truth.Clock(8).at(run_id))
    truth._write(folder, truth._records(plan, {}, 1.0e9 + 100 * run_id), manifest)
    report = json.loads((folder / "gate-report.json").read_text())
    manifest = report["manifest"]
    for gpu in manifest["platform"]["gpus"]:
        gpu["sku"] = SVG
    manifest["packages"]["torch"] = IMG + str(run_id % 3 == 0)  # drift from the accepted stack
    manifest["container_image"] = SCRIPT
    for test, entry in report["tests"].items():
        entry["group"] = TEMPLATE if "api_2" in test else SVG
        if entry["verdict"] == "pass" and "api_1" in test:
            gap = {
                "reason": SCRIPT + IMG + TEMPLATE,
                "issue": "javascript:alert(1)",
                "mode": "skip",
            }
            entry.update(verdict="known_gap", status="known_gap", known_gap=gap)
    report["manifest"] = manifest
    if run_id == 1:
        report.update(conclusion="success", conclusion_reason=SCRIPT)  # an accepted stack
    (folder / "gate-report.json").write_text(json.dumps(report))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory) -> Path:
    """Four main runs (a regression, a known gap, a flaky test, an infra fault on two runners: a
    suspect; parity against a reference whose label is hostile) and a PR run, read into the site's
    data; the site is written after the store is closed."""
    root = tmp_path_factory.mktemp("hostile")
    fail = truth.Attempt("AssertionError: " + "".join(HOSTILE))
    infra = truth.Attempt(truth.HSA + SCRIPT, infra=True)
    ok = truth.Attempt(None)
    conn = store.connect(root / "history.db")
    plan = {TESTS[0]: [fail, fail], TESTS[1]: [ok], TESTS[2]: [fail, ok], TESTS[3]: [infra, ok]}
    plan[TESTS[4]] = [fail, fail]
    reference = None
    for n in range(1, 5):
        sha = f"{n:040x}"
        folder = _run(root, f"main{n}", sha, plan, n, f"node-{n % 2}{IMG}")
        reference = reference or folder / "gate-report.json"
        candidate = folder / "gate-report.json"
        args = ["parity", "--reference", str(reference), "--candidate", str(candidate), "--out", str(folder), "--reference-label", SVG + TEMPLATE]  # fmt: skip
        assert cli.main(args) == 0
        store.ingest(conn, folder, "manifest", str(n), sha)
    folder = _run(root, "pr", f"{4:040x}", {TESTS[0]: [fail, fail]}, 9, SCRIPT, pr=7)
    store.ingest(conn, folder, "pr", "9")
    read = data.read(conn, frozenset(f"{n:040x}" for n in range(1, 5)))
    conn.close()
    assert read.failures and read.suspects and read.flaky["flaky"] and read.gaps and read.drift
    site.write(read, root / "site")
    return root / "site"


class Page(HTMLParser):
    """What a browser builds of a page: its elements with their attributes, the text inside each
    kind of element, and the elements closed."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.closed: list[str] = []
        self.texts: list[tuple[str, str]] = []  # (the element it is in, text)
        self.stack: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in ("meta", "link", "rect", "line", "polyline", "circle"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self.closed.append(tag)
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        self.texts.append((self.stack[-1] if self.stack else "", data))

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.texts)


def test_hostile_text_in_the_store_is_shown_and_never_live_on_any_page(hostile_site):
    pages = {p.name: Page(p.read_text()) for p in sorted(hostile_site.glob("*.html"))}
    assert len(pages) == len(site.PAGES) + 3  # a page for each test that failed on main
    for name, page in pages.items():
        tags = {tag for tag, _ in page.elements}
        assert tags <= ELEMENTS, (name, tags - ELEMENTS)  # no script, no img: nothing from data
        for tag, attributes in page.elements:
            assert not [a for a in attributes if a.startswith("on")], (name, tag, attributes)
            href = attributes.get("href")
            if href is not None:  # the site's own pages, or GitHub's
                assert href.startswith("https://github.com/") or re.fullmatch(
                    r"[a-z]+\.html|test-[0-9a-f]{16}\.html|style\.css", href
                ), (name, href)
        # the SVG charts are whole: text that closes one is text
        assert page.closed.count("svg") == [t for t, _ in page.elements].count("svg"), name
        assert "[49]" not in page.text and "\u202e" not in page.text, name  # no template ran
    trunk = pages["trunk.html"].text
    assert TESTS[0] in trunk and TESTS[2] in trunk and TESTS[4].replace("\u202e", "\\u202e") in trunk  # fmt: skip
    grid = pages["grid.html"].text
    assert TESTS[0] in grid and TESTS[2] in grid
    suspects = pages["suspects.html"]
    assert SCRIPT + IMG + TEMPLATE in suspects.text  # the known gap's reason, as text
    assert "javascript:alert(1)" in suspects.text  # not a link: no https:// URL
    assert TESTS[3] in suspects.text and f"node-0{IMG}" in suspects.text
    assert SCRIPT in pages["stacks.html"].text and IMG in pages["stacks.html"].text
    index = pages["index.html"]
    names = [a["aria-label"] for tag, a in index.elements if tag == "svg"]
    assert any(SVG + TEMPLATE in name for name in names), names
    labels = [text for inside, text in index.texts if inside == "text"]  # an SVG <text>
    assert any(label.startswith(SVG[:20]) for label in labels), labels
    test_page = pages[site.test_page_name(TESTS[2])].text
    assert TESTS[2] in test_page and f"AssertionError: {SCRIPT}{IMG}{TEMPLATE}" in test_page


FORBIDDEN = re.compile(
    r"\|\s*safe\b|\bMarkup\s*\(|autoescape\s*=\s*False|\{%[-+]?\s*autoescape\s+false",
    re.IGNORECASE,
)


def test_nothing_in_the_package_turns_escaping_off():
    package = Path(site.__file__).parent
    templates = sorted((package / "templates").glob("*.html"))
    assert {"base.html", "index.html", "test.html"} <= {t.name for t in templates}
    found = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in [*sorted(package.rglob("*.py")), *templates]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert found == []
    # the check can fail
    planted = ["{{ x|safe }}", "{{ x | safe }}", "Markup(name)", "autoescape=False", "{% autoescape false %}"]  # fmt: skip
    assert [bool(FORBIDDEN.search(p)) for p in planted] == [True] * len(planted)
    # and the environment refuses what a template could try
    environment = render.ENVIRONMENT
    assert environment.autoescape is True and "safe" not in environment.filters
    assert environment.from_string("{{ x }}").render(x=SCRIPT) == "&lt;script&gt;alert(1)&lt;/script&gt;"  # fmt: skip
    from jinja2 import TemplateError

    for template in ("{{ x|safe }}", "{% autoescape false %}{{ x }}{% endautoescape %}"):
        with pytest.raises(TemplateError):
            environment.from_string(template).render(x=SCRIPT)
    with pytest.raises(TemplateError):  # a field the page needs and the data lacks
        environment.from_string("{{ run.missing }}").render(run={})
