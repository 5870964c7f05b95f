"""BabelStream (`hip-stream`): each results table's Copy and Triad bandwidth per GPU, against the
SKU's HBM floor and against the other GPUs.

Run under MPI, the ranks' lines interleave and every rank prints its own table; each table is
judged, and each GPU's Copy and Triad are compared with the median of the other tables (a GPU far
below its peers has bad HBM on any SKU). Runs over several array sizes (one `Array size:` line
before each table) are also judged for a fall from one size to a larger one, from arrays larger than
the GPU's cache up.

Reads BabelStream 4-5 `hip-stream` (alone or under `mpiexec`); captures:
tests/data/samples/preflight/babelstream, and RVS's babel module in rvs.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rocm_gate.preflight.evidence import Finding, Line, Reading, finding, no_floor, number
from rocm_gate.preflight.relative import below_peers, falls

_TABLE_HEADER = re.compile(r"^Function\s+MBytes/sec\b")
_ROW = re.compile(r"^(Copy|Mul|Add|Triad|Dot|Read|Write|Nstream)\s+([\d.]+)\s")
_ARRAY_SIZE = re.compile(r"^Array size:\s*([\d.]+)\s*MB")
_KNOWN = re.compile(
    r"^(BabelStream|Version:|Implementation:|Running kernels|Precision:|Array size:|Total size:|"
    r"Using HIP device|Using OpenCL device|Driver:|Memory:|Init:|Read:|Validation failed.*)"
)
FLOORS = {"Triad": "babelstream_triad_mbps", "Copy": "babelstream_copy_mbps"}
RELATIVE_CHECKS = "each GPU against the others, and over array sizes"
# Arrays smaller than this are served from the MI300 and MI350 series' 256 MB Infinity Cache, faster
# than HBM: a fall from them to a larger size is the cache, not a fault, so sizes are compared from
# here up.
CACHE_MB = 256


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    tables = 0
    array_size, sizes = None, []  # the array size each table ran with, where the output says
    # per table, in order
    measured: dict[str, list[tuple[float, Line]]] = {name: [] for name in FLOORS}
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if _TABLE_HEADER.match(text):
            tables += 1
            sizes.append(array_size)
            reading.understood += 1
        elif tables and (match := _ROW.match(text)):
            reading.understood += 1
            function, value = match.group(1), number(match.group(2)) or 0.0
            if function not in FLOORS:
                continue
            measured[function].append((value, line))
            reading.add(
                judge_floor(function, value, limits, f"babelstream.{function.lower()}", line)
            )
        elif text.startswith("Validation failed") or "error" in text.lower():
            reading.understood += 1
            reading.add(
                finding("babelstream.error", "failed", "BabelStream reported an error", line)
            )
        elif match := _ARRAY_SIZE.match(text):
            reading.understood += 1
            array_size = number(match.group(1))
        elif _KNOWN.match(text.replace("**", "")):
            reading.understood += 1
        else:
            reading.unread.append(line)
    if not tables:
        reading.add(
            finding(
                "babelstream.no_table",
                "failed",
                "no BabelStream results table found (the run did not finish?)",
            )
        )
    elif len(set(sizes)) == len(sizes) == tables and None not in sizes and tables > 1:
        _judge_sizes(reading, sizes, measured, limits)
    else:
        _judge_peers(reading, measured, limits)
    return reading


def _judge_peers(reading: Reading, measured: dict, limits: dict) -> None:
    """One table per GPU (an MPI run): each GPU's figure against the median of the others."""
    for function, rows in measured.items():
        by_table = {f"table {index + 1} of {len(rows)}": row for index, row in enumerate(rows)}
        for item in judge_hbm_peers(
            by_table, function, limits, f"babelstream.{function.lower()}_peers", str
        ):
            reading.add(item)


def judge_floor(function: str, value: float, limits: dict, check: str, at) -> Finding:
    """One GPU's Copy or Triad against the SKU's HBM floor (BabelStream's, from AMD's acceptance
    guide); a SKU without one is judged by the peer rule only."""
    floor = limits.get(FLOORS[function])
    if value <= 0:
        return finding(
            check, "failed", f"{function} measured 0 MB/s: the kernel did not run", at, value=value
        )
    if floor is None:
        return finding(
            check,
            "ok",
            f"{function} measured; " + no_floor(limits, RELATIVE_CHECKS),
            at,
            value=value,
        )
    if value < floor:
        return finding(
            check,
            "failed",
            f"{function} {value:,.0f} MB/s is below {floor:,.0f} MB/s (HBM bandwidth)",
            at,
            value=value,
            threshold=floor,
        )
    return finding(
        check, "ok", f"{function} at least {floor:,.0f} MB/s", at, value=value, threshold=floor
    )


def judge_hbm_peers(
    rows: dict, function: str, limits: dict, check: str, describe: Callable[[object], str]
) -> list[Finding]:
    """Each GPU's Copy or Triad (key -> (MB/s, where)) against the median of the others: more than
    `peer_degraded_pct` / `peer_failed_pct` below is degraded / failed (that GPU's HBM is slow).
    Read by BabelStream's MPI tables and RVS's babel module alike."""
    degraded, failed = limits.get("peer_degraded_pct"), limits.get("peer_failed_pct")
    if degraded is None or failed is None or len(rows) < 2:
        return []
    last = list(rows.values())[-1][1]
    if max(value for value, _ in rows.values()) <= 0:
        return [
            finding(
                check, "failed", f"{function} of every GPU is 0 MB/s: the kernels did not run", last
            )
        ]
    slow_ones = below_peers({key: value for key, (value, _) in rows.items()}, degraded, failed)
    if not slow_ones:
        return [
            finding(
                check,
                "ok",
                f"{function} of each of {len(rows)} GPUs within {degraded:g} % of the others",
                last,
            )
        ]
    return [
        finding(
            check,
            slow.status,
            f"{function} of {describe(slow.key)}: {slow.value:,.0f} MB/s, {slow.below_pct:.0f} % "
            f"below the other GPUs' median ({slow.peers_median:,.0f} MB/s): that GPU's HBM is slow",
            rows[slow.key][1],
            value=slow.value,
        )
        for slow in slow_ones
    ]


def _judge_sizes(reading: Reading, sizes: list[float], measured: dict, limits: dict) -> None:
    """Tables of one GPU over growing array sizes: bandwidth must not fall from one size to a larger
    one."""
    max_fall = limits.get("bandwidth_fall_max_pct")
    if max_fall is None:
        return
    order = sorted((i for i in range(len(sizes)) if sizes[i] >= CACHE_MB), key=sizes.__getitem__)
    for function, rows in measured.items():
        if len(rows) != len(sizes) or len(order) < 2:
            continue
        fall = falls([rows[i][0] for i in order], max_fall)
        if fall is None:
            reading.add(
                finding(
                    f"babelstream.{function.lower()}_sizes",
                    "ok",
                    f"{function} never falls more than "
                    f"{max_fall:g} % from one array size to a larger one ({len(sizes)} sizes)",
                    rows[-1][1],
                )
            )
        else:
            at, peak = order[fall.at], order[fall.peak]
            reading.add(
                finding(
                    f"babelstream.{function.lower()}_sizes",
                    "failed" if fall.sustained else "degraded",
                    f"{function} falls {(1 - fall.ratio) * 100:.0f} % from {rows[peak][0]:,.0f} MB/s at "
                    f"{sizes[peak]:g} MB arrays to {rows[at][0]:,.0f} MB/s at {sizes[at]:g} MB",
                    rows[at][1],
                    value=round(fall.ratio, 3),
                )
            )
