"""rccl-tests (`all_reduce_perf` and friends): results table, `#wrong`, bus bandwidth, hangs and
failures.

Column positions are taken from the table's own header (rccl-tests added `redop`/`root` columns over
the years, and old builds print `error` where new ones print `#wrong`), so any version reads the
same. A run that printed its header and no rows stopped there: a hang or a crash.

Reads rccl-tests from develop:ae3e635 (2023) to HEAD:e1b8a3a (RCCL 2.21-2.26, ROCm 6.3-7.0), one node
or several, MI210 to MI355X; captures: tests/data/samples/preflight/rccl-tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rocm_gate.preflight.evidence import (
    Finding,
    Line,
    Reading,
    finding,
    last_line,
    no_floor,
    number,
)
from rocm_gate.preflight.relative import below_peers, falls

_DEVICE = re.compile(
    r"^#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s"
)
# RCCL prints warnings that are advice ("NCCL WARN NUMA auto balancing enabled ..."): a warning is a
# failure only when it says something failed, timed out or was aborted.
_FAILURE = re.compile(
    r"(TIMEOUT:|Test (?:NCCL|CUDA|HIP) failure|Test failure|[NR]CCL WARN.{0,300}?\b(?:fail|error|timed? ?out|abort)"
    r"|segmentation fault|Aborted)",
    re.I,
)
_BANNER = re.compile(
    r"^(# .*|#|rccl-tests: .*|nccl-tests: .*|RCCL version\s*:.*|HIP version\s*:.*|ROCm version\s*:.*|"
    r"Hostname\s*:.*|Librccl path\s*:.*|# Using devices)$"
)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_COLLECTIVE = re.compile(r"#\s*Collective test (?:starting|concluded):\s*(\w+)")
_MAX_BYTES = re.compile(r"\bmaxBytes:?\s*(\d+)")
_STEP = re.compile(r"\bstep:?\s*(\d+)\s*\((factor|bytes)\)")
GIB = 1024**3
# Sizes are compared from a best of 1 GB/s and a tenth of the sweep's peak up: rccl-tests prints two
# decimals (under 1 GB/s one step of 0.01 is a 1 % change), and small messages measure latency, not
# bandwidth.
COMPARED_FROM_GBPS = 1.0
COMPARED_FROM_PEAK = 0.1
RELATIVE_CHECKS = "bandwidth across message sizes, out-of-place against in-place"


def size_text(size: float) -> str:
    """8589934592 -> '8 GiB' (rccl-tests sizes are powers of two)."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size:g} B"


def _header_columns(text: str) -> list[str] | None:
    tokens = text.lstrip("#").split()
    if "size" in tokens and "busbw" in tokens:
        return tokens
    return None


