"""What a node's GPUs are, held to the SKU table (hw/skus.py) and to each other: compute units,
VRAM size, partition modes, how many GPUs the node lists. Pure judgements, one per rule, read by every
reader whose tool prints the figure (rocminfo and RVS gpup: compute units; amd-smi `static` and the
default view: VRAM, partition, compute units), so one rule is written once.

- `judge_compute_units`: a GPU with fewer compute units than most of its peers fails (CUs disabled:
  a harvested or failing GPU), and so does a count that is neither the SKU's whole GPU nor one of its
  partitions (MI300X: 304, 152, 76 or 38).
- `judge_gpu_count`: the GPUs listed against the runner's count (`--expect-gpus`), else the SKU's
  (`gpus` in thresholds.toml), as physical GPUs or as that many in the partition mode shown.
- `judge_vram`: a GPU with less VRAM than most of its peers, or than the SKU's whole GPU (or one of
  its memory partitions), by more than `vram_short_max_pct`, fails (an HBM stack or its memory lost).
- `judge_partitions`: a GPU in another compute or memory partition mode than most of its peers
  fails (the node lists another number of GPUs than the job plans for), and so does a mode the SKU
  does not have.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_rocm.hw.skus import (
    COMPUTE_PARTITIONS,
    LOGICAL_GPUS_PER_PARTITION_MODE,
    VRAM_MB,
    WHOLE_GPU_COMPUTE_UNITS,
    partition_from_compute_units,
)
from rocm_gate.preflight.evidence import Finding, finding
from rocm_gate.preflight.relative import most_common

__all__ = [
    "MEMORY_PARTITIONS",
    "compute_units_ok",
    "judge_compute_units",
    "judge_gpu_count",
    "judge_partitions",
    "judge_vram",
]

# memory partition mode -> the share of the GPU's VRAM each partition shows (NPS1: all of it)
MEMORY_PARTITIONS = {"NPS1": 1, "NPS2": 2, "NPS4": 4, "NPS8": 8}


def judge_compute_units(
    gpus: list[tuple],
    sku: str | None,
    what: str = "GPU agent",
    check: str = "rocminfo.compute_units",
) -> list[Finding]:
    """GPUs as (label, SKU read or None, compute units, where): the failed ones, per the module
    docstring; nothing where every GPU is whole or a partition and as its peers. `what` names a GPU
    as the tool does (rocminfo's agents, RVS's GPU ids)."""
    found = []
    # the count most GPUs have; on a tie the larger, so the GPUs with fewer are named
    usual = most_common((cus for _, _, cus, _ in gpus if cus), tie=max)
    for label, gpu_sku, cus, at in gpus:
        whole = WHOLE_GPU_COMPUTE_UNITS.get(gpu_sku or sku or "")
        if cus and usual and cus < usual:
            found.append(
                finding(
                    check,
                    "failed",
                    f"{what} {label}: {cus} compute units, its peers {usual} (CUs disabled: a "
                    "harvested or failing GPU)",
                    at,
                    value=cus,
                    threshold=usual,
                )
            )
        elif (
            cus and whole and cus != whole and not partition_from_compute_units(gpu_sku or sku, cus)
        ):
            found.append(
                finding(
                    check,
                    "failed",
                    f"{what} {label}: {cus} compute units, neither a whole "
                    f"{gpu_sku or sku} ({whole}) nor one of its partitions",
                    at,
                    value=cus,
                    threshold=whole,
                )
            )
    return found


def compute_units_ok(gpus: list[tuple], sku: str | None, check: str) -> Finding:
    """The ok finding of `judge_compute_units` where it found nothing: how many GPUs, their compute
    units, and the whole SKU or the partition they show."""
    usual = most_common(cus for _, _, cus, _ in gpus)
    named = next((gpu_sku for _, gpu_sku, _, _ in gpus if gpu_sku), None) or sku
    mode = partition_from_compute_units(named, usual)
    shown = (
        f" ({mode} of a {named})"
        if mode
        else f" (a whole {named})"
        if named in WHOLE_GPU_COMPUTE_UNITS
        else ""
    )
    return finding(
        check, "ok", f"{len(gpus)} GPU(s) of {usual} compute units{shown}", gpus[0][3], value=usual
    )


def judge_gpu_count(
    listed: int,
    sku: str | None,
    usual_cus: int | None,
    expect_gpus: int | None,
    sku_gpus: int | None,
    at=None,
    check: str = "rocminfo.agents",
) -> Finding | None:
    """`listed` GPUs against the runner's count (`--expect-gpus`), else the SKU's node size: as
    physical GPUs, or as that many in the partition mode the CU count shows (8 MI300X in CPX list
    64). None where nothing gives a count, or the count is met."""
    physical = expect_gpus or sku_gpus
    if not physical:
        return None
    mode = partition_from_compute_units(sku, usual_cus) or "SPX"
    logical = physical * LOGICAL_GPUS_PER_PARTITION_MODE[mode]
    if listed in (physical, logical):
        return None
    whose = "the runner has" if expect_gpus else f"a {sku} node has"
    return finding(
        check,
        "failed",
        f"{listed} GPU agent(s); {whose} {physical} GPU(s)"
        + (f", {logical} in {mode}" if logical != physical else ""),
        at,
        value=listed,
        threshold=logical,
    )


def judge_vram(
    sizes: dict[str, tuple], sku: str | None, short_max_pct: float | None
) -> list[Finding]:
    """Each GPU's VRAM size as (MB, memory partition mode or None, where), against its peers' and
    the SKU's (or a memory partition of it); one ok finding where none is short."""
    if not sizes or short_max_pct is None:
        return []
    tolerance = 1 - short_max_pct / 100
    usual = most_common((mb for mb, _, _ in sizes.values()), tie=max)
    whole = VRAM_MB.get(sku or "")
    found = []
    for gpu, (mb, mode, at) in sizes.items():
        if mb < usual * tolerance:
            found.append(
                finding(
                    "vram.size",
                    "failed",
                    f"GPU {gpu}: {mb:g} MB of VRAM, its peers {usual:g} MB ({(usual - mb) / 1024:.0f} GB "
                    "short: an HBM stack or its memory lost; replace the GPU)",
                    at,
                    value=mb,
                    threshold=usual,
                )
            )
        elif whole and not _whole_or_partition(mb, whole, mode, tolerance):
            shown = f" in {mode}" if mode in MEMORY_PARTITIONS else ""
            found.append(
                finding(
                    "vram.size",
                    "failed",
                    f"GPU {gpu}: {mb:g} MB of VRAM{shown}, not a {sku}'s {whole:g} MB "
                    + (f"/ {MEMORY_PARTITIONS[mode]}" if shown else "nor a memory partition of it")
                    + " (memory lost, or another SKU)",
                    at,
                    value=mb,
                    threshold=whole,
                )
            )
    if not found:
        first = next(iter(sizes.values()))
        found.append(
            finding(
                "vram.size",
                "ok",
                f"VRAM of {len(sizes)} GPU(s) alike ({usual:g} MB)"
                + (f", a {sku}'s" if whole else ""),
                first[2],
                value=usual,
            )
        )
    return found


