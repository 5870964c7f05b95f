"""`amd-smi` health outputs: `metric` (ECC, PCIe, temperature, VRAM use), `bad-pages`, `topology`,
`xgmi` (`--metric`: bit rate; `--link-status`: each link up, down or disabled), `firmware` (each
component's version across the node's GPUs) and `monitor` (temperature, power, VRAM held by idle
GPUs).

Outputs read, each with a capture in tests/data/samples/preflight/amd-smi: ROCm 6.1-7.2 text and
`--json` (amdsmi CHANGELOG examples, AMD's and OEMs' acceptance notes); `xgmi --link-status` in its
ROCm 6.4 form (a row of U/D/X per GPU) and its later form (a GPU-by-GPU matrix, `N/A` where an mVF
guest may not read it); `firmware` as `FW_LIST` / `FW n` / `FW_ID` / `FW_VERSION`.

Text output is nested `KEY: value` lines under `GPU: N`; `--json` output is the same tree as JSON.
Both are flattened to (GPU, key path, value) and judged by the last keys of the path, so a new ROCm
that adds fields or reorders them reads the same. `N/A` means "not measured" and is never judged.
"""

from __future__ import annotations

import json
import re

from pytest_rocm.hw.parsers import UnexpectedOutput
from pytest_rocm.hw.parsers.amd_smi import json_document, text_values
from pytest_rocm.preflight.evidence import Line, Reading, finding, number
from pytest_rocm.preflight.readers.matrix import link_type_findings, tables
from pytest_rocm.preflight.readers.rocm_smi import judge_idle_vram, judge_power, judge_temperature
from pytest_rocm.preflight.relative import most_common

# `amd-smi xgmi --link-status`: `GPU0   0000:08:00.0  U  U  D  X` (ROCm 6.4) or a matrix of
# SELF / U / D / N/A cells under GPU0..GPUn (later versions)
_LINK_STATUS_ROW = re.compile(
    r"^GPU(\d+)\s+([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])((?:\s+(?:[UDX]|SELF|N/A|UP|DOWN|DISABLED))+)\s*$",
    re.I,
)
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
    if "LINK STATUS:" in text:
        _read_link_status(reading, lines)
    elif "LINK METRIC TABLE" in text:
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
    ("static", re.compile(r"\b(?:VBIOS|ASIC|MARKET_NAME|BOARD)\b", re.I)),
    ("process", re.compile(r"\bPROCESS_INFO\b", re.I)),
    ("version", re.compile(r"\bAMDSMI Tool\b|\bamdsmi_library_version\b", re.I)),
)


def _finish(reading: Reading, text: str = "") -> Reading:
    """An output with no finding is amd-smi's, of a command judged nowhere here: not judged (its
    layer not proven), naming the command, never failed."""
    if not reading.findings and not reading.not_judged:
        command = next((name for name, key in _COMMANDS if key.search(text)), None)
        what = f"`amd-smi {command}` output" if command else "this amd-smi output"
        reading.not_judged = (
            f"nothing in {what} is judged here: give the output of amd-smi metric, bad-pages, "
            "topology, xgmi (--metric or --link-status), firmware or monitor"
        )
    return reading


def _flatten_text(reading: Reading, lines: list[Line]):
    """(gpu, path, value, line) for every `KEY: value` under `GPU: N` (detection's reader,
    `text_values`); other lines are unread but authors' `...`."""
    for index, gpu, path, value in text_values(line.text for line in lines):
        line = lines[index]
        if path is None:
            if not line.text.strip().startswith(("...", "…")):
                reading.unread.append(line)
            continue
        reading.understood += 1
        if path != ("GPU",):
            yield gpu, path, value, line


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
    # `firmware`: (GPU, component) -> (version, line); the FW_ID named last, per GPU
    firmware: dict[tuple, tuple] = {}
    component: dict[object, str] = {}
    links: dict[str, list] = {}  # `xgmi --link-status --json`: each GPU's link states
    for gpu, path, value, line in values:
        measured = number(value.split()[0]) if value.split() else None
        page_kind = next((key for key in path if key in PAGE_KINDS), None)
        if path[-1:] == ("FW_ID",):
            component[gpu] = value.strip()
        elif path[-1:] == ("FW_VERSION",) and gpu in component and value.strip():
            firmware[(str(gpu), component.pop(gpu))] = (value.strip(), line)
        elif "LINK_STATUS" in path and _LINK_STATE.get(value.strip().upper()):
            links.setdefault(str(gpu), []).append((None, value.strip(), line))
        elif page_kind is not None:
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
    for item in judge_firmware(firmware):
        reading.add(item)
    for item in judge_links(links):
        reading.add(item)


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


# A link's state as `xgmi --link-status` prints it (amdsmi_xgmi_link_status_type_t)
_LINK_STATE = {
    "U": "up",
    "UP": "up",
    "D": "down",
    "DOWN": "down",
    "X": "disabled",
    "DISABLED": "disabled",
}


