"""`rocminfo`: the node's GPU agents as the HSA runtime sees them, read by the parser detection uses
(hw/parsers/rocminfo.py), so detection and preflight read rocminfo alike.

Reads any ROCm 6-7 rocminfo (captures: tests/data/samples/rocminfo). Judged (`judge_agents`): each
GPU agent's compute units against its peers' (an agent with fewer has CUs disabled: a harvested or
failing GPU) and against the SKU's whole count and its partitions (MI300X: 304, 152, 76 or 38; no
field names the partition mode, the CU count shows it), and how many agents the node lists against
the runner's GPU count (`--expect-gpus`), else the SKU's node size (`gpus` in thresholds.toml).
"""

from __future__ import annotations

import re

from pytest_rocm.hw.parsers import UnexpectedOutput
from pytest_rocm.hw.parsers.rocminfo import parse
from pytest_rocm.hw.skus import WHOLE_GPU_COMPUTE_UNITS, partition_from_compute_units
from rocm_gate.preflight.evidence import Line, Reading, finding
from rocm_gate.preflight.inventory import judge_compute_units, judge_gpu_count
from rocm_gate.preflight.relative import most_common

_DEVICE_TYPE = re.compile(r"^\s*Device Type:\s*(\w+)")
_COMPUTE_UNIT = re.compile(r"^\s*Compute Unit:\s*(\d+)")


def read(lines: list[Line], limits: dict) -> Reading:
    reading = Reading()
    try:
        parsed = parse("\n".join(line.text for line in lines))
    except UnexpectedOutput:
        return reading  # understood nothing: not rocminfo output
    # rocminfo prints hundreds of lines per agent, all of them the parser's
    reading.understood = len(lines)
    agents = [(gpu.sku, gpu.compute_units, at) for gpu, at in zip(parsed.gpus, _cu_lines(lines))]
    if not agents:
        reading.not_judged = "rocminfo lists no GPU agent: give its output on the GPU node"
        return reading
    for item in judge_agents(
        agents, limits.get("sku"), limits.get("expect_gpus"), limits.get("gpus")
    ):
        reading.add(item)
    return reading


def _cu_lines(lines: list[Line]):
    """The `Compute Unit:` line of each GPU agent, in the order the agents are listed."""
    device = None
    for line in lines:
        if match := _DEVICE_TYPE.match(line.text):
            device = match.group(1).upper()
        elif device == "GPU" and _COMPUTE_UNIT.match(line.text):
            device = None
            yield line


def judge_agents(
    agents: list[tuple], sku: str | None, expect_gpus: int | None, sku_gpus: int | None = None
) -> list:
    """GPU agents as (SKU read, compute units, line). Failed: an agent with fewer CUs than most of
    its peers, or a CU count that is neither the SKU's whole GPU nor one of its partitions;
    failed too: a number of agents that is neither the GPUs expected (`--expect-gpus`, else the
    SKU's node size) nor that many in the mode the CU count shows (8 MI300X in CPX list 64). The
    rules are preflight/inventory.py's, which RVS gpup and amd-smi static read too."""
    sku = sku or next((agent_sku for agent_sku, _, _ in agents if agent_sku), None)
    found = judge_compute_units(
        [(index, agent_sku, cus, at) for index, (agent_sku, cus, at) in enumerate(agents)], sku
    )
    # the count most agents have; on a tie the larger, so the agents with fewer are named
    usual = most_common((cus for _, cus, _ in agents if cus), tie=max)
    first = agents[0][2]
    count = judge_gpu_count(len(agents), sku, usual, expect_gpus, sku_gpus, first)
    if count is not None:
        found.append(count)
    if not found:
        mode = partition_from_compute_units(sku, usual) or "SPX"
        found.append(
            finding(
                "rocminfo.agents",
                "ok",
                f"{len(agents)} GPU agent(s)"
                + (f" of {usual} compute units" if usual else "")
                + (f" ({mode})" if sku in WHOLE_GPU_COMPUTE_UNITS else ""),
                first,
                value=len(agents),
            )
        )
    return found