def _whole_or_partition(mb: float, whole: float, mode: str | None, tolerance: float) -> bool:
    shares = [MEMORY_PARTITIONS[mode]] if mode in MEMORY_PARTITIONS else MEMORY_PARTITIONS.values()
    return any(
        whole / share * tolerance <= mb <= whole / share * (2 - tolerance) for share in shares
    )


def judge_partitions(modes: dict[str, tuple], sku: str | None) -> list[Finding]:
    """Each GPU's (compute mode, memory mode, where), `N/A` or None where not read: a mode the
    SKU does not have, or one other than most GPUs', fails; one ok finding else."""
    found = []
    compute = {gpu: _mode(c) for gpu, (c, _, _) in modes.items()}
    memory = {gpu: _mode(m) for gpu, (_, m, _) in modes.items()}
    for kind, read, known in (
        # the compute modes the SKU can be set to (hw/skus.toml), every mode for a SKU not known
        ("compute", compute, COMPUTE_PARTITIONS.get(sku or "", LOGICAL_GPUS_PER_PARTITION_MODE)),
        ("memory", memory, MEMORY_PARTITIONS),
    ):
        present = {gpu: mode for gpu, mode in read.items() if mode}
        # on a tie the mode listed first (SPX, NPS1: the default), so the GPU moved off it is named
        usual = most_common(
            present.values(), tie=lambda tied, known=known: min(tied, key=_rank(known))
        )
        for gpu, mode in present.items():
            at = modes[gpu][2]
            if sku in WHOLE_GPU_COMPUTE_UNITS and mode not in known:
                found.append(
                    finding(
                        "partition.mode",
                        "failed",
                        f"GPU {gpu}: {kind} partition {mode}, not one a {sku} has "
                        f"({', '.join(known)})",
                        at,
                        value=mode,
                    )
                )
            elif mode != usual:
                found.append(
                    finding(
                        "partition.mode",
                        "failed",
                        f"GPU {gpu}: {kind} partition {mode}, its peers {usual} (the node lists "
                        "another number of GPUs or memory than the job plans for: set it as the "
                        "others, amd-smi set --compute-partition / --memory-partition)",
                        at,
                        value=mode,
                        threshold=usual,
                    )
                )
    if not found and any(compute.values()) | any(memory.values()):
        shown = "/".join(
            m
            for m in (
                most_common(v for v in compute.values() if v),
                most_common(v for v in memory.values() if v),
            )
            if m
        )
        found.append(
            finding(
                "partition.mode",
                "ok",
                f"every GPU in {shown} ({len(modes)} GPU(s))",
                next(iter(modes.values()))[2],
                value=shown,
            )
        )
    return found


def _rank(known) -> Callable[[str], tuple]:
    """A mode's place in the SKU's list of modes (SPX before DPX ...); modes not in it last."""
    order = list(known)
    return lambda mode: (mode not in order, order.index(mode) if mode in order else 0, mode)


def _mode(value: str | None) -> str | None:
    text = (value or "").strip().upper()
    return None if text in ("", "N/A", "NOT SUPPORTED", "UNKNOWN") else text
