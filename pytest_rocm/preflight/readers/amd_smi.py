"""`amd-smi` health outputs: `metric` (ECC, PCIe, temperature, VRAM use), `bad-pages`, `topology`,
`xgmi` and `monitor` (temperature, power, VRAM held by idle GPUs).

Text output is nested `KEY: value` lines under `GPU: N`; `--json` output is the same tree as JSON.
Both are flattened to (GPU, key path, value) and judged by the last keys of the path, so a new ROCm
that adds fields or reorders them reads the same. `N/A` means "not measured" and is never judged.
"""

from __future__ import annotations

import json
import re

from pytest_rocm.hw.parsers import UnexpectedOutput
from pytest_rocm.hw.parsers.amd_smi import json_document
from pytest_rocm.preflight.evidence import Line, Reading, finding, number
from pytest_rocm.preflight.readers.matrix import link_type_findings, tables
from pytest_rocm.preflight.readers.rocm_smi import judge_idle_vram, judge_power, judge_temperature

_KEY_VALUE = re.compile(r"^(\s*)([A-Za-z_][\w ]*?):\s*(.*)$")
_XGMI_ROW = re.compile(r"^GPU(\d+)\s+\S+\s+(N/A|[\d.]+\s*Gb/s)\s+(N/A|[\d.]+\s*Gb/s)\s+(\w+)")
# A `monitor` cell: a number or N/A with its unit, or a word (THROTTLE prints UNTHROTTLED); columns
# differ by version and flags (GPU_T or GPU_TEMP, GFX% or GFX_UTIL), so cells are matched to the
# header by position. A value is believed only with the unit its column must have: a layout this
# reader does not know (an added column, a partition row with fewer cells) then leaves a cell
# unjudged instead of reading MHz as °C.
_MONITOR_CELL = re.compile(
    r"(N/A|-?[\d.]+(?:/[\d.]+)?)(?:\s*(W|°C|C|MHz|GHz|%|[KMGT]i?B|[KMG]b/s|B))?(?!\S)|([A-Za-z]\S*)"
)
_MONITOR_UNITS = {
    "GPU_T": ("°C", "C"),
    "GPU_TEMP": ("°C", "C"),
    "HOTSPOT_T": ("°C", "C"),
    "HOTSPOT_TEMP": ("°C", "C"),
    "MEM_T": ("°C", "C"),
    "MEM_TEMP": ("°C", "C"),
    "POWER": ("W",),
    "PWR_CAP": ("W",),
    "GFX%": ("%",),
    "GFX_UTIL": ("%",),
}
_MONITOR_HEADER = re.compile(r"^\s*GPU(?:\s+[A-Z][A-Z0-9_]*%?){2,}\s*$", re.M)
_MEGABYTES = {
    "B": 1 / 1e6,
    "KB": 1e-3,
    "KIB": 1 / 1024,
    "MB": 1,
    "MIB": 1,
    "GB": 1e3,
    "GIB": 1024,
    "TB": 1e6,
}
NO_PAGES = "no bad pages found"
PAGE_KINDS = ("RETIRED", "PENDING", "UN_RES")  # `amd-smi bad-pages` sections
# what amd-smi prints for a value it could not read (amdsmi_commands.py: "N/A"; older "Not supported")
_NOT_MEASURED = re.compile(r"^\s*(?:N/A|not supported|not available)\s*$", re.I)


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    text = "\n".join(line.text for line in lines)
    try:
        offset, tree = json_document(text)
        values = list(_flatten_json(tree))
    except (UnexpectedOutput, RecursionError):
        tree = None
    if tree is not None:
        # a banner or amd-smi's `[WARNING] ...` line before the document is not its output
        reading.understood = len(lines) - text.count("\n", 0, offset)
        _judge_values(reading, values, limits)
        return _finish(reading, text)
    if "LINK METRIC TABLE" in text:
        _read_xgmi(reading, lines, limits)
    elif _MONITOR_HEADER.search(text):
        _read_monitor(reading, lines, limits)
    elif any(True for _ in tables(lines)):
        link_type_findings(reading, lines)
        # other topology tables (WEIGHT, HOPS, NUMA BW) carry no verdict
        reading.understood = len(lines)
    else:
        _judge_values(reading, _flatten_text(reading, lines), limits)
    return _finish(reading, text)


