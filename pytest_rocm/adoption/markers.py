"""Add pytest-rocm's markers to the `markers` list of a `pyproject.toml`'s
`[tool.pytest.ini_options]`, as a text edit that keeps every other byte of the file (comments,
order, quoting), then prove it with the TOML parser: the edited file must parse to the same document
with only the marker lines added, or nothing is written.

A diff in a guide cannot do this on a real tree (vLLM's pyproject has other lists ending in `]`
before the markers, and its lines move between commits); this finds the list where it is.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from pytest_rocm.errors import BadInput
from pytest_rocm.plugin.markers import MARKER_HELP

# The markers a test writes (the server markers are the plugin's own suites'): their signature, and
# where to read.
USER_MARKERS = ("rocm_gate", "hardware", "rocm_known_gap")
LINES = tuple(
    f"{MARKER_HELP[name].split(': ', 1)[0]}: pytest-rocm (docs/adoption.md)"
    for name in USER_MARKERS
)
_TABLE = re.compile(r"^\s*\[\s*tool\s*\.\s*pytest\s*\.\s*ini_options\s*\]\s*(#.*)?$")
_ANY_TABLE = re.compile(r"^\s*\[")
_MARKERS = re.compile(r"^(\s*)markers\s*=\s*\[(.*)$")


class MarkerEditError(BadInput):
    """The file cannot be edited safely; the message names it and says what to do by hand."""


@dataclass
class Edit:
    text: str  # the new file's text (the same text when nothing was missing)
    added: list[str]  # the marker lines added


def _table(document: dict, keys: tuple[str, ...], path: Path) -> dict | None:
    """`document[keys...]`, each a table, or None where one is missing; a key that holds something
    else (`[tool] pytest = "x"`) is an error naming it."""
    found: object = document
    for depth, key in enumerate(keys):
        found = found.get(key) if isinstance(found, dict) else None
        if found is None:
            return None
        if not isinstance(found, dict):
            name = ".".join(keys[: depth + 1])
            raise MarkerEditError(
                f"{path}: `{name}` is {type(found).__name__} {found!r:.40}, not a table; pytest reads "
                "its settings from the table [tool.pytest.ini_options]: fix the file first"
            )
    return found if isinstance(found, dict) else None


def _registered(markers: list) -> set[str]:
    return {str(m).split(":", 1)[0].split("(", 1)[0].strip() for m in markers}


def add_markers(path: Path) -> Edit:
    """The file with pytest-rocm's missing markers added; MarkerEditError when it cannot be done
    safely."""
    if path.suffix != ".toml":
        raise MarkerEditError(
            f"{path}: only a pyproject.toml is edited; in an ini file add these lines under "
            "`markers =` by hand, one per line: " + "; ".join(LINES)
        )
    try:
        # bytes decoded, not read_text: its universal newlines would turn CRLF into LF
        text = path.read_bytes().decode("utf-8")
        before = tomllib.loads(text)
    except OSError as exc:
        raise MarkerEditError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise MarkerEditError(f"{path}: not UTF-8 text ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise MarkerEditError(f"{path}: not valid TOML ({exc}); fix it first") from None
    except RecursionError:
        raise MarkerEditError(
            f"{path}: nested too deep for the TOML parser; not a pyproject.toml this edits"
        ) from None
    options = _table(before, ("tool", "pytest", "ini_options"), path)
    markers = (options or {}).get("markers", [])
    if not isinstance(markers, list):
        raise MarkerEditError(
            f"{path}: [tool.pytest.ini_options] markers is not a list; add these lines to it by hand: "
            + "; ".join(LINES)
        )
    missing = [
        line
        for name, line in zip(USER_MARKERS, LINES, strict=True)
        if name not in _registered(markers)
    ]
    if not missing:
        return Edit(text, [])
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    quoted = [f"    {_toml_string(line)},{newline}" for line in missing]
    if options is None:
        ending = "" if not text or text.endswith("\n") else newline
        edited = (
            text
            + ending
            + f"{newline}[tool.pytest.ini_options]{newline}markers = [{newline}"
            + "".join(quoted)
            + f"]{newline}"
        )
    else:
        edited = _insert(lines, quoted, newline, has_markers="markers" in options, path=path)
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError as exc:  # the edit misread the file: never written
        raise MarkerEditError(
            f"{path}: the markers list is written in a way this edit does not follow (the edit "
            f"would not be valid TOML: {exc}); add these lines to it by hand: " + "; ".join(LINES)
        ) from None
    expected = _with_markers(before, markers + missing)
    if after != expected:
        raise MarkerEditError(
            f"{path}: the markers list is written in a way this edit does not follow (an inline "
            "table, a one-line list with comments); add these lines to it by hand: "
            + "; ".join(LINES)
        )
    return Edit(edited, missing)


def _insert(
    lines: list[str], quoted: list[str], newline: str, has_markers: bool, path: Path
) -> str:
    table = next((i for i, line in enumerate(lines) if _TABLE.match(line.rstrip("\r\n"))), None)
    if table is None:  # `[tool.pytest.ini_options]` written as dotted keys or an inline table
        raise MarkerEditError(
            f"{path}: [tool.pytest.ini_options] is not written as a table header; add these lines "
            "to its markers by hand: " + "; ".join(line.strip() for line in quoted)
        )
    end = next(
        (
            i
            for i in range(table + 1, len(lines))
            if _ANY_TABLE.match(lines[i]) and not _in_list(lines, table, i)
        ),
        len(lines),
    )
    if not has_markers:
        return "".join(
            lines[: table + 1]
            + [f"markers = [{newline}"]
            + quoted
            + [f"]{newline}"]
            + lines[table + 1 :]
        )
    start = next((i for i in range(table + 1, end) if _MARKERS.match(lines[i])), None)
    if start is None:
        raise MarkerEditError(
            f"{path}: cannot find the `markers = [` line of [tool.pytest.ini_options]"
        )
    close = _closing_line(lines, start, end)
    if close is None or close == start:  # a one-line list: rewrite it as one item per line
        raise MarkerEditError(
            f"{path}: the markers list is on one line; put one marker per line, then run this again"
        )
    previous = max(
        i for i in range(start, close) if lines[i].strip() and not lines[i].strip().startswith("#")
    )
    body = lines[previous].rstrip("\r\n")
    code = _strip_comment(body).rstrip()
    if previous != start and not code.endswith(","):
        lines[previous] = code + "," + body[len(code) :] + newline
    return "".join(lines[:close] + quoted + lines[close:])


def _closing_line(lines: list[str], start: int, end: int) -> int | None:
    """The line holding the `]` that closes the list opened on `start` (strings and comments
    skipped)."""
    depth = 0
    for i in range(start, end):
        code = _strip_comment(lines[i])
        code = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'', '""', code)
        for char in code:
            if char == "[":
                depth += 1
            elif char == "]":
                depth -= 1
                if depth == 0:
                    return i
    return None


def _in_list(lines: list[str], table: int, index: int) -> bool:
    """Whether line `index` is inside an open list (a `[` at its start is then an item, not a
    table)."""
    depth = 0
    for i in range(table + 1, index):
        code = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'', '""', _strip_comment(lines[i]))
        depth += code.count("[") - code.count("]")
    return depth > 0


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` outside strings: a basic string ("...") ends at a
    `"` no backslash escapes (`\\"` is a quote inside it, and a `#` after one is text), a literal
    string ('...') at the next `'`."""
    quote = None
    escaped = False
    for index, char in enumerate(line):
        if quote == '"' and escaped:
            escaped = False
        elif quote == '"' and char == "\\":
            escaped = True
        elif quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:index]
    return line


def _toml_string(value: str) -> str:
    """`value` as a TOML string, as the TOML writer (tomli_w) writes it: every character a basic
    string must escape is escaped."""
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def _with_markers(document: dict, markers: list) -> dict:
    import copy

    expected = copy.deepcopy(document)
    expected.setdefault("tool", {}).setdefault("pytest", {}).setdefault("ini_options", {})[
        "markers"
    ] = markers
    return expected
