"""One node's acceptance, from what was gathered to the evidence: each layer's step, the pipeline
run over them, the decision and the `pytest-rocm/preflight/1` document (`rocm-gate preflight`
gathers the inputs, writes the document and exits by its decision). `render` prints the document
on one screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from pytest_rocm.hw.model import Platform
from pytest_rocm.hw.skus import LOGICAL_GPUS_PER_PARTITION_MODE, partition_from_compute_units
from rocm_gate.preflight import drain, layers
from rocm_gate.preflight.evidence import finding
from rocm_gate.preflight.layers import Layer, ToolOutput
from rocm_gate.preflight.readers import READERS, TOOLS


@dataclass
class Inputs:
    """What one preflight judges: the tools' outputs, the SKU's limits and the rest the layers read.
    `from_files`: the outputs were read from --source files (else the tools ran here)."""

    outputs: list[ToolOutput]
    limits: dict
    sku: str | None
    node: str
    sku_from: str = "given by --sku"  # where the SKU came from (`choose_sku`)
    platform: Platform | None = None
    history: drain.History | None = None
    stack: dict | None = None
    expected_stack: dict | None = None
    expect_gpus: int | None = None
    smoke_command: str | None = None
    smoke_timeout: float = 600
    require: tuple[str, ...] = layers.DEFAULT_REQUIRED
    from_files: bool = False
    thresholds: str = ""
    started: str = field(default_factory=lambda: _now())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def layer_of(tool: str) -> str:
    return READERS[tool][1]


def logical_gpus(physical: int | None, platform) -> int | None:
    """The thresholds' GPU count (physical GPUs) as the node lists them: every GPU in one compute
    partition mode shows as that many (8 x MI300X in CPX: 64)."""
    if physical is None or platform is None or not platform.gpus:
        return physical
    # the mode a tool named, else the one the agent's CU count shows (rocminfo, and a `doctor
    # --json` platform made from it, name none)
    modes = {
        (g.partition or partition_from_compute_units(g.sku, g.compute_units) or "SPX")
        .split("/")[0]
        .strip()
        .upper()
        for g in platform.gpus
    }
    if len(modes) == 1:
        return physical * LOGICAL_GPUS_PER_PARTITION_MODE.get(modes.pop(), 1)
    return physical


def platform_sku(platform) -> str | None:
    skus = {g.sku for g in platform.gpus} if platform else set()
    return skus.pop() if len(skus) == 1 else None


def choose_sku(
    given: str | None, runner_class: str | None, outputs: list[ToolOutput], platform
) -> tuple[str | None, str]:
    """The SKU whose floors judge the node, and where it came from: `--sku`, the runner class
    (PYTEST_ROCM_SKU, set on every runner of a class), the outputs of the same run (a capture that
    names no GPU, TransferBench's or rccl-tests', is judged by the floor another names), or the
    GPUs detected here. None: only the relative rules judge."""
    if given:
        return given, "given by --sku"
    if runner_class:
        return runner_class, "set by the runner class (PYTEST_ROCM_SKU)"
    named, files = layers.guess_sku(outputs)
    if named:
        shown = ", ".join(files[:2]) + (f" and {len(files) - 2} more" if len(files) > 2 else "")
        return named, f"named by {shown}"
    detected = platform_sku(platform)
    if detected:
        return detected, "detected on this node"
    return None, (
        "no SKU: no --sku, runner class or tool output names one; only the relative rules "
        "judged (give --sku for the SKU's floors)"
    )


def accept(given: Inputs) -> tuple[str, dict]:
    """Run the five layers; (decision: layers.ACCEPTED, REFUSED or NOT_PROVEN, the evidence with
    `exit_code` left for the caller)."""
    pipeline = layers.run_pipeline(
        {
            "hardware": _tool_step("hardware", given),
            "communication": _tool_step("communication", given),
            "framework": lambda layer: layers.framework_layer(
                layer, given.platform, _doctor_problems(given), given.stack, given.expected_stack
            ),
            "workload": lambda layer: layers.workload_layer(
                layer, given.platform, given.smoke_command, given.smoke_timeout
            ),
            "recovery": lambda layer: _recovery(layer, given.node, given.history),
        }
    )
    decision, summary = layers.decide(pipeline, given.require)
    return decision, {
        "schema": layers.PREFLIGHT_SCHEMA,
        "node": given.node,
        "sku": given.sku,
        "sku_from": given.sku_from,
        "thresholds": given.thresholds,
        "started": given.started,
        "finished": _now(),
        "exit_code": None,
        "accepted": decision == layers.ACCEPTED,
        "summary": summary,
        "required": list(given.require),
        "layers": [layer.to_dict() for layer in pipeline],
    }


def _tool_step(name: str, given: Inputs):
    """The hardware or communication layer: its tools' outputs, read."""
    tools = ", ".join(t for t in TOOLS if layer_of(t) == name)
    nothing = (
        f"no output of {tools}: give --source TOOL=FILE"
        if given.from_files
        else f"{tools} not run: add --benchmarks"
        if name == "communication"
        else "no tool output"
    )
    return lambda layer: layers.read_outputs(
        layer,
        [o for o in given.outputs if layer_of(o.tool) == name],
        # the runner's own GPU count, where given, for the readers that list GPUs (rocminfo)
        {**given.limits, "expect_gpus": given.expect_gpus},
        nothing,
        required=name in given.require,
    )


