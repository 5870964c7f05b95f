"""The maps pytest-rocm ships, by name: `vllm` and `sglang` sort those projects' test trees into the
gate groups (each made for one upstream commit, named in its `source`), `applicability` lists the
tests that can never apply to ROCm. Installed with the package, so an upstream checkout names them
(`rocm_group_map = vllm`, `--rocm-group-map=pytest_rocm:vllm`, `rocm-gate groups --map vllm`)
instead of pointing at a pytest-rocm checkout.

`resolve(value)` turns a setting's value into a file: `pytest_rocm:NAME` is always a shipped map; a
bare NAME (no `/`, no suffix) is one unless a file of that name is where the value is read (a folder
never is: inside vLLM's checkout `vllm` is its package folder); anything else is a path. A bare
name that is neither, close to a shipped one (`vlm`), is refused with the nearest name.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pytest_rocm.errors import BadInput

FOLDER = Path(__file__).resolve().parent
PREFIX = "pytest_rocm:"


class UnknownMapError(BadInput):
    """A `pytest_rocm:NAME` that names no shipped map."""


def names() -> list[str]:
    """The shipped maps' names."""
    return sorted(path.stem for path in FOLDER.glob("*.toml"))


def shipped(name: str) -> Path | None:
    """The shipped map of that name, or None."""
    path = FOLDER / f"{name}.toml"
    return path if name and "/" not in name and "\\" not in name and path.is_file() else None


def is_name(value: str) -> bool:
    """Whether a setting's value is written as a map's name rather than a path."""
    return value.startswith(PREFIX) or (
        "/" not in value and "\\" not in value and "." not in value and bool(value)
    )


def resolve(value: str, base: Path | None = None) -> Path:
    """The file a group-map or applicability setting names: a shipped map for `pytest_rocm:NAME`, or
    for a bare NAME with no such file under `base` (default: here); else the path itself (relative
    to `base`). UnknownMapError, listing the shipped names, for a `pytest_rocm:` name that is not
    one."""
    base = base or Path.cwd()
    if value.startswith(PREFIX):
        name = value.removeprefix(PREFIX)
        found = shipped(name)
        if found is None:
            raise UnknownMapError(
                f"{value!r} names no map shipped with pytest-rocm"
                + _nearest(name, PREFIX)
                + "; the shipped ones are "
                + ", ".join(f"{PREFIX}{n}" for n in names())
            )
        return found
    path = Path(value)
    if is_name(value) and not (base / path).is_file():
        if shipped(value) is not None:
            return shipped(value)
        nearest = _nearest(value)
        if nearest:  # `--map vlm`: a misspelt shipped name, not a file that is missing
            raise UnknownMapError(
                f"{value!r} is no file in {base} and names no map shipped with pytest-rocm"
                + nearest
                + "; the shipped ones are "
                + ", ".join(names())
            )
    return path if path.is_absolute() else base / path


def _nearest(name: str, prefix: str = "") -> str:
    """` (did you mean 'vllm'?)` for a name close to a shipped one (difflib), else nothing."""
    close = difflib.get_close_matches(name.lower(), names(), n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


__all__ = ["resolve", "names", "shipped", "is_name", "UnknownMapError", "PREFIX"]
