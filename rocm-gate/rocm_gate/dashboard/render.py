"""The dashboard's one way of writing HTML: Jinja2 templates (`dashboard/templates/`) rendered in
an environment that escapes every value, with no way to turn that off.

Escaping is Jinja's autoescape, on for every template; the `safe` filter is removed and a template
that holds an `autoescape` block is refused, so no value (a test id, a reason, a SKU a pull request
wrote) becomes markup. What a value shows is its text with the invisible characters made visible
first (`schemas/markdown.py`: `visible`), then escaped. A missing field fails the build
(`StrictUndefined`). The templates are written one element a line; a line break between two tags
is no part of the page, and any other is one space.

A table cell is text, or `Text` (text that is code, or links to a page of the site or an https://
URL), or a list of these shown one after the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateSyntaxError
from jinja2.ext import Extension
from markupsafe import Markup

from pytest_rocm.schemas.markdown import visible

TEMPLATES = Path(__file__).with_name("templates")
ROWS = 1000  # rows of one table; the rest are counted


@dataclass(frozen=True)
class Text:
    """Text of a cell: as code, and/or a link. `href` is set only to an https:// URL or a page of
    the site (`link`)."""

    text: str
    href: str | None = None
    code: bool = False


Cell = str | int | float | Text | list


@dataclass(frozen=True)
class Table:
    """A table of at most `ROWS` rows (`table`); `more` says how many were left out."""

    caption: str
    headers: list[str]
    rows: list[list[Cell]]
    more: int = 0

    @property
    def total(self) -> int:
        return len(self.rows) + self.more


def table(caption: str, headers: list[str], rows: list[list[Cell]], limit: int = ROWS) -> Table:
    return Table(caption, headers, rows[:limit], max(0, len(rows) - limit))


def link(url: str | None, text: str | None = None) -> Text:
    """`text` (the URL itself where none) linking to `url` when it is an https:// URL; else the text
    alone."""
    shown = text or url or ""
    return Text(shown, url) if url and url.startswith("https://") else Text(shown)


class _Layout(Extension):
    """A template's own line breaks: none between two tags (`>` or `}` then `<` or `{`), one space
    elsewhere; and no template may switch escaping off with an `autoescape` block."""

    _BETWEEN_TAGS = re.compile(r"(?<=[>}])[ \t]*\n\s*(?=[<{])")
    _LINE_BREAK = re.compile(r"[ \t]*\n\s*")
    _AUTOESCAPE = re.compile(r"\{%[-+]?\s*autoescape\b")

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if found := self._AUTOESCAPE.search(source):
            line = source.count("\n", 0, found.start()) + 1
            raise TemplateSyntaxError(
                "no autoescape block: escaping is always on", line, name, filename
            )
        return self._LINE_BREAK.sub(" ", self._BETWEEN_TAGS.sub("", source.strip()))


def _shown(value: object) -> object:
    """What `{{ value }}` prints, before Jinja escapes it: the value's text with its invisible
    characters made visible. A macro's output (Jinja's own, already escaped) passes as it is."""
    if isinstance(value, Markup):
        return value
    return visible(value)


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_shown,
        extensions=[_Layout],
        auto_reload=False,
    )
    del environment.filters["safe"]  # no such filter here: a template asking for it does not load
    environment.tests["text"] = lambda value: isinstance(value, Text)
    environment.tests["pieces"] = lambda value: isinstance(value, list)
    return environment


ENVIRONMENT = _environment()


def render(template: str, **context: object) -> str:
    """The template filled with `context`, every value escaped."""
    return ENVIRONMENT.get_template(template).render(**context)
