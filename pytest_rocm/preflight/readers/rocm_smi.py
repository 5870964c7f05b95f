"""`rocm-smi` (concise table and `--showtopo`): temperatures and power against limits, and GPU-to-GPU link types.

The concise table's columns have changed across ROCm versions and hold spaces inside cells
("0x74a2,   1017", "NPS1, SPX, 0"), so values are found by their units rather than by position:
the first `°C` is the junction temperature, the first `W` the socket power and the last `W` the cap.
"""

from __future__ import annotations

import re

from pytest_rocm.preflight.evidence import Line, Reading, finding
from pytest_rocm.preflight.readers.matrix import link_type_findings

_ROW = re.compile(r"^(\d+)\s+\S+\s+.*?°C")
_TEMP = re.compile(r"([\d.]+)\s*°C")
_WATTS = re.compile(r"([\d.]+)\s*W\b")
_KNOWN = re.compile(r"^(=+.*=*|Device\s+Node.*|\(DID.*|\s*\(DID.*|WARNING:.*|GPU\[\d+\]\s*:.*|GPU\d+(\s+GPU\d+)*|"
                    r"GPU\d+\s+.*)$")


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if _ROW.match(text) and (temps := _TEMP.findall(text)):
            reading.understood += 1
            gpu = text.split()[0]
            watts = [float(w) for w in _WATTS.findall(text)]
            judge_temperature(reading, line, gpu, float(temps[0]), limits.get("hotspot_temperature_max_c"), "junction")
            if len(watts) >= 2:
                judge_power(reading, line, gpu, watts[0], watts[-1])
        elif _KNOWN.match(text):
            reading.understood += 1
        else:
            reading.unread.append(line)
    link_type_findings(reading, lines)
    if not reading.findings:
        reading.add(finding("rocm_smi.nothing", "failed", "no GPU rows or topology tables found in the rocm-smi output"))
    return reading


def judge_temperature(reading: Reading, line: Line, gpu: str, value: float, limit: float | None, sensor: str) -> None:
    if limit is None:
        return
    status = "failed" if value >= limit else "ok"
    message = (f"GPU {gpu} {sensor} temperature {value:g} C at or above {limit:g} C (throttling)" if status == "failed"
               else f"{sensor} temperature below {limit:g} C")
    reading.add(finding(f"temperature.{sensor}", status, message, line, value=value, threshold=limit))


def judge_power(reading: Reading, line: Line, gpu: str, watts: float, cap: float) -> None:
    if cap <= 0:
        return
    if watts > cap:
        reading.add(finding("power", "failed", f"GPU {gpu} draws {watts:g} W over its cap of {cap:g} W", line,
                            value=watts, threshold=cap))
    else:
        reading.add(finding("power", "ok", "power within the cap", line, value=watts, threshold=cap))
