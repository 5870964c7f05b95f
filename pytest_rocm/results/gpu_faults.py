"""The one catalog of GPU fault texts (`gpu_faults.toml`, each entry with its source and a real
example), read by the run verdicts (`results/verdicts.py`: infrastructure signatures) and by node
acceptance (`preflight/readers/dmesg.py`: the kernel log's rules), so a fault preflight fails a
node on is recognised as infrastructure in a test's failure too, and the texts cannot drift apart.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.errors import BadInput

__all__ = ["CATALOG_FILE", "Fault", "faults", "kernel_rules", "signature_pattern"]

CATALOG_FILE = Path(__file__).resolve().parent / "gpu_faults.toml"
PLACES = ("kernel_log", "test_failure")
STATUSES = ("failed", "degraded")
_REQUIRED = ("name", "pattern", "read_in", "example", "source")
_KERNEL_KEYS = ("check", "status", "meaning")


@dataclass(frozen=True)
class Fault:
    name: str
    pattern: str  # as written in the catalog
    ignore_case: bool
    read_in: tuple[str, ...]
    example: str
    source: str
    signature: str | None = None  # the verdicts' signature (read in a test's failure)
    check: str | None = None  # the kernel log's finding (read in the kernel log)
    status: str | None = None
    meaning: str | None = None

    @property
    def regex(self) -> str:
        """The pattern as one group, its case flag inside it, so entries join with `|`."""
        return f"(?{'i' if self.ignore_case else ''}:{self.pattern})"

    @property
    def compiled(self) -> re.Pattern:
        return re.compile(self.regex)


class CatalogError(BadInput):
    """The catalog is malformed (a release that must not ship, or an edited copy): the entry and
    the key."""


def _entry(number: int, raw: dict) -> Fault:
    missing = [key for key in _REQUIRED if not raw.get(key)]
    if missing:
        raise CatalogError(f"{CATALOG_FILE}: fault {number} has no {', '.join(missing)}")
    read_in = tuple(raw["read_in"])
    if not read_in or set(read_in) - set(PLACES):
        raise CatalogError(f"{CATALOG_FILE}: {raw['name']}: read_in is one or both of {PLACES}")
    if "kernel_log" in read_in and (
        any(not raw.get(key) for key in _KERNEL_KEYS) or raw["status"] not in STATUSES
    ):
        raise CatalogError(
            f"{CATALOG_FILE}: {raw['name']}: read in the kernel log, it needs check, meaning and "
            f"a status of {' or '.join(STATUSES)}"
        )
    if "test_failure" in read_in and not raw.get("signature"):
        raise CatalogError(
            f"{CATALOG_FILE}: {raw['name']}: read in a test's failure, it needs a signature"
        )
    fault = Fault(
        name=raw["name"],
        pattern=raw["pattern"],
        ignore_case=bool(raw.get("ignore_case", False)),
        read_in=read_in,
        example=raw["example"],
        source=raw["source"],
        signature=raw.get("signature"),
        check=raw.get("check"),
        status=raw.get("status"),
        meaning=raw.get("meaning"),
    )
    try:
        if not fault.compiled.search(fault.example):
            raise CatalogError(
                f"{CATALOG_FILE}: {fault.name}: its example does not match its pattern"
            )
    except re.error as exc:
        raise CatalogError(f"{CATALOG_FILE}: {fault.name}: bad pattern ({exc})") from None
    return fault


@functools.cache
def faults() -> tuple[Fault, ...]:
    """Every entry, in the catalog's order."""
    data = tomllib.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    return tuple(_entry(number, raw) for number, raw in enumerate(data.get("fault", []), start=1))


def signature_pattern(signature: str) -> str:
    """The verdicts' pattern of one signature: its entries read in a test's failure, joined."""
    found = [f.regex for f in faults() if f.signature == signature and "test_failure" in f.read_in]
    if not found:
        raise CatalogError(f"{CATALOG_FILE}: no entry is read in a test's failure as {signature}")
    return "|".join(found)


def kernel_rules(status: str) -> list[tuple[re.Pattern, str, str, str]]:
    """The kernel log's rules of one status, in the catalog's order: (pattern, check, status,
    meaning)."""
    return [
        (f.compiled, str(f.check), str(f.status), str(f.meaning))
        for f in faults()
        if "kernel_log" in f.read_in and f.status == status
    ]
