"""ROCm Validation Suite (`rvs`): the pass/fail words of each module and the summary table of RVS
1.6+.

RVS prints `[RESULT] [timestamp] [action] module ...` lines; the verdict words differ per module
(`met: TRUE` for gst, `pass: TRUE` for iet, `peqt true`, `mem Test N : PASS`, `... violations N` for
gm) and RVS 1.6 ends with a summary table (`| action | MODULE | PASS |`). `[ERROR]` lines fail the
run. Measured figures are compared with their peers of the same action on any SKU
(preflight/relative.py), whatever the verdict word says: pbqt's `p2p-bandwidth` per GPU pair (a slow
link), gst's final `GFLOPS` per GPU (a throttled GPU: AMD's MI355X `gst_single.conf` sets
`target_stress: 0` for its fp4/fp6/bf6 actions, so `met: TRUE` whatever the GPU does) and pebb's
`pcie-bandwidth` per GPU, its best over the CPUs it was measured from (a host link at half speed).
"""

from __future__ import annotations

import re

from rocm_gate.preflight.evidence import NO_FLOOR, Finding, Line, Reading, finding
from rocm_gate.preflight.inventory import compute_units_ok, judge_compute_units
from rocm_gate.preflight.readers.babelstream import judge_floor, judge_hbm_peers
from rocm_gate.preflight.relative import below_peers