# what amd-smi command printed an output no rule here judges, by a key only it prints
_COMMANDS = (
    ("firmware", re.compile(r"\bFW_(?:VERSION|ID|LIST)\b", re.I)),
    ("static", re.compile(r"\b(?:VBIOS|ASIC|MARKET_NAME|BOARD)\b", re.I)),
    ("process", re.compile(r"\bPROCESS_INFO\b", re.I)),
    ("version", re.compile(r"\bAMDSMI Tool\b|\bamdsmi_library_version\b", re.I)),
)


def _finish(reading: Reading, text: str = "") -> Reading:
    """An output with no finding is amd-smi's, of a command judged nowhere here: not judged (its
    layer not proven), naming the command, never failed."""
    if not reading.findings:
        command = next((name for name, key in _COMMANDS if key.search(text)), None)
        what = f"`amd-smi {command}` output" if command else "this amd-smi output"
        reading.not_judged = (
            f"nothing in {what} is judged here: give the output of amd-smi metric, bad-pages, "
            "topology, xgmi or monitor"
        )
    return reading


def _flatten_text(reading: Reading, lines: list[Line]):
    """(gpu, path, value, line) for every `KEY: value` under `GPU: N`, nesting read from the
    indentation."""
    gpu, stack = None, []
    for line in lines:
        if not line.text.strip():
            continue
        match = _KEY_VALUE.match(line.text)
        if not match:
            if line.text.strip().startswith(("...", "…")):
                continue
            reading.unread.append(line)
            continue
        reading.understood += 1
        indent, key, value = (
            len(match.group(1)),
            match.group(2).strip().upper(),
            match.group(3).strip(),
        )
        if key == "GPU" and indent == 0:
            gpu, stack = value, []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        yield gpu, tuple(k for _, k in stack), value, line


def _flatten_json(tree, gpu=None, path=()):
    if isinstance(tree, list):
        for item in tree:
            yield from _flatten_json(item, gpu, path)
    elif isinstance(tree, dict):
        if set(tree) >= {"value", "unit"}:
            yield gpu, path, f"{tree['value']} {tree['unit']}", None
            return
        gpu = tree.get("gpu", gpu)
        # a list or object: a label
        gpu = gpu if isinstance(gpu, (int, str)) or gpu is None else json.dumps(gpu)[:40]
        for key, value in tree.items():
            if key != "gpu":
                yield from _flatten_json(value, gpu, (*path, str(key).upper()))
    else:
        yield gpu, path, "" if tree is None else str(tree), None


def _judge_values(reading: Reading, values, limits: dict) -> None:
    """Every `KEY: value` of every GPU: bad pages and memory gathered per GPU, the rest judged
    one by one (`_judge_value`)."""
    pages: dict[tuple, list] = {}
    # MEM_USAGE/USED_VRAM, TOTAL_VRAM and USAGE/GFX_ACTIVITY per GPU
    memory: dict[object, dict] = {}
    for gpu, path, value, line in values:
        measured = number(value.split()[0]) if value.split() else None
        page_kind = next((key for key in path if key in PAGE_KINDS), None)
        if page_kind is not None:
            pages.setdefault((gpu, page_kind), []).append((value, line, path[-1]))
        elif measured is None:
            continue
        elif path[-2:] in (
            ("MEM_USAGE", "USED_VRAM"),
            ("MEM_USAGE", "TOTAL_VRAM"),
            ("USAGE", "GFX_ACTIVITY"),
        ):
            memory.setdefault(gpu, {})[path[-1]] = (value, line)
        else:
            _judge_value(reading, gpu, path, measured, line, limits)
    _judge_memory(reading, memory, limits)
    _judge_pages(reading, pages)


# the PCIe link's width and speed: the threshold's key, how the value reads, how the floor reads
_PCIE = {
    ("PCIE", "WIDTH"): ("pcie_width", "width x{:g}", "x{:g}"),
    ("PCIE", "SPEED"): ("pcie_speed_gts", "speed {:g} GT/s", "{:g}"),
}


