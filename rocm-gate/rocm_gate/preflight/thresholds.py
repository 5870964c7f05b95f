"""The per-SKU thresholds of the preflight (`thresholds.toml`): loaded, checked, and looked up for
one SKU."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from pytest_rocm.errors import BadInput

DEFAULT_FILE = Path(__file__).resolve().parent / "thresholds.toml"
# Every key the layers read; a file naming another key has a typo.
KEYS = {
    "gpus": int,
    "pcie_width": int,
    "pcie_speed_gts": float,
    "ecc_uncorrectable_max": int,
    "hotspot_temperature_max_c": float,
    "memory_temperature_max_c": float,
    "rccl_large_message_bytes": int,
    "rccl_dip_ratio": float,
    "rccl_timeout_s": float,
    "rccl_all_reduce_busbw_gbps": float,
    "babelstream_triad_mbps": float,
    "babelstream_copy_mbps": float,
    "transferbench_a2a_gbps": float,
    "bandwidth_fall_max_pct": float,
    "rccl_plateau_failed_pct": float,
    "peer_degraded_pct": float,
    "peer_failed_pct": float,
    "idle_vram_max_pct": float,
    "idle_gfx_max_pct": float,
    "vram_short_max_pct": float,
}
# Keys a file may still hold from an earlier release, read and not used, each with why: a site's
# copy of the packaged file must keep loading.
RETIRED = {
    "xgmi_bit_rate_gbps": "amd-smi xgmi's bit_rate is the GPU's static maximum, not the speed a "
    "link trained at (amdsmi: amdsmi_get_xgmi_info), so no link could ever fall below it; a link's "
    "state is judged from `amd-smi xgmi --link-status`, its speed from RVS pbqt and TransferBench",
}
RELATIVE_KEYS = (
    "bandwidth_fall_max_pct",
    "rccl_plateau_failed_pct",
    "peer_degraded_pct",
    "peer_failed_pct",
    "idle_vram_max_pct",
    "idle_gfx_max_pct",
    "vram_short_max_pct",
)
# a ratio is at most 1, a percentage at most 100
BOUNDED = {
    "rccl_dip_ratio": 1,
    "bandwidth_fall_max_pct": 100,
    "rccl_plateau_failed_pct": 100,
    "peer_degraded_pct": 100,
    "peer_failed_pct": 100,
    "idle_vram_max_pct": 100,
    "idle_gfx_max_pct": 100,
    "vram_short_max_pct": 100,
}
LARGEST = 1e15  # above any figure a node prints (bytes of the largest message: 1.7e10); TOML integers are unbounded


class ThresholdError(BadInput):
    """The thresholds file cannot be used; the message names the file, the key and the fix."""


class Thresholds:
    def __init__(self, path: Path, default: dict, per_sku: dict[str, dict]):
        self.path, self._default, self._per_sku = path, default, per_sku

    def for_sku(self, sku: str | None) -> dict:
        """The values for one SKU: `[default]` overlaid with `[sku.NAME]`, each beside its
        `<key>_source`, and the SKU itself under `sku` (the readers name it where it has no
        floor)."""
        return {**self._default, **self._per_sku.get(sku or "", {}), "sku": sku}


def _check_table(path: Path, where: str, table: object) -> dict:
    if not isinstance(table, dict):
        raise ThresholdError(
            f"{path}: {where} = {table!r} is not a table; write it as [{where}] with keys under it"
        )
    values = {}
    for key, value in table.items():
        if key.endswith("_source"):
            if key[: -len("_source")] in RETIRED:
                continue
            if key[: -len("_source")] not in table:
                raise ThresholdError(
                    f"{path}: [{where}] {key} is the source of a value that is not set"
                )
            if not isinstance(value, str):
                raise ThresholdError(
                    f"{path}: [{where}] {key} = {value!r}: a source is text (where the number comes from)"
                )
            continue
        if key in RETIRED:
            continue  # (its source too, above) read and not used: RETIRED says why
        if key not in KEYS:
            raise ThresholdError(
                f"{path}: [{where}] unknown key {key!r}; known keys: {', '.join(sorted(KEYS))}"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value < 0
            or isinstance(value, float)
            and not math.isfinite(value)
            or value > LARGEST
        ):
            raise ThresholdError(
                f"{path}: [{where}] {key} = {value!r:.40}: expected a finite number from 0 to {LARGEST:g}"
            )
        if KEYS[key] is int and value != int(value):
            raise ThresholdError(f"{path}: [{where}] {key} = {value!r}: expected a whole number")
        if key in BOUNDED and value > BOUNDED[key]:
            raise ThresholdError(
                f"{path}: [{where}] {key} = {value!r}: expected at most {BOUNDED[key]}"
            )
        if not str(table.get(f"{key}_source", "")).strip():
            raise ThresholdError(
                f'{path}: [{where}] {key} has no source: add {key}_source = "where the number comes from"'
            )
        values[key] = KEYS[key](value)
        values[f"{key}_source"] = table[f"{key}_source"]
    return values


def load(path: str | Path | None = None) -> Thresholds:
    path = Path(path) if path else DEFAULT_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ThresholdError(f"{path}: no such thresholds file") from None
    except IsADirectoryError:
        raise ThresholdError(
            f"{path}: a folder; give the thresholds file (copy the packaged thresholds.toml)"
        ) from None
    except OSError as exc:
        raise ThresholdError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ThresholdError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"default", "sku"}
    if unknown:
        raise ThresholdError(
            f"{path}: unknown table(s) {', '.join(sorted(unknown))}; use [default] and [sku.NAME]"
        )
    from pytest_rocm.hw.skus import normalise_sku

    per_sku = {}
    skus = data.get("sku", {})
    if not isinstance(skus, dict):
        raise ThresholdError(f"{path}: sku = {skus!r} is not a table; write each SKU as [sku.NAME]")
    for name, table in skus.items():
        sku = normalise_sku(name)
        if sku is None or not isinstance(table, dict):
            raise ThresholdError(
                f"{path}: [sku.{name}] is not a SKU table; use a SKU name such as MI300X"
            )
        if sku in per_sku:
            raise ThresholdError(f"{path}: [sku.{name}] is {sku} again; keep one table per SKU")
        per_sku[sku] = _check_table(path, f"sku.{name}", table)
    default = _check_table(path, "default", data.get("default", {}))
    if path.resolve() != DEFAULT_FILE.resolve():
        # The relative rules need no SKU figure: a site's own file written before they existed still
        # gets them.
        packaged = load(DEFAULT_FILE)._default
        for key in RELATIVE_KEYS:
            if key not in default:
                default[key] = packaged[key]
                default[f"{key}_source"] = (
                    f"the packaged thresholds.toml (not set in {path}): {packaged[f'{key}_source']}"
                )
    for where, table in (
        ("default", default),
        *((f"sku.{sku}", values) for sku, values in per_sku.items()),
    ):
        _degraded_first(path, where, {**default, **table})
    return Thresholds(path, default, per_sku)


def _degraded_first(path: Path, where: str, merged: dict) -> None:
    """The degraded limit of the peer rules is below each failed one."""
    for failed in ("peer_failed_pct", "rccl_plateau_failed_pct"):
        if merged.get("peer_degraded_pct", 0) > merged.get(failed, 100):
            raise ThresholdError(
                f"{path}: [{where}] peer_degraded_pct = {merged['peer_degraded_pct']:g} is "
                f"above {failed} = {merged[failed]:g}; degraded comes first"
            )
