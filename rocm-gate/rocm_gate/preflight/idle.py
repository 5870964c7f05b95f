"""Idle means idle: a node offered for a job runs nothing on its GPUs.

Pure judgements, read by every reader that sees a GPU's load (rocm-smi's concise table and
`--showmeminfo`/`--showuse`, amd-smi `metric`, `monitor` and its `--process` table, amd-smi's
default view and `amd-smi process`):

- `judge_load`: one GPU's VRAM held and GFX activity. More than `idle_vram_max_pct` of its VRAM
  held fails (memory left by a hung or killed process at 0 % activity, or a process still running);
  more than `idle_gfx_max_pct` busy fails too, whatever it holds (someone's kernels run on it).
- `judge_processes`: each process a tool lists on a GPU, named by GPU, process id and figure. One
  holding more than `idle_vram_max_pct` of its GPU's VRAM, or on a GPU that is busy, fails; any other
  process on a GPU offered for a job degrades the node (it will hold memory or time the job plans
  for). The GPU's size comes from the same output, else the SKU table (hw/skus.py: VRAM_MB), else the
  largest Instinct GPU's (a process over the limit of the largest is over every GPU's).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_rocm.hw.skus import VRAM_MB
from rocm_gate.preflight.evidence import Finding, Line, Pointer, finding

__all__ = ["Process", "judge_load", "judge_node", "judge_processes", "megabytes", "no_processes"]

_MEGABYTES = {
    "B": 1 / 2**20,
    "KB": 1 / 1024,
    "KIB": 1 / 1024,
    "MB": 1,
    "MIB": 1,
    "GB": 1024,
    "GIB": 1024,
    "TB": 1024**2,
    "TIB": 1024**2,
}


def megabytes(amount: float | None, unit: str | None) -> float | None:
    """An amount as amd-smi prints it (its KB, MB, GB are binary: 196592 MB is 192 GiB) in MB;
    None where the unit is not one of memory."""
    scale = _MEGABYTES.get((unit or "").upper())
    return amount * scale if amount is not None and scale else None


def _size(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:g} MB"


@dataclass(frozen=True)
class Process:
    """One process a tool lists on a GPU (`amd-smi process`, `monitor --process`, the default
    view's process list)."""

    gpu: str
    pid: str
    name: str
    vram_mb: float | None  # the VRAM it holds, where the tool says
    at: Line | Pointer | None = None


def judge_load(
    gpu: str,
    used_pct: float | None,
    activity_pct: float | None,
    limits: dict,
    at: Line | Pointer | None = None,
) -> list[Finding]:
    """One GPU of a node offered for a job: its VRAM held (of its total) and its GFX activity
    against `idle_vram_max_pct` and `idle_gfx_max_pct`. Nothing to judge (no figure, no limit):
    no finding."""
    vram_limit, gfx_limit = limits.get("idle_vram_max_pct"), limits.get("idle_gfx_max_pct")
    found = []
    if used_pct is not None and vram_limit is not None:
        found.append(_vram(gpu, used_pct, activity_pct, vram_limit, at))
    held = used_pct is not None and vram_limit is not None and used_pct > vram_limit
    if activity_pct is not None and gfx_limit is not None and not held:
        if activity_pct > gfx_limit:
            found.append(
                finding(
                    "gpu.busy",
                    "failed",
                    f"GPU {gpu} at {activity_pct:g} % GFX activity (idle is at most "
                    f"{gfx_limit:g} %): a process runs on a node offered for a job",
                    at,
                    value=activity_pct,
                    threshold=gfx_limit,
                )
            )
    return found


def _vram(gpu: str, used_pct: float, activity_pct: float | None, limit: float, at) -> Finding:
    """VRAM held: a hung or killed process's memory at no activity, a running process's else."""
    if used_pct <= limit:
        return finding(
            "vram.idle",
            "ok",
            f"no GPU holds more than {limit:g} % of its VRAM",
            at,
            value=round(used_pct, 1),
            threshold=limit,
        )
    if not activity_pct:
        activity = "at 0 % activity" if activity_pct == 0 else "(no activity figure)"
        why = "memory left by a hung or killed process; reset the GPU (amd-smi reset -G)"
    else:
        activity = f"at {activity_pct:g} % activity"
        why = "a process still runs on a node offered for a job"
    return finding(
        "vram.idle",
        "failed",
        f"GPU {gpu} holds {used_pct:.0f} % of its VRAM {activity}: {why}",
        at,
        value=round(used_pct, 1),
        threshold=limit,
    )


def judge_processes(
    processes: list[Process],
    limits: dict,
    totals_mb: dict[str, float] | None = None,
    busy_pct: dict[str, float] | None = None,
) -> list[Finding]:
    """Each process listed on a GPU (see the module docstring). `totals_mb`: each GPU's VRAM as
    the same output gives it; `busy_pct`: each GPU's GFX activity there."""
    vram_limit, gfx_limit = limits.get("idle_vram_max_pct"), limits.get("idle_gfx_max_pct")
    if vram_limit is None:
        return []
    sku_total = VRAM_MB.get(limits.get("sku") or "")
    found = []
    for process in processes:
        total = (totals_mb or {}).get(process.gpu) or sku_total
        of = _size(total) if total else f"the largest Instinct GPU's {_size(max(VRAM_MB.values()))}"
        limit_mb = (total or max(VRAM_MB.values())) * vram_limit / 100
        busy = (busy_pct or {}).get(process.gpu)
        held = process.vram_mb or 0
        heavy = held > limit_mb
        running = busy is not None and gfx_limit is not None and busy > gfx_limit
        share = f"{held / total * 100:.0f} % of {of}" if total else ""
        share += (", " if share else "") + f"over {vram_limit:g} % of {of}" if heavy else ""
        figure = (
            f"holds {_size(held)} of VRAM" + (f" ({share})" if share else "")
            if process.vram_mb is not None
            else "holds VRAM the tool does not say"
        )
        activity = f" on a GPU at {busy:g} % GFX activity" if running else ""
        who = f"GPU {process.gpu}: process {process.pid} ({process.name or '?'}) {figure}{activity}"
        found.append(
            finding(
                "process.idle",
                "failed" if heavy or running else "degraded",
                f"{who}: a job's process on a node offered for a job; end it (kill "
                f"{process.pid}) or reset the GPU (amd-smi reset -G)"
                if heavy or running
                else f"{who}: a process on a GPU offered for a job (end it before the job starts)",
                process.at,
                value=round(held, 1),
                threshold=round(limit_mb, 1),
            )
        )
    return found


def no_processes(at: Line | Pointer | None, gpus: int | None = None) -> Finding:
    """The tool listed no process: what an idle node prints."""
    on = f" on {gpus} GPU(s)" if gpus else ""
    return finding("process.idle", "ok", f"no process runs{on}", at)


def judge_node(
    loads: list[tuple], processes: list[Process], limits: dict, totals_mb: dict[str, float]
) -> list[Finding]:
    """A tool's view of the whole node (the default view, `monitor --process`): each GPU's load
    (gpu, VRAM used %, GFX activity %, where) and each process on it. A busy GPU whose process is
    named is one problem, the process's finding (GPU, process id, figures), not two."""
    busy = {gpu: activity for gpu, _, activity, _ in loads if activity is not None}
    found = judge_processes(processes, limits, totals_mb, busy)
    named = {p.gpu for p, f in zip(processes, found) if f.status == "failed"}
    for gpu, used_pct, activity, at in loads:
        found += [
            item
            for item in judge_load(gpu, used_pct, activity, limits, at)
            if not (item.status != "ok" and gpu in named)
        ]
    return found
