"""BabelStream (`hip-stream`): each results table's Copy and Triad bandwidth per GPU, against the SKU's HBM floor.

Run under MPI, the ranks' lines interleave and every rank prints its own table; each table is judged.
"""

from __future__ import annotations

import re

from pytest_rocm.preflight.evidence import Line, Reading, finding, number

_TABLE_HEADER = re.compile(r"^Function\s+MBytes/sec\b")
_ROW = re.compile(r"^(Copy|Mul|Add|Triad|Dot|Read|Write|Nstream)\s+([\d.]+)\s")
_KNOWN = re.compile(r"^(BabelStream|Version:|Implementation:|Running kernels|Precision:|Array size:|Total size:|"
                    r"Using HIP device|Using OpenCL device|Driver:|Memory:|Init:|Read:|Validation failed.*)")
FLOORS = {"Triad": "babelstream_triad_mbps", "Copy": "babelstream_copy_mbps"}


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    tables = 0
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if _TABLE_HEADER.match(text):
            tables += 1
            reading.understood += 1
        elif tables and (match := _ROW.match(text)):
            reading.understood += 1
            function, value = match.group(1), number(match.group(2))
            floor = limits.get(FLOORS.get(function, ""))
            if function not in FLOORS:
                continue
            if floor is None:
                reading.add(finding(f"babelstream.{function.lower()}", "ok",
                                    f"{function} measured; no floor for this SKU (see thresholds.toml)", line, value=value))
            elif value < floor:
                reading.add(finding(f"babelstream.{function.lower()}", "failed",
                                    f"{function} {value:g} MB/s is below {floor:g} MB/s (HBM bandwidth)", line,
                                    value=value, threshold=floor))
            else:
                reading.add(finding(f"babelstream.{function.lower()}", "ok", f"{function} at least {floor:g} MB/s", line,
                                    value=value, threshold=floor))
        elif text.startswith("Validation failed") or "error" in text.lower():
            reading.understood += 1
            reading.add(finding("babelstream.error", "failed", "BabelStream reported an error", line))
        elif _KNOWN.match(text.replace("**", "")):
            reading.understood += 1
        else:
            reading.unread.append(line)
    if not tables:
        reading.add(finding("babelstream.no_table", "failed", "no BabelStream results table found (the run did not finish?)"))
    return reading
