"""The kernel log (`dmesg`, `journalctl -k`) of amdgpu: RAS errors, resets, init failures, ring
timeouts, faults.

Every line is first cut of its timestamp, whatever form the log comes in (`split_timestamp`:
`dmesg`'s `[  10.358030]`, `dmesg -T`'s `[Sun Oct  6 00:50:49 2024]`, `--time-format iso`,
`-H`/reltime and delta, `-x`'s facility and level, journalctl's short, precise, ISO, full and
monotonic forms with `HOST kernel:`), so every rule reads the kernel's own message. Lines of other
drivers (`pci`, `spi-nor`, `nvme`, ..., named as the kernel prefixes a driver's line) are not the
preflight's business and are set aside before any rule reads them (`other_driver`). The GPU's fault
texts are the catalog the run verdicts read too (results/gpu_faults.toml: a fault that refuses a node
is infrastructure in a test's failure); amdgpu lines no rule knows are boot chatter (understood, no
finding), so a new error message needs an entry there; lines that are neither kernel nor amdgpu lines
are kept as unread. The HIP runtime's `HW Exception ... GPU Hang` and `Memory access fault by GPU`
lines are read too (printed by the application, not the kernel, but they say the same about the GPU);
the finding says so. A ring timeout's `Process information:` line is the same event: it names the
process in the timeout's finding, never a second problem.

Reads `dmesg` and `journalctl -k` of amdgpu in ROCm 6.2-7.0 (kernels 5.15-6.8, MI300X); captures:
tests/data/samples/preflight/dmesg.
"""

from __future__ import annotations

import re

from pytest_rocm.results.gpu_faults import kernel_rules
from rocm_gate.preflight.evidence import Finding, Line, Reading, finding, last_line