@dataclass
class _Sweep:
    """What the lines of one rccl-tests run said, read in order."""

    hosts: set[str] = field(default_factory=set)
    ranks: int = 0
    collective: str | None = None
    max_bytes: int | None = None  # the largest size asked for (the header)
    step: tuple[int, str] = (2, "factor")  # how sizes grow (-f 2 unless the header says otherwise)
    closed: bool = False  # the summary after the table was printed
    columns: list[str] | None = None
    rows: list[tuple[Line, dict[str, list[str]]]] = field(default_factory=list)

    def take(self, reading: Reading, line: Line, text: str) -> None:
        if match := _DEVICE.match(text):
            self.hosts.add(match.group(1))
            self.ranks += 1
        elif text.startswith("#") and (match := _MAX_BYTES.search(text)):
            self.max_bytes = int(match.group(1))
            if found := _STEP.search(text):
                self.step = (int(found.group(1)), found.group(2))
        elif header := _header_columns(text):
            self.columns = header
        elif match := _COLLECTIVE.search(text):
            self.collective = match.group(1)
            return  # a marker line, not counted as read
        elif match := _OUT_OF_BOUNDS.match(text):
            self.closed = True
            if int(match.group(1)):
                reading.add(
                    finding(
                        "rccl.out_of_bounds",
                        "failed",
                        f"{match.group(1)} result(s) out of bounds: the collective computed wrong values",
                        line,
                    )
                )
        elif _AVERAGE.match(text):
            self.closed = True
        elif _FAILURE.search(text):
            reading.add(finding("rccl.failure", "failed", "the test reported a failure", line))
        elif self.columns and not text.startswith("#") and (cells := _row(text, self.columns)):
            self.rows.append((line, cells))
        else:
            if not _BANNER.match(text):
                reading.unread.append(line)
            return
        reading.understood += 1

    def stopped_at(self) -> int | None:
        """maxBytes where the size after the last row's, had the sweep gone on, is within it: the
        sweep stopped early."""
        last_size = number(self.rows[-1][1]["size"][0]) or 0
        factor, how = self.step
        next_size = (
            last_size * factor if how == "factor" and factor > 1 else last_size + max(factor, 1)
        )
        return (
            self.max_bytes if self.max_bytes is not None and next_size <= self.max_bytes else None
        )


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    sweep = _Sweep()
    for line in lines:
        if text := line.text.strip():
            sweep.take(reading, line, text)
    if sweep.columns is None:
        if not reading.findings:
            reading.add(
                finding(
                    "rccl.no_table",
                    "failed",
                    "no rccl-tests results table found (is this rccl-tests output?)",
                )
            )
        return reading
    if not sweep.rows:
        if not reading.findings:
            reading.add(
                finding(
                    "rccl.no_rows",
                    "failed",
                    "the results table has a header and no rows: the test stopped before the first size "
                    "(a hang or a crash of a GPU or link)",
                    last_line(lines),
                )
            )
        return reading
    _judge_rows(reading, sweep.rows, limits)
    _judge_sweep(reading, sweep.rows, limits)
    _judge_plateaus(reading, sweep.rows, limits)
    _judge_largest(reading, sweep, limits)
    return reading


def _row(text: str, columns: list[str]) -> dict[str, list[str]] | None:
    """A data row as {column name: [values in order]} ('busbw' has two: out-of-place, in-place)."""
    cells = text.split()
    if len(cells) != len(columns) or number(cells[0]) is None:
        return None
    row: dict[str, list[str]] = {}
    for name, value in zip(columns, cells):
        row.setdefault(name, []).append(value)
    return row


def _judge_rows(reading: Reading, rows, limits: dict) -> None:
    """Each row: wrong values, and a dip of one of its two bandwidths below the other."""
    wrong_column = (
        "#wrong" if "#wrong" in rows[0][1] else "error" if "error" in rows[0][1] else None
    )
    for line, row in rows:
        for value in row.get(wrong_column, []) if wrong_column else []:
            # rccl-tests marks a count over its error threshold with '*'
            if "*" in value or number(value.rstrip("*")) not in (None, 0):
                reading.add(
                    finding(
                        "rccl.wrong",
                        "failed",
                        f"{wrong_column} is {value} at {size_text(number(row['size'][0]) or 0)}: the collective computed wrong values",
                        line,
                    )
                )
        bandwidths = [b for b in (number(v) for v in row["busbw"]) if b is not None]
        size = number(row["size"][0]) or 0
        ratio = limits.get("rccl_dip_ratio")
        if (
            ratio
            and size >= 64 * 1024**2
            and len(bandwidths) == 2
            and max(bandwidths) > 0
            and min(bandwidths) / max(bandwidths) < ratio
        ):
            reading.add(
                finding(
                    "rccl.dip",
                    "degraded",
                    f"bus bandwidth dips at {size_text(size)}: out-of-place {bandwidths[0]:g} vs in-place "
                    f"{bandwidths[1]:g} GB/s (a noisy link or a busy GPU)",
                    line,
                    value=round(min(bandwidths) / max(bandwidths), 3),
                    threshold=ratio,
                )
            )


