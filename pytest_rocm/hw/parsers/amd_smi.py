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


def json_document(text: str) -> tuple[int, object]:
    """(where it starts, the document): the first line that starts a JSON value which parses.
    Without render-group access amd-smi prints a text banner before the JSON, a `[WARNING] ...`
    line starts with `[` too, and a log line may follow the document: all skipped. Detection and
    preflight (preflight/readers/amd_smi.py) both find amd-smi's JSON with it."""
    decoder = json.JSONDecoder()
    error = None
    for match in re.finditer(r"^[\[{]", text, re.MULTILINE):
        try:
            return match.start(), decoder.raw_decode(text, match.start())[0]
        except json.JSONDecodeError as exc:
            error = error or exc
    if error is not None:
        raise UnexpectedOutput(f"amd-smi JSON does not parse: {error}")
    raise UnexpectedOutput("no JSON object or list found in amd-smi output")


def parse_static_json(text: str) -> Parsed:
    start, data = json_document(text)
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


def _table(entry: dict, key: str) -> dict:
    """A section of a GPU's entry; `N/A` (amd-smi could not read the section) is an empty one."""
    section = entry.get(key)
    return section if isinstance(section, dict) else {}


_SIZE = re.compile(r"^\s*([\d.]+)\s*([A-Za-z]*)\s*$")
_COUNT = re.compile(r"^\s*(\d+)\b")


def _memory_gib(size) -> float | None:
    """`vram.size`: {"value": 196592, "unit": "MB"}, "196592 MB", "196592MB" or a bare number (MB)."""
    if isinstance(size, dict):
        size = None if missing(size.get("value")) else f"{size['value']} {size.get('unit') or ''}"
    if isinstance(size, int | float) and not isinstance(size, bool):
        size = str(size)
    if not isinstance(size, str) or missing(size):
        return None
    match = _SIZE.match(size)
    if match is None:
        raise UnexpectedOutput(f"vram size {size!r} is not a number with a unit")
    return gib(match.group(1), match.group(2) or "MB")


def _device_id(value) -> str | None:
    """0x74a1, as amd-smi prints it; an integer or bare hex digits as the same text."""
    if missing(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"0x{value:04x}"
    text = str(value).strip().lower()
    return f"0x{text}" if re.fullmatch(r"[0-9a-f]{4}", text) else text


def _gpu_from_static(entry: dict, position: int) -> Gpu:
    asic, board, vram, bus = (_table(entry, key) for key in ("asic", "board", "vram", "bus"))
    name = _first_present(asic.get("market_name"), board.get("product_name"))
    memory = _memory_gib(vram.get("size"))
    cus = asic.get("num_compute_units")
    counted = None if missing(cus) else _COUNT.match(str(cus))
    if counted is None and not missing(cus):
        raise UnexpectedOutput(f"num_compute_units {cus!r} is not a number")
    cus = int(counted.group(1)) if counted else None
    device_id = _device_id(asic.get("device_id"))
    target = asic.get("target_graphics_version")
    sku, arch = identify_amd(
        name,
        None if missing(target) else str(target),
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
        pci_bus=None if missing(bus.get("bdf")) else str(bus.get("bdf")),
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


# `KEY: value` as amd-smi's text output prints it (its YAML-like tree, amdsmi_logger.py)
_KEY_VALUE = re.compile(r"^(\s*)([A-Za-z_][\w ]*?):\s*(.*)$")


def text_values(lines):
    """amd-smi's text output as (index, GPU, key path, value): every `KEY: value` line under
    `GPU: N`, its nesting read from the indentation (`GPU: 0` / `    ASIC:` /
    `        MARKET_NAME: MI300X` -> ("0", ("ASIC", "MARKET_NAME"), "MI300X")); a heading (`ASIC:`)
    has value "". A line that is not `KEY: value` (a `[WARNING]` or banner line, a table) is
    (index, None, None, None); blank lines are left out. Detection (`parse_text`) and preflight
    (preflight/readers/amd_smi.py) both read amd-smi's text with it."""
    gpu, stack = None, []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        match = _KEY_VALUE.match(raw.rstrip())
        if not match:
            yield index, None, None, None
            continue
        indent, key, value = len(match.group(1)), match.group(2).strip().upper(), match.group(3)
        if key == "GPU" and indent == 0:
            gpu, stack = value.strip(), []
            yield index, gpu, ("GPU",), gpu
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        yield index, gpu, tuple(k for _, k in stack), value.strip()


def _sections(text: str) -> list[dict[str, str]]:
    """Text output: blocks that start with 'GPU: N', keys flattened as 'SECTION.KEY'."""
    gpus: list[dict[str, str]] = []
    for _, gpu, path, value in text_values(text.splitlines()):
        if path == ("GPU",):
            gpus.append({"GPU": value})
        elif path and gpus and gpu is not None and value:
            gpus[-1][path[0] if len(path) == 1 else f"{path[0]}.{path[-1]}"] = value
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
    data = json_document(text)[1]
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
