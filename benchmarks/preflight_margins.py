"""Where the relative rules' numbers come from: the healthy shared captures' widest figures, beside
each default.

For every capture under tests/data/samples/preflight that the tests expect to be healthy, this
measures what each relative rule looks at, read by the readers themselves:
- rccl-tests: the widest fall of bus bandwidth from the best smaller size (out-of-place and in-place, per sweep,
  from the same comparison floor the rule uses) against `bandwidth_fall_max_pct`; and on the plateau (from
  `rccl_large_message_bytes` up) the widest gap of a size below the median of the plateau's other sizes
  against `peer_degraded_pct` and `rccl_plateau_failed_pct`;
- TransferBench p2p matrices, RVS pbqt pairs, BabelStream tables: the widest gap below the median of the peers
  against `peer_degraded_pct` and `peer_failed_pct`;
- rocm-smi and amd-smi monitor: the most VRAM an idle GPU holds against `idle_vram_max_pct`.
It prints each figure, the capture it comes from, and the margin (the default divided by the widest
healthy
figure: above 1 means the healthy nodes pass with room). The issue's goal: every healthy capture passes.

    .venv/bin/python benchmarks/preflight_margins.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rocm_gate.preflight import thresholds  # noqa: E402
from rocm_gate.preflight.evidence import lines_of, number  # noqa: E402
from rocm_gate.preflight.readers import rccl_tests, rvs, transferbench  # noqa: E402
from rocm_gate.preflight.readers.babelstream import _ROW, FLOORS  # noqa: E402

SAMPLES = REPO / "tests" / "data" / "samples" / "preflight"
# file names of the faulty captures say so; a MODELED capture is no evidence of what a healthy node
# prints (preflight/SOURCES.md), so none is measured here
HEALTHY_WORDS = ("FAIL", "BAD", "hang", "no_code_object", "MODELED")


def healthy(tool: str) -> list[Path]:
    """The captures of `tool` that are not faulty; rocm-smi and amd-smi also from
    tests/data/samples/<tool>."""
    folders = [SAMPLES / tool] + (
        [SAMPLES.parent / tool] if tool in ("rocm-smi", "amd-smi") else []
    )
    return [
        p
        for folder in folders
        for p in sorted(folder.glob("*.txt"))
        if not any(w in p.name for w in HEALTHY_WORDS)
    ]


def widest_fall(values: list[float], compared_from: float) -> float:
    """The largest fall, in %, of a point below the best point before it (best at least
    `compared_from`)."""
    best, widest = None, 0.0
    for value in values:
        if best is not None and best >= compared_from and best > 0:
            widest = max(widest, (1 - value / best) * 100)
        best = value if best is None else max(best, value)
    return widest


def rccl_falls(path: Path) -> float:
    widest = 0.0
    for sweep in rccl_sweeps(path):
        if len(sweep) > 1:
            values = [value for _, value in sweep]
            floor = max(rccl_tests.COMPARED_FROM_GBPS, rccl_tests.COMPARED_FROM_PEAK * max(values))
            widest = max(widest, widest_fall(values, floor))
    return widest


def rccl_plateau(path: Path, from_bytes: float) -> float:
    """The widest gap, in %, of a plateau size below the median of the plateau's other sizes."""
    return max(
        (
            below_median([value for size, value in sweep if size >= from_bytes])
            for sweep in rccl_sweeps(path)
            if sum(size >= from_bytes for size, _ in sweep) > 1
        ),
        default=0.0,
    )


def rccl_sweeps(path: Path) -> list[list[tuple[float, float]]]:
    """Each sweep of (size, bus bandwidth), out-of-place and in-place apart."""
    lines = lines_of(path.read_text(encoding="utf-8"))
    columns = None
    rows = []
    for line in lines:
        text = line.text.strip()
        if header := rccl_tests._header_columns(text):
            columns = header
        elif (
            columns
            and text
            and not text.startswith("#")
            and (cells := rccl_tests._row(text, columns))
        ):
            rows.append(cells)
    sweeps: list[list[tuple[float, float]]] = []
    for column in (0, 1):
        points = [
            (number(r["size"][0]) or 0, number(r["busbw"][column]))
            for r in rows
            if len(r["busbw"]) > column
        ]
        points = [(size, value) for size, value in points if value is not None]
        previous = None
        for size, value in points:
            if previous is None or size <= previous:
                sweeps.append([])
            sweeps[-1].append((size, value))
            previous = size
    return sweeps