def _judge_value(reading: Reading, gpu, path: tuple, measured: float, line, limits: dict) -> None:
    """One measured value: ECC counts, the PCIe link, temperatures; anything else is not judged."""
    last = path[-1] if path else ""
    # amd-smi 7 wraps GPUs in gpu_data
    where = f"GPU {gpu} " + "/".join(key for key in path if key != "GPU_DATA")
    if last.endswith("UNCORRECTABLE_COUNT"):
        limit = limits.get("ecc_uncorrectable_max", 0)
        reading.add(
            finding(
                "ecc.uncorrectable",
                "failed" if measured > limit else "ok",
                f"{where} = {measured:g}" if measured > limit else "no uncorrectable ECC errors",
                line,
                value=measured,
                threshold=limit,
            )
        )
    elif last.endswith(("CORRECTABLE_COUNT", "DEFERRED_COUNT")) and measured > 0:
        reading.add(
            finding(
                "ecc.correctable",
                "degraded",
                f"{where} = {measured:g} (watch the count: `rocm-gate drain` acts when it grows)",
                line,
                value=measured,
            )
        )
    elif path[-2:] in _PCIE and limits.get(_PCIE[path[-2:]][0]):
        key, shown, floor_shown = _PCIE[path[-2:]]
        floor = limits[key]
        ok = measured >= floor
        reading.add(
            finding(
                "pcie.link",
                "ok" if ok else "failed",
                f"GPU {gpu} PCIe {shown.format(measured)}"
                + ("" if ok else f" below {floor_shown.format(floor)}"),
                line,
                value=measured,
                threshold=floor,
            )
        )
    elif len(path) >= 2 and path[-2] == "TEMPERATURE" and last in ("HOTSPOT", "MEM", "VRAM"):
        sensor, key = (
            ("hotspot", "hotspot_temperature_max_c")
            if last == "HOTSPOT"
            else ("memory", "memory_temperature_max_c")
        )
        judge_temperature(reading, line, str(gpu), measured, limits.get(key), sensor)


def _judge_memory(reading: Reading, memory: dict, limits: dict) -> None:
    """Each GPU's idle memory: used of total VRAM, with its activity."""
    for gpu, found in memory.items():
        used = _megabytes(found.get("USED_VRAM", ("",))[0])
        total = _megabytes(found.get("TOTAL_VRAM", ("",))[0])
        if used is not None and total:
            activity = found.get("GFX_ACTIVITY", ("",))[0].split()
            judge_idle_vram(
                reading,
                found["USED_VRAM"][1],
                str(gpu),
                used / total * 100,
                number(activity[0]) if activity else None,
                limits,
            )


def _page_count(entries: list[tuple]) -> int:
    """How many pages a kind's entries list. amd-smi prints each page as `PAGE_ADDRESS`,
    `PAGE_SIZE` and `STATUS` (amdsmi_cli/amdsmi_commands.py: bad_pages), its numbers in decimal
    unless `--hex`: a page is an address, whatever its base, never a size or a status. Where no
    entry is named an address (another version's wording), each number that is not a size is one."""
    addresses = [v for v, _, key in entries if key.endswith("ADDRESS")]
    if addresses:
        return sum(1 for v in addresses if v and not _NOT_MEASURED.match(v))
    return sum(
        1
        for v, _, key in entries
        if not key.endswith(("SIZE", "STATUS"))
        and re.fullmatch(r"(?:0x[0-9a-f]+|\d+)", v.strip(), re.I)
    )


def _judge_pages(reading: Reading, pages: dict) -> None:
    """Each GPU's bad pages by kind: retired (ok), pending (degraded), unreservable (failed)."""
    for (gpu, kind), entries in pages.items():
        if all(_NOT_MEASURED.match(v) for v, _, _ in entries):
            # amd-smi prints N/A where the driver gives no bad-page table (it could not ask)
            reading.add(
                finding(
                    "bad_pages.not_measured",
                    "ok",
                    f"GPU {gpu}: {kind} not measured (amd-smi printed {entries[0][0]!r}: the "
                    "driver gave no bad-page table)",
                    entries[0][1],
                )
            )
            continue
        if all(NO_PAGES in v.lower() or not v for v, _, _ in entries) and any(
            NO_PAGES in v.lower() for v, _, _ in entries
        ):
            reading.add(finding("bad_pages", "ok", f"{kind}: no bad pages", entries[0][1]))
            continue
        count = _page_count(entries)
        status = {"RETIRED": "ok", "PENDING": "degraded"}.get(kind, "failed")
        meaning = {
            "RETIRED": "retired (safe; `rocm-gate drain` acts when the count grows)",
            "PENDING": "pending retirement (reset the GPU to retire them)",
        }.get(kind, "unreservable: memory with errors stays in use")
        first = next((line for v, line, key in entries if key.endswith("ADDRESS")), entries[0][1])
        reading.add(
            finding(
                f"bad_pages.{kind.lower()}",
                status,
                f"GPU {gpu}: {count} page(s) {meaning}",
                first,
                value=count,
            )
        )


