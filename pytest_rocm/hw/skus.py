"""The SKU table (`skus.toml`, one row per GPU model, read here for every reader: detection, the
markers, the simulated profiles, node acceptance), and turning what a tool printed (name, gfx arch,
PCI device id, memory) into a SKU.

Tools name the same board many ways ("AMD Instinct MI300X OAM", "MI300X-O",
"AMD Instinct Mi325X VF", an empty name with only "gfx950:sramecc+:xnack-"),
and some print wrong values (rocm-smi on MI250X reports "gfx9010"). Evidence is
weighed in this order: an unambiguous product name, the PCI device id, then
arch with compute units or memory size. The raw name is always kept beside.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.errors import BadInput

TABLE_FILE = Path(__file__).resolve().parent / "skus.toml"
VENDORS = ("amd", "nvidia")
_KEYS = {
    "name": str,
    "vendor": str,
    "arch": str,
    "device_ids": list,
    "memory_gb": float,
    "vram_mib": int,
    "compute_units": int,
    "compute_partitions": list,
    "simulated": bool,
    "source": str,
}


_KINDS = {str: "text", list: "a list", float: "a number", int: "an integer", bool: "true or false"}


class SkuTableError(BadInput):
    """The SKU table is malformed (an edited copy, or a release that must not ship): the row and
    the key."""


@dataclass(frozen=True)
class Sku:
    """One row of the SKU table (skus.toml says what each field is and where it comes from)."""

    name: str
    vendor: str
    arch: str
    device_ids: tuple[str, ...] = ()
    memory_gb: float | None = None
    vram_mib: int | None = None
    compute_units: int | None = None
    compute_partitions: tuple[str, ...] = ()
    simulated: bool = True


def _row(path: Path, number: int, raw: dict) -> Sku:
    where = f"{path}: sku {number} ({raw.get('name', 'no name')})"
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise SkuTableError(f"{where}: unknown key {', '.join(unknown)}; keys: {', '.join(_KEYS)}")
    for key, kind in _KEYS.items():
        value = raw.get(key)
        # TOML's true is a Python int too: only a number is a number
        is_kind = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if value is not None and not (is_kind or (kind is float and type(value) is int)):
            raise SkuTableError(f"{where}: {key} must be {_KINDS[kind]}, not {value!r}")
    if not raw.get("name") or not raw.get("arch") or raw.get("vendor") not in VENDORS:
        raise SkuTableError(f"{where}: a row needs a name, an arch and a vendor of {VENDORS}")
    ids = tuple(normalise_device_id(d) or "" for d in raw.get("device_ids", []))
    if "" in ids:
        raise SkuTableError(f"{where}: device_ids are hex PCI ids such as '0x74a1'")
    modes = tuple(raw.get("compute_partitions", []))
    if set(modes) - set(LOGICAL_GPUS_PER_PARTITION_MODE):
        raise SkuTableError(
            f"{where}: compute_partitions are of {', '.join(LOGICAL_GPUS_PER_PARTITION_MODE)}"
        )
    return Sku(
        name=raw["name"].upper(),
        vendor=raw["vendor"],
        arch=raw["arch"],
        device_ids=ids,
        memory_gb=None if raw.get("memory_gb") is None else float(raw["memory_gb"]),
        vram_mib=raw.get("vram_mib"),
        compute_units=raw.get("compute_units"),
        compute_partitions=modes,
        simulated=raw.get("simulated", True),
    )


def load_table(path: Path = TABLE_FILE) -> tuple[Sku, ...]:
    """The rows of the SKU table, checked: a bad row is named with its key, two rows of one name
    or one device id are refused."""
    try:
        raw_rows = tomllib.loads(path.read_text(encoding="utf-8")).get("sku", [])
    except tomllib.TOMLDecodeError as error:
        raise SkuTableError(f"{path}: not TOML ({error})") from None
    if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
        raise SkuTableError(f"{path}: the table is rows of [[sku]], each a table of keys")
    rows = tuple(_row(path, n, raw) for n, raw in enumerate(raw_rows, 1))
    for label, keys in (
        ("name", [r.name for r in rows]),
        ("device id", [d for r in rows for d in r.device_ids]),
    ):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise SkuTableError(f"{path}: {label} {', '.join(twice)} in two rows")
    return rows


# Compute partition mode -> logical GPUs each physical GPU shows as (the MI300X, MI325X and MI350
# series have 8 XCDs, split in 2, 4 or one per XCD).
LOGICAL_GPUS_PER_PARTITION_MODE = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}


def normalise_device_id(value: str | int | None) -> str | None:
    """'0x74A1', '74a1', 29857 -> '0x74a1'."""
    if value is None or value == "" or value == "N/A":
        return None
    if isinstance(value, int):
        return f"0x{value:04x}"
    text = str(value).strip().lower()
    try:
        return f"0x{int(text, 16):04x}"
    except ValueError:
        return None


SKUS = load_table()
AMD_SKUS = tuple(r.name for r in SKUS if r.vendor == "amd")
NVIDIA_SKUS = tuple(r.name for r in SKUS if r.vendor == "nvidia")
ALL_SKUS = AMD_SKUS + NVIDIA_SKUS
# PCI device ids (physical and SR-IOV virtual functions) -> (SKU, arch).
AMD_DEVICE_IDS: dict[str, tuple[str, str]] = {
    d: (r.name, r.arch) for r in SKUS if r.vendor == "amd" for d in r.device_ids
}
# The compute units of a whole GPU of the SKUs that can be partitioned: an agent with a half, a
# quarter or an eighth of them is one partition (rocminfo names no mode; an MI300X in CPX lists 64
# agents of 38 CUs).
WHOLE_GPU_COMPUTE_UNITS = {r.name: r.compute_units for r in SKUS if r.compute_partitions}
COMPUTE_PARTITIONS = {r.name: r.compute_partitions for r in SKUS if r.compute_partitions}
# VRAM of one whole GPU in MiB, what amd-smi prints as MB.
VRAM_MB = {r.name: r.vram_mib for r in SKUS if r.vram_mib}
ARCH_BY_SKU = {r.name: r.arch for r in SKUS}
NVIDIA_ARCH_BY_SKU = {r.name: r.arch for r in SKUS if r.vendor == "nvidia"}


def partition_from_compute_units(sku: str | None, compute_units: int | None) -> str | None:
    """The compute partition mode a GPU agent's CU count shows (DPX, QPX or CPX), or None where it
    is the whole GPU or the SKU's whole count is not known."""
    whole = WHOLE_GPU_COMPUTE_UNITS.get(sku or "")
    if not whole or not compute_units:
        return None
    return next(
        (
            mode
            for mode, parts in LOGICAL_GPUS_PER_PARTITION_MODE.items()
            if parts > 1 and compute_units * parts == whole
        ),
        None,
    )


