"""ROCm Validation Suite (`rvs`): the pass/fail words of each module and the summary table of RVS
1.6+.

RVS prints `[RESULT] [timestamp] [action] module ...` lines; the verdict words differ per module
(`met: TRUE` for gst, `pass: TRUE` for iet, `peqt true`, `mem Test N : PASS`, `... violations N` for
gm) and RVS 1.6 ends with a summary table (`| action | MODULE | PASS |`). `[ERROR]` lines fail the
run. pbqt's `p2p-bandwidth` lines give each GPU pair's bandwidth: a pair far below the median of the
other pairs of the same action is a slow link on any SKU (preflight/relative.py).
"""

from __future__ import annotations

import re

from pytest_rocm.preflight.evidence import Line, Reading, finding
from pytest_rocm.preflight.relative import below_peers

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
            if bandwidth := _P2P_BANDWIDTH.search(match.group(1)):
                action = _ACTION.match(match.group(1))
                name = f"{action.group(1) if action else 'pbqt'}, {'bi' if bandwidth.group(3).lower() == 'true' else 'uni'}directional"
                links.setdefault(name, {})[(int(bandwidth.group(1)), int(bandwidth.group(2)))] = (
                    float(bandwidth.group(4)),
                    line,
                )
            continue
        if not _KNOWN.match(text):
            reading.unread.append(line)
    _judge_links(reading, links, limits)
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


def _judge_links(reading: Reading, links: dict[str, dict], limits: dict) -> None:
    degraded, failed = limits.get("peer_degraded_pct"), limits.get("peer_failed_pct")
    if degraded is None or failed is None:
        return
    for name, pairs in links.items():
        if max(value for value, _ in pairs.values()) <= 0:
            reading.add(
                finding(
                    "rvs.peer_link",
                    "failed",
                    f"{name}: every GPU pair measured 0 GB/s: no transfer ran",
                    max(pairs.values(), key=lambda item: item[1].number)[1],
                )
            )
            continue
        slow = below_peers({pair: value for pair, (value, _) in pairs.items()}, degraded, failed)
        for link in slow:
            reading.add(
                finding(
                    "rvs.peer_link",
                    link.status,
                    f"{name}: GPU {link.key[0]} to GPU {link.key[1]} "
                    f"{link.value:g} GB/s, {link.below_pct:.0f} % below the median of the other "
                    f"{len(pairs) - 1} pairs ({link.peers_median:g} GB/s): a slow or retrained link",
                    pairs[link.key][1],
                    value=link.value,
                )
            )
        if not slow and len(pairs) > 1:
            reading.add(
                finding(
                    "rvs.peer_link",
                    "ok",
                    f"every GPU pair within {degraded:g} % of the others "
                    f"({len(pairs)} pairs, {name})",
                    min(pairs.values(), key=lambda item: item[1].number)[1],
                )
            )