_RESULT = re.compile(r"^\[RESULT\]\s*\[\s*[\d.]+\s*\]\s*(.*)$")
_ACTION = re.compile(r"^\[([^\]]+)\]\s*(.*)$")
_VERDICTS = (  # (pattern on the text after [action], check); group 1 is the pass/fail word
    (re.compile(r"\bmet:\s*(TRUE|FALSE)\b", re.I), "rvs.target_met"),
    (re.compile(r"\bpass:\s*(TRUE|FALSE)\b", re.I), "rvs.pass"),
    (re.compile(r"\bpeqt\s+(true|false)\b", re.I), "rvs.pcie_qualification"),
    (re.compile(r"\bmem Test\s*(?:\d+)\s*:\s*(PASS|FAIL)\b", re.I), "rvs.memory_test"),
    # pbqt: the two GPUs can reach each other
    (re.compile(r"\bpeers:\s*(true|false)\b", re.I), "rvs.p2p_peers"),
)
_VIOLATIONS = re.compile(r"\bgm\s+\S+\s+(\w+)\s+violations\s+(\d+)")
_SUMMARY_ROW = re.compile(
    r"^\|\s*(\S[^|]*?)\s*\|\s*([A-Z]+)\s*\|\s*(PASS|FAIL|SKIP\w*)\s*\|$", re.I
)
_ERROR = re.compile(r"^\[ERROR\s*\]", re.I)
_P2P_BANDWIDTH = re.compile(
    r"p2p-bandwidth\s*\[\s*\d+\s*/\s*\d+\s*\]\s*\[GPU::\s*(\d+)\b[^\]]*\]\s*\[GPU::\s*(\d+)\b[^\]]*\]"
    r"\s*bidirectional:\s*(true|false)\s+([\d.]+)\s*GBps",
    re.I,
)
# gst's last line per GPU: `[GPU:: 28851] GFLOPS 1687129 Target GFLOPS: 1215000 met: TRUE`
_GST_FINAL = re.compile(
    r"\[GPU::\s*(\d+)[^\]]*\]\s*GFLOPS\s+([\d.]+)\s+Target GFLOPS:\s*[\d.]+\s+met:", re.I
)
# pebb: `pcie-bandwidth [ 1/16] [CPU:: 0] [GPU:: 2 - 28851 - 0000:05:00.0] h2d::false d2h::true 56.298 GBps`
_PCIE_BANDWIDTH = re.compile(
    r"pcie-bandwidth\s*\[\s*\d+\s*/\s*\d+\s*\]\s*\[CPU::\s*\d+\s*\]\s*\[GPU::\s*(\d+)\b[^\]]*\]"
    r"\s*h2d::(true|false)\s+d2h::(true|false)\s+([\d.]+)\s*GBps",
    re.I,
)
# gpup's node properties (KFD topology): `[RVS-GPUP-TC1] gpup 28851 simd_count 1216`
_GPUP = re.compile(r"\bgpup\s+(\d+)\s+(simd_count|simd_per_cu)\s+(\d+)\s*$")
# babel's table row: `42583       Copy        6224488.986    6224488.986 ...` (GPU id, function, MB/s)
_BABEL_ROW = re.compile(r"^(\d+)\s+(Copy|Triad)\s+([\d.]+)\s")
# SIMDs per compute unit on CDNA (KFD's simd_per_cu), where gpup's output does not list it
SIMDS_PER_CU = 4
# Lines RVS prints that carry no verdict: banners, the GPU list of `rvs -g`, tables' borders and
# headers.
_GPU_LISTED = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d - GPU\[", re.I)  # `rvs -g`
_KNOWN = re.compile(
    r"^(ROCm Validation Suite.*|Supported GPUs available:|"
    r"[+=|-][-=+| ]*|\|.*\||-{5,}|GPU Id\s+Function.*|\d+\s+(Read|Write|Copy|Mul|Add|Triad|Dot)\s.*)$"
)


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    listed = []
    links: dict[str, dict] = {}  # "action, uni/bidirectional" -> {(GPU, GPU): (GB/s, line)}
    gflops: dict[str, dict] = {}  # gst action -> {GPU: (GFLOPS, line)}
    host_links: dict[str, dict] = {}  # "pebb action, h2d/d2h" -> {GPU: (best GB/s, line)}
    simds: dict[str, dict] = {}  # gpup: GPU -> {simd_count, simd_per_cu: (count, line)}
    babel: dict[str, dict] = {"Copy": {}, "Triad": {}}  # babel: function -> {GPU: (MB/s, line)}
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if _ERROR.match(text):
            reading.understood += 1
            reading.add(finding("rvs.error", "failed", "RVS reported an error", line))
            continue
        if match := _SUMMARY_ROW.match(text):
            reading.understood += 1
            action, module, result = match.groups()
            if module.upper() == "MODULE":
                continue
            status = "ok" if result.upper() == "PASS" else "failed"
            reading.add(
                finding(
                    "rvs.summary",
                    status,
                    f"{module} {result.upper()}"
                    + ("" if status == "ok" else f" (action {action})"),
                    line,
                )
            )
            continue
        if _GPU_LISTED.match(text):
            reading.understood += 1
            listed.append(line)
            continue
        if match := _RESULT.match(text):
            reading.understood += 1
            _judge_result(reading, line, match.group(1))
            _measured(match.group(1), line, links, gflops, host_links)
            if gpup := _GPUP.search(match.group(1)):
                simds.setdefault(gpup.group(1), {})[gpup.group(2)] = (int(gpup.group(3)), line)
            continue
        if row := _BABEL_ROW.match(text):
            babel[row.group(2)][row.group(1)] = (float(row.group(3)), line)
        if not _KNOWN.match(text):
            reading.unread.append(line)
    _judge_peers(
        reading, links, limits, "rvs.peer_link", "GB/s", "pairs", "a slow or retrained link"
    )
    _judge_peers(
        reading, gflops, limits, "rvs.peer_gflops", "GFLOPS", "GPUs", "a throttled or failing GPU"
    )
    _judge_peers(
        reading,
        host_links,
        limits,
        "rvs.peer_pcie",
        "GB/s",
        "GPUs",
        "a slow or retrained host link",
    )
    for item in [*judge_gpup(simds, limits.get("sku")), *judge_babel(babel, limits)]:
        reading.add(item)
    if listed:
        expected = limits.get("gpus")
        short = expected is not None and len(listed) < expected
        reading.add(
            finding(
                "rvs.gpus_visible",
                "failed" if short else "ok",
                f"RVS sees {len(listed)} GPU(s)"
                + (f"; this SKU's node has {expected}" if short else ""),
                listed[-1],
                value=len(listed),
                threshold=expected,
            )
        )
    if not reading.findings:
        if reading.understood:
            reading.add(
                finding(
                    "rvs.listing",
                    "ok",
                    f"{reading.understood} RVS result line(s) with no pass/fail word "
                    "(properties or bandwidths listed)",
                )
            )
        else:
            reading.add(
                finding(
                    "rvs.no_results", "failed", "no RVS [RESULT] lines found (is this RVS output?)"
                )
            )
    return reading


def _judge_result(reading: Reading, line: Line, body: str) -> None:
    action = _ACTION.match(body)
    name = action.group(1) if action else "rvs"
    for pattern, check in _VERDICTS:
        if match := pattern.search(body):
            ok = match.group(1).upper() in ("TRUE", "PASS")
            reading.add(
                finding(
                    check, "ok" if ok else "failed", f"{name}: {'passed' if ok else 'FAILED'}", line
                )
            )
            return
    if match := _VIOLATIONS.search(body):
        kind, count = match.group(1), int(match.group(2))
        reading.add(
            finding(
                "rvs.violations",
                "ok" if count == 0 else "failed",
                f"{name}: {kind} violations {count}",
                line,
                value=count,
                threshold=0,
            )
        )


def _measured(body: str, line: Line, links: dict, gflops: dict, host_links: dict) -> None:
    """A result line's figure, kept per action for the peer rule."""
    action = _ACTION.match(body)
    if bandwidth := _P2P_BANDWIDTH.search(body):
        name = f"{action.group(1) if action else 'pbqt'}, {'bi' if bandwidth.group(3).lower() == 'true' else 'uni'}directional"
        links.setdefault(name, {})[(int(bandwidth.group(1)), int(bandwidth.group(2)))] = (
            float(bandwidth.group(4)),
            line,
        )
    elif final := _GST_FINAL.search(body):
        gflops.setdefault(action.group(1) if action else "gst", {})[int(final.group(1))] = (
            float(final.group(2)),
            line,
        )
    elif pcie := _PCIE_BANDWIDTH.search(body):
        way = "h2d" if pcie.group(2).lower() == "true" else "d2h"
        name = f"{action.group(1) if action else 'pebb'}, {way}"
        gpu, value = int(pcie.group(1)), float(pcie.group(4))
        best = host_links.setdefault(name, {})
        if gpu not in best or value > best[gpu][0]:  # its best over the CPUs measured from
            best[gpu] = (value, line)


def _subject(key) -> str:
    return f"GPU {key[0]} to GPU {key[1]}" if isinstance(key, tuple) else f"GPU {key}"


def _judge_peers(
    reading: Reading,
    groups: dict[str, dict],
    limits: dict,
    check: str,
    unit: str,
    kind: str,
    why: str,
) -> None:
    """Each measured figure against the median of its peers of the same action (`kind`: what the
    peers are), at the SKU's `peer_degraded_pct` and `peer_failed_pct`."""
    degraded, failed = limits.get("peer_degraded_pct"), limits.get("peer_failed_pct")
    if degraded is None or failed is None:
        return
    for name, measured in groups.items():
        if max(value for value, _ in measured.values()) <= 0:
            reading.add(
                finding(
                    check,
                    "failed",
                    f"{name}: every one of the {kind} measured 0 {unit}: nothing ran",
                    max(measured.values(), key=lambda item: item[1].number)[1],
                )
            )
            continue
        slow = below_peers({key: value for key, (value, _) in measured.items()}, degraded, failed)
        for peer in slow:
            reading.add(
                finding(
                    check,
                    peer.status,
                    f"{name}: {_subject(peer.key)} {peer.value:g} {unit}, {peer.below_pct:.0f} % "
                    f"below the median of the other {len(measured) - 1} {kind} "
                    f"({peer.peers_median:g} {unit}): {why}",
                    measured[peer.key][1],
                    value=peer.value,
                )
            )
        if not slow and len(measured) > 1:
            reading.add(
                finding(
                    check,
                    "ok",
                    f"every one of the {len(measured)} {kind} within {degraded:g} % of the others "
                    f"({name})",
                    min(measured.values(), key=lambda item: item[1].number)[1],
                )
            )


def judge_gpup(simds: dict[str, dict], sku: str | None) -> list[Finding]:
    """gpup's node properties per GPU: its compute units (`simd_count` / `simd_per_cu`, 4 on CDNA
    where not listed) held to the SKU's whole GPU or a partition of it and to its peers
    (preflight/inventory.py, the rule rocminfo's agents are held to)."""
    gpus = [
        (gpu, None, count // keys.get("simd_per_cu", (SIMDS_PER_CU, None))[0], line)
        for gpu, keys in simds.items()
        if "simd_count" in keys
        for count, line in [keys["simd_count"]]
        if keys.get("simd_per_cu", (SIMDS_PER_CU,))[0]
    ]
    if not gpus:
        return []
    found = judge_compute_units(gpus, sku, "GPU", "rvs.compute_units")
    return found or [compute_units_ok(gpus, sku, "rvs.compute_units")]


def judge_babel(babel: dict[str, dict], limits: dict) -> list[Finding]:
    """babel's table per GPU: Copy and Triad against the SKU's HBM floor and the median of the
    other GPUs, the rules BabelStream's own tables are held to (babelstream.py), whatever the
    summary says."""
    found = []
    for function, rows in babel.items():
        for value, line in rows.values():
            item = judge_floor(function, value, limits, f"rvs.babel_{function.lower()}", line)
            if item.status != "ok" or NO_FLOOR not in item.message:
                found.append(item)
        found += judge_hbm_peers(
            rows, function, limits, f"rvs.babel_{function.lower()}_peers", lambda gpu: f"GPU {gpu}"
        )
    return found
