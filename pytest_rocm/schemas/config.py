"""Reading and checking the project's TOML configuration files, with one kind of error per file
type.

Every configuration file (group maps, applicability, baselines, server settings)
goes through `read_config`: it reads the file as UTF-8, parses it, refuses
unknown top-level keys (a misspelt `[[not_aplicable]]` would otherwise load as
an empty file and silently change a report), checks the optional `schema` key,
and checks that each table list is a list of tables. Entries are then checked
with `check_keys`. Every message names the file, the entry and the fix.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

# Keys any configuration file may have at its top level besides its own tables.
COMMON_KEYS = ("schema", "source", "note")


def read_toml(path: Path, label: str, error: type[Exception]) -> dict:
    """The parsed file; `error` names the file (as `label path`) and what is wrong with it."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(f"{label} {path}: cannot read it ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise error(
            f"{label} {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {line}); "
            "save it as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{label} {path}: not valid TOML: {exc}") from exc


def read_config(
    path: Path,
    label: str,
    error: type[Exception],
    kind: str,
    tables: tuple[str, ...] = (),
    sections: tuple[str, ...] = (),
) -> dict:
    """Read a configuration file of `kind` (its `schema`, when given, must be
    `pytest-rocm/<kind>/1`). `tables` are arrays of tables (`[[rule]]`), `sections` plain tables
    (`[vllm.default]`); any other top-level key is an error saying which ones are allowed."""
    data = read_toml(path, label, error)
    allowed = (*COMMON_KEYS, *tables, *sections)
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise error(
            f"{label} {path}: unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(allowed)}"
        )
    expected = f"pytest-rocm/{kind}/1"
    if "schema" in data and data["schema"] != expected:
        raise error(
            f"{label} {path}: schema is {data['schema']!r}; this version reads {expected!r}"
        )
    for key in ("source", "note"):
        if key in data and not isinstance(data[key], str):
            raise error(f"{label} {path}: `{key}` must be a string")
    for name in tables:
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
            raise error(f"{label} {path}: `{name}` must be a list of tables, written [[{name}]]")
    for name in sections:
        if name in data and not isinstance(data[name], dict):
            raise error(f"{label} {path}: `{name}` must be a table, written [{name}.<key>]")
    return data


def check_keys(
    raw: dict, where: str, allowed: tuple[str, ...] | set[str], error: type[Exception]
) -> None:
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise error(
            f"{where}: unknown keys {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
