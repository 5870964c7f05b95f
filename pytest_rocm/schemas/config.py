"""Reading the project's TOML configuration files (group maps, applicability, baselines) with one kind of error."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_toml(path: Path, label: str, error: type[Exception]) -> dict:
    """The parsed file; `error` names the file (as `label path`) and what is wrong with it."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{label} {path}: cannot read it ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{label} {path}: not valid TOML: {exc}") from exc
