"""The per-SKU thresholds of the preflight (`thresholds.toml`): loaded, checked, and looked up for one SKU."""

from __future__ import annotations

import tomllib
from pathlib import Path

DEFAULT_FILE = Path(__file__).resolve().parent / "thresholds.toml"
# Every key the layers read; a file naming another key has a typo.
KEYS = {
    "gpus": int, "pcie_width": int, "pcie_speed_gts": float, "ecc_uncorrectable_max": int,
    "hotspot_temperature_max_c": float, "memory_temperature_max_c": float, "rccl_large_message_bytes": int,
    "rccl_dip_ratio": float, "rccl_timeout_s": float, "rccl_all_reduce_busbw_gbps": float,
    "babelstream_triad_mbps": float, "babelstream_copy_mbps": float, "transferbench_a2a_gbps": float,
    "xgmi_bit_rate_gbps": float,
}


class ThresholdError(ValueError):
    """The thresholds file cannot be used; the message names the file, the key and the fix."""


class Thresholds:
    def __init__(self, path: Path, default: dict, per_sku: dict[str, dict]):
        self.path, self._default, self._per_sku = path, default, per_sku

    def for_sku(self, sku: str | None) -> dict:
        """The values for one SKU: `[default]` overlaid with `[sku.NAME]`, each beside its `<key>_source`."""
        return {**self._default, **self._per_sku.get(sku or "", {})}


def _check_table(path: Path, where: str, table: dict) -> dict:
    values = {}
    for key, value in table.items():
        if key.endswith("_source"):
            if key[: -len("_source")] not in table:
                raise ThresholdError(f"{path}: [{where}] {key} is the source of a value that is not set")
            continue
        if key not in KEYS:
            raise ThresholdError(f"{path}: [{where}] unknown key {key!r}; known keys: {', '.join(sorted(KEYS))}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ThresholdError(f"{path}: [{where}] {key} = {value!r}: expected a number that is not negative")
        if not str(table.get(f"{key}_source", "")).strip():
            raise ThresholdError(f"{path}: [{where}] {key} has no source: add {key}_source = \"where the number comes from\"")
        values[key] = KEYS[key](value)
        values[f"{key}_source"] = table[f"{key}_source"]
    return values


def load(path: str | Path | None = None) -> Thresholds:
    path = Path(path) if path else DEFAULT_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ThresholdError(f"{path}: no such thresholds file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ThresholdError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"default", "sku"}
    if unknown:
        raise ThresholdError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}; use [default] and [sku.NAME]")
    from pytest_rocm.hw.skus import normalise_sku

    per_sku = {}
    for name, table in data.get("sku", {}).items():
        sku = normalise_sku(name)
        if sku is None or not isinstance(table, dict):
            raise ThresholdError(f"{path}: [sku.{name}] is not a SKU table; use a SKU name such as MI300X")
        per_sku[sku] = _check_table(path, f"sku.{name}", table)
    return Thresholds(path, _check_table(path, "default", data.get("default", {})), per_sku)
