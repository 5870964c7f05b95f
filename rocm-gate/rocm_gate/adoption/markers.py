"""Add pytest-rocm's markers to the `markers` list of a `pyproject.toml`'s
`[tool.pytest.ini_options]` with tomlkit, the TOML library that keeps a file's comments, order,
quoting and line endings, then prove it with the TOML parser: the edited file must parse to the same
document with only the marker lines added, or nothing is written.

A diff in a guide cannot do this on a real tree (vLLM's pyproject has other lists ending in `]`
before the markers, and its lines move between commits); this finds the list where it is.
"""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Comment, InlineTable, Table, Whitespace

from pytest_rocm.errors import BadInput
from pytest_rocm.plugin.markers import MARKER_HELP

# The markers a test writes (the server markers are the plugin's own suites'): their signature, and
# where to read.
USER_MARKERS = ("rocm_gate", "hardware", "rocm_known_gap")
LINES = tuple(
    f"{MARKER_HELP[name].split(': ', 1)[0]}: pytest-rocm (docs/adoption.md)"
    for name in USER_MARKERS
)
_KEYS = ("tool", "pytest", "ini_options")
_LONE_LF = re.compile(r"(?<!\r)\n")


class MarkerEditError(BadInput):
    """The file cannot be edited safely; the message names it and says what to do by hand."""


@dataclass
class Edit:
    text: str  # the new file's text (the same text when nothing was missing)
    added: list[str]  # the marker lines added


def _by_hand() -> str:
    return "add these lines to [tool.pytest.ini_options] markers by hand: " + "; ".join(LINES)


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


def _read(path: Path) -> tuple[str, dict]:
    """The file's text (bytes decoded, not read_text: its universal newlines would turn CRLF into
    LF) and the document the TOML parser reads from it."""
    if path.suffix != ".toml":
        raise MarkerEditError(
            f"{path}: only a pyproject.toml is edited; in an ini file add these lines under "
            "`markers =` by hand, one per line: " + "; ".join(LINES)
        )
    try:
        text = path.read_bytes().decode("utf-8")
        return text, tomllib.loads(text)
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


def add_markers(path: Path) -> Edit:
    """The file with pytest-rocm's missing markers added; MarkerEditError when it cannot be done
    safely."""
    text, before = _read(path)
    options = _table(before, _KEYS, path)
    markers = (options or {}).get("markers", [])
    if not isinstance(markers, list):
        raise MarkerEditError(
            f"{path}: [tool.pytest.ini_options] markers is not a list; {_by_hand()}"
        )
    missing = [
        line
        for name, line in zip(USER_MARKERS, LINES, strict=True)
        if name not in _registered(markers)
    ]
    if not missing:
        return Edit(text, [])
    edited = _edited(text, before, missing, path)
    try:
        after = tomllib.loads(edited)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # never written
        raise MarkerEditError(
            f"{path}: the edit would not be valid TOML ({exc}); {_by_hand()}"
        ) from None
    expected = copy.deepcopy(before)
    node = expected
    for key in _KEYS:
        node = node.setdefault(key, {})
    node["markers"] = markers + missing
    if after != expected:
        raise MarkerEditError(
            f"{path}: the TOML editor (tomlkit) would change more than the markers list here (the "
            f"file writes [tool.pytest.ini_options] in a shape it does not follow); {_by_hand()}"
        )
    return Edit(edited, missing)


def _edited(text: str, before: dict, missing: list[str], path: Path) -> str:
    """The text with the missing lines added to the markers list by tomlkit, every other byte kept.
    New lines end as the file's first line does, but tomlkit writes "\\n" where it adds a line of
    its own (a table's header, a blank line): in a file whose every line ends in CRLF those become
    CRLF; a file that mixes both keeps every line it has, and those new ones end in "\\n"."""
    first, eol, _ = text.partition("\n")
    newline = "\r\n" if eol and first.endswith("\r") else "\n"
    if text and not text.endswith("\n") and "tool" not in before:
        text += newline  # the new table is appended: after a blank line, as after a full line
    try:
        document = tomlkit.parse(text)
        _add(document, missing, newline)
        edited = tomlkit.dumps(document)
    except RecursionError:
        raise MarkerEditError(
            f"{path}: nested too deep for the TOML editor (tomlkit); {_by_hand()}"
        ) from None
    except (TOMLKitError, ValueError) as exc:
        raise MarkerEditError(
            f"{path}: the TOML editor (tomlkit) cannot edit it ({exc}); {_by_hand()}"
        ) from None
    if newline == "\r\n" and not _LONE_LF.search(text):
        edited = _LONE_LF.sub("\r\n", edited)
    return edited


def _add(document: Any, missing: list[str], newline: str) -> None:
    """Add the missing lines to `tool.pytest.ini_options.markers`, creating the tables and the list
    where missing: a new list has one marker a line, a one-line list becomes one (but in an inline
    table, which stays on its line), a list over several lines takes them after its last item."""
    node, inline, created = document, False, False
    for depth, key in enumerate(_KEYS):
        inline = inline or isinstance(node, InlineTable)
        if key not in node:
            created = True
            if inline:  # append: `{a = 1, b = 2}`, where item assignment writes `{a = 1,b = 2}`
                node.append(key, tomlkit.inline_table())
            else:
                node[key] = tomlkit.table(is_super_table=depth < len(_KEYS) - 1)
        node = node[key]
    inline = inline or isinstance(node, InlineTable)
    current = node.get("markers")
    if inline:
        if current is None:
            node.append("markers", tomlkit.array())
        node["markers"].extend(missing)
    elif current is None or "\n" not in current.as_string():
        kept = [item.as_string() for item in current or []]
        quoted = [tomlkit.string(line).as_string() for line in missing]
        node["markers"] = _one_a_line(kept + quoted, newline)
    else:
        current.extend(missing)
    if created and isinstance(node, Table) and not _ends(document, node):
        node.append(None, Whitespace(newline))  # a blank line before the table that follows


def _one_a_line(values: list[str], newline: str) -> Any:
    """A TOML list of `values` (each as TOML writes it), one a line, ending its lines with
    `newline`: tomlkit's own multi-line lists end theirs with "\\n"."""
    body = "".join(f"    {value},{newline}" for value in values)
    return tomlkit.parse(f"markers = [{newline}{body}]{newline}")["markers"]


def _ends(container: Any, table: Table) -> bool:
    """Whether `table` is the last thing written in `container` (a document, or a table's body)."""
    body = container.body if hasattr(container, "body") else container.value.body
    items = [item for _, item in body if not isinstance(item, (Whitespace, Comment))]
    if not items:
        return False
    return items[-1] is table or (isinstance(items[-1], Table) and _ends(items[-1], table))
