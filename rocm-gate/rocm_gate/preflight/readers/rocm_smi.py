"""`rocm-smi` (concise table, `--showtopo`, `--showmeminfo vram`, `--showuse`, `--showmemuse`, and
those as `--json`): temperatures and power against limits, VRAM held and GFX activity of GPUs that
must be idle (preflight/idle.py), and GPU-to-GPU link types.

The concise table's columns have changed across ROCm versions and hold spaces inside cells
("0x74a2,   1017", "NPS1, SPX, 0"), so values are found by their units rather than by position:
the first `°C` is the junction temperature, the first `W` the socket power and the last `W` the cap;
where the header ends with `VRAM%  GPU%` (every version since ROCm 5), the row's last two cells are those
(`75%`, or `N/A` where not measured).

Reads rocm-smi of ROCm 5-7 (MI308X, MI350X); captures: tests/data/samples/preflight/rocm-smi and
tests/data/samples/rocm-smi.
"""

from __future__ import annotations

import json
import re

from rocm_gate.preflight.evidence import Line, Pointer, Reading, finding, json_pointer, number
from rocm_gate.preflight.idle import judge_load
from rocm_gate.preflight.readers.matrix import link_type_findings

# `°` read from a Latin-1 terminal's capture is U+FFFD (the file is decoded as UTF-8 with
# errors="replace").
# a concise row: the device, its node, then the temperature (N/A where not measured: a partition or
# a virtual function's row)
_ROW = re.compile(r"^(\d+)\s+\S+\s+.*?(?:[°\ufffd]C|\bN/A\b)")
_TEMP = re.compile(r"([\d.]+)\s*[°\ufffd]C")
_WATTS = re.compile(r"([\d.]+)\s*W\b")
_PERCENT = re.compile(r"([\d.]+)%")
_VRAM_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*VRAM Total (Used )?Memory \(B\)\s*:\s*(\d+)")
_USE_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*GPU use \(%\)\s*:\s*([\d.]+)")
# --showmemuse
_MEMUSE_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*GPU Memory Allocated \(VRAM%\)\s*:\s*([\d.]+)")
# `rocm-smi --json`: {"card0": {"VRAM Total Used Memory (B)": "...", "GPU use (%)": "0", ...}}
JSON_KEYS = {
    "VRAM Total Memory (B)": "total",
    "VRAM Total Used Memory (B)": "used",
    "GPU use (%)": "activity",
    "GPU Memory Allocated (VRAM%)": "percent",
}
# Header and wrap lines: the ROCm 6.1+ layout prints a second header line "Name (20 chars) ..." and
# the product name under each row ("AMD Instinct MI300X").
_KNOWN = re.compile(
    r"^(=+.*=*|Device\s+(?:Node|\[Model).*|Name \(20 chars\).*|AMD Instinct .*|\(DID.*|\s*\(DID.*|"
    r"WARNING:.*|GPU\[\d+\]\s*:.*|GPU\d+(\s+GPU\d+)*|"
    r"GPU\d+\s+.*)$"
)


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    vram_columns = False  # the concise header ends with VRAM% GPU%
    # --showmeminfo vram / --showuse / --showmemuse lines (or --json), per GPU
    memory: dict[str, dict] = {}
    if _read_json(reading, lines, memory):
        lines = []
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if text.startswith("Device") and "VRAM%" in text:
            vram_columns = text.split()[-2:] == ["VRAM%", "GPU%"]
            reading.understood += 1
        elif _ROW.match(text) and (vram_columns or _TEMP.search(text)):
            reading.understood += 1
            _judge_row(reading, line, text, vram_columns, limits)
        elif match := _VRAM_LINE.match(text):
            reading.understood += 1
            memory.setdefault(match.group(1), {})["used" if match.group(2) else "total"] = (
                int(match.group(3)),
                line,
            )
        elif match := _USE_LINE.match(text):
            reading.understood += 1
            memory.setdefault(match.group(1), {})["activity"] = (float(match.group(2)), line)
        elif match := _MEMUSE_LINE.match(text):
            reading.understood += 1
            memory.setdefault(match.group(1), {})["percent"] = (float(match.group(2)), line)
        elif _KNOWN.match(text):
            reading.understood += 1
        else:
            reading.unread.append(line)
    _judge_memory(reading, memory, limits)
    link_type_findings(reading, lines)
    if not reading.findings and reading.understood:
        # rocm-smi's, of a command no rule reads (--showproductname, --showdriverversion): not
        # judged, its layer not proven, never failed
        reading.not_judged = (
            "nothing in this rocm-smi output is judged here: give rocm-smi (the concise table), "
            "--showtopo, --showmeminfo vram, --showuse or --showmemuse (text or --json)"
        )
    elif not reading.findings:
        reading.add(
            finding(
                "rocm_smi.nothing",
                "failed",
                "no GPU rows or topology tables found in the rocm-smi output",
            )
        )
    return reading