def _judge_largest(reading: Reading, sweep: _Sweep, limits: dict) -> None:
    """The sweep's largest size: whether the sweep got as far as it was asked (maxBytes; where the
    header does not say, the plateau with a summary after it), then its bus bandwidth against the
    SKU's all_reduce floor."""
    stopped_before = sweep.stopped_at()
    line, last = sweep.rows[-1]
    size = number(last["size"][0]) or 0
    busbw = min((b for b in (number(v) for v in last["busbw"]) if b is not None), default=None)
    name = sweep.collective or "this collective"
    threshold = limits.get("rccl_all_reduce_busbw_gbps")
    large = limits.get("rccl_large_message_bytes", GIB)
    if stopped_before is not None or sweep.max_bytes is None and not sweep.closed and size < large:
        reading.add(_stopped(line, size, stopped_before))
    elif busbw is None:
        reading.add(
            finding("rccl.bus_bandwidth", "failed", "the largest size has no bus bandwidth", line)
        )
    elif len(sweep.hosts) > 1:
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "ok",
                f"{busbw:g} GB/s at {size_text(size)} over {len(sweep.hosts)} hosts "
                f"({sweep.ranks} ranks): a multi-node run is not compared with the single-node threshold",
                line,
                value=busbw,
            )
        )
    elif sweep.collective not in (None, "all_reduce_perf") or (
        "redop" in last and last["redop"][0] == "none"
    ):
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "ok",
                f"{busbw:g} GB/s at {size_text(size)} ({name}): thresholds "
                "are set for all_reduce only",
                line,
                value=busbw,
            )
        )
    elif threshold is None:
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "ok",
                f"{busbw:g} GB/s at {size_text(size)}: " + no_floor(limits, RELATIVE_CHECKS),
                line,
                value=busbw,
            )
        )
    elif size < large:
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "failed",
                f"the run ended at {size_text(size)}, below "
                f"{size_text(large)} where bus bandwidth is judged against the floor (run with -e 8G)",
                line,
                value=size,
                threshold=large,
            )
        )
    elif busbw < threshold:
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "failed",
                f"all_reduce bus bandwidth {busbw:g} GB/s at {size_text(size)} "
                f"is below {threshold:g} GB/s",
                line,
                value=busbw,
                threshold=threshold,
            )
        )
    else:
        reading.add(
            finding(
                "rccl.bus_bandwidth",
                "ok",
                f"all_reduce bus bandwidth {busbw:g} GB/s at {size_text(size)} "
                f"(at least {threshold:g})",
                line,
                value=busbw,
                threshold=threshold,
            )
        )


def _stopped(line: Line, size: float, stopped_before: int | None):
    """On any SKU: the sweep stopped before the size it was asked for (or, where the header does
    not say, before the plateau with no summary after it): a hang or a crash, whatever the bandwidth
    so far."""
    why = (
        f" of the {size_text(stopped_before)} asked for (maxBytes)"
        if stopped_before is not None
        else ", with no summary after it"
    )
    return finding(
        "rccl.stopped",
        "failed",
        f"the run stopped at {size_text(size)}{why}: a hang or a crash of a GPU or link",
        line,
        value=size,
        threshold=stopped_before,
    )


def _judge_sweep(reading: Reading, rows, limits: dict) -> None:
    """Bus bandwidth over the message sizes, out-of-place and in-place each: a fall that no floor is
    needed to see. A file may hold several sweeps (runs or collectives one after another): a size
    that is not larger than the one before starts a new sweep."""
    max_fall = limits.get("bandwidth_fall_max_pct")
    if max_fall is None:
        return
    found, compared = False, 0
    for placement, points in _placements(rows):
        if len(points) < 2:
            continue
        compared = max(compared, len(points))
        for sweep in _sweeps(points):
            found |= _judge_one_sweep(reading, sweep, max_fall, placement)
    if compared and not found:
        reading.add(
            finding(
                "rccl.size_sweep",
                "ok",
                f"bus bandwidth never falls more than {max_fall:g} % from one "
                f"message size to a larger one ({compared} sizes)",
                rows[-1][0],
            )
        )


def _judge_one_sweep(reading: Reading, points: list, max_fall: float, placement: str) -> bool:
    values = [bandwidth for _, _, bandwidth in points]
    fall = falls(values, max_fall, max(COMPARED_FROM_GBPS, COMPARED_FROM_PEAK * max(values)))
    if fall is None:
        return False
    line, size, bandwidth = points[fall.at]
    _, peak_size, peak = points[fall.peak]
    _, last_size, last = points[-1]
    drop = (
        f"{bandwidth:g} GB/s at {size_text(size)}, {(1 - fall.ratio) * 100:.0f} % below {peak:g} GB/s at "
        f"{size_text(peak_size)} ({placement})"
    )
    if fall.sustained:
        reading.add(
            finding(
                "rccl.collapse",
                "failed",
                f"bus bandwidth collapses: {drop}, and stays down to the largest "
                f"size ({last:g} GB/s at {size_text(last_size)}): a link or GPU fails under load",
                line,
                value=round(fall.ratio, 3),
                threshold=round(1 - max_fall / 100, 3),
            )
        )
    else:
        reading.add(
            finding(
                "rccl.collapse",
                "degraded",
                f"bus bandwidth falls: {drop}, then recovers "
                f"({last:g} GB/s at {size_text(last_size)})",
                line,
                value=round(fall.ratio, 3),
                threshold=round(1 - max_fall / 100, 3),
            )
        )
    return True


