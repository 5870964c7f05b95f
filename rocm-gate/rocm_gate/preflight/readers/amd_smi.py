"""`amd-smi` outputs: `metric` (ECC, PCIe, temperature, VRAM use and GFX activity), `bad-pages`,
`topology`, `xgmi --link-status` (each link up, down or disabled), `firmware` (each component's
version across the node's GPUs), `process` (each process on a GPU of a node offered for a job),
`static` (VRAM size, compute units and partition modes against the SKU and the node's peers), and,
in amd_smi_tables.py, the default view (`amd-smi` alone) and `monitor` (with `--process`).

Outputs read, each with a capture in tests/data/samples/preflight/amd-smi: ROCm 6.1-7.2 text and
`--json` (amdsmi CHANGELOG examples, AMD's and OEMs' acceptance notes); `xgmi --link-status` in its
ROCm 6.4 form (a row of U/D/X per GPU) and its later form (a GPU-by-GPU matrix, `N/A` where an mVF
guest may not read it); `firmware` as `FW_LIST` / `FW n` / `FW_ID` / `FW_VERSION`; `process` as
`PROCESS_INFO` blocks. `amd-smi xgmi`'s LINK METRIC TABLE is not judged: its `bit_rate` and
`max_bandwidth` are the GPU's static maxima (amdsmi_get_xgmi_info), not what a link trained at, so no
rule on them can fire; a link's state is `--link-status`'s, its speed RVS pbqt's and TransferBench's.

Text output is nested `KEY: value` lines under `GPU: N`; `--json` output is the same tree as JSON.
Both are flattened to (GPU, key path, value, where: the line, or the JSON pointer) and judged by the
last keys of the path, so a new ROCm that adds fields or reorders them reads the same. `N/A` means
"not measured" and is never judged.
"""

from __future__ import annotations

import json
import re

from pytest_rocm.hw.parsers import UnexpectedOutput
from pytest_rocm.hw.parsers.amd_smi import json_document, text_values
from pytest_rocm.hw.skus import sku_from_amd_name
from rocm_gate.preflight.evidence import Line, Pointer, Reading, finding, json_pointer, number
from rocm_gate.preflight.idle import Process, judge_load, judge_processes, megabytes, no_processes
from rocm_gate.preflight.inventory import (
    compute_units_ok,
    judge_compute_units,
    judge_partitions,
    judge_vram,
)
from rocm_gate.preflight.readers.amd_smi_tables import (
    DEFAULT_VIEW,
    MONITOR_HEADER,
    read_default_view,
    read_monitor,
)
from rocm_gate.preflight.readers.matrix import link_type_findings, tables
from rocm_gate.preflight.readers.rocm_smi import judge_temperature
from rocm_gate.preflight.relative import most_common

# `amd-smi xgmi --link-status`: `GPU0   0000:08:00.0  U  U  D  X` (ROCm 6.4) or a matrix of
# SELF / U / D / N/A cells under GPU0..GPUn (later versions)
_LINK_STATUS_ROW = re.compile(
    r"^GPU(\d+)\s+([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])((?:\s+(?:[UDX]|SELF|N/A|UP|DOWN|DISABLED))+)\s*$",
    re.I,
)
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
    if DEFAULT_VIEW.search(text):
        read_default_view(reading, lines, limits)
    elif "LINK STATUS:" in text:
        _read_link_status(reading, lines)
    elif "LINK METRIC TABLE" in text:
        _read_xgmi(reading, lines)
    elif MONITOR_HEADER.search(text):
        read_monitor(reading, lines, limits)
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
    ("version", re.compile(r"\bAMDSMI Tool\b|\bamdsmi_library_version\b", re.I)),
)