def _judge_row(reading: Reading, line: Line, text: str, vram_columns: bool, limits: dict) -> None:
    """A GPU's row of the concise table: its junction temperature, power against its cap, and
    (where the header ends with VRAM% GPU%) its idle memory."""
    gpu = text.split()[0]
    watts = [float(w) for w in _WATTS.findall(text)]
    if temps := _TEMP.findall(text):
        judge_temperature(
            reading, line, gpu, float(temps[0]), limits.get("hotspot_temperature_max_c"), "junction"
        )
    if len(watts) >= 2:
        judge_power(reading, line, gpu, watts[0], watts[-1])
    vram, activity = (_percent(cell) for cell in text.split()[-2:])
    if vram_columns and (vram is not None or activity is not None):
        judge_idle_vram(reading, line, gpu, vram, activity, limits)


def _judge_memory(reading: Reading, memory: dict[str, dict], limits: dict) -> None:
    """Each GPU's idle memory from the --showmeminfo vram / --showuse / --showmemuse lines: used of
    total where both are given, else the percentage."""
    for gpu, values in memory.items():
        activity = values.get("activity", (None,))[0]
        if "used" in values and values.get("total", (0,))[0] > 0:
            used, line = values["used"]
            judge_idle_vram(reading, line, gpu, used / values["total"][0] * 100, activity, limits)
        elif "percent" in values:
            judge_idle_vram(
                reading, values["percent"][1], gpu, values["percent"][0], activity, limits
            )
        elif activity is not None:  # --showuse alone
            judge_idle_vram(reading, values["activity"][1], gpu, None, activity, limits)


def judge_temperature(
    reading: Reading, line: Line, gpu: str, value: float, limit: float | None, sensor: str
) -> None:
    if limit is None:
        return
    status = "failed" if value >= limit else "ok"
    message = (
        f"GPU {gpu} {sensor} temperature {value:g} C at or above {limit:g} C (throttling)"
        if status == "failed"
        else f"{sensor} temperature below {limit:g} C"
    )
    reading.add(
        finding(f"temperature.{sensor}", status, message, line, value=value, threshold=limit)
    )


def judge_power(reading: Reading, line: Line, gpu: str, watts: float, cap: float) -> None:
    if cap <= 0:
        return
    if watts > cap:
        reading.add(
            finding(
                "power",
                "failed",
                f"GPU {gpu} draws {watts:g} W over its cap of {cap:g} W",
                line,
                value=watts,
                threshold=cap,
            )
        )
    else:
        reading.add(
            finding("power", "ok", "power within the cap", line, value=watts, threshold=cap)
        )


def _read_json(reading: Reading, lines: list[Line], memory: dict) -> bool:
    """`rocm-smi ... --json`: the memory and use fields of each card into `memory`; False if it is
    not JSON."""
    text = "\n".join(line.text for line in lines).strip()
    if not text.startswith("{"):
        return False
    try:
        cards = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    if not isinstance(cards, dict):
        return False
    reading.understood = sum(1 for line in lines if line.text.strip())
    for card, fields in cards.items():
        gpu = card.removeprefix("card")
        for key, name in JSON_KEYS.items():
            value = number(str(fields.get(key))) if isinstance(fields, dict) else None
            if value is not None:
                at = Pointer(json_pointer((card, key)), f"{key}: {fields[key]}")
                memory.setdefault(gpu, {})[name] = (value, at)
    return True


def _percent(cell: str) -> float | None:
    """'75%' -> 75.0; 'N/A' -> None."""
    match = _PERCENT.fullmatch(cell)
    return float(match.group(1)) if match else None


def judge_idle_vram(
    reading: Reading,
    line: Line | Pointer | None,
    gpu: str,
    used_pct: float | None,
    activity_pct: float | None,
    limits: dict,
) -> None:
    """A node offered for a job has no job on it: a GPU holding VRAM is a process that hung or was
    killed without freeing it (0 % activity), or one still running; a busy GPU runs someone's
    kernels; either way the next job cannot have what it plans for (preflight/idle.py)."""
    for item in judge_load(gpu, used_pct, activity_pct, limits, line):
        reading.add(item)
