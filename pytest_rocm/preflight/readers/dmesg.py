"""The kernel log (`dmesg`, `journalctl -k`) of amdgpu: RAS errors, resets, init failures, ring
timeouts, faults.

Each rule names what the line means for the node. Lines of other drivers (`pci`, `spi-nor`, `nvme`, ...,
named as the kernel prefixes a driver's line) are not the preflight's business and are set aside
before any rule reads them (`other_driver`); amdgpu lines no rule knows are boot chatter (understood, no finding), so a
new error message needs a rule here; lines that are neither kernel nor amdgpu lines are kept as
unread. The HIP runtime's `HW Exception ... GPU Hang` lines are read too (they are printed by the
application, not the kernel, but say the same about the GPU); the finding says so.

Reads `dmesg` and `journalctl -k` of amdgpu in ROCm 6.2-7.0 (kernels 5.15-6.8, MI300X); captures:
tests/data/samples/preflight/dmesg.
"""

from __future__ import annotations

import re

from pytest_rocm.preflight.evidence import Line, Reading, finding

_DEVICE = re.compile(r"amdgpu (\w{4}:\w{2}:\w{2}\.\w)")
_COUNTED = re.compile(
    r"(\d+) new (correctable|uncorrectable) hardware errors detected in (\w+) block"
)
# (pattern, check, status, what it means); first match wins
RULES = (
    (
        re.compile(r"uncorrectable hardware error", re.I),
        "dmesg.ras_uncorrectable",
        "failed",
        "RAS: uncorrectable hardware error",
    ),
    (
        re.compile(r"Fatal error during GPU init|early_init of IP block <\w+> failed", re.I),
        "dmesg.init_failed",
        "failed",
        "the GPU failed to initialise (a full power cycle may recover it; else replace)",
    ),
    (
        re.compile(r"ring \S+ timeout", re.I),
        "dmesg.ring_timeout",
        "failed",
        "a GPU ring timed out (GPU hang)",
    ),
    (
        re.compile(
            r"GPU reset begin|MODE[12] reset|GPU reset succeeded|GPU reset\(\d+\) succeeded|VRAM is lost",
            re.I,
        ),
        "dmesg.gpu_reset",
        "failed",
        "the GPU was reset (its memory was lost; jobs on it failed)",
    ),
    (
        re.compile(r"unrecoverable state|Failed to restore process queues|GPU recovery", re.I),
        "dmesg.gpu_hang",
        "failed",
        "the GPU stopped responding",
    ),
    (
        re.compile(r"HW Exception by GPU node-\d+.*reason\s*:\s*GPU Hang", re.I),
        "hip.gpu_hang",
        "failed",
        "the HIP runtime reported a GPU hang (application output, not the kernel log)",
    ),
    (
        re.compile(r"GPU hang detected|Xgmi link is down|Poison is (?:created|consumed)", re.I),
        "dmesg.gpu_fault",
        "failed",
        "the GPU or its links failed (hang, XGMI link down, or poisoned memory)",
    ),
    (
        re.compile(
            r"probe with driver amdgpu failed|\*ERROR\*.*\bfail|PSP .*\bfail|\bSMU\b.*(?:not done|\bfail|timeout)",
            re.I,
        ),
        "dmesg.driver_error",
        "failed",
        "amdgpu reported an error from its driver or firmware (probe, IP block init, PSP, SMU): the GPU is not usable",
    ),
    # ACA detail of a RAS event above
    (re.compile(r"\[Hardware Error\]", re.I), "dmesg.hardware_error_record", "ok", None),
    (
        re.compile(
            r"retry page fault|page fault|VM_L2_PROTECTION_FAULT|Faulty UTCL2|MORE_FAULTS|WALKER_ERROR|"
            r"PERMISSION_FAULTS|MAPPING_ERROR|\bRW: 0x|in page starting at|for process|cookie node_id",
            re.I,
        ),
        "dmesg.page_fault",
        "degraded",
        "a GPU page fault (usually a bug in the process named; the GPU stays usable)",
    ),
    (
        re.compile(
            r"RAS INFO: ras initialized successfully|Initialized amdgpu|XGMI: Add node|ras_mask",
            re.I,
        ),
        "dmesg.init_ok",
        "ok",
        "amdgpu initialised with RAS enabled",
    ),
    (
        re.compile(
            r"bad page retirement enabled, [1-9]\d* bad pages|\*ERROR\*|\bFailed to\b", re.I
        ),
        "dmesg.amdgpu_warning",
        "degraded",
        "amdgpu reported a problem (retired bad pages, a driver error, a failed step): read the line",
    ),
)
# amdgpu lines that carry no health signal (boot chatter)
_CHATTER = re.compile(r"amdgpu|\[drm\]|kfd|\bdrm\b", re.I)
_KERNEL_LINE = re.compile(
    r"^-- .* --$|^\[\s*\d+\.\d+\]|^\w{3}\s+\d+\s+\d\d:\d\d:\d\d|^\d{4}-\d\d-\d\dT"
)
# what comes before the kernel's message: dmesg's `[  10.358030] `, journalctl's `Nov 09 12:00:01 host
# kernel: ` or an ISO time and host
_PREFIX = re.compile(
    r"^(?:\[\s*\d+\.\d+\]\s*|\w{3}\s+\d+\s+\d\d:\d\d:\d\d\s+\S+\s+kernel:\s*|"
    r"\d{4}-\d\d-\d\dT\S+\s+\S+\s+kernel:\s*)+"
)
# a driver's own line, as the kernel's dev_printk and pr_fmt write it: `pci 0000:17:02.0: ...`,
# `spi-nor spi0.1: ...`, `spi-nor: ...`
_DRIVER_LINE = re.compile(r"^(?P<driver>[A-Za-z][\w.-]*)(?: [\w:.-]+)?: ")
# the drivers whose lines are the GPU's (amdgpu, its KFD and DRM)
_GPU_DRIVERS = frozenset({"amdgpu", "kfd", "drm"})