def _doctor_problems(given: Inputs) -> list[str]:
    """What `doctor` finds wrong with the detected platform for this SKU and GPU count."""
    from pytest_rocm.hw.expectations import check

    platform = given.platform
    if platform is None:
        return []
    expect = (
        given.expect_gpus
        if given.expect_gpus is not None
        else logical_gpus(given.limits.get("gpus"), platform)
    )
    problems = check(platform, expect, given.sku, require_gpu=True)[1]
    skus = sorted({g.sku or "unknown" for g in platform.gpus})
    if given.sku is None and len(skus) > 1:
        # no SKU's floors apply, and no count: judged by nothing unless named
        problems.append(
            f"GPUs of more than one SKU ({platform.describe()}): a node has one; give --sku to "
            "judge it against that SKU (the others are then named), or find the GPU that reads "
            "wrong"
        )
    return problems


def _recovery(layer: Layer, node: str, history: drain.History | None) -> None:
    """The recovery layer: should the node's history drain it?"""
    if history is None:
        layer.reason = "no --history given (earlier preflights and gate reports of this node)"
        return
    decision = drain.decide(node, history)
    skipped = (
        f" ({len(history.skipped)} file(s) skipped: {history.skipped[0]})"
        if history.skipped
        else ""
    )
    layer.findings = [finding("drain", "failed", reason) for reason in decision.reasons] or [
        finding(
            "drain",
            "ok",
            f"no drain pattern in {len(history.preflights)} preflight(s) and "
            f"{len(history.reports)} gate report(s){skipped}",
        )
    ]
    layer.verdict = "failed" if decision.drain else "ok"
    layer.reason = "; ".join(f.message for f in layer.findings)


def render(evidence: dict) -> str:
    """One screen: a line per layer, the findings that decided it, and the sources' unread lines."""
    sku = evidence["sku"]
    floors = (
        f"SKU {sku}, {evidence.get('sku_from') or 'given'}: {sku}'s floors applied"
        if sku
        else evidence.get("sku_from") or "SKU unknown"
    )
    lines = [f"preflight of {evidence['node']} ({floors})"]
    for layer in evidence["layers"]:
        shown = [item for item in layer["findings"] if item["status"] != "ok"]
        lines.append(
            f"  {layer['name']:<14} {layer['verdict'].upper():<9} "
            + (f"{len(shown)} finding(s):" if shown else layer["reason"][:300])
        )
        for item in shown:
            where = (
                f"{item.get('file')}:{item['line']}"
                if item.get("line")
                else f"{item.get('file')}#{item['pointer']}"
                if item.get("pointer")
                else item.get("file") or ""
            )
            times = f" (x{item['count']})" if item.get("count", 1) > 1 else ""
            lines.append(
                f"      {item['status']:<8} {item['message'][:300]}{times}"
                + (f"  [{where}]" if where else "")
            )
            if item.get("text"):
                lines.append(f"               > {item['text'][:120]}")
        for source in layer["sources"]:
            if source.get("unread"):
                lines.append(
                    f"      note: {source['unread']} line(s) of {source['file']} not understood "
                    f"(first at line {source['unread_lines'][0]['line']})"
                )
    lines.append(evidence["summary"][:500] + f" (exit {evidence['exit_code']})")
    return "\n".join(lines)
