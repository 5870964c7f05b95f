"""Simulated platforms: built-in names like `mi300x-8`, or a JSON file (the shape
`rocm-gate doctor --json` prints).

Any `<sku>-<count>` of a SKU in SKU_SPECS works (`mi300x-4`, `h100-2`); BUILTIN lists the
ones we document. Profiles make hardware logic testable on a machine without GPUs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.hw.model import MAX_GPUS, Gpu, Platform, SourceResult
from pytest_rocm.hw.skus import SKUS

# Nominal whole-device figures of each SKU the table simulates (memory in GiB, as the tools report
# it): hw/skus.toml.
SKU_SPECS: dict[str, dict] = {
    sku.name: {
        "vendor": sku.vendor,
        "arch": sku.arch,
        "memory_gb": sku.memory_gb,
        **({"device_id": sku.device_ids[0]} if sku.device_ids else {}),
        **({"compute_units": sku.compute_units} if sku.vendor == "amd" else {}),
    }
    for sku in SKUS
    if sku.simulated and sku.memory_gb is not None
}

STACKS = {
    "amd": {"rocm": "7.0.0", "hip": "7.0.51831", "driver": "amdgpu 6.14.14"},
    "nvidia": {"cuda": "12.9", "driver": "nvidia 575.57.08"},
}

BUILTIN = (
    "cpu",
    "mi300x-1",
    "mi300x-2",
    "mi300x-8",
    "mi325x-8",
    "mi355x-1",
    "mi355x-8",
    "mi250x-2",
    "h100-1",
    "h100-8",
    "h200-1",
    "b200-8",
)

_NAME = re.compile(r"^([a-z0-9]+)-(\d+)$")


class ProfileError(BadInput):
    pass


def builtin(name: str) -> Platform:
    if name == "cpu":
        return Platform(vendor="cpu", profile="cpu")
    match = _NAME.match(name.lower())
    sku = match.group(1).upper() if match else None
    if not match or sku not in SKU_SPECS:
        raise ProfileError(
            f"unknown platform profile {name!r}: use one of {', '.join(BUILTIN)}, "
            "any '<sku>-<count>' of " + ", ".join(s.lower() for s in SKU_SPECS) + ", or a JSON file"
        )
    count = int(match.group(2))
    if not 1 <= count <= MAX_GPUS:
        raise ProfileError(f"platform profile {name!r} must have from 1 to {MAX_GPUS} GPUs")
    spec = dict(SKU_SPECS[sku])
    vendor = spec.pop("vendor")
    partition = "SPX/NPS1" if vendor == "amd" else None
    gpus = [
        Gpu(
            index=i,
            vendor=vendor,
            sku=sku,
            raw_name=f"simulated {sku}",
            partition=partition,
            pci_bus=f"0000:{0x10 * (i + 1):02x}:00.0",
            **spec,
        )
        for i in range(count)
    ]
    return Platform(vendor=vendor, gpus=gpus, versions=dict(STACKS[vendor]), profile=name.lower())


def from_file(path: Path) -> Platform:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("platform"), dict):
            data = data["platform"]  # the whole of `doctor --json`: the platform is one part
        if isinstance(data, dict) and not {"vendor", "gpus"} & set(data):
            # read as it is, it would be a runner without GPUs: say so rather than simulate that
            raise ValueError(f"no vendor or gpus key (it has {', '.join(sorted(data)) or 'none'})")
        platform = Platform.from_dict(data)
    # UnicodeDecodeError and JSONDecodeError are ValueErrors
    except (OSError, ValueError, TypeError) as exc:
        raise ProfileError(
            f"platform profile file {path}: {exc}. Expected the JSON that "
            "`rocm-gate doctor --json` prints (its platform: vendor, gpus, versions)."
        ) from exc
    platform.profile = platform.profile or path.name
    return platform


def load(name_or_path: str) -> Platform:
    """A built-in name or a path to a JSON file; the result records that it is simulated."""
    path = Path(name_or_path)
    if name_or_path.endswith(".json") or path.is_file():
        platform = from_file(path)
        detail = f"simulated from {path}"
    else:
        platform = builtin(name_or_path)
        detail = f"simulated built-in profile {platform.profile}"
    platform.sources = [SourceResult("profile", True, detail, platform.gpu_count)]
    return platform