# Archs we recognise (the table's, and the Instinct and Radeon targets ROCm builds for); anything else
# a tool prints is treated as unreliable when the device id tells a known arch.
KNOWN_AMD_ARCHS = {r.arch for r in SKUS if r.vendor == "amd"} | {
    "gfx908",
    "gfx90a",
    "gfx940",
    "gfx941",
    "gfx942",
    "gfx950",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1200",
    "gfx1201",
}

_AMD_NAME = re.compile(r"\bMI[\s-]?(\d{3})([AX]?)", re.IGNORECASE)
# the longest name first, so "GH200" is not read as "H200"
_NVIDIA_NAME = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, NVIDIA_SKUS), key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)
_GFX = re.compile(r"gfx[0-9a-f]{3,4}", re.IGNORECASE)


def normalise_sku(name: str) -> str | None:
    """'mi300x' -> 'MI300X', 'H100' -> 'H100'; None when not a SKU we know (used to validate
    markers)."""
    upper = name.strip().upper()
    return upper if upper in ALL_SKUS else None


def normalise_arch(text: str | None) -> str | None:
    """'amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-' -> 'gfx942'."""
    if not text:
        return None
    match = _GFX.search(text)
    return match.group(0).lower() if match else None


def sku_from_amd_name(name: str | None) -> str | None:
    if not name:
        return None
    match = _AMD_NAME.search(name)
    if not match:
        return None
    candidate = f"MI{match.group(1)}{match.group(2).upper()}"
    return candidate if candidate in AMD_SKUS else None


def identify_amd(
    raw_name: str | None = None,
    arch: str | None = None,
    device_id: str | int | None = None,
    memory_gb: float | None = None,
    compute_units: int | None = None,
) -> tuple[str | None, str | None]:
    """Return (sku, arch) for an AMD GPU from whatever evidence a tool gave."""
    dev = normalise_device_id(device_id)
    by_device = AMD_DEVICE_IDS.get(dev) if dev else None
    arch = normalise_arch(arch)
    if by_device and arch not in KNOWN_AMD_ARCHS:
        arch = by_device[1]  # e.g. rocm-smi's "gfx9010" on MI250X

    sku = sku_from_amd_name(raw_name)
    if sku is None and by_device:
        sku = by_device[0]
        if dev == "0x740c" and compute_units is not None and compute_units <= 104:
            sku = "MI250"  # MI250 has 104 CUs per GCD, MI250X 110
    if sku is None and arch == "gfx942":
        sku = _gfx942_by_size(memory_gb, compute_units)
    if arch is None and sku is not None:
        arch = _arch_of_amd_sku(sku)
    return sku, arch


def _gfx942_by_size(memory_gb: float | None, compute_units: int | None) -> str | None:
    # Only used without a name or device id. Partitioned GPUs (CPX/NPS4) report a
    # fraction of the CUs and memory, so only whole-device figures are trusted.
    if compute_units == 80:
        return "MI308X"
    if compute_units == 228:
        return "MI300A"
    if memory_gb is None or compute_units not in (None, 304):
        return None
    if memory_gb >= 240:
        return "MI325X"
    if 180 <= memory_gb < 240:
        return "MI300X"
    return None


def _arch_of_amd_sku(sku: str) -> str | None:
    return ARCH_BY_SKU.get(sku)


def identify_nvidia(
    raw_name: str | None, compute_cap: str | None = None
) -> tuple[str | None, str | None]:
    """Return (sku, arch) for an NVIDIA GPU: 'NVIDIA H100 80GB HBM3', '9.0' -> ('H100', 'sm_90')."""
    sku = None
    if raw_name:
        match = _NVIDIA_NAME.search(raw_name)
        sku = match.group(1).upper() if match else None
    arch = None
    if compute_cap:
        try:
            major, minor = str(compute_cap).strip().split(".")
            arch = f"sm_{int(major)}{int(minor)}"
        except ValueError:
            arch = None
    if arch is None and sku:
        arch = NVIDIA_ARCH_BY_SKU.get(sku)
    return sku, arch
