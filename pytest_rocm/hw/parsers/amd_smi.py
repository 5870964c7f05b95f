"""`amd-smi static --json`, `amd-smi static` / `amd-smi list` text, and `amd-smi version --json`."""

from __future__ import annotations

import json
import re

from pytest_rocm.hw.model import Gpu
from pytest_rocm.hw.parsers import Parsed, UnexpectedOutput, gib, missing
from pytest_rocm.hw.skus import identify_amd

# amd-smi >= 24 puts the GPU's PCI device id into the UUID after an "ff" byte:
# "9fff74b9-0000-1000-..." is device 0x74b9. `amd-smi list` prints nothing else
# that tells the board apart, so this is how a list output gets a SKU.
_UUID_DEVICE = re.compile(r"^[0-9a-f]{2}ff([0-9a-f]{4})-", re.IGNORECASE)


def _json_start(text: str) -> int:
    """Without render-group access amd-smi prints a text banner before the JSON; skip it."""
    match = re.search(r"^[\[{]", text, re.MULTILINE)
    if not match:
        raise UnexpectedOutput("no JSON object or list found in amd-smi output")
    return match.start()


def parse_static_json(text: str) -> Parsed:
    start = _json_start(text)
    try:
        data = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise UnexpectedOutput(f"amd-smi JSON does not parse: {exc}") from exc
    if isinstance(data, dict) and "gpu_data" in data:  # ROCm 7 shape
        entries = data["gpu_data"]
    elif isinstance(data, list):  # older shape: a list of per-GPU objects
        entries = data
    else:
        raise UnexpectedOutput("amd-smi JSON is neither a list of GPUs nor {'gpu_data': [...]}")
    parsed = Parsed()
    if start > 0:
        banner = text[:start].strip().splitlines()[0]
        parsed.notes.append(
            f"amd-smi printed a banner before its JSON: {banner!r} "
            "(fields it could not read show as N/A; add the user to the render group)"
        )
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UnexpectedOutput(f"amd-smi GPU entry {position} is not an object")
        parsed.gpus.append(_gpu_from_static(entry, position))
        driver = entry.get("driver") or {}
        if isinstance(driver, dict) and not missing(driver.get("version")):
            parsed.versions.setdefault("driver", f"amdgpu {driver['version']}")
    return parsed


def _gpu_from_static(entry: dict, position: int) -> Gpu:
    asic = entry.get("asic") or {}
    board = entry.get("board") or {}
    vram = entry.get("vram") or {}
    bus = entry.get("bus") or {}
    name = _first_present(
        asic.get("market_name"), board.get("product_name") if isinstance(board, dict) else None
    )
    memory = None
    size = vram.get("size") if isinstance(vram, dict) else None
    if isinstance(size, dict) and not missing(size.get("value")):
        memory = gib(size["value"], size.get("unit", "MB"))
    elif isinstance(size, str) and not missing(size):
        value, _, unit = size.partition(" ")
        memory = gib(value, unit or "MB")
    cus = asic.get("num_compute_units")
    cus = None if missing(cus) else int(cus)
    device_id = None if missing(asic.get("device_id")) else asic.get("device_id")
    sku, arch = identify_amd(
        name,
        None
        if missing(asic.get("target_graphics_version"))
        else asic.get("target_graphics_version"),
        device_id,
        memory,
        cus,
    )
    index = entry.get("gpu", position)
    return Gpu(
        index=int(index) if not missing(index) else position,
        vendor="amd",
        sku=sku,
        arch=arch,
        raw_name=name,
        memory_gb=memory,
        device_id=device_id,
        pci_bus=None if missing(bus.get("bdf")) else bus.get("bdf"),
        partition=_partition(entry),
        compute_units=cus,
    )


def _partition(entry: dict) -> str | None:
    part = entry.get("partition")
    if not isinstance(part, dict):
        return None
    compute = _first_present(part.get("compute_partition"), part.get("accelerator_partition"))
    memory = part.get("memory_partition")
    shown = [p for p in (compute, None if missing(memory) else memory) if p]
    return "/".join(shown) or None


