"""Node acceptance before a job: `rocm-gate preflight` and `rocm-gate drain`.

A runner proves itself in five layers, in order (hardware, communication, framework, workload,
recovery), each with a verdict (`ok`, `degraded`, `failed`, `skipped` with the reason) and the
evidence that decided it, down to the line of tool output it came from. This package owns reading
the tools' outputs (`readers/`, one module per tool), the per-SKU thresholds (`thresholds.toml`,
each with its source), the judgements several readers share (`relative.py`: figures against each
other; `idle.py`: a node offered for a job runs nothing; `inventory.py`: compute units, VRAM,
partitions and GPU count against the SKU and the peers), running the layers (`layers.py`), one
node's acceptance from its inputs to its evidence (`acceptance.py`), running the tools on a live node
(`live.py`) and the recovery decisions over a node's history (`drain.py`).
"""

LAYERS = ("hardware", "communication", "framework", "workload", "recovery")

__all__ = [
    "LAYERS",
    "acceptance",
    "evidence",
    "idle",
    "inventory",
    "readers",
    "relative",
    "thresholds",
    "layers",
    "live",
    "drain",
]
