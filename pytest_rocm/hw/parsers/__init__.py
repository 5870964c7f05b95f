"""One parser per detection source. Each takes the text a tool printed and returns `Parsed`.

A parser raises `UnexpectedOutput` with a message that says what it expected;
the detector turns that into a failed `SourceResult` and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_rocm.errors import BadInput
from pytest_rocm.hw.model import Gpu


class UnexpectedOutput(BadInput):
    """The tool answered, but not in a shape we understand."""


@dataclass
class Parsed:
    gpus: list[Gpu] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    # things worth telling the user (permission banners, ...)
    notes: list[str] = field(default_factory=list)


def missing(value):
    """amd-smi and friends print "N/A" (or nothing) for what they could not read."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "N/A", "n/a", "NA"))


def gib(value: float | str, unit: str) -> float:
    """Convert a size (a number, or its digits as the tool printed them) with its unit to GiB,
    rounded to 0.1 (tools print MB meaning MiB)."""
    factors = {
        "B": 1 / 1024**3,
        "KB": 1 / 1024**2,
        "KIB": 1 / 1024**2,
        "MB": 1 / 1024,
        "MIB": 1 / 1024,
        "GB": 1.0,
        "GIB": 1.0,
        "TB": 1024.0,
    }
    try:
        return round(float(value) * factors[unit.strip().upper()], 1)
    except KeyError as exc:
        raise UnexpectedOutput(f"unknown memory unit {unit!r}") from exc
