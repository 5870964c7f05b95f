"""`rocm-smi`: the concise table, `--showproductname` text, and `--json`."""

from __future__ import annotations

import json
import re

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput, gib, missing
from pytest_rocm.hw.skus import identify_amd

_FIELD_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*?)\s*$")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_DEVICE_ID = re.compile(r"\b0x[0-9a-fA-F]{4}\b")
_PARTITION = re.compile(r"\b(NPS\d|N/A)\s*,\s*(SPX|DPX|TPX|QPX|CPX|N/A)\b")


def parse(text: str) -> Parsed:
    stripped = text.strip()
    if not stripped:
        raise UnexpectedOutput("rocm-smi printed nothing")
    if stripped.startswith("{"):
        return parse_json(stripped)
    if _FIELD_LINE.search(text.replace("\t", " ")) or re.search(r"^GPU\[\d+\]", text, re.MULTILINE):
        return parse_fields(text)
    return parse_concise(text)


def _gpu_from_fields(index: int, fields: dict[str, str]) -> Gpu:
    lower = {k.strip().lower(): v for k, v in fields.items() if not missing(v)}
    name = lower.get("card series") or lower.get("card model name") or lower.get("marketing name")
    device_id = lower.get("card model") or lower.get("device id")
    if device_id and not _DEVICE_ID.fullmatch(device_id.strip()):
        device_id = None  # some versions print the series text here
    memory = None
    if "vram total memory (b)" in lower:
        memory = gib(lower["vram total memory (b)"], "B")
    sku, arch = identify_amd(name, lower.get("gfx version"), device_id, memory)
    return Gpu(
        index=index,
        vendor="amd",
        sku=sku,
        arch=arch,
        raw_name=name,
        memory_gb=memory,
        device_id=device_id,
    )


def parse_json(text: str) -> Parsed:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnexpectedOutput(f"rocm-smi JSON does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise UnexpectedOutput("rocm-smi JSON is not an object of cards")
    parsed = Parsed()
    for key, fields in data.items():
        match = re.fullmatch(r"card(\d+)", key)
        if match and isinstance(fields, dict):
            parsed.gpus.append(_gpu_from_fields(int(match.group(1)), fields))
        elif key == "system" and isinstance(fields, dict) and fields.get("Driver version"):
            parsed.versions["driver"] = f"amdgpu {fields['Driver version']}"
    if not parsed.gpus:
        raise UnexpectedOutput("rocm-smi JSON has no 'cardN' entries")
    return parsed


def parse_fields(text: str) -> Parsed:
    """`rocm-smi --showproductname` (and other per-field listings): 'GPU[0] : Card Series: ...'."""
    per_gpu: dict[int, dict[str, str]] = {}
    parsed = Parsed()
    for line in text.splitlines():
        line = line.replace("\t", " ")
        match = _FIELD_LINE.match(line.strip())
        if match:
            per_gpu.setdefault(int(match.group(1)), {})[match.group(2)] = match.group(3)
        elif line.strip().lower().startswith("driver version"):
            parsed.versions["driver"] = f"amdgpu {line.split(':', 1)[1].strip()}"
    if not per_gpu:
        raise UnexpectedOutput("no 'GPU[N] : field: value' lines in rocm-smi output")
    parsed.gpus = [_gpu_from_fields(i, fields) for i, fields in sorted(per_gpu.items())]
    return parsed


def parse_concise(text: str) -> Parsed:
    """Plain `rocm-smi`: one row per GPU between '=' rules; newer versions put the name on the next
    line."""
    lines = text.splitlines()
    header = next(
        (i for i, line in enumerate(lines) if line.startswith("Device") or line.startswith("GPU ")),
        None,
    )
    if header is None:
        raise UnexpectedOutput("no 'Device' header row in rocm-smi output")
    parsed = Parsed()
    rows = lines[header + 1 :]
    for i, line in enumerate(rows):
        if line.startswith("="):
            if parsed.gpus:
                break
            continue
        match = _TABLE_ROW.match(line)
        if not match:
            continue
        rest = match.group(2)
        device = _DEVICE_ID.search(rest)
        partition = _PARTITION.search(rest)
        name = None
        if i + 1 < len(rows) and rows[i + 1][:1].isspace() and rows[i + 1].strip():
            name = rows[i + 1].strip()
        sku, arch = identify_amd(name, None, device.group(0) if device else None)
        parsed.gpus.append(
            Gpu(
                index=int(match.group(1)),
                vendor="amd",
                sku=sku,
                arch=arch,
                raw_name=name,
                device_id=device.group(0).lower() if device else None,
                partition=f"{partition.group(2)}/{partition.group(1)}" if partition else None,
            )
        )
    if not parsed.gpus:
        raise UnexpectedOutput("rocm-smi table has no GPU rows")
    return parsed
