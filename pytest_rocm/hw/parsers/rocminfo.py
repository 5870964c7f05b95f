"""`rocminfo`: HSA agents; GPU agents have a gfx name, a marketing name, a chip id and memory
pools."""

from __future__ import annotations

import re

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput, gib
from pytest_rocm.hw.skus import identify_amd, partition_from_compute_units

_AGENT = re.compile(r"^\*+\s*\n\s*Agent\s+\d+\s*\n\*+\s*$", re.MULTILINE)
_KV = re.compile(r"^(\s*)([^:\n]+?):\s*(.*?)\s*$")
_NUMBER = re.compile(r"^(\d+)")


def _agent_fields(block: str) -> tuple[dict[str, str], list[str]]:
    """Top-level fields of an agent (2-space indent), and the sizes of its GLOBAL memory pools."""
    fields: dict[str, str] = {}
    global_pool_sizes: list[str] = []
    in_global_pool = False
    for line in block.splitlines():
        match = _KV.match(line)
        if not match:
            continue
        indent, key, value = len(match.group(1)), match.group(2).strip(), match.group(3)
        if indent <= 2:
            fields.setdefault(key, value)
        if key == "Segment":
            in_global_pool = value.startswith("GLOBAL")
        elif key == "Size" and in_global_pool:
            global_pool_sizes.append(value)
            in_global_pool = False
    return fields, global_pool_sizes


def parse(text: str) -> Parsed:
    parts = _AGENT.split(text)
    # An excerpt of one agent (no "Agent N" banner) is accepted as a single agent.
    agents = parts[1:] if len(parts) > 1 else [text]
    parsed = Parsed()
    runtime = re.search(r"^Runtime Version:\s*(\S+)", text, re.MULTILINE)
    if runtime:
        parsed.versions["hsa_runtime"] = runtime.group(1)
    saw_agent = False
    for block in agents:
        fields, pools = _agent_fields(block)
        if "Name" not in fields:
            continue
        saw_agent = True
        if fields.get("Device Type", "GPU" if fields["Name"].startswith("gfx") else "") != "GPU":
            continue
        memory = None
        if pools:
            size = _NUMBER.match(pools[0])
            unit = pools[0].split(")")[-1].strip() or "KB"
            memory = gib(size.group(1), unit) if size else None
        chip = _NUMBER.match(fields.get("Chip ID", ""))
        cus = _NUMBER.match(fields.get("Compute Unit", ""))
        name = fields.get("Marketing Name") or None
        sku, arch = identify_amd(
            name,
            fields["Name"],
            int(chip.group(1)) if chip else None,
            memory,
            int(cus.group(1)) if cus else None,
        )
        parsed.gpus.append(
            Gpu(
                index=len(parsed.gpus),
                vendor="amd",
                sku=sku,
                arch=arch,
                raw_name=name,
                memory_gb=memory,
                device_id=f"0x{int(chip.group(1)):04x}" if chip else None,
                compute_units=int(cus.group(1)) if cus else None,
                # rocminfo names no partition mode: an agent with a part of the GPU's CUs is one
                partition=partition_from_compute_units(sku, int(cus.group(1)) if cus else None),
            )
        )
    if not saw_agent:
        raise UnexpectedOutput("no HSA agents found in rocminfo output")
    return parsed
