"""vLLM's (and PyTorch's) `collect_env.py` report: the stack versions and the GPU model."""

from __future__ import annotations

import re

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput
from pytest_rocm.hw.skus import identify_amd, identify_nvidia, normalise_arch

_VERSION_LINES = {
    "PyTorch version": "torch",
    "ROCM Version": "rocm",
    "HIP runtime version": "hip",
    "MIOpen runtime version": "miopen",
    "CUDA runtime version": "cuda",
    "Nvidia driver version": "driver",
    "vLLM Version": "vllm",
}


def parse(text: str) -> Parsed:
    parsed = Parsed()
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _VERSION_LINES | {"GPU models and configuration": None}:
            values[key.strip()] = value.strip()
    if "PyTorch version" not in values:
        raise UnexpectedOutput("not a collect_env report: no 'PyTorch version:' line")
    for key, name in _VERSION_LINES.items():
        found = values.get(key)
        if found and found not in ("N/A", "Could not collect"):
            parsed.versions[name] = found
    names = re.findall(r"^GPU (\d+): (.+)$", text, re.MULTILINE)  # CUDA layout, one line per GPU
    model = values.get("GPU models and configuration", "")
    if not names and model and model != "Could not collect":
        count = _topology_count(text) or 1
        names = [(str(i), model) for i in range(count)]
    amd = bool(parsed.versions.get("hip") or parsed.versions.get("rocm"))
    for index, name in names:
        if amd:
            sku, arch = identify_amd(name, normalise_arch(name))
        else:
            sku, arch = identify_nvidia(name)
        parsed.gpus.append(
            Gpu(
                index=int(index),
                vendor="amd" if amd else "nvidia",
                sku=sku,
                arch=arch,
                raw_name=name.strip(),
            )
        )
    return parsed


def _topology_count(text: str) -> int:
    """The 'GPU Topology' table lists one column per GPU: 'GPU0  GPU1 ...'."""
    header = re.search(r"^\s+(GPU0(?:\s+GPU\d+)*)\s*$", text, re.MULTILINE)
    return len(header.group(1).split()) if header else 0