def _placements(rows):
    """(placement, [(line, size, bus bandwidth)]) for out-of-place and in-place, in file order."""
    for column, placement in enumerate(("out-of-place", "in-place")):
        yield (
            placement,
            [
                (line, number(row["size"][0]) or 0, bandwidth)
                for line, row in rows
                if len(row["busbw"]) > column
                and (bandwidth := number(row["busbw"][column])) is not None
            ],
        )


def _sweeps(points: list) -> list[list]:
    """A file may hold several sweeps (runs or collectives one after another): a size that is not
    larger than the one before starts a new one."""
    sweeps = [[points[0]]] if points else []
    for point in points[1:]:
        if point[1] <= sweeps[-1][-1][1]:
            sweeps.append([])
        sweeps[-1].append(point)
    return sweeps


def judge_plateau(
    points: list[tuple], from_bytes: float, degraded_pct: float, failed_pct: float, placement: str
) -> list:
    """One sweep's sizes on its plateau (from `from_bytes` up; (line, size, GB/s) each): a size
    more than `degraded_pct` below the median of the plateau's other sizes is degraded, more than
    `failed_pct` below failed (a link or GPU that stalls at that size). Healthy plateaus differ by
    under 1.1 % on one node, 4.1 % on two; the fall rule (`falls`) cannot see a single size at 30 %
    of its neighbours, its limit being set by an algorithm switch below the plateau
    (thresholds.toml: rccl_plateau_failed_pct). An ok finding where the plateau has two sizes or
    more and none is below."""
    plateau = {size: (bandwidth, line) for line, size, bandwidth in points if size >= from_bytes}
    if len(plateau) < 2:
        return []
    slow = below_peers(
        {size: value for size, (value, _) in plateau.items()}, degraded_pct, failed_pct
    )
    shown = f"{size_text(from_bytes)} up, {len(plateau)} sizes"
    if not slow:
        last = max(plateau)
        return [
            finding(
                "rccl.plateau",
                "ok",
                f"bus bandwidth on the plateau ({shown}) within {degraded_pct:g} % of its other sizes",
                plateau[last][1],
            )
        ]
    return [
        finding(
            "rccl.plateau",
            peer.status,
            f"bus bandwidth at {size_text(peer.key)}: {peer.value:g} GB/s, {peer.below_pct:.0f} % below "
            f"the median of the plateau's other sizes ({peer.peers_median:g} GB/s; {shown}) "
            f"({placement}): a link or GPU that stalls at that size",
            plateau[peer.key][1],
            value=peer.value,
            threshold=round(peer.peers_median * (1 - failed_pct / 100), 2),
        )
        for peer in slow
    ]


def _judge_plateaus(reading: Reading, rows, limits: dict) -> None:
    """Each sweep's plateau, out-of-place and in-place each (`judge_plateau`). A degraded size the
    out-of-place/in-place dip already names (`rccl.dip`, same line) is that dip, not a second
    problem."""
    degraded, failed = limits.get("peer_degraded_pct"), limits.get("rccl_plateau_failed_pct")
    if degraded is None or failed is None:
        return
    large = limits.get("rccl_large_message_bytes", GIB)
    dips = {f.line for f in reading.findings if f.check == "rccl.dip"}
    slow: dict[tuple, Finding] = {}  # (line, status) -> the finding: one per size
    for placement, points in _placements(rows):
        for sweep in _sweeps(points):
            for item in judge_plateau(sweep, large, degraded, failed, placement):
                if item.status == "degraded" and item.line in dips:
                    continue
                if item.status != "ok" and (earlier := slow.get((item.line, item.status))):
                    # both placements of one size: one problem, both figures named
                    earlier.message += f"; {placement} too, {item.value:g} GB/s"
                    continue
                slow[(item.line, item.status)] = item
                reading.add(item)
