"""KFD topology in sysfs: /sys/class/kfd/kfd/topology/nodes/*/properties (readable without the
render group)."""

from __future__ import annotations

from pathlib import Path

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput, gib
from pytest_rocm.hw.skus import identify_amd

DEFAULT_ROOT = Path("/sys/class/kfd/kfd/topology/nodes")


def _properties(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value.strip())
        except ValueError:
            continue
    return values


def gfx_from_target_version(version: int) -> str:
    """KFD encodes gfx942 as 90402 and gfx90a as 90010 (major, minor, stepping in hex)."""
    return f"gfx{version // 10000}{(version // 100) % 100}{version % 100:x}"


def parse_dir(root: Path = DEFAULT_ROOT) -> Parsed:
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist (amdgpu/KFD driver not loaded)")
    parsed = Parsed()
    nodes = sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not nodes:
        raise UnexpectedOutput(f"no numbered nodes under {root}")
    for node in nodes:
        props = _properties(node / "properties")
        if props.get("simd_count", 0) <= 0:
            continue  # a CPU node
        banks = sorted(node.glob("mem_banks/*/properties"))
        sizes = [_properties(bank).get("size_in_bytes", 0) for bank in banks]
        largest = max(sizes, default=0)
        memory = gib(largest, "B") if largest else None
        simd_per_cu = props.get("simd_per_cu") or 4
        cus = props["simd_count"] // simd_per_cu
        arch = (
            gfx_from_target_version(props["gfx_target_version"])
            if props.get("gfx_target_version")
            else None
        )
        device_id = props.get("device_id")
        sku, arch = identify_amd(None, arch, device_id, memory, cus)
        parsed.gpus.append(
            Gpu(
                index=len(parsed.gpus),
                vendor="amd",
                sku=sku,
                arch=arch,
                memory_gb=memory,
                device_id=f"0x{device_id:04x}" if device_id else None,
                compute_units=cus,
            )
        )
    return parsed
