"""Which entries of the quarantine file (`pytest-rocm/quarantine/1`, `--rocm-quarantine`) apply to
this run's platform. The file is kept by the CI service (`trunk/quarantine.py`, `rocm-gate history
quarantine`); the plugin only reads it, so this filter lives here, away from the history store."""

from __future__ import annotations

from typing import Any


def applying(document: dict[str, Any], skus: list[str]) -> dict[str, dict[str, Any]]:
    """test id -> its entry, for the entries that apply on a platform with these SKUs (an entry
    without a SKU applies on every SKU; a combined `MI300X/MI325X` SKU when all its parts are here)."""
    wanted = {s.upper() for s in skus}
    out: dict[str, dict[str, Any]] = {}
    for entry in document["tests"]:
        sku = entry.get("sku")
        if sku is None or sku.upper() in wanted or set(sku.upper().split("/")) <= wanted:
            out.setdefault(entry["test"], entry)
    return out