def below_median(values: list[float]) -> float:
    """The widest gap, in %, of a value below the median of the others."""
    return max(
        ((1 - v / median(values[:i] + values[i + 1 :])) * 100 for i, v in enumerate(values)),
        default=0.0,
    )


def peer_spreads() -> list[tuple[float, str]]:
    found = []
    for path in healthy("transferbench"):
        for name, matrix in transferbench._p2p_matrices(
            lines_of(path.read_text(encoding="utf-8"))
        ).items():
            found.append(
                (below_median([v for v, _ in matrix.links.values()]), f"{path.name} ({name})")
            )
    for path in healthy("rvs"):
        pairs: dict[str, list[float]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if match := rvs._P2P_BANDWIDTH.search(line):
                pairs.setdefault(match.group(3), []).append(float(match.group(4)))
        found += [
            (below_median(values), f"{path.name} (pbqt)")
            for values in pairs.values()
            if len(values) > 1
        ]
    for path in healthy("babelstream"):
        tables: dict[str, list[float]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if (match := _ROW.match(line.strip())) and match.group(1) in FLOORS:
                tables.setdefault(match.group(1), []).append(float(match.group(2)))
        found += [
            (below_median(v), f"{path.name} ({name})") for name, v in tables.items() if len(v) > 1
        ]
    return found


def idle_vram() -> list[tuple[float, str]]:
    found = []
    for tool in ("rocm-smi", "amd-smi"):
        for path in healthy(tool):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rocm_gate.cli",
                    "preflight",
                    "--json",
                    "--require",
                    "none",
                    "--source",
                    f"{tool}={path}",
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            evidence = json.loads(done.stdout)
            values = [
                f["value"]
                for layer in evidence["layers"]
                for f in layer["findings"]
                if f["check"] == "vram.idle"
            ]
            if values:
                found.append((max(values), path.name))
    return found


def report(name: str, figures: list[tuple[float, str]], default: float) -> None:
    widest, where = max(figures)
    margin = (
        f"margin x{default / widest:.1f}" if widest > 0 else "margin: every healthy capture 0 %"
    )
    print(
        f"{name:<26} widest healthy {widest:6.2f} %  default {default:5.1f} %  {margin}"
        f"  ({len(figures)} measured; widest in {where})"
    )


def main() -> int:
    limits = thresholds.load().for_sku(None)
    falls = [(rccl_falls(path), path.name) for path in healthy("rccl-tests")]
    for value, name in sorted(falls, reverse=True):
        print(f"  rccl-tests fall {value:5.1f} %  {name}")
    report("bandwidth_fall_max_pct", falls, limits["bandwidth_fall_max_pct"])
    plateaus = [
        (rccl_plateau(path, limits["rccl_large_message_bytes"]), path.name)
        for path in healthy("rccl-tests")
    ]
    for value, name in sorted(plateaus, reverse=True):
        print(f"  rccl-tests plateau {value:5.1f} %  {name}")
    report("rccl_plateau_failed_pct", plateaus, limits["rccl_plateau_failed_pct"])
    spreads = peer_spreads()
    for value, name in sorted(spreads, reverse=True):
        print(f"  below peers {value:5.2f} %  {name}")
    report("peer_degraded_pct", spreads, limits["peer_degraded_pct"])
    report("peer_failed_pct", spreads, limits["peer_failed_pct"])
    vram = idle_vram()
    for value, name in sorted(vram, reverse=True):
        print(f"  idle VRAM {value:5.1f} %  {name}")
    report("idle_vram_max_pct", vram, limits["idle_vram_max_pct"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
