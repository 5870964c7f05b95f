"""amd-smi's table views: `amd-smi` with no arguments (the boxed default view of ROCm 6.4+/7, what
AMD's install guide runs to verify a node) and `amd-smi monitor` (with `--process`/`-q`, its
`PROCESS INFO:` table).

The default view prints, per GPU, two rows in two boxes: `BDF GPU-Name | Mem-Uti Temp UEC
Power-Usage` and `GPU HIP-ID OAM-ID Partition-Mode | GFX-Uti Fan Mem-Usage`, then a `Processes:` box
(`GPU PID Process Name GTT_MEM VRAM_MEM MEM_USAGE CU %`, or `No running processes found`). Every
column is read: UEC (uncorrectable errors) against `ecc_uncorrectable_max`, the temperature and the
power against their limits, GFX activity and memory used against the idle rules (preflight/idle.py),
each process named by GPU, process id and VRAM, the VRAM total and the partition mode against the
SKU and the node's peers (preflight/inventory.py). `Mem-Uti` (memory controller activity) and `Fan`
(N/A on Instinct) carry no verdict. Cells are matched to their header by position and believed only
with the unit their column must have, so a layout this reader does not know leaves a cell unjudged
instead of misread.

Captures: tests/data/samples/preflight/amd-smi (`*default-view*`, `*monitor*`; those modeled on
AMD's documented format say so in SOURCES.md).
"""

from __future__ import annotations

import re

from pytest_rocm.hw.skus import sku_from_amd_name
from rocm_gate.preflight.evidence import Line, Reading, finding, number
from rocm_gate.preflight.idle import Process, judge_node, megabytes, no_processes
from rocm_gate.preflight.inventory import judge_partitions, judge_vram
from rocm_gate.preflight.readers.rocm_smi import judge_power, judge_temperature

# A cell: a number or N/A with its unit (`0 %`, `34 °C`, `137/750 W`, `283/196592 MB`, `0 ns`), or a
# word (THROTTLE prints UNTHROTTLED)
CELL = re.compile(
    r"(N/A|-?[\d.]+(?:/[\d.]+)?)(?:\s*(W|°C|C|MHz|GHz|%|[KMGT]i?B|B|[KMG]b/s|ns|us|ms|s))?(?!\S)"
    r"|([A-Za-z]\S*)"
)
DEFAULT_VIEW = re.compile(r"^\|\s*BDF\s+GPU-Name\s*\|", re.M)
_BDF = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_FIRST_ROW = re.compile(rf"^\|\s*({_BDF})\s+(.*?)\s*\|(.*)\|$", re.I)
# the GPU's index first, its partition mode last (HIP-ID and OAM-ID between: a version that adds a
# column there reads the same)
_SECOND_ROW = re.compile(r"^\|\s*(\d+)((?:\s+\S+)+?)\s*\|(.*)\|$")
_PROCESS_ROW = re.compile(r"^\|?\s*(\d+)\s+(\d+)\s+(.*?)\s*\|?$")
_BORDER = re.compile(r"^[+|][-=+| ]*[+|]$")
_NONE_RUNNING = re.compile(r"No running processes", re.I)
# the header's columns as the view prints them, where a capture has no header line
_RIGHT = (["Mem-Uti", "Temp", "UEC", "Power-Usage"], ["GFX-Uti", "Fan", "Mem-Usage"])
_UNITS = {
    "Mem-Uti": ("%",),
    "GFX-Uti": ("%",),
    "Temp": ("°C", "C"),
    "UEC": (None,),
    "Power-Usage": ("W",),
    "Mem-Usage": ("MB", "GB", "MiB", "GiB"),
}


def cells(text: str, columns: list[str]) -> dict[str, tuple[str, str | None]]:
    """A row's cells matched to `columns` by position: column -> (value, unit)."""
    found = {}
    for column, match in zip(columns, CELL.finditer(text)):
        found[column] = (match.group(1) or match.group(3) or "", match.group(2))
    return found


