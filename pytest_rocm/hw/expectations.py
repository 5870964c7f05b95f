"""Whether a platform is what a job expects of its runner: a GPU count, a SKU on every GPU, any GPU
at all, and no detection tool that hung.

`rocm-gate doctor` exits on the answer and `rocm-gate preflight` feeds its problems to the framework
layer.
"""

from __future__ import annotations

from pytest_rocm.hw.model import Platform
from pytest_rocm.hw.skus import normalise_sku

HEALTHY, MISMATCH, NO_GPU = "healthy", "mismatch", "no_gpu"


def check(
    platform: Platform, expect_gpus: int | None, expect_sku: str | None, require_gpu: bool
) -> tuple[str, list[str]]:
    """(HEALTHY, MISMATCH or NO_GPU; the problems found, each a sentence naming what was
    expected)."""
    wanted_sku = normalise_sku(expect_sku) if expect_sku else None
    expecting = require_gpu or expect_gpus is not None or wanted_sku is not None
    if expecting and platform.gpu_count == 0:
        failed = [f"{s.name}: {s.detail}" for s in platform.sources if not s.ok]
        return NO_GPU, [
            "no GPU visible" + (f"; sources that failed: {'; '.join(failed)}" if failed else "")
        ]
    # a tool that hung: what the others saw may be right, but a hung GPU or driver hangs its tools
    problems = [
        f"{source.name} {source.detail.removeprefix('TimeoutError: ')}"
        for source in platform.sources
        if not source.ok and source.detail.startswith("TimeoutError")
    ]
    if expect_gpus is not None and platform.gpu_count != expect_gpus:
        problems.append(f"expected {expect_gpus} GPU(s), this runner has {platform.describe()}")
    if wanted_sku is not None:
        others = [g for g in platform.gpus if g.sku != wanted_sku]
        if others:
            shown = ", ".join(f"GPU {g.index}: {g.label()}" for g in others[:8])
            problems.append(
                f"expected every GPU to be {wanted_sku}; {len(others)} are not ({shown})"
            )
    return (MISMATCH if problems else HEALTHY), problems