_DEVICE = re.compile(r"amdgpu (\w{4}:\w{2}:\w{2}\.\w)")
_COUNTED = re.compile(
    r"(\d+) new (correctable|uncorrectable) hardware errors detected in (\w+) block"
)
# (pattern, check, status, what it means); first match wins: the catalog's failing faults, the ACA
# detail of a RAS event, the catalog's degrading faults, then this reader's own chatter and warnings
RULES = (
    *kernel_rules("failed"),
    # ACA detail of a RAS event above
    (re.compile(r"\[Hardware Error\]", re.I), "dmesg.hardware_error_record", "ok", None),
    *kernel_rules("degraded"),
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
# journalctl's own lines: `-- Boot 3f2a... --`, `-- No entries --`, `-- Logs begin at ... --`
_JOURNAL_MARK = re.compile(r"^-- .* --$")
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# What comes before the kernel's message, in every form the kernel log is read in (one of them,
# or several in a row: syslog's ISO time, host and `kernel:` before dmesg's own `[  10.358]`)
_STAMP = re.compile(
    r"^(?:"
    r"\[\s*\d+\.\d+(?:\s*<\s*\d+\.\d+>)?\]"  # dmesg; dmesg -d (with the delta)
    rf"|\[{_DAY} {_MONTH} [ \d]\d \d\d:\d\d:\d\d \d{{4}}\]"  # dmesg -T / --ctime
    rf"|\[{_MONTH} [ \d]?\d \d\d:\d\d\]|\[\s*\+\d+\.\d+\]"  # dmesg -H / --time-format reltime
    r"|\[<\s*\d+\.\d+>\]"  # dmesg --time-format delta
    r"|(?:kern|user|daemon|syslog)\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:"  # -x
    rf"|{_ISO}(?:\s+\S+\s+kernel:)?"  # dmesg --time-format iso; journalctl -o short-iso(-precise)
    rf"|(?:{_DAY} )?\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z]{{2,5}})?\s+\S+\s+kernel:"  # short-full
    rf"|{_MONTH}\s+\d+\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\S+\s+kernel:"  # journalctl short(-precise)
    r")\s*"
)
# the host and `kernel:` after a stamp cut before them (journalctl -o short-monotonic)
_HOST = re.compile(r"^\S+\s+kernel:\s*")
# a driver's own line, as the kernel's dev_printk and pr_fmt write it: `pci 0000:17:02.0: ...`,
# `spi-nor spi0.1: ...`, `spi-nor: ...`
_DRIVER_LINE = re.compile(r"^(?P<driver>[A-Za-z][\w.-]*)(?: [\w:.-]+)?: ")
# the drivers whose lines are the GPU's (amdgpu, its KFD and DRM)
_GPU_DRIVERS = frozenset({"amdgpu", "kfd", "drm"})
# amdgpu_job_timedout's second line: the process whose job timed out (the same event)
_RING_PROCESS = re.compile(
    r"Process information: process (?P<name>\S*)\s+pid (?P<pid>\d+)(?: thread \S*\s+pid \d+)?",
    re.I,
)


def split_timestamp(text: str) -> tuple[str, str]:
    """(the stamp, the kernel's message): the time, host and `kernel:` the log put before the
    message, in any of the forms `dmesg` and `journalctl` print (module docstring); ("", text)
    for a line with none. A stamp only before the message is cut: the message itself is never
    changed."""
    stamp, rest = "", text.lstrip()
    while rest and (match := _STAMP.match(rest) or (_HOST.match(rest) if stamp else None)):
        stamp, rest = stamp + match.group(0), rest[match.end() :]
    return stamp.strip(), rest


def other_driver(text: str) -> str | None:
    """The driver that wrote a kernel line, where it is not the GPU's: its line is not the node's
    GPU problem (`pci 0000:1b:00.0: ROM [mem size 0x00020000 pref]: failed to assign`, the option
    ROM's window, found on healthy MI300X boots; `spi-nor spi0.1: ... Failed to register OTP NVMEM
    device`), and is set aside before any rule reads it. None for the GPU's lines and for lines no
    driver names (the RAS core's, HIP's). Reads the line with its timestamp or without."""
    match = _DRIVER_LINE.match(split_timestamp(text)[1])
    if match is None or match["driver"].lower() in _GPU_DRIVERS:
        return None
    return match["driver"]


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    ring: Finding | None = None  # the last ring timeout: its process line follows it
    for line in lines:
        stamp, text = split_timestamp(line.text.strip())
        if not text:
            reading.understood += bool(stamp)
            continue
        if other_driver(text) is not None:
            reading.understood += 1  # another driver's line: not the GPU's business
            continue
        if process := _RING_PROCESS.search(text):
            # the second line of a ring timeout (amdgpu_job_timedout): the same event
            reading.understood += 1
            if ring is not None:
                _name_process(ring, process)
            continue
        if match := _COUNTED.search(text):
            reading.understood += 1
            _counted(reading, line, text, match, limits.get("ecc_uncorrectable_max", 0))
            continue
        ring = _rule(reading, line, text, bool(stamp))
    if not reading.findings:
        # quoting the last line: read to the end, nothing found
        reading.add(
            finding("dmesg.clean", "ok", "no amdgpu error in the kernel log", last_line(lines))
        )
    return reading


def _name_process(ring: Finding, process: re.Match) -> None:
    """A ring timeout's `Process information:` line: the process it names, in the timeout's
    finding."""
    named = f" (process {process['name'] or '?'} pid {process['pid']})"
    if "(process " not in ring.message:
        ring.message += named


def _rule(reading: Reading, line: Line, text: str, kernel: bool) -> Finding | None:
    """The first rule that matches the message, its finding added; the ring timeout's finding
    returned (its process line follows). A kernel line no rule knows, and amdgpu chatter, is
    understood; anything else is unread."""
    rule = next((r for r in RULES if r[0].search(text)), None)
    if rule is not None:
        reading.understood += 1
        _, check, status, meaning = rule
        if meaning is None:
            return None
        found = finding(check, status, meaning, line)
        reading.add(found)
        # the finding kept (an earlier one of the same message may have taken it)
        kept = next(f for f in reading.findings if (f.check, f.message) == (check, meaning))
        return kept if check == "dmesg.ring_timeout" else None
    if _CHATTER.search(text) or kernel or _JOURNAL_MARK.match(text):
        reading.understood += 1  # boot messages and other drivers' lines: no health signal
    else:
        reading.unread.append(line)
    return None


def _counted(reading: Reading, line: Line, text: str, match: re.Match, most: float) -> None:
    """`N new correctable|uncorrectable hardware errors detected in X block`: the count, held to
    the SKU's uncorrectable limit."""
    count, kind, block = int(match.group(1)), match.group(2), match.group(3)
    device = _DEVICE.search(text)
    where = f" on {device.group(1)}" if device else ""
    if kind == "uncorrectable":
        reading.add(
            finding(
                "dmesg.ecc_uncorrectable",
                "failed" if count > most else "ok",
                f"{count} uncorrectable errors in the {block} block{where}",
                line,
                value=count,
                threshold=most,
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