def _figure(row: dict, column: str) -> tuple[float, float | None] | None:
    """A cell of `column` with its column's unit: (value, the part after `/`: a cap or total)."""
    value, unit = row.get(column, ("", None))
    if unit not in _UNITS.get(column, ()) or value in ("", "N/A"):
        return None
    first, _, second = value.partition("/")
    amount = number(first)
    if amount is None:
        return None
    return amount, number(second) if second else None


class DefaultView:
    """The default view read a line at a time (`take`), judged at the end (`judge`)."""

    def __init__(self) -> None:
        self.right = [list(columns) for columns in _RIGHT]
        self.gpus: list[dict] = []  # per GPU: bdf, name, line1, row1, line2, row2, index, partition
        self.processes: list[Process] = []
        self.process_columns: list[str] = []
        self.none_running: Line | None = None

    def take(self, reading: Reading, line: Line) -> None:
        text = line.text.strip()
        if not text:
            return
        if self._header(text) or self._gpu_row(line, text) or self._process(line, text):
            reading.understood += 1
        elif _BORDER.match(text) or re.match(r"^\|\s*(?:AMD-SMI|VBIOS|Platform:|Processes:)", text):
            reading.understood += 1
        elif text.startswith("amd-smi"):
            reading.understood += 1  # the command line some captures start with
        else:
            reading.unread.append(line)

    def _header(self, text: str) -> bool:
        if DEFAULT_VIEW.match(text) or re.match(r"^\|\s*GPU\s+HIP-ID\b", text):
            right = text.strip("|").split("|")[-1].split()
            self.right[0 if "BDF" in text else 1] = right
            return True
        if re.match(r"^\|?\s*GPU\s+PID\s+Process Name\b", text):
            tail = text.strip("|").split("Name", 1)[1].split()
            # `CU %`: a unit printed as its own word is its column's name
            self.process_columns = [
                f"{c} %" if i + 1 < len(tail) and tail[i + 1] == "%" else c
                for i, c in enumerate(tail)
                if c != "%"
            ]
            return True
        return False

    def _gpu_row(self, line: Line, text: str) -> bool:
        if first := _FIRST_ROW.match(text):
            self.gpus.append(
                {
                    "bdf": first.group(1),
                    "name": first.group(2),
                    "line1": line,
                    "row1": cells(first.group(3), self.right[0]),
                }
            )
            return True
        second = _SECOND_ROW.match(text)
        if second and self.gpus and "line2" not in self.gpus[-1]:
            self.gpus[-1].update(
                index=second.group(1),
                partition=second.group(2).split()[-1],
                line2=line,
                row2=cells(second.group(3), self.right[1]),
            )
            return True
        return False

    def _process(self, line: Line, text: str) -> bool:
        if _NONE_RUNNING.search(text):
            self.none_running = line
            return True
        match = _PROCESS_ROW.match(text)
        if not (match and self.process_columns):
            return False
        rest = match.group(3)
        first_cell = next(
            (m for m in CELL.finditer(rest) if m.group(1) is not None and m.group(2)), None
        )
        name = rest[: first_cell.start()].strip() if first_cell else rest
        row = cells(rest[first_cell.start() :], self.process_columns) if first_cell else {}
        held = row.get("VRAM_MEM") or row.get("VRAM")
        vram = megabytes(number(held[0]), held[1]) if held else None
        self.processes.append(Process(match.group(1), match.group(2), name, vram, line))
        return True

    def judge(self, reading: Reading, limits: dict) -> None:
        totals, loads, sizes, modes = {}, [], {}, {}
        sku = limits.get("sku")
        for gpu in self.gpus:
            label = gpu.get("index", gpu["bdf"])
            sku = sku or sku_from_amd_name(gpu["name"])
            _judge_first_row(reading, label, gpu, limits)
            if "row2" not in gpu:
                continue
            activity = _figure(gpu["row2"], "GFX-Uti")
            memory = _figure(gpu["row2"], "Mem-Usage")
            used_pct = memory[0] / memory[1] * 100 if memory and memory[1] else None
            loads.append((label, used_pct, activity[0] if activity else None, gpu["line2"]))
            if memory and memory[1]:
                unit = gpu["row2"]["Mem-Usage"][1]
                totals[label] = megabytes(memory[1], unit) or memory[1]
                sizes[label] = (totals[label], _memory_mode(gpu["partition"]), gpu["line2"])
            compute, _, memory_mode = gpu["partition"].partition("/")
            modes[label] = (compute, memory_mode, gpu["line2"])
        for item in judge_vram(sizes, sku, limits.get("vram_short_max_pct")):
            reading.add(item)
        for item in judge_partitions(modes, sku):
            reading.add(item)
        for item in judge_node(loads, self.processes, limits, totals):
            reading.add(item)
        if self.none_running is not None and not self.processes:
            reading.add(no_processes(self.none_running, len(self.gpus)))


