"""What a reader found in a tool's output: findings with the line they came from, and what it could
not read."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

# How bad a finding is; a layer's verdict is its worst finding.
SEVERITY = {"ok": 0, "degraded": 1, "failed": 2}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LINE_TEXT_LIMIT = 200  # evidence quotes the line, cut to this many characters
# Lines a tool prints when it failed, whatever the tool: its own error mark, the HIP and HSA
# runtimes' errors (not hipErrorNotReady: rccl-tests polls streams, and AMD_LOG_LEVEL=3 logs every
# poll), an RCCL warning that something failed, a FAIL word, a non-zero exit code it (or mpirun)
# prints, a crash. Matched on every line of every tool but the kernel log (other drivers' lines say
# "failed" routinely; dmesg has its own rules).
TOOL_ERROR = re.compile(
    r"\[\s*ERROR\s*\]|\bHIP Error\b|\bhipError(?!Success\b|NotReady\b|PeerAccessAlreadyEnabled\b)[A-Z]\w*"
    r"|\bHSA_STATUS_ERROR\w*|\b[RN]CCL WARN\b.*(?i:\bfail)|\bFAIL(?:ED|URE)?\b"
    r"|(?i:\b(?:exit|exited|exiting)\b[^\n]{0,40}?\b(?:code|status)\b\s*(?:\w+\s*)?[:=\[]?\s*-?[1-9]\d*\b)"
    r"|(?i:\bexited on signal\b)|Traceback \(most recent call last\)|\bSegmentation fault\b|\bcore dumped\b"
    r"|\bterminate called after throwing\b"
)
# The line `live.run` adds to what a tool printed before its timeout killed it (`hang_line`): the tool
# hung, so what it printed is a part, and proves nothing of the rest (a hung GPU hangs its tools).
HANG = re.compile(r"^TIMEOUT: did not finish in .{1,40} s \(hang\)$")


def hang_line(timeout_s: float) -> str:
    return f"TIMEOUT: did not finish in {timeout_s:g} s (hang)"


# Characters of each line searched for TOOL_ERROR: tools print their errors first, and a hostile 100
# KB line must not cost minutes.
ERROR_SCAN = 1000
# A source with more than this share of characters that are not text (NUL and other controls, bytes
# that are not UTF-8) is not a tool's output: tools print text, and a damaged or wrong file must not
# read as healthy.
NOT_TEXT_SHARE = 0.10
NO_FLOOR = "no floor for "  # how a finding starts to say the SKU has no absolute figure (the layer's reason shows it)
_NOT_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, as an editor shows it
    text: str  # without ANSI colours and trailing space


def lines_of(text: str) -> list[Line]:
    """The lines of a tool's output, cleaned of what terminals add (colours, CR of progress
    bars)."""
    cleaned = _ANSI.sub("", text.replace("\r\n", "\n"))
    return [
        Line(i, raw.split("\r")[-1].rstrip()) for i, raw in enumerate(cleaned.split("\n"), start=1)
    ]


@dataclass(frozen=True)
class Pointer:
    """Where a value of a JSON document is: its JSON pointer (RFC 6901, `/gpu_data/0/ecc/...`) and
    the value as read, what a finding quotes in place of a line."""

    pointer: str
    text: str


def json_pointer(keys) -> str:
    """('gpu_data', 0, 'ecc') -> '/gpu_data/0/ecc', `~` and `/` escaped as RFC 6901 says."""
    return "".join("/" + str(key).replace("~", "~0").replace("/", "~1") for key in keys)


@dataclass
class Finding:
    check: str  # short stable name, e.g. "rccl.bus_bandwidth"
    status: str  # ok | degraded | failed
    message: str  # one sentence a person acts on
    line: int | None = None  # where in the file the evidence is (text output)
    text: str | None = None
    pointer: str | None = None  # where in the document the evidence is (JSON output)
    value: float | str | None = None
    threshold: float | str | None = None
    count: int = 1  # identical findings folded into one (8 GPUs reset: one finding, count 8)
    tool: str | None = None
    file: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def finding(
    check: str, status: str, message: str, at: Line | Pointer | None = None, **extra
) -> Finding:
    """A finding quoting where it came from: a line of text output, or a JSON pointer and the
    value there."""
    return Finding(
        check,
        status,
        message,
        line=at.number if isinstance(at, Line) else None,
        text=at.text.strip()[:LINE_TEXT_LIMIT] if at else None,
        pointer=at.pointer if isinstance(at, Pointer) else None,
        **extra,
    )


def where(item: Finding) -> str:
    """`file:line`, `file#/json/pointer` or the file alone: how a reason names a finding's
    place."""
    if item.line:
        return f"{item.file}:{item.line}"
    if item.pointer:
        return f"{item.file}#{item.pointer}"
    return str(item.file)


@dataclass
class Reading:
    """One tool output read: the findings and the lines not understood."""

    findings: list[Finding] = field(default_factory=list)
    unread: list[Line] = field(default_factory=list)
    understood: int = 0  # lines that carried something the reader used
    # the tool's output, but of a command the reader judges nothing of: why (naming the command and
    # what to give instead). The source is then not judged and its layer not proven, never failed:
    # adding a check must not refuse a healthy fleet
    not_judged: str | None = None

    def add(self, item: Finding) -> None:
        """Fold a finding into an earlier one of the same check, status and message (counts, first
        line kept)."""
        for earlier in self.findings:
            if (earlier.check, earlier.status, earlier.message) == (
                item.check,
                item.status,
                item.message,
            ):
                earlier.count += 1
                return
        self.findings.append(item)


def worst(statuses) -> str:
    return max(statuses, key=SEVERITY.__getitem__, default="ok")


def number(text: str) -> float | None:
    """'315.91' -> 315.91; 'N/A', '-', '', 'nan', 'inf' -> None (tools print these for what they could not measure)."""
    try:
        value = float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None
    return value if math.isfinite(value) else None  # 'nan', '-nan', 'inf' are not measurements


def last_line(lines: list[Line]) -> Line | None:
    """Where a truncated output stops: its last line that is not blank."""
    return next((line for line in reversed(lines) if line.text.strip()), None)


def not_text_share(text: str) -> float:
    """The share of characters that no tool prints: controls other than tab, newline, CR and ESC,
    and U+FFFD (what a byte that is not UTF-8 becomes when the file is read with
    errors="replace")."""
    return len(_NOT_TEXT.findall(text)) / len(text) if text else 0.0


def no_floor(limits: dict, ran: str) -> str:
    """How a finding says that the SKU has no absolute figure and which relative checks decided
    instead."""
    return f"{NO_FLOOR}{limits.get('sku') or 'an unknown SKU'}: relative checks only ({ran})"
