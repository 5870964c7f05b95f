"""TransferBench: the all-to-all average against the SKU's floor, each p2p link against its peers, and HIP errors.

TransferBench prints matrices and per-test lines (`Executor: GPU 00 | 47.772 GB/s | ...`) that are
read as measurements; the a2a summary's `Average bandwidth (GPU Timed)` is the figure AMD's
acceptance guide sets a floor on. The p2p matrices (`Unidirectional` /
`Bidirectional copy peak bandwidth`) give every GPU-to-GPU link on its own: a link far below the
median of the others is a bad link on any SKU. The a2a summary matrix is compared within each row
only, and only at `peer_failed_pct`: its healthy rows differ by 22 % (links contend by design), and
within a row of AMD's published MI300X matrix no cell is more than 16 % below the median of the
row's other cells, while a link at half speed is 49 % below. With `AMD_LOG_LEVEL` set, the HIP
runtime's log lines are read for errors.

Reads TransferBench's `a2a`, `p2p` and config-file runs (`example.cfg`), as AMD's MI300X acceptance guide
and ROCm 7.0 on MI350X print them; captures: tests/data/samples/preflight/transferbench.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

from rocm_gate.preflight.evidence import Line, Reading, finding, last_line, no_floor, number
from rocm_gate.preflight.relative import below_peers

_A2A_AVERAGE = re.compile(r"^Average\s+bandwidth\s+\(GPU Timed\):\s*([\d.]+)\s*GB/s")
_MEASURE = re.compile(
    r"^(CPU->|Executor|Transfer|Aggregate|Test \d+:|##|Summary|SRC|GPU \d+|CPU \d+|RTotal|Averages|"
    r"Aggregate bandwidth|=+$|Bytes|Unidirectional|Bidirectional|TransferBench|Using|Test)",
    re.I,
)
# AMD_LOG_LEVEL lines: ':1:' is an error, higher numbers are information
_HIP_LOG = re.compile(r"^:(\d):")
_HIP_ERROR = re.compile(
    r"(No compatible code objects found for: (\S+)|Returned (hipError(?!NotReady\b)\w+))"
)
_P2P_TITLE = re.compile(
    r"^(Unidirectional|Bidirectional) copy peak bandwidth.*?(?:\((?:GPU-)?Executor:\s*(\w+)\))?\s*$",
    re.I,
)
_MATRIX_HEADER = re.compile(r"^SRC\S*\s+(?:CPU|GPU)\s+\d+")
_DEVICE = re.compile(r"\b(CPU|GPU)\s+(\d+)\b")
_P2P_ROW = re.compile(r"^GPU\s+(\d+)\s+(->|<-|<->)?\s*((?:N/A|[\d.]+)(?:\s+(?:N/A|[\d.]+))*)$")
RELATIVE_CHECKS = "p2p links against their peers; the all-to-all average is not judged"
# A line that carries a measurement: a bandwidth, or a matrix row with numbers (banners and settings
# do not).
_MEASUREMENT = re.compile(r"\d\s*GB/s|^(?:GPU|CPU)\s+\d+\s+(?:->|<-|<->)?\s*(?:N/A|[\d.]+)(?:\s|$)")


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    # the a2a summary line, and whether its average followed
    measured, summary, average = (0, None, False)
    last_measured = None  # the last line that carried a measurement (quoted where no rule fired)
    for line in lines:
        text = line.text.strip().replace("\\|", "|").replace("\\\\", "\\")
        if not text:
            continue
        if _MEASUREMENT.search(text):
            measured, last_measured = measured + 1, line
        if match := _HIP_ERROR.search(text):
            reading.understood += 1
            if match.group(2):
                message = (
                    f"no code object for {match.group(2).rstrip(',;')}: this TransferBench build does not support the GPU's "
                    "architecture (rebuild it for this arch)"
                )
            else:
                message = f"HIP returned {match.group(3)}"
            reading.add(finding("transferbench.hip_error", "failed", message, line))
        elif match := _A2A_AVERAGE.match(text):
            reading.understood += 1
            average = True
            value, floor = number(match.group(1)), limits.get("transferbench_a2a_gbps")
            if floor is None:
                reading.add(
                    finding(
                        "transferbench.a2a",
                        "ok",
                        f"all-to-all average {value:g} GB/s; " + no_floor(limits, RELATIVE_CHECKS),
                        line,
                        value=value,
                    )
                )
            else:
                reading.add(
                    finding(
                        "transferbench.a2a",
                        "ok" if value >= floor else "failed",
                        f"all-to-all average {value:g} GB/s "
                        + ("meets" if value >= floor else "is below")
                        + f" {floor:g} GB/s",
                        line,
                        value=value,
                        threshold=floor,
                    )
                )
        elif _HIP_LOG.match(text) or _MEASURE.match(text):
            reading.understood += 1
            # the a2a summary
            if text.startswith("Summary:") and "bytes per Transfer" in text and summary is None:
                summary = line
        else:
            reading.unread.append(line)
    _judge_p2p(reading, lines, limits)
    _judge_a2a_rows(reading, lines, limits)
    if summary is not None and not average:
        reading.add(
            finding(
                "transferbench.a2a",
                "failed",
                "the all-to-all summary has no `Average bandwidth` line: "
                "the run stopped before it ended (a crash or a hang)",
                last_line(lines),
            )
        )
    if not reading.findings:
        if measured:
            reading.add(
                finding(
                    "transferbench.measured",
                    "ok",
                    "transfers measured; no figure with a floor (the a2a summary has one)",
                    last_measured,
                )
            )
        elif reading.understood:
            reading.add(
                finding(
                    "transferbench.no_results",
                    "failed",
                    "TransferBench started and measured nothing "
                    "(the run stopped before its first transfer)",
                    last_line(lines),
                )
            )
        else:
            reading.add(
                finding("transferbench.no_results", "failed", "no TransferBench results found")
            )
    return reading


@dataclass
class Matrix:
    """One p2p matrix: its GPU-to-GPU links, the links it printed as N/A, the GPUs of its columns
    and rows."""

    links: dict[tuple[int, int], tuple[float, Line]] = field(default_factory=dict)
    missing: list[tuple[int, int, Line]] = field(default_factory=list)
    columns: set[int] = field(default_factory=set)
    rows: set[int] = field(default_factory=set)
    # rows cut short: (GPU, cells, columns, line)
    short: list[tuple[int, int, int, Line]] = field(default_factory=list)
    last: Line | None = None


def _p2p_matrices(lines: list[Line]) -> dict[str, Matrix]:
    """{matrix name: Matrix} of the p2p tables, GPU to other GPU only (a GPU to itself is its local
    copy, ten times faster; CPU cells are the host's links)."""
    matrices: dict[str, Matrix] = {}
    title, columns = None, []
    for line in lines:
        text = line.text.strip().replace("\\\\", "\\")
        if match := _P2P_TITLE.match(text):  # one matrix per kind and executor (GFX, DMA)
            title, columns = (
                match.group(1).lower() + (f" {match.group(2)}" if match.group(2) else ""),
                [],
            )
        elif title and _MATRIX_HEADER.match(text):
            columns = _DEVICE.findall(text)
        elif title and columns and (match := _P2P_ROW.match(text)):
            source, direction, cells = (
                int(match.group(1)),
                match.group(2) or "->",
                match.group(3).split(),
            )
            matrix = matrices.setdefault(f"{title} {direction}", Matrix())
            matrix.columns.update(int(index) for kind, index in columns if kind == "GPU")
            matrix.rows.add(source)
            matrix.last = line
            if len(cells) < len(columns):
                matrix.short.append((source, len(cells), len(columns), line))
            for (kind, index), cell in zip(columns, cells):
                if kind != "GPU" or int(index) == source:
                    continue
                if (value := number(cell)) is None:
                    matrix.missing.append((source, int(index), line))
                else:
                    matrix.links[(source, int(index))] = (value, line)
        elif text.startswith(("Averages", "Summary")):
            title, columns = None, []
    return matrices


def _judge_p2p(reading: Reading, lines: list[Line], limits: dict) -> None:
    degraded, failed = limits.get("peer_degraded_pct"), limits.get("peer_failed_pct")
    for name, matrix in _p2p_matrices(lines).items():
        links = matrix.links
        for source, destination, line in matrix.missing:
            reading.add(
                finding(
                    "transferbench.peer_link",
                    "failed",
                    f"GPU {source} to GPU {destination} ({name}): N/A, "
                    "no bandwidth: the GPUs have no peer access or the transfer failed",
                    line,
                )
            )
        for source, cells, wanted, line in matrix.short:
            reading.add(
                finding(
                    "transferbench.matrix",
                    "failed",
                    f"the {name} row of GPU {source} has {cells} of "
                    f"{wanted} cells: the run stopped (a crash or a hang)",
                    line,
                )
            )
        if links and max(value for value, _ in links.values()) <= 0:
            reading.add(
                finding(
                    "transferbench.peer_link",
                    "failed",
                    f"every GPU-to-GPU link of the {name} matrix measured 0 GB/s: no transfer ran",
                    matrix.last,
                )
            )
            continue
        if len(matrix.rows) < len(matrix.columns):
            reading.add(
                finding(
                    "transferbench.matrix",
                    "failed",
                    f"the {name} matrix has {len(matrix.rows)} of "
                    f"{len(matrix.columns)} GPU rows: the run stopped (a crash or a hang)",
                    matrix.last,
                )
            )
        if degraded is None or failed is None:
            continue
        stragglers = below_peers(
            {pair: value for pair, (value, _) in links.items()}, degraded, failed
        )
        for slow in stragglers:
            source, destination = slow.key
            reading.add(
                finding(
                    "transferbench.peer_link",
                    slow.status,
                    f"GPU {source} to GPU {destination} ({name}): {slow.value:g} GB/s, {slow.below_pct:.0f} % "
                    f"below the median of the other {len(links) - 1} links ({slow.peers_median:g} GB/s): "
                    "a slow or retrained link",
                    links[slow.key][1],
                    value=slow.value,
                    threshold=round(slow.peers_median * (1 - degraded / 100), 3),
                )
            )
        if not stragglers and len(links) > 1:
            first = min(links.values(), key=lambda item: item[1].number)[1]
            reading.add(
                finding(
                    "transferbench.peer_link",
                    "ok",
                    f"every GPU-to-GPU link within {degraded:g} % of its "
                    f"peers ({len(links)} links, {name})",
                    first,
                )
            )


def _a2a_rows(lines: list[Line]) -> dict[int, dict[int, tuple[float, Line]]]:
    """The a2a summary matrix (after `Summary:`): {source GPU: {destination
    GPU: (GB/s, line)}}, the row's totals left out."""
    rows: dict[int, dict[int, tuple[float, Line]]] = {}
    columns: list[tuple[str, str]] = []
    inside = False
    for line in lines:
        text = line.text.strip().replace("\\\\", "\\")
        if text.startswith("Summary:"):  # `Summary: [268435456 bytes per Transfer] ...`, or bare
            inside, columns = True, []
        elif inside and _MATRIX_HEADER.match(text):
            columns = _DEVICE.findall(text)
        elif inside and columns and (match := _P2P_ROW.match(text)):
            source = int(match.group(1))
            for (kind, index), cell in zip(columns, match.group(3).split()):
                if kind == "GPU" and int(index) != source and (value := number(cell)) is not None:
                    rows.setdefault(source, {})[int(index)] = (value, line)
        elif inside and text.startswith(("RTotal", "Average")):
            inside = False
    return rows


def _judge_a2a_rows(reading: Reading, lines: list[Line], limits: dict) -> None:
    """Each a2a cell against the median of its row's other cells, at `peer_failed_pct` alone."""
    failed = limits.get("peer_failed_pct")
    rows = _a2a_rows(lines)
    if failed is None or not rows:
        return
    slow_found = False
    for source, cells in sorted(rows.items()):
        for slow in below_peers({d: value for d, (value, _) in cells.items()}, failed, failed):
            slow_found = True
            reading.add(
                finding(
                    "transferbench.a2a_link",
                    "failed",
                    f"GPU {source} to GPU {slow.key} (all-to-all): {slow.value:g} GB/s, "
                    f"{slow.below_pct:.0f} % below the median of the other {len(cells) - 1} cells of "
                    f"its row ({slow.peers_median:g} GB/s): a slow link",
                    cells[cast(int, slow.key)][1],
                    value=slow.value,
                    threshold=round(slow.peers_median * (1 - failed / 100), 3),
                )
            )
    if not slow_found:
        first = min(
            (line for cells in rows.values() for _, line in cells.values()),
            key=lambda at: at.number,
        )
        reading.add(
            finding(
                "transferbench.a2a_link",
                "ok",
                f"every all-to-all cell within {failed:g} % of its row's others ({len(rows)} rows)",
                first,
            )
        )
