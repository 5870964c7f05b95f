"""The five acceptance layers as a pipeline: each layer's verdict, its evidence, and whether the
node may take a job.

Layer order is the order of trust: a node whose hardware failed is not asked about its collectives.
After a failed layer the later ones are `skipped` (reason: which layer failed). A layer with nothing
to look at is `skipped` with the reason (tool not installed, no GPU, no history given), never `ok`.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_rocm.hw.skus import AMD_DEVICE_IDS, sku_from_amd_name
from pytest_rocm.schemas.artifacts import schema
from rocm_gate.preflight import LAYERS
from rocm_gate.preflight.evidence import (
    ERROR_SCAN,
    HANG,
    NO_FLOOR,
    NOT_TEXT_SHARE,
    TOOL_ERROR,
    Finding,
    Reading,
    finding,
    lines_of,
    not_text_share,
    where,
    worst,
)
from rocm_gate.preflight.readers import READERS, is_filler

PREFLIGHT_SCHEMA = schema("preflight")
UNREAD_SHOWN = 20  # unread lines kept per source in the artifact
# A source of at least this many lines of which the reader understood under this share is another
# file (a log of something else, base64): every shared capture has all but 2 of its lines
# understood.
MOSTLY_UNREAD_LINES, UNDERSTOOD_SHARE = 20, 0.05
# `decide`: the CLI maps them to exits
ACCEPTED, REFUSED, NOT_PROVEN = ("accepted", "refused", "not_proven")
DEFAULT_REQUIRED = ("hardware", "communication", "framework")
_SKU_NAME = re.compile(r"\b(?:Instinct\s+|Product:\s*)(MI\d{3}[AX]?)\b", re.I)
# any PCI device id: the SKU table (hw/skus.toml) says which are GPUs of which SKU
_DEVICE_ID = re.compile(r"\b0x([0-9a-f]{4})\b", re.I)


@dataclass
class ToolOutput:
    tool: str
    label: str  # the file it was read from, or the command that printed it
    text: str | None
    problem: str | None = None  # why there is no text


@dataclass
class Layer:
    name: str
    verdict: str = "skipped"
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "reason": self.reason,
            "findings": [f.to_dict() for f in self.findings],
            "sources": self.sources,
        }


def guess_sku(outputs: list[ToolOutput]) -> tuple[str | None, list[str]]:
    """The SKU the outputs name (`AMD Instinct MI300X`, `Product: MI350X`, device id 0x75a0) and
    the files that name it; (None, []) if none or several."""
    found: dict[str, list[str]] = {}
    for output in outputs:
        names = {
            sku_from_amd_name(f"MI{name[2:]}".upper())
            for name in _SKU_NAME.findall(output.text or "")
        }
        names |= {
            AMD_DEVICE_IDS[f"0x{device.lower()}"][0]
            for device in _DEVICE_ID.findall(output.text or "")
            if f"0x{device.lower()}" in AMD_DEVICE_IDS
        }
        for sku in names:
            if sku is not None:
                found.setdefault(sku, []).append(output.label)
    if len(found) != 1:
        return None, []
    return next(iter(found.items()))


def read_outputs(
    layer: Layer,
    outputs: list[ToolOutput],
    limits: dict,
    nothing: str = "no tool output given",
    required: bool = False,
) -> None:
    """Fill a tool layer from its tools' outputs; an output that could not be produced says why.

    An output that is not the tool's (mostly not text, or not one line its reader understands)
    proves
    nothing: it fails a required layer and leaves an optional one not proven, naming the file. A line the
    tool marks as an error fails the layer wherever the reader did not already quote it."""
    for output in outputs:
        reader = READERS[output.tool][0]
        if output.text is None or not output.text.strip():
            problem = (
                output.problem or "printed nothing (no device of this kind, or the tool needs root)"
            )
            layer.sources.append({"tool": output.tool, "file": output.label, "problem": problem})
            continue
        if (share := not_text_share(output.text)) > NOT_TEXT_SHARE:
            _unreadable(
                layer,
                output,
                f"{share:.0%} of it is not text: a binary or damaged file, not "
                f"{output.tool} output",
                required,
            )
            continue
        lines = lines_of(output.text)
        reading = reader(lines, limits)
        if output.tool != "dmesg":
            _tool_errors(reading, lines)
        _hangs(reading, lines)
        unread = [line for line in reading.unread if not is_filler(line.text)]
        source = {
            "tool": output.tool,
            "file": output.label,
            "lines": len(lines),
            "understood": reading.understood,
            "unread": len(unread),
            "unread_lines": [
                {"line": u.number, "text": u.text[:200]} for u in unread[:UNREAD_SHOWN]
            ],
        }
        shown = sum(1 for line in lines if line.text.strip())
        if not any(f.status == "failed" and f.line for f in reading.findings) and (
            reading.understood == 0
            or shown >= MOSTLY_UNREAD_LINES
            and reading.understood < UNDERSTOOD_SHARE * shown
        ):
            what = "not one" if reading.understood == 0 else f"only {reading.understood}"
            verb = "is" if reading.understood <= 1 else "are"
            _unreadable(
                layer,
                output,
                f"{what} of its {shown} line(s) {verb} {output.tool} output",
                required,
                source,
            )
            continue
        if reading.not_judged and not reading.findings:
            layer.sources.append({**source, "problem": f"not judged: {reading.not_judged}"})
            continue
        for item in reading.findings:
            item.tool, item.file = output.tool, output.label
            layer.findings.append(item)
        layer.sources.append(source)
    problems = [f"{s['file']}: {s['problem']}" for s in layer.sources if s.get("problem")]
    if layer.findings:
        layer.verdict = worst(f.status for f in layer.findings)
        deciding = [f for f in layer.findings if f.status == layer.verdict]
        floorless = [f for f in layer.findings if NO_FLOOR in f.message and f not in deciding[:3]]
        layer.reason = "; ".join(f"{f.message} ({where(f)})" for f in deciding[:3] + floorless[:1])
        layer.reason += f"; and {len(deciding) - 3} more" if len(deciding) > 3 else ""
    if problems and layer.verdict != "failed":
        # A tool that did not answer leaves the layer unproven, whatever the others said.
        layer.verdict = "skipped"
        layer.reason = (
            "not proven: "
            + "; ".join(problems)
            + (f" (what was read: {layer.reason})" if layer.reason else "")
        )
    elif not layer.findings:
        layer.reason = nothing


def _unreadable(
    layer: Layer, output: ToolOutput, problem: str, required: bool, source: dict | None = None
) -> None:
    """A source that is not its tool's output: failed where the layer is required, else the layer is
    not proven."""
    layer.sources.append(
        {
            **(source or {"tool": output.tool, "file": output.label}),
            "problem": problem,
            "unreadable": True,
        }
    )
    if required:
        layer.findings.append(
            Finding(
                f"{output.tool}.unreadable",
                "failed",
                f"{problem}: nothing in it proves the node (give the tool's own output)",
                tool=output.tool,
                file=output.label,
            )
        )


def _tool_errors(reading: Reading, lines: list) -> None:
    """Every line the tool marks as an error (evidence.TOOL_ERROR) that no failed finding quotes
    yet: one finding quoting the first such line, counting the others."""
    quoted = {f.line for f in reading.findings if f.status == "failed"}
    errors = {
        line.number
        for line in lines
        if line.number not in quoted and TOOL_ERROR.search(line.text[:ERROR_SCAN])
    }
    for line in lines:
        if line.number in errors:
            reading.add(finding("tool.error", "failed", "the tool printed an error", line))
    reading.unread = [line for line in reading.unread if line.number not in errors]


def _hangs(reading: Reading, lines: list) -> None:
    """A tool its timeout killed (`live.run` marks where): failed, whatever the part it printed
    before says. The rest of its output is missing, and a hung GPU or driver is what hangs them."""
    quoted = {f.line for f in reading.findings if f.status == "failed"}
    hang = next(
        (line for line in lines if HANG.match(line.text.strip()) and line.number not in quoted),
        None,
    )
    if hang is not None:
        # first: the layer's reason leads with it
        reading.findings.insert(
            0,
            finding(
                "tool.hang",
                "failed",
                "the tool hung and was stopped: what it printed before is incomplete and proves "
                "nothing (a hung GPU or driver hangs its tools; run it by hand on the node to see "
                "where it stops)",
                hang,
            ),
        )
    reading.unread = [line for line in reading.unread if not HANG.match(line.text.strip())]


def framework_layer(
    layer: Layer, platform, problems: list[str], stack: dict | None, expected_stack: dict | None
) -> None:
    """`doctor`'s problems with this platform (GPU count, SKU) and the runner image's pinned stack
    against the job's."""
    if platform is None:
        layer.reason = "no platform to check: run on the node, or give --platform"
        return
    layer.findings = [finding("doctor", "failed", problem) for problem in problems] or [
        finding("doctor", "ok", platform.describe())
    ]
    if expected_stack is not None:
        if stack is None:
            layer.findings.append(
                finding(
                    "stack",
                    "failed",
                    "the job pins a stack and this runner has no image manifest "
                    "(give --stack FILE)",
                )
            )
        else:
            layer.findings.extend(compare_stack(stack, expected_stack))
    layer.verdict = worst(f.status for f in layer.findings)
    layer.reason = "; ".join(f.message for f in layer.findings if f.status == layer.verdict)