def other_driver(text: str) -> str | None:
    """The driver that wrote a kernel line, where it is not the GPU's: its line is not the node's
    GPU problem (`pci 0000:1b:00.0: ROM [mem size 0x00020000 pref]: failed to assign`, the option
    ROM's window, found on healthy MI300X boots; `spi-nor spi0.1: ... Failed to register OTP NVMEM
    device`), and is set aside before any rule reads it. None for the GPU's lines and for lines no
    driver names (the RAS core's, HIP's)."""
    match = _DRIVER_LINE.match(_PREFIX.sub("", text, count=1))
    if match is None or match["driver"].lower() in _GPU_DRIVERS:
        return None
    return match["driver"]


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    uncorrectable_max = limits.get("ecc_uncorrectable_max", 0)
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if other_driver(text) is not None:
            reading.understood += 1  # another driver's line: not the GPU's business
            continue
        if match := _COUNTED.search(text):
            reading.understood += 1
            count, kind, block = int(match.group(1)), match.group(2), match.group(3)
            device = _DEVICE.search(text)
            where = f" on {device.group(1)}" if device else ""
            if kind == "uncorrectable":
                status = "failed" if count > uncorrectable_max else "ok"
                reading.add(
                    finding(
                        "dmesg.ecc_uncorrectable",
                        status,
                        f"{count} uncorrectable errors in the {block} block{where}",
                        line,
                        value=count,
                        threshold=uncorrectable_max,
                    )
                )
            else:
                reading.add(
                    finding(
                        "dmesg.ecc_correctable",
                        "degraded",
                        f"{count} correctable errors in the {block} "
                        f"block{where} (watch the count: `rocm-gate drain` acts when it grows)",
                        line,
                        value=count,
                    )
                )
            continue
        rule = next((r for r in RULES if r[0].search(text)), None)
        if rule is not None:
            reading.understood += 1
            _, check, status, meaning = rule
            if meaning is not None:
                reading.add(finding(check, status, meaning, line))
        elif _CHATTER.search(text) or _KERNEL_LINE.match(text):
            reading.understood += 1  # boot messages and other drivers' lines: no health signal
        else:
            reading.unread.append(line)
    if not reading.findings:
        reading.add(finding("dmesg.clean", "ok", "no amdgpu error in the kernel log"))
    return reading