def _first_present(*values):
    for value in values:
        if not missing(value):
            return str(value).strip()
    return None


def _sections(text: str) -> list[dict[str, str]]:
    """Text output: blocks that start with 'GPU: N', keys flattened as 'SECTION.KEY'."""
    gpus: list[dict[str, str]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key = key.strip().upper()
        if indent == 0 and key == "GPU":
            gpus.append({"GPU": value.strip()})
            section = ""
        elif not gpus:
            continue
        elif not value.strip():
            section = key  # a heading such as "ASIC:"
        else:
            qualified = f"{section}.{key}" if section and indent > 4 else key
            gpus[-1][qualified] = value.strip()
    return gpus


def parse_text(text: str) -> Parsed:
    """`amd-smi static` (sections ASIC, BUS, BOARD, ...) or `amd-smi list` (BDF, UUID per GPU)."""
    blocks = _sections(text)
    if not blocks:
        raise UnexpectedOutput("no 'GPU: N' blocks in amd-smi text output")
    parsed = Parsed()
    for position, block in enumerate(blocks):
        name = _first_present(block.get("ASIC.MARKET_NAME"), block.get("BOARD.PRODUCT_NAME"))
        device_id = _first_present(block.get("ASIC.DEVICE_ID"))
        if device_id is None and block.get("UUID"):
            match = _UUID_DEVICE.match(block["UUID"])
            device_id = f"0x{match.group(1).lower()}" if match else None
        cus = _first_present(block.get("ASIC.NUM_COMPUTE_UNITS"))
        memory = None
        size = _first_present(block.get("VRAM.SIZE"))
        if size:
            value, _, unit = size.partition(" ")
            memory = gib(value, unit or "MB")
        sku, arch = identify_amd(
            name,
            _first_present(block.get("ASIC.TARGET_GRAPHICS_VERSION")),
            device_id,
            memory,
            int(cus) if cus else None,
        )
        driver = _first_present(block.get("DRIVER.VERSION"))
        if driver:
            parsed.versions.setdefault("driver", f"amdgpu {driver}")
        parsed.gpus.append(
            Gpu(
                index=int(block["GPU"]) if block["GPU"].isdigit() else position,
                vendor="amd",
                sku=sku,
                arch=arch,
                raw_name=name,
                memory_gb=memory,
                device_id=device_id,
                pci_bus=_first_present(block.get("BUS.BDF"), block.get("BDF")),
                compute_units=int(cus) if cus else None,
            )
        )
    return parsed


def parse_version_json(text: str) -> Parsed:
    """`amd-smi version --json`: the ROCm version and the amdgpu driver."""
    try:
        data = json.loads(text[_json_start(text) :])
    except json.JSONDecodeError as exc:
        raise UnexpectedOutput(f"amd-smi version JSON does not parse: {exc}") from exc
    entry = data[0] if isinstance(data, list) and data else data
    if not isinstance(entry, dict):
        raise UnexpectedOutput("amd-smi version JSON is not an object")
    parsed = Parsed()
    if not missing(entry.get("rocm_version")):
        parsed.versions["rocm"] = str(entry["rocm_version"])
    if not missing(entry.get("amdgpu_version")):
        parsed.versions["driver"] = f"amdgpu {entry['amdgpu_version']}"
    if not missing(entry.get("version")):
        parsed.versions["amd-smi"] = str(entry["version"])
    return parsed


def parse(text: str) -> Parsed:
    """Any amd-smi output: JSON (static or version) or text."""
    stripped = text.lstrip()
    if re.search(r"^[\[{]", text, re.MULTILINE) and '"' in text:
        if '"rocm_version"' in text or '"amdsmi_library_version"' in text:
            return parse_version_json(text)
        return parse_static_json(text)
    if not stripped:
        raise UnexpectedOutput("amd-smi printed nothing")
    return parse_text(text)
