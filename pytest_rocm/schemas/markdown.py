"""Text from artifacts as GitHub markdown that shows as text, never as markup (docs/architecture.md,
"Untrusted text").

Everything a job that ran a PR's code wrote is the attacker's: test ids, messages, reasons, runner
and image names. Where such a string becomes markdown (a check run's summary, parity.md) it goes
through one of these, so no heading, list, link, image, mention, issue reference, HTML or table
break can come from it:

- `code(text)`: an inline code span on one line. GitHub renders nothing inside a code span (no emphasis, link,
  HTML, and its mention and reference filters skip code), so the only ways out are the span's own end and the
  line's end: the delimiter is one backtick longer than any run of backticks inside, and line breaks, control
  and bidirectional-override characters become visible escapes (`\\n`, `\\u202e`).
- `cell(text)`: the same, for a table cell: GitHub splits table rows on `|` before it sees code spans, and
  takes `\\|` as a `|` of the cell's content, inside a code span too (the GFM spec's table extension: "include
  a pipe in a cell's content by escaping it, including inside other inline spans"), so each `|` is written
  `\\|` there: the cell shows, and a person copies, the text as it is (a test id's `|` parameter too), and no
  `|` of it ends the cell or the span.
- `block(lines)`: a fenced code block whose fence is longer than any run of backticks inside.
- `html_code(text)`: `<code>` with HTML escaping, for text inside an HTML element (`<summary>`), where markdown
  does not apply.
- `plain(text)`: one line of plain text for fields GitHub shows as text (check and annotation titles).
- `name(text)`: a name (a group, a status) as it is when it is an identifier that cannot be markup (a letter or
  digit, then letters, digits, `_`, `.`, `-`) nor a link GitHub makes of such a word (`www.` domains, commit
  hashes, `GH-12`, `GHSA-...`), else as `code` makes it (`cell` in a table: `table=True`).
"""

from __future__ import annotations

import html
import re

__all__ = [
    "block",
    "cell",
    "code",
    "cut_page",
    "utf8_len",
    "html_code",
    "html_name",
    "html_text",
    "name",
    "plain",
]

INLINE_LIMIT = 300
# C0 and C1 controls, DEL, the line and paragraph separators, and every code point Unicode makes
# Default_Ignorable (DerivedCoreProperties.txt: soft hyphen, combining grapheme joiner, the Hangul
# fillers, Khmer and Mongolian invisibles, zero-width characters, bidi embeddings, overrides, isolates
# and marks, variation selectors, tag characters, ...): each would make a shown id differ from the
# real one, or hide text.
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_BACKTICKS = re.compile("`+")
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# identifiers GitHub still turns into links: a `www.` domain (GFM's autolink), a commit (7 to 40 hex
# digits), an issue or advisory (GH-12, GHSA-...)
_LINKED = re.compile(r"(?i)www\..*|[0-9a-f]{7,40}|gh-\d+|ghsa-.*")


def _visible(text: str, keep_newlines: bool = False) -> str:
    def escape(match: re.Match) -> str:
        char = match.group()
        if keep_newlines and char == "\n":
            return char
        return {"\n": "\\n", "\r": "\\r", "\t": " "}.get(
            char, f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
        )

    return _INVISIBLE.sub(escape, text)


def visible(text: object) -> str:
    """Text safe to print on a terminal or in a log: controls (escape sequences, a clipboard write)
    and hiding characters escaped as `\\uXXXX`, nothing else changed."""
    return _visible(str(text))


def html_text(text: object) -> str:
    """Text for an HTML page (the dashboard): HTML-escaped, with the invisible characters escaped as
    `visible` does."""
    return html.escape(_visible(str(text)), quote=True)


_CLOSE_DETAILS = "\n</details>"


def utf8_len(text: str) -> int:
    """The length GitHub counts a check's summary and text in: UTF-8 bytes (a CJK character is 3)."""
    return len(text.encode("utf-8", "surrogatepass"))


def cut_page(text: str, limit: int, note: str) -> str:
    """A page of markdown cut to GitHub's `limit`, counted in UTF-8 bytes as GitHub counts it, with
    `note` at its end: at a line's end (a line cut in its middle could end inside a code span, and
    the rest of that line, artifact text, would then be markdown; a code span never spans lines),
    never inside a character, with every `<details>` left open closed."""
    if utf8_len(text) <= limit:
        return text
    budget = limit - utf8_len(note) - utf8_len(_CLOSE_DETAILS) * text.count("<details>")
    cut = text.encode("utf-8", "surrogatepass")[: max(budget, 0)].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else ""
    return cut + _CLOSE_DETAILS * (cut.count("<details>") - cut.count("</details>")) + note


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code(text: object, limit: int = INLINE_LIMIT) -> str:
    return _span(_cut(_visible(str(text)), limit))


def cell(text: object, limit: int = INLINE_LIMIT) -> str:
    """`code` for a table cell: each `|` written `\\|`, which GitHub's table reads as a `|` of the
    cell (a backslash before it stays: `\\\\|` shows `\\|`)."""
    return _span(_cut(_visible(str(text)), limit), table=True)


def _span(body: str, table: bool = False) -> str:
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(body)), default=0) + 1)
    if table:
        body = body.replace("|", "\\|")
    # One space inside each end: CommonMark strips exactly one from both, so a body that starts or
    # ends with a backtick cannot merge into the fence.
    return f"{fence} {body} {fence}"


def block(lines: list[str], indent: str = "") -> str:
    """A fenced block of `lines` (each already one line); empty when there are none."""
    if not lines:
        return ""
    body = [_visible(line) for line in lines]
    longest = max((len(run) for line in body for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join(indent + line for line in [fence, *body, fence])


def html_code(text: object, limit: int = INLINE_LIMIT) -> str:
    return f"<code>{html.escape(_cut(_visible(str(text)), limit), quote=True)}</code>"


def plain(text: object, limit: int = INLINE_LIMIT) -> str:
    return _cut(_visible(str(text)), limit)


def _is_plain_name(text: str) -> bool:
    return _IDENTIFIER.fullmatch(text) is not None and _LINKED.fullmatch(text) is None


def name(text: object, table: bool = False) -> str:
    text = str(text)
    return text if _is_plain_name(text) else cell(text) if table else code(text)


def html_name(text: object) -> str:
    """`name` inside an HTML element: the identifier as it is, anything else as `html_code`."""
    text = str(text)
    return text if _is_plain_name(text) else html_code(text)


def table(headers: list[str], rows: list[list[str]], numeric_from: int = 1) -> list[str]:
    """Aligned columns: text columns left-aligned, columns from `numeric_from` on right-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells):
        return "  ".join(
            cell.rjust(widths[i]) if i >= numeric_from else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    return [line(headers), *(line(r) for r in rows)]