def _memory_mode(partition: str) -> str | None:
    return partition.partition("/")[2] or None


def _judge_first_row(reading: Reading, label: str, gpu: dict, limits: dict) -> None:
    """The first row of a GPU: its uncorrectable errors (UEC), temperature and power."""
    row, line = gpu["row1"], gpu["line1"]
    uec = row.get("UEC", ("", None))
    count = number(uec[0]) if uec[1] is None else None
    if count is not None:
        most = limits.get("ecc_uncorrectable_max", 0)
        reading.add(
            finding(
                "ecc.uncorrectable",
                "failed" if count > most else "ok",
                f"GPU {label} ({gpu['bdf']}): {count:g} uncorrectable ECC error(s) (UEC): its "
                "results are untrustworthy; reset or replace it"
                if count > most
                else "no uncorrectable ECC errors",
                line,
                value=count,
                threshold=most,
            )
        )
    if temperature := _figure(row, "Temp"):
        judge_temperature(
            reading,
            line,
            label,
            temperature[0],
            limits.get("hotspot_temperature_max_c"),
            "hotspot",
        )
    power = _figure(row, "Power-Usage")
    if power and power[1]:
        judge_power(reading, line, label, power[0], power[1])


def read_default_view(reading: Reading, lines: list[Line], limits: dict) -> None:
    view = DefaultView()
    for line in lines:
        view.take(reading, line)
    view.judge(reading, limits)


# `amd-smi monitor`: columns differ by version and flags (GPU_T or GPU_TEMP, GFX% or GFX_UTIL)
MONITOR_HEADER = re.compile(r"^\s*GPU(?:\s+[A-Z][A-Z0-9_]*%?){2,}\s*$", re.M)
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
    "DOUBLE_ECC": (None,),  # uncorrectable ECC errors, a bare count
}
_SENSORS = (
    ("GPU_T", "hotspot", "hotspot_temperature_max_c"),
    ("GPU_TEMP", "hotspot", "hotspot_temperature_max_c"),
    ("HOTSPOT_T", "hotspot", "hotspot_temperature_max_c"),
    ("HOTSPOT_TEMP", "hotspot", "hotspot_temperature_max_c"),
    ("MEM_T", "memory", "memory_temperature_max_c"),
    ("MEM_TEMP", "memory", "memory_temperature_max_c"),
)
_MONITOR_PROCESS = re.compile(r"^(\d+)\s+(.+?)\s+(\d+)\s+(.*)$")


def _memory_cell(cell: tuple[str, str | None] | None) -> float | None:
    if not cell or cell[1] is None:
        return None
    return megabytes(number(cell[0]), cell[1])


