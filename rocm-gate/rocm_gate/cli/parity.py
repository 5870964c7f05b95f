"""`rocm-gate parity`: CUDA-parity coverage, of what passes on the reference how much passes on the
candidate.

Exit statuses: 0 done, 2 unreadable input (the message names the file and line; --keep-going drops
such a file, keeps what was read before the break, and names it in the report), 3 parity below
--min-parity.
"""

from __future__ import annotations

import argparse
import gc
import sys
from contextlib import nullcontext
from pathlib import Path

from pytest_rocm.schemas import values
from pytest_rocm.schemas.markdown import visible
from rocm_gate.cli import exits
from rocm_gate.cli.arguments import map_file

# --min-parity: a number from 0 to 1 (a NaN, a negative or 1.5 would always pass or always fail)
_fraction = values.Option(values.share)


def add_parser(commands, name: str) -> None:
    parity = commands.add_parser(
        name,
        help="CUDA-parity coverage: of what passes on the reference, how much passes on the candidate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parity.add_argument(
        "--reference",
        nargs="+",
        default=[],
        metavar="PATH",
        help="reference run (usually CUDA): JUnit XML files, gate-report.json files, or folders of them",
    )
    parity.add_argument(
        "--candidate", nargs="+", default=[], metavar="PATH", help="candidate run (usually ROCm)"
    )
    parity.add_argument("--reference-label", default="CUDA")
    parity.add_argument("--candidate-label", default="ROCm")
    parity.add_argument(
        "--reference-commit",
        metavar="SHA",
        help="the commit the reference run tested (default: a reference gate report's manifest); the "
        "parity report names it, with the date and SKU",
    )
    parity.add_argument(
        "--reference-date",
        metavar="WHEN",
        help="when the reference ran (default: its manifest's start, or its JUnit file's timestamp)",
    )
    parity.add_argument(
        "--reference-sku",
        metavar="SKU",
        help="the reference's GPU (default: its manifest's, or its JUnit file's rocm_sku property)",
    )
    parity.add_argument(
        "--groups",
        type=map_file,
        metavar="MAP",
        help="group map for tests without a group property: a file, or a shipped map by name (vllm)",
    )
    parity.add_argument(
        "--applicability",
        type=map_file,
        metavar="TOML",
        help="tests that can never apply to ROCm, with reasons (left out of the denominator)",
    )
    parity.add_argument(
        "--previous",
        type=Path,
        metavar="parity.json",
        help="an earlier report: list newly broken and fixed",
    )
    parity.add_argument(
        "--min-parity",
        type=_fraction,
        metavar="FRACTION",
        help="exit 3 when overall parity is below this",
    )
    parity.add_argument(
        "--strip-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="leading path to remove from test ids on both sides (repeatable); "
        "a common prefix on one side is also found automatically",
    )
    parity.add_argument(
        "--keep-going",
        action="store_true",
        help="drop unreadable files (named in the report) and go on",
    )
    parity.add_argument(
        "--sglang-registry",
        metavar="DIR|JSONL",
        help="SGLang checkout (test/registered/) or JSONL of its register_*_ci calls: declared coverage",
    )
    parity.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where parity.json and parity.md go"
    )


def run(args) -> int:
    # A short-lived process that builds 100,000s of small objects and frees none of them until it
    # exits: the cyclic collector's passes over the growing heap only cost time here. (A caller that
    # runs this in its own process, a test, gets its setting back.)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if collecting:
            gc.enable()


def _run(args) -> int:
    from rocm_gate.parity.inputs import ReadingSides

    if bool(args.reference) != bool(args.candidate) or not (args.reference or args.sglang_registry):
        print(
            "rocm-gate parity: give --reference and --candidate (and/or --sglang-registry)",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    # With many files, forked processes start reading the sides now, while this one loads the maps
    # and an earlier report.
    sides = [(args.reference_label, args.reference), (args.candidate_label, args.candidate)]
    with ReadingSides(sides, args.keep_going) if args.reference else nullcontext() as reading:
        return _compare(args, reading)


def _compare(args, reading) -> int:
    from pytest_rocm.catalog.applicability import ApplicabilityError, load_applicability
    from pytest_rocm.catalog.groups import GroupMapError, load_group_map
    from pytest_rocm.catalog.sglang import RegistryError, read_registry
    from pytest_rocm.schemas.artifacts import write_json_atomic
    from rocm_gate.parity import compare as parity_mod
    from rocm_gate.parity.inputs import InputError, identify
    from rocm_gate.parity.junit import JUnitError
    from rocm_gate.parity.markdown import render
    from rocm_gate.parity.sglang_registry import declared_parity, executed_coverage

    try:
        group_map = load_group_map(args.groups) if args.groups else None
        applicability = load_applicability(args.applicability) if args.applicability else None
        try:
            previous = parity_mod.read_previous(args.previous) if args.previous else None
        except (OSError, ValueError) as exc:
            print(
                f"rocm-gate parity: cannot read {visible(args.previous)}: {visible(exc)}",
                file=sys.stderr,
            )
            return exits.BAD_INPUT
        report: dict = {"schema": parity_mod.PARITY_SCHEMA}
        if reading is not None:
            reference, candidate = reading.sides()
            reading.close()  # the reading processes are done: none is left running meanwhile
            for side in (reference, candidate):
                parity_mod.strip_explicit(side, args.strip_prefix)
            report = parity_mod.compute(
                reference, candidate, group_map, applicability, previous=previous
            )
            report["inputs"]["reference"].update(
                identify(
                    [Path(f) for f in reference.files],
                    args.reference_commit,
                    args.reference_date,
                    args.reference_sku,
                )
            )
        if args.sglang_registry:
            registered = read_registry(args.sglang_registry)
            report["sglang"] = declared_parity(registered, applicability)
            # registrations and results together: declared against executed, per file
            if args.reference:
                report["sglang"]["executed"] = executed_coverage(registered, report, applicability)
    except (GroupMapError, ApplicabilityError, JUnitError, InputError, RegistryError) as exc:
        print(f"rocm-gate parity: {visible(exc)}", file=sys.stderr)
        return exits.BAD_INPUT
    markdown = render(report, args.min_parity)
    write_json_atomic(args.out / "parity.json", report)
    (args.out / "parity.md").write_text(markdown, encoding="utf-8")
    headline = (
        report.get("overall", {}).get("parity")
        if "overall" in report
        else report["sglang"]["declared_parity"]
    )
    print(markdown.split("\n\n")[0].lstrip("# "))
    for dropped in report.get("inputs", {}).get("reference", {}).get("dropped", []) + report.get(
        "inputs", {}
    ).get("candidate", {}).get("dropped", []):
        # file names are the artifact's: a newline in one would start a workflow command line
        print(f"dropped: {visible(dropped)}", file=sys.stderr)
    print(f"wrote {args.out / 'parity.json'} and {args.out / 'parity.md'}")
    if args.min_parity is not None and (headline is None or headline < args.min_parity):
        print(f"parity {headline} is below the minimum {args.min_parity}", file=sys.stderr)
        return exits.NO
    return 0
