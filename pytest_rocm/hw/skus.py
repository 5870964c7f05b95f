"""SKU table: turn what a tool printed (name, gfx arch, PCI device id, memory) into a SKU.

Tools name the same board many ways ("AMD Instinct MI300X OAM", "MI300X-O",
"AMD Instinct Mi325X VF", an empty name with only "gfx950:sramecc+:xnack-"),
and some print wrong values (rocm-smi on MI250X reports "gfx9010"). Evidence is
weighed in this order: an unambiguous product name, the PCI device id, then
arch with compute units or memory size. The raw name is always kept beside.
"""

from __future__ import annotations

import re

AMD_SKUS = ("MI300X", "MI300A", "MI308X", "MI325X", "MI350X", "MI355X", "MI210", "MI250", "MI250X")
NVIDIA_SKUS = ("H100", "H200", "H20", "GH200", "B200", "GB200", "A100", "L40S")
ALL_SKUS = AMD_SKUS + NVIDIA_SKUS

# PCI device ids (physical and SR-IOV virtual functions) -> (SKU, arch).
# 0x740c is sold as both MI250 and MI250X; the name or the CU count decides.
AMD_DEVICE_IDS: dict[str, tuple[str, str]] = {
    "0x74a0": ("MI300A", "gfx942"),
    "0x74a1": ("MI300X", "gfx942"),
    "0x74b5": ("MI300X", "gfx942"),
    "0x74a9": ("MI300X", "gfx942"),
    "0x74bd": ("MI300X", "gfx942"),
    "0x74a2": ("MI308X", "gfx942"),
    "0x74b6": ("MI308X", "gfx942"),
    "0x74a5": ("MI325X", "gfx942"),
    "0x74b9": ("MI325X", "gfx942"),
    "0x75a0": ("MI350X", "gfx950"),
    "0x75b0": ("MI350X", "gfx950"),
    "0x75a3": ("MI355X", "gfx950"),
    "0x75b3": ("MI355X", "gfx950"),
    "0x7408": ("MI250X", "gfx90a"),
    "0x740c": ("MI250X", "gfx90a"),
    "0x740f": ("MI210", "gfx90a"),
    "0x7410": ("MI210", "gfx90a"),
}

# Compute partition mode -> logical GPUs each physical GPU shows as: the MI300X, MI325X and MI350
# series have 8 XCDs, split in 2 (DPX), 4 (QPX) or one per XCD (CPX) (AMD Instinct MI300X GPU
# partitioning overview, instinct.docs.amd.com; 8 x MI300X in CPX lists 64 GPUs,
# ROCm/legacy-rocm-build#4750).
LOGICAL_GPUS_PER_PARTITION_MODE = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
# Compute units of a whole GPU of the 8-XCD SKUs (AMD Instinct data sheets: MI300X and MI325X 304,
# MI350X and MI355X 256): an agent with a half, a quarter or an eighth of them is one partition of a
# DPX, QPX or CPX GPU. rocminfo names no mode, and an MI300X in CPX lists 64 agents of 38 CUs.
WHOLE_GPU_COMPUTE_UNITS = {"MI300X": 304, "MI325X": 304, "MI350X": 256, "MI355X": 256}
# VRAM of one whole GPU in MiB, what amd-smi prints as MB (AMD Instinct data sheets: MI300X and
# MI308X 192 GB HBM3, MI325X 256 GB HBM3E, MI350X and MI355X 288 GB HBM3E, MI210 64 GB, each GCD of an
# MI250/MI250X 64 GB); amd-smi static on 8x MI300X prints 196592 of the 196608 (16 MiB held by
# firmware: tests/data/samples/amd-smi, dell-ai). A GPU in a memory partition mode NPS2/4/8 shows a
# half, a quarter or an eighth of it per partition.
VRAM_MB = {
    "MI300X": 196608,
    "MI308X": 196608,
    "MI325X": 262144,
    "MI350X": 294912,
    "MI355X": 294912,
    "MI210": 65536,
    "MI250": 65536,
    "MI250X": 65536,
}


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


# Archs we recognise; anything else a tool prints is treated as unreliable when
# the device id tells a known arch.
KNOWN_AMD_ARCHS = {
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

NVIDIA_ARCH_BY_SKU = {
    "A100": "sm_80",
    "L40S": "sm_89",
    "H100": "sm_90",
    "H200": "sm_90",
    "H20": "sm_90",
    "GH200": "sm_90",
    "B200": "sm_100",
    "GB200": "sm_100",
}

_AMD_NAME = re.compile(r"\bMI[\s-]?(\d{3})([AX]?)", re.IGNORECASE)
_NVIDIA_NAME = re.compile(r"\b(GH200|GB200|B200|H200|H100|H20|A100|L40S)\b", re.IGNORECASE)
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
    for found_sku, found_arch in AMD_DEVICE_IDS.values():
        if found_sku == sku:
            return found_arch
    return "gfx90a" if sku == "MI250" else None


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