def compare_stack(stack: dict, expected: dict) -> list[Finding]:
    """Image digest and package versions the job expects against the runner image's manifest."""
    found = []
    want_image, have_image = expected.get("image"), stack.get("image")
    if want_image and want_image != have_image:
        found.append(
            finding(
                "stack.image",
                "failed",
                f"image {have_image or 'unknown'} is not the pinned {want_image}",
            )
        )
    have = stack.get("packages", {})
    for name, version in sorted(expected.get("packages", {}).items()):
        if have.get(name) != version:
            found.append(
                finding(
                    "stack.package",
                    "failed",
                    f"{name} {have.get(name, 'not installed')} is not the pinned {version}",
                )
            )
    if not found:
        found.append(
            finding(
                "stack",
                "ok",
                f"pinned stack matches ({len(expected.get('packages', {}))} packages"
                + (", image digest" if want_image else "")
                + ")",
            )
        )
    return found


def workload_layer(layer: Layer, platform, command: str | None, timeout_s: float) -> None:
    """The suite's short serving smoke test, once on each GPU alone (HIP/CUDA_VISIBLE_DEVICES=i)."""
    if not command:
        layer.reason = "no --smoke-command given (the suite's short serving test on each GPU)"
        return
    if platform is None or platform.gpu_count == 0:
        layer.reason = "no GPU visible to run the smoke test on"
        return
    failures = []
    for gpu in platform.gpus:
        env = {
            **os.environ,
            "HIP_VISIBLE_DEVICES": str(gpu.index),
            "CUDA_VISIBLE_DEVICES": str(gpu.index),
            "ROCR_VISIBLE_DEVICES": str(gpu.index),
        }
        returncode, stdout, stderr = _run_smoke(command, env, timeout_s)
        if returncode is None:
            failures.append(f"GPU {gpu.index}: the smoke test did not finish in {timeout_s:g} s")
        elif returncode != 0:
            last = ((stderr or stdout).strip().splitlines() or ["no output"])[-1][:200]
            failures.append(f"GPU {gpu.index}: the smoke test exited with {returncode}: {last}")
    layer.findings = [finding("smoke", "failed", message) for message in failures] or [
        finding("smoke", "ok", f"the smoke test passed on each of {platform.gpu_count} GPU(s)")
    ]
    layer.verdict = worst(f.status for f in layer.findings)
    layer.reason = "; ".join(f.message for f in layer.findings)