def _read_xgmi(reading: Reading, lines: list[Line], limits: dict) -> None:
    floor = limits.get("xgmi_bit_rate_gbps")
    for line in lines:
        stripped = line.text.strip()
        if not stripped:
            continue
        if match := _XGMI_ROW.match(stripped):
            reading.understood += 1
            rate = number(match.group(2).split()[0])
            if rate is None:
                reading.add(
                    finding("xgmi.bit_rate", "ok", "XGMI bit rate not reported (N/A)", line)
                )
            elif floor is not None and rate < floor:
                reading.add(
                    finding(
                        "xgmi.bit_rate",
                        "degraded",
                        f"GPU{match.group(1)} XGMI bit rate {rate:g} Gb/s below {floor:g} Gb/s",
                        line,
                        value=rate,
                        threshold=floor,
                    )
                )
            else:
                reading.add(
                    finding(
                        "xgmi.bit_rate",
                        "ok",
                        f"XGMI links up at {rate:g} Gb/s",
                        line,
                        value=rate,
                        threshold=floor,
                    )
                )
        elif stripped.startswith(("LINK METRIC TABLE", "bdf", "Read", "Write")):
            reading.understood += 1
        else:
            reading.unread.append(line)


def _read_monitor(reading: Reading, lines: list[Line], limits: dict) -> None:
    header: list[str] | None = None
    for line in lines:
        stripped = line.text.strip()
        if not stripped:
            continue
        if _MONITOR_HEADER.match(stripped):
            header, reading.understood = stripped.split(), reading.understood + 1
        elif header and re.match(r"^\d+\s", stripped):
            reading.understood += 1
            gpu, rest = stripped.split(None, 1)
            matches = dict(zip(header[1:], _MONITOR_CELL.finditer(rest)))
            cells = {column: match.group(0) for column, match in matches.items()}
            value = {
                column: number(matches[column].group(1))
                for column, units in _MONITOR_UNITS.items()
                if column in matches and matches[column].group(2) in units
            }
            for column, sensor, key in (
                ("GPU_T", "hotspot", "hotspot_temperature_max_c"),
                ("GPU_TEMP", "hotspot", "hotspot_temperature_max_c"),
                ("HOTSPOT_T", "hotspot", "hotspot_temperature_max_c"),
                ("HOTSPOT_TEMP", "hotspot", "hotspot_temperature_max_c"),
                ("MEM_T", "memory", "memory_temperature_max_c"),
                ("MEM_TEMP", "memory", "memory_temperature_max_c"),
            ):
                if value.get(column) is not None:
                    judge_temperature(reading, line, gpu, value[column], limits.get(key), sensor)
            if value.get("POWER") is not None and value.get("PWR_CAP") is not None:
                judge_power(reading, line, gpu, value["POWER"], value["PWR_CAP"])
            used, total = _megabytes(cells.get("VRAM_USED")), _megabytes(cells.get("VRAM_TOTAL"))
            if "VRAM_USAGE" in cells and "/" in cells["VRAM_USAGE"]:  # ROCm 7: "95.3/192.0 GB"
                amounts, _, unit = cells["VRAM_USAGE"].partition(" ")
                used, total = (_megabytes(f"{amount} {unit}") for amount in amounts.split("/", 1))
            if used is not None and total:
                activity = next(
                    (value[c] for c in ("GFX%", "GFX_UTIL") if value.get(c) is not None), None
                )
                judge_idle_vram(reading, line, gpu, used / total * 100, activity, limits)
        elif stripped.startswith("amd-smi"):
            reading.understood += 1  # the command line some captures start with
        else:
            reading.unread.append(line)


def _megabytes(cell: str | None) -> float | None:
    """'283 MB' -> 283.0; '1.5 GB' -> 1500.0; N/A or no unit -> None."""
    parts = (cell or "").split()
    value = number(parts[0]) if parts else None
    scale = _MEGABYTES.get(parts[1].upper()) if len(parts) == 2 else None
    return value * scale if value is not None and scale else None
