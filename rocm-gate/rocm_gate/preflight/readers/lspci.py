"""`lspci -vv` of the GPUs: each PCIe link's speed and width (`LnkSta`) and device errors
(`DevSta`).

lspci marks a link that trained below its capability `(downgraded)`; the SKU's expected width and
speed are checked as well, since some platforms print no marks.

Reads pciutils' `lspci -vv -d 1002:` (Ubuntu 22.04-24.04 builds, MI350X at 32 GT/s x16); captures:
tests/data/samples/preflight/lspci.
"""

from __future__ import annotations

import re

from rocm_gate.preflight.evidence import Line, Reading, finding

_LINK = re.compile(
    r"LnkSta:\s*Speed\s+([\d.]+)GT/s(?:\s*\((\w+)\))?,\s*Width\s+x(\d+)(?:\s*\((\w+)\))?"
)
_DEVICE_STATUS = re.compile(r"DevSta:\s*(.*)")
_HEADER = re.compile(r"^[0-9a-f]{2,4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d\s")  # a device's first line
_KNOWN = re.compile(
    r"^(LnkSta2:|LnkCap|LnkCtl|DevCap|DevCtl|Subsystem|Control|Status|Capabilities|Kernel|Region|"
    r"Expansion|Flags|Latency|Interrupt|Physical Slot|NUMA|IOMMU|Memory|I/O|Bus:|Prefetchable|"
    r"BridgeCtl|Secondary|Product|Vendor|\[|Capabilities: <access denied>)"
)


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    width, speed = limits.get("pcie_width"), limits.get("pcie_speed_gts")
    links = 0
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if match := _LINK.search(text):
            reading.understood += 1
            links += 1
            got_speed, speed_mark, got_width, width_mark = (
                float(match.group(1)),
                match.group(2),
                int(match.group(3)),
                match.group(4),
            )
            problems = []
            if "downgraded" in (speed_mark, width_mark):
                problems.append("lspci marks the link downgraded")
            if width is not None and got_width < width:
                problems.append(f"width x{got_width} below x{width}")
            if speed is not None and got_speed < speed:
                problems.append(f"speed {got_speed:g} GT/s below {speed:g}")
            if problems:
                reading.add(
                    finding(
                        "pcie.link",
                        "failed",
                        f"PCIe link {'; '.join(problems)} (host-device copies "
                        "slow down and every timing is wrong: reseat or replace)",
                        line,
                    )
                )
            else:
                reading.add(
                    finding("pcie.link", "ok", f"PCIe link {got_speed:g} GT/s x{got_width}", line)
                )
        elif match := _DEVICE_STATUS.search(text):
            reading.understood += 1
            flags = match.group(1)
            if "FatalErr+" in flags or "NonFatalErr+" in flags:
                reading.add(
                    finding(
                        "pcie.device_errors",
                        "failed",
                        "the device reports PCIe errors (FatalErr+ or NonFatalErr+)",
                        line,
                    )
                )
        elif _HEADER.match(text) or _KNOWN.match(text):
            reading.understood += 1
        else:
            reading.unread.append(line)
    if not links:
        denied = next((line for line in lines if "access denied" in line.text), None)
        if denied is not None:  # lspci hides capabilities from users other than root
            reading.add(
                finding(
                    "pcie.no_links",
                    "degraded",
                    "PCIe links not checked: lspci needs root to show them",
                    denied,
                )
            )
        else:
            reading.add(
                finding(
                    "pcie.no_links", "failed", "no LnkSta lines: run `lspci -vv -d 1002:` as root"
                )
            )
    return reading
