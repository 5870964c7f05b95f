"""TransferBench: the all-to-all average bandwidth against the SKU's floor, and HIP errors that stop it.

TransferBench prints matrices and per-test lines (`Executor: GPU 00 | 47.772 GB/s | ...`) that are
read as measurements; the a2a summary's `Average bandwidth (GPU Timed)` is the figure AMD's acceptance
guide sets a floor on. With `AMD_LOG_LEVEL` set, the HIP runtime's log lines are read for errors.
"""

from __future__ import annotations

import re

from pytest_rocm.preflight.evidence import Line, Reading, finding, number

_A2A_AVERAGE = re.compile(r"^Average\s+bandwidth\s+\(GPU Timed\):\s*([\d.]+)\s*GB/s")
_MEASURE = re.compile(r"^(CPU->|Executor|Transfer|Aggregate|Test \d+:|##|Summary|SRC|GPU \d+|CPU \d+|RTotal|Averages|"
                      r"Aggregate bandwidth|=+$|Bytes|Unidirectional|Bidirectional|TransferBench|Using|Test)", re.I)
_HIP_LOG = re.compile(r"^:(\d):")  # AMD_LOG_LEVEL lines: ':1:' is an error, higher numbers are information
_HIP_ERROR = re.compile(r"(No compatible code objects found for: (\S+)|Returned (hipError\w+))")


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    for line in lines:
        text = line.text.strip().replace("\\|", "|").replace("\\\\", "\\")
        if not text:
            continue
        if match := _HIP_ERROR.search(text):
            reading.understood += 1
            if match.group(2):
                message = (f"no code object for {match.group(2).rstrip(',;')}: this TransferBench build does not support the GPU's "
                           "architecture (rebuild it for this arch)")
            else:
                message = f"HIP returned {match.group(3)}"
            reading.add(finding("transferbench.hip_error", "failed", message, line))
        elif match := _A2A_AVERAGE.match(text):
            reading.understood += 1
            value, floor = number(match.group(1)), limits.get("transferbench_a2a_gbps")
            if floor is None:
                reading.add(finding("transferbench.a2a", "ok", f"all-to-all average {value:g} GB/s; no floor for "
                                    "this SKU (see thresholds.toml)", line, value=value))
            else:
                reading.add(finding("transferbench.a2a", "ok" if value >= floor else "failed",
                                    f"all-to-all average {value:g} GB/s " + ("meets" if value >= floor else "is below")
                                    + f" {floor:g} GB/s", line, value=value, threshold=floor))
        elif _HIP_LOG.match(text) or _MEASURE.match(text):
            reading.understood += 1
        else:
            reading.unread.append(line)
    if not reading.findings:
        if reading.understood:
            reading.add(finding("transferbench.measured", "ok", "transfers measured; no figure with a floor "
                                "(the a2a summary has one)"))
        else:
            reading.add(finding("transferbench.no_results", "failed", "no TransferBench results found"))
    return reading