def _run_smoke(command: str, env: dict, timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status or None on timeout, stdout, stderr) of the smoke command, run as its own process
    group: on a timeout or an interrupt the whole group is killed, so a server it started does not keep holding the GPU."""
    process = subprocess.Popen(
        command,
        shell=True,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        return None, stdout, stderr
    except BaseException:
        _kill_group(process)
        process.wait()
        raise


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def node_name(given: str | None = None) -> str:
    from pytest_rocm.results.manifest import RUNNER_VARIABLES

    return given or next(
        (os.environ[v] for v in ("NODE_NAME", *RUNNER_VARIABLES) if os.environ.get(v)),
        socket.gethostname(),
    )


def decide(layers: list[Layer], required: tuple[str, ...]) -> tuple[str, str]:
    """(ACCEPTED, REFUSED or NOT_PROVEN, one line): refused on a failed layer, not proven when a
    required layer was skipped or any layer was given a file that is not its tool's output."""
    failed = [layer for layer in layers if layer.verdict == "failed"]
    if failed:
        return REFUSED, f"refused: the {failed[0].name} layer failed: {failed[0].reason}"
    # A file given that is not its tool's output: the run did not do what was asked, required layer
    # or not.
    unproven = [
        layer
        for layer in layers
        if layer.verdict == "skipped"
        and (layer.name in required or any(source.get("unreadable") for source in layer.sources))
    ]
    if unproven:
        return NOT_PROVEN, "not proven: " + "; ".join(
            f"{layer.name} skipped ({layer.reason})" for layer in unproven
        )
    degraded = [layer.name for layer in layers if layer.verdict == "degraded"]
    return ACCEPTED, "accepted" + (f" (degraded: {', '.join(degraded)})" if degraded else "")


def run_pipeline(fillers: dict[str, Callable[[Layer], None]]) -> list[Layer]:
    """Each layer in order, filled by its function; once one failed, the later ones are not
    asked."""
    layers, failed = [], None
    for name in LAYERS:
        layer = Layer(name)
        if failed is not None:
            layer.reason = f"not run: the {failed} layer failed"
        else:
            fillers[name](layer)
            if layer.verdict == "failed":
                failed = name
        layers.append(layer)
    return layers