def _finish(reading: Reading, text: str = "") -> Reading:
    """An output with no finding is amd-smi's, of a command judged nowhere here: not judged (its
    layer not proven), naming the command, never failed."""
    if not reading.findings and not reading.not_judged:
        command = next((name for name, key in _COMMANDS if key.search(text)), None)
        what = f"`amd-smi {command}` output" if command else "this amd-smi output"
        reading.not_judged = (
            f"nothing in {what} is judged here: give the output of amd-smi (the default view), "
            "metric, process, static (--vram, --asic, --partition), bad-pages, topology, "
            "xgmi --link-status, firmware or monitor"
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


def _flatten_json(tree, gpu=None, path=(), keys=()):
    """(gpu, path, value, where) for every value of amd-smi's JSON: `where` is its JSON pointer
    and the value as read; a `{"value", "unit"}` object is one value; an empty list is one value,
    `[]` (amd-smi process's `process_list` of an idle GPU)."""
    if isinstance(tree, list):
        if not tree:
            yield gpu, path, "[]", Pointer(json_pointer(keys), f"{_last(keys)}: []")
        for index, item in enumerate(tree):
            yield from _flatten_json(item, gpu, path, (*keys, index))
    elif isinstance(tree, dict):
        if set(tree) >= {"value", "unit"}:
            value = f"{tree['value']} {tree['unit']}"
            yield gpu, path, value, Pointer(json_pointer(keys), f"{_last(keys)}: {value}")
            return
        gpu = tree.get("gpu", gpu)
        # a list or object: a label
        gpu = gpu if isinstance(gpu, (int, str)) or gpu is None else json.dumps(gpu)[:40]
        for key, value in tree.items():
            if key != "gpu":
                yield from _flatten_json(value, gpu, (*path, str(key).upper()), (*keys, key))
    else:
        value = "" if tree is None else str(tree)
        yield gpu, path, value, Pointer(json_pointer(keys), f"{_last(keys)}: {value}")


def _last(keys: tuple) -> str:
    return str(keys[-1]) if keys else ""


# `amd-smi static`: what the inventory rules read, by the last keys of the path
_COMPUTE_PARTITION = ("COMPUTE_PARTITION", "ACCELERATOR_PARTITION", "CURRENT_COMPUTE_PARTITION")
_MEMORY_PARTITION = ("MEMORY_PARTITION", "CURRENT_MEMORY_PARTITION")


class _Values:
    """Every `KEY: value` of every GPU gathered for the rules that read several at once (bad
    pages, memory and activity, firmware, links, processes, the node's inventory)."""

    def __init__(self) -> None:
        self.pages: dict[tuple, list] = {}
        # MEM_USAGE/USED_VRAM, TOTAL_VRAM and USAGE/GFX_ACTIVITY per GPU
        self.memory: dict[object, dict] = {}
        # `firmware`: (GPU, component) -> (version, where); the FW_ID named last, per GPU
        self.firmware: dict[tuple, tuple] = {}
        self.component: dict[object, str] = {}
        self.links: dict[str, list] = {}  # `xgmi --link-status --json`: each GPU's link states
        self.processes: list[dict] = []  # `process`: each process's keys, in order
        self.idle_at = None  # `process`: where amd-smi said no process runs
        self.idle_gpus = 0  # on how many GPUs
        # `static`: per GPU
        self.inventory: dict[str, dict] = {}

    def take(self, gpu, path: tuple, value: str, at) -> bool:
        """Keep a value one of the gathered rules reads; False for one judged alone."""
        last = path[-1] if path else ""
        if last == "FW_ID":
            self.component[gpu] = value.strip()
        elif last == "FW_VERSION" and gpu in self.component and value.strip():
            self.firmware[(str(gpu), self.component.pop(gpu))] = (value.strip(), at)
        elif "LINK_STATUS" in path and _LINK_STATE.get(value.strip().upper()):
            self.links.setdefault(str(gpu), []).append((None, value.strip(), at))
        elif (kind := next((key for key in path if key in PAGE_KINDS), None)) is not None:
            self.pages.setdefault((gpu, kind), []).append((value, at, last))
        elif "PROCESS_INFO" in path or last == "PROCESS_LIST":
            self._process(gpu, last, value, at)
        elif path[-2:] in (
            ("VRAM", "SIZE"),
            ("ASIC", "NUM_COMPUTE_UNITS"),
            ("ASIC", "MARKET_NAME"),
        ):
            self.inventory.setdefault(str(gpu), {})[last] = (value.strip(), at)
        elif last in _COMPUTE_PARTITION + _MEMORY_PARTITION + ("PARTITION_ID",):
            kind = (
                "COMPUTE"
                if last in _COMPUTE_PARTITION
                else "MEMORY"
                if last in _MEMORY_PARTITION
                else last
            )
            self.inventory.setdefault(str(gpu), {})[kind] = (value.strip(), at)
        elif path[-2:] in (
            ("MEM_USAGE", "USED_VRAM"),
            ("MEM_USAGE", "TOTAL_VRAM"),
            ("USAGE", "GFX_ACTIVITY"),
        ):
            self.memory.setdefault(gpu, {})[last] = (value, at)
        else:
            return False
        return True

    def _process(self, gpu, last: str, value: str, at) -> None:
        """`amd-smi process`: a process's NAME, PID and VRAM_MEM; a NAME or PID met again starts
        the next process. `No running processes detected` (or an empty list): none runs."""
        if "no running process" in value.lower() or value == "[]":
            self.idle_at = self.idle_at or at
            self.idle_gpus += 1
            return
        current = self.processes[-1] if self.processes else None
        if last in ("NAME", "PID") and (
            current is None or current["gpu"] != str(gpu) or last in current
        ):
            current = {"gpu": str(gpu)}
            self.processes.append(current)
        if current is not None and last in ("NAME", "PID", "VRAM_MEM"):
            current[last] = (value.strip(), at)


def _judge_values(reading: Reading, values, limits: dict) -> None:
    """Every `KEY: value` of every GPU: the gathered ones judged together (`_Values`), the rest
    one by one (`_judge_value`)."""
    gathered = _Values()
    for gpu, path, value, at in values:
        if gathered.take(gpu, path, value, at):
            continue
        measured = number(value.split()[0]) if value.split() else None
        if measured is not None:
            _judge_value(reading, gpu, path, measured, at, limits)
    _judge_memory(reading, gathered.memory, limits)
    _judge_pages(reading, gathered.pages)
    _judge_processes(reading, gathered, limits)
    for item in [
        *judge_firmware(gathered.firmware),
        *judge_links(gathered.links),
        *_judge_inventory(gathered.inventory, limits),
    ]:
        reading.add(item)


def _judge_processes(reading: Reading, gathered: _Values, limits: dict) -> None:
    processes = []
    for keys in gathered.processes:
        held = keys.get("VRAM_MEM", ("", None))[0].split()
        vram = megabytes(number(held[0]), held[1]) if len(held) == 2 else None
        at = keys.get("PID", keys.get("NAME", ("", None)))[1]
        processes.append(
            Process(keys["gpu"], keys.get("PID", ("?",))[0], keys.get("NAME", ("",))[0], vram, at)
        )
    for item in judge_processes(processes, limits):
        reading.add(item)
    if gathered.idle_at is not None and not processes:
        reading.add(no_processes(gathered.idle_at, gathered.idle_gpus or None))


def _judge_inventory(inventory: dict[str, dict], limits: dict) -> list:
    """`amd-smi static`: each GPU's VRAM size, compute units and partition modes against the SKU
    and its peers (preflight/inventory.py)."""
    named = {
        sku_from_amd_name(v["MARKET_NAME"][0]) for v in inventory.values() if "MARKET_NAME" in v
    }
    sku = limits.get("sku") or (named.pop() if len(named) == 1 else None)
    sizes, units, modes = {}, [], {}
    for gpu, keys in inventory.items():
        size = keys.get("SIZE", ("", None))
        amount, _, unit = size[0].partition(" ")
        mb = megabytes(number(amount), unit or "MB")
        if mb:
            sizes[gpu] = (mb, _memory_mode(keys), size[1])
        if (cus := number(keys.get("NUM_COMPUTE_UNITS", ("",))[0])) is not None:
            its_sku = sku_from_amd_name(keys.get("MARKET_NAME", ("",))[0])
            units.append((gpu, its_sku or sku, int(cus), keys["NUM_COMPUTE_UNITS"][1]))
        # a physical GPU in CPX lists 8 partitions (PARTITION_ID 0-7): its mode counts once
        if ("COMPUTE" in keys or "MEMORY" in keys) and keys.get("PARTITION_ID", ("0",))[0] in (
            "0",
            "N/A",
        ):
            at = (keys.get("COMPUTE") or keys["MEMORY"])[1]
            modes[gpu] = (keys.get("COMPUTE", ("",))[0], keys.get("MEMORY", ("",))[0], at)
    found = judge_vram(sizes, sku, limits.get("vram_short_max_pct"))
    found += judge_compute_units(units, sku, "GPU", "asic.compute_units") if units else []
    if units and not any(f.check == "asic.compute_units" for f in found):
        found.append(compute_units_ok(units, sku, "asic.compute_units"))
    return found + judge_partitions(modes, sku)


def _memory_mode(keys: dict) -> str | None:
    mode = keys.get("MEMORY", ("",))[0].upper()
    return mode or None


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
    """Each GPU's idle memory (used of total VRAM) and activity (preflight/idle.py); the total is
    also the GPU's VRAM size, held to its peers and the SKU."""
    sizes = {}
    for gpu, found in memory.items():
        used = _megabytes(found.get("USED_VRAM", ("",))[0])
        total = _megabytes(found.get("TOTAL_VRAM", ("",))[0])
        activity = found.get("GFX_ACTIVITY", ("",))[0].split()
        at = found.get("USED_VRAM", found.get("GFX_ACTIVITY", (None, None)))[1]
        for item in judge_load(
            str(gpu),
            used / total * 100 if used is not None and total else None,
            number(activity[0]) if activity else None,
            limits,
            at,
        ):
            reading.add(item)
        if total:
            sizes[str(gpu)] = (total, None, found["TOTAL_VRAM"][1])
    for item in judge_vram(sizes, limits.get("sku"), limits.get("vram_short_max_pct")):
        reading.add(item)


def _megabytes(cell: str | None) -> float | None:
    """'283 MB' -> 283.0; '1.5 GB' -> 1536.0; N/A or no unit -> None."""
    parts = (cell or "").split()
    return megabytes(number(parts[0]), parts[1]) if len(parts) == 2 else None


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


def _read_xgmi(reading: Reading, lines: list[Line]) -> None:
    """`amd-smi xgmi` (the LINK METRIC TABLE): understood, not judged. Its `bit_rate` and
    `max_bandwidth` are the GPU's static maxima (amdsmi_get_xgmi_info), the same on a healthy link
    and on one that trained slower or went down, and its read/write counters are traffic since
    boot: nothing in it tells a link's health."""
    reading.understood = sum(1 for line in lines if line.text.strip())
    reading.not_judged = (
        "`amd-smi xgmi` (its LINK METRIC TABLE) prints the GPU's static maximum bit rate, not the "
        "speed a link trained at: give `amd-smi xgmi --link-status` (each link up or down) and RVS "
        "pbqt or TransferBench p2p (each link's bandwidth)"
    )


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