class Monitor:
    """`amd-smi monitor` read a line at a time: a row per GPU under its header, then (with
    `--process`) the `PROCESS INFO:` table."""

    def __init__(self) -> None:
        self.header: list[str] | None = None
        self.process_header: list[str] | None = None
        self.in_processes = False
        self.totals: dict[str, float] = {}
        self.loads: list[tuple] = []  # (GPU, VRAM used %, GFX activity %, line)
        self.processes: list[Process] = []
        self.none_running: Line | None = None

    def take(self, reading: Reading, line: Line, limits: dict) -> None:
        stripped = line.text.strip()
        if not stripped:
            return
        reading.understood += 1
        if stripped.upper().startswith("PROCESS INFO"):
            self.in_processes = True
        elif self.in_processes:
            self._process(reading, line, stripped)
        elif MONITOR_HEADER.match(stripped):
            self.header = stripped.split()
        elif self.header and re.match(r"^\d+\s", stripped):
            self._row(reading, line, stripped, limits)
        elif not stripped.startswith("amd-smi"):  # the command line some captures start with
            reading.understood -= 1
            reading.unread.append(line)

    def _process(self, reading: Reading, line: Line, stripped: str) -> None:
        if _NONE_RUNNING.search(stripped):
            self.none_running = line
        elif MONITOR_HEADER.match(stripped) or stripped.upper().startswith("GPU "):
            self.process_header = stripped.split()
        elif (match := _MONITOR_PROCESS.match(stripped)) and self.process_header:
            after = self.process_header[self.process_header.index("PID") + 1 :]
            row = cells(match.group(4), after) if "PID" in self.process_header else {}
            vram = _memory_cell(row.get("VRAM_MEM") or row.get("VRAM"))
            self.processes.append(
                Process(match.group(1), match.group(3), match.group(2), vram, line)
            )
        else:
            reading.understood -= 1
            reading.unread.append(line)

    def _row(self, reading: Reading, line: Line, stripped: str, limits: dict) -> None:
        gpu, rest = stripped.split(None, 1)
        row = cells(rest, (self.header or [])[1:])
        value: dict[str, float] = {
            column: measured
            for column, units in _MONITOR_UNITS.items()
            if column in row
            and row[column][1] in units
            and (measured := number(row[column][0])) is not None
        }
        for column, sensor, key in _SENSORS:
            if column in value:
                judge_temperature(reading, line, gpu, value[column], limits.get(key), sensor)
        if "POWER" in value and "PWR_CAP" in value:
            judge_power(reading, line, gpu, value["POWER"], value["PWR_CAP"])
        if "DOUBLE_ECC" in value:
            most = limits.get("ecc_uncorrectable_max", 0)
            count = value["DOUBLE_ECC"]
            reading.add(
                finding(
                    "ecc.uncorrectable",
                    "failed" if count > most else "ok",
                    f"GPU {gpu}: {count:g} uncorrectable ECC error(s) (DOUBLE_ECC)"
                    if count > most
                    else "no uncorrectable ECC errors",
                    line,
                    value=count,
                    threshold=most,
                )
            )
        used, total = _memory_cell(row.get("VRAM_USED")), _memory_cell(row.get("VRAM_TOTAL"))
        usage = row.get("VRAM_USAGE")
        if usage and usage[1] and "/" in usage[0]:  # ROCm 7: "95.3/192.0 GB"
            used, total = (megabytes(number(part), usage[1]) for part in usage[0].split("/", 1))
        activity = next((value[c] for c in ("GFX%", "GFX_UTIL") if c in value), None)
        used_pct = used / total * 100 if used is not None and total else None
        self.loads.append((gpu, used_pct, activity, line))
        if total:
            self.totals[gpu] = total

    def judge(self, reading: Reading, limits: dict) -> None:
        for item in judge_node(self.loads, self.processes, limits, self.totals):
            reading.add(item)
        if self.none_running is not None and not self.processes:
            reading.add(no_processes(self.none_running, len(self.totals) or None))


def read_monitor(reading: Reading, lines: list[Line], limits: dict) -> None:
    monitor = Monitor()
    for line in lines:
        monitor.take(reading, line, limits)
    monitor.judge(reading, limits)