def _read_link_status(reading: Reading, lines: list[Line]) -> None:
    """`amd-smi xgmi --link-status`: each GPU's row of link states (U, D, X; SELF on the diagonal
    and N/A where amd-smi could not read it are not links), judged by `judge_links`."""
    links: dict[str, list] = {}
    peers: list[str] = []
    for line in lines:
        stripped = line.text.strip()
        if not stripped:
            continue
        if match := _LINK_STATUS_ROW.match(stripped):
            reading.understood += 1
            cells = match.group(3).split()
            labels = peers if len(peers) == len(cells) else [f"link {i}" for i in range(len(cells))]
            links[match.group(1)] = [
                (label, cell, line) for label, cell in zip(labels, cells, strict=True)
            ]
        elif stripped.lower().startswith("bdf"):
            reading.understood += 1
            peers = [
                cell.upper() for cell in stripped.split()[1:] if cell.upper().startswith("GPU")
            ]
        elif stripped.startswith(("XGMI LINK STATUS", "* U:", "amd-smi")):
            reading.understood += 1
        else:
            reading.unread.append(line)
    found = judge_links(links)
    if not found and links:
        reading.not_judged = (
            f"`amd-smi xgmi --link-status` printed N/A for every link of {len(links)} GPU(s): "
            "amd-smi cannot read link status here (an mVF guest cannot); prove the links with "
            "rccl-tests or TransferBench instead"
        )
    for item in found:
        reading.add(item)


def judge_links(links: dict[str, list]) -> list:
    """Each GPU's XGMI links: (label, state as printed, line) per link. A link down fails the
    hardware layer, naming the GPU and the link. A disabled link is by design where every GPU has
    as many (a platform leaves the same port unused on each), and fails where a GPU has more
    disabled than most GPUs (on a tie, than the fewest). N/A and SELF cells are not links. No link read at all: no finding."""
    states = {
        gpu: [
            (label, _LINK_STATE[cell.upper()], line)
            for label, cell, line in cells
            if cell.upper() in _LINK_STATE
        ]
        for gpu, cells in links.items()
    }
    states = {gpu: cells for gpu, cells in states.items() if cells}
    if not states:
        return []
    found = []
    for gpu, cells in sorted(states.items(), key=lambda item: _gpu_order(item[0])):
        down = [
            label or f"link {i}" for i, (label, state, _) in enumerate(cells) if state == "down"
        ]
        if down:
            found.append(
                finding(
                    "xgmi.link_status",
                    "failed",
                    f"GPU {gpu}: XGMI {', '.join(down)} down",
                    cells[0][2],
                    value=len(down),
                )
            )
    disabled = {
        gpu: sum(state == "disabled" for _, state, _ in cells) for gpu, cells in states.items()
    }
    # the count most GPUs have; on a tie the fewest, so a GPU with more is named
    usual = most_common(disabled.values(), tie=min)
    for gpu, count in sorted(disabled.items(), key=lambda item: _gpu_order(item[0])):
        if count > usual:
            found.append(
                finding(
                    "xgmi.link_status",
                    "failed",
                    f"GPU {gpu}: {count} XGMI link(s) disabled, its peers {usual}",
                    states[gpu][0][2],
                    value=count,
                    threshold=usual,
                )
            )
    if not found:
        up = sum(state == "up" for cells in states.values() for _, state, _ in cells)
        found.append(
            finding(
                "xgmi.link_status",
                "ok",
                f"XGMI links up: {up} on {len(states)} GPU(s)"
                + (f", {usual} disabled on each by design" if usual else ""),
                next(iter(states.values()))[0][2],
                value=up,
            )
        )
    return found


def judge_firmware(versions: dict[tuple, tuple]) -> list:
    """Each firmware component's version across the node's GPUs: (GPU, component) -> (version,
    line). A GPU whose version of a component differs from the one most GPUs run is degraded
    (a GPU missed a firmware update: it runs, but not as its peers do), naming the GPU, the
    component and both versions. Where no version is held by more GPUs than another, every GPU
    that differs from the lowest-numbered GPU is named."""
    by_component: dict[str, dict] = {}
    for (gpu, name), (version, line) in versions.items():
        by_component.setdefault(name, {})[gpu] = (version, line)
    found = []
    for name, per_gpu in by_component.items():
        usual = most_common(version for version, _ in per_gpu.values())
        for gpu, (version, line) in sorted(per_gpu.items(), key=lambda item: _gpu_order(item[0])):
            if version != usual:
                holders = sum(v == usual for v, _ in per_gpu.values())
                found.append(
                    finding(
                        "firmware.mismatch",
                        "degraded",
                        f"GPU {gpu}: {name} firmware {version}, its peers {usual} "
                        f"({holders} of {len(per_gpu)} GPUs); update it to match",
                        line,
                        value=version,
                        threshold=usual,
                    )
                )
    if not found and by_component:
        gpus = {gpu for gpu, _ in versions}
        found.append(
            finding(
                "firmware.mismatch",
                "ok",
                f"firmware the same on {len(gpus)} GPU(s) ({len(by_component)} components)",
                next(iter(versions.values()))[1],
            )
        )
    return found


def _gpu_order(gpu: str):
    return (0, int(gpu)) if str(gpu).isdigit() else (1, str(gpu))
