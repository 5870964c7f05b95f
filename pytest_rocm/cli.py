"""The `rocm-gate` command line: `doctor` (platform and health check), `report` (rebuild the gate report),
`parity` (CUDA-parity coverage report)."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from pytest_rocm import doctor as doctor_mod
from pytest_rocm.hw import SOURCE_NAMES
from pytest_rocm.hw.skus import ALL_SKUS, normalise_sku

# Each command imports what it needs when it runs: `parity` at CI scale should not pay for detection.

EXIT_BAD_INPUT = 2
EXIT_BELOW_MIN_PARITY = 3  # also: `baselines diff --fail-on-loosened` found a loosened threshold


def _source(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"expected TOOL=FILE, got {value!r}")
    if name not in SOURCE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown source {name!r}; use one of {', '.join(SOURCE_NAMES)}")
    return name, path


def _sku(value: str) -> str:
    if normalise_sku(value) is None:
        raise argparse.ArgumentTypeError(f"unknown SKU {value!r}; use one of {', '.join(ALL_SKUS)}")
    return normalise_sku(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocm-gate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    doctor = commands.add_parser("doctor", help="show the detected platform and check it against expectations",
                                 description=doctor_mod.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    doctor.add_argument("--json", action="store_true", help="print JSON for machines")
    doctor.add_argument("--platform", metavar="NAME|FILE", help="show a simulated profile instead of detecting")
    doctor.add_argument("--source", metavar="TOOL=FILE", type=_source, action="append", default=[],
                        help="read saved tool output instead of running the tool (repeatable): "
                             + ", ".join(SOURCE_NAMES))
    doctor.add_argument("--expect-gpus", type=int, metavar="N", help="exit 3 unless exactly N GPUs are visible")
    doctor.add_argument("--expect-sku", type=_sku, metavar="SKU", help="exit 3 unless every GPU is this SKU")
    doctor.add_argument("--require-gpu", action="store_true", help="exit 4 when no GPU is visible")

    for name in ("verdict", "report"):
        report = commands.add_parser(name, help="rebuild gate-report.json (verdicts, conclusion) from a folder of "
                                                "records, offline" + (" (same as verdict)" if name == "report" else ""))
        report.add_argument("--records", required=True, type=Path, metavar="DIR",
                            help="the --rocm-report-dir of a run (records-*.jsonl, manifest.json)")
        report.add_argument("--out", type=Path, metavar="DIR", help="where to write gate-report.json (default: DIR)")
        report.add_argument("--group-map", type=Path, metavar="TOML", help="groups for records that carry none")

    baselines = commands.add_parser("baselines", help="baseline files: what a change loosened or tightened")
    baseline_commands = baselines.add_subparsers(dest="baselines_command", required=True)
    diff = baseline_commands.add_parser("diff", help="compare two baseline files or folders (exit 3 with "
                                                     "--fail-on-loosened when a threshold was loosened)")
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    diff.add_argument("--json", action="store_true")
    diff.add_argument("--fail-on-loosened", action="store_true")
    parity = commands.add_parser(
        "parity", help="CUDA-parity coverage: of what passes on the reference, how much passes on the candidate",
        description="Exit codes: 0 done, 3 parity below --min-parity, 2 unreadable input.")
    parity.add_argument("--reference", nargs="+", default=[], metavar="PATH",
                        help="reference run (usually CUDA): JUnit XML files, gate-report.json files, or folders of them")
    parity.add_argument("--candidate", nargs="+", default=[], metavar="PATH", help="candidate run (usually ROCm)")
    parity.add_argument("--reference-label", default="CUDA")
    parity.add_argument("--candidate-label", default="ROCm")
    parity.add_argument("--groups", type=Path, metavar="MAP.toml", help="group map for tests without a group property")
    parity.add_argument("--applicability", type=Path, metavar="TOML",
                        help="tests that can never apply to ROCm, with reasons (left out of the denominator)")
    parity.add_argument("--previous", type=Path, metavar="parity.json", help="an earlier report: list newly broken and fixed")
    parity.add_argument("--min-parity", type=float, metavar="FRACTION", help="exit 3 when overall parity is below this")
    parity.add_argument("--strip-prefix", action="append", default=[], metavar="PREFIX",
                        help="leading path to remove from test ids on both sides (repeatable); "
                             "a common prefix on one side is also found automatically")
    parity.add_argument("--keep-going", action="store_true", help="drop unreadable files (named in the report) and go on")
    parity.add_argument("--sglang-registry", metavar="DIR|JSONL",
                        help="SGLang checkout (test/registered/) or JSONL of its register_*_ci calls: declared coverage")
    parity.add_argument("--out", type=Path, required=True, metavar="DIR", help="where parity.json and parity.md go")
    return parser


def run_parity(args) -> int:
    from pytest_rocm.groups import GroupMapError, load_group_map
    from pytest_rocm.jsonio import write_json_atomic

    # A short-lived process that builds 100,000s of small objects and frees none of them until it
    # exits: the cyclic collector's passes over the growing heap only cost time here.
    gc.disable()
    from pytest_rocm import parity as parity_mod
    from pytest_rocm.applicability import ApplicabilityError, load_applicability
    from pytest_rocm.junit import JUnitError
    from pytest_rocm.parity_inputs import InputError, load_sides
    from pytest_rocm.parity_md import render
    from pytest_rocm.sglang_registry import RegistryError, declared_parity, read_registry

    if bool(args.reference) != bool(args.candidate) or not (args.reference or args.sglang_registry):
        print("rocm-gate parity: give --reference and --candidate (and/or --sglang-registry)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        group_map = load_group_map(args.groups) if args.groups else None
        applicability = load_applicability(args.applicability) if args.applicability else None
        previous = json.loads(args.previous.read_text()) if args.previous else None
        report: dict = {"schema": parity_mod.PARITY_SCHEMA}
        if args.reference:
            reference, candidate = load_sides([(args.reference_label, args.reference),
                                               (args.candidate_label, args.candidate)], args.keep_going)
            for side in (reference, candidate):
                parity_mod.strip_explicit(side, args.strip_prefix)
            report = parity_mod.compute(reference, candidate, group_map, applicability, previous=previous)
        if args.sglang_registry:
            report["sglang"] = declared_parity(read_registry(args.sglang_registry), applicability)
    except (GroupMapError, ApplicabilityError, JUnitError, InputError, RegistryError) as exc:
        print(f"rocm-gate parity: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, json.JSONDecodeError) as exc:
        print(f"rocm-gate parity: cannot read {args.previous}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    markdown = render(report, args.min_parity)
    write_json_atomic(args.out / "parity.json", report)
    (args.out / "parity.md").write_text(markdown, encoding="utf-8")
    headline = report.get("overall", {}).get("parity") if "overall" in report else report["sglang"]["declared_parity"]
    print(markdown.split("\n\n")[0].lstrip("# "))
    for dropped in report.get("inputs", {}).get("reference", {}).get("dropped", []) + \
            report.get("inputs", {}).get("candidate", {}).get("dropped", []):
        print(f"dropped: {dropped}", file=sys.stderr)
    print(f"wrote {args.out / 'parity.json'} and {args.out / 'parity.md'}")
    if args.min_parity is not None and (headline is None or headline < args.min_parity):
        print(f"parity {headline} is below the minimum {args.min_parity}", file=sys.stderr)
        return EXIT_BELOW_MIN_PARITY
    return 0


def run_doctor(args) -> int:
    from pytest_rocm.hw import detect as detect_mod
    from pytest_rocm.hw.profiles import ProfileError
    from pytest_rocm.manifest import package_versions

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
    packages = package_versions()
    code, problems = doctor_mod.check(platform, args.expect_gpus, args.expect_sku, args.require_gpu)
    if args.json:
        status = {doctor_mod.EXIT_HEALTHY: "healthy", doctor_mod.EXIT_MISMATCH: "mismatch",
                  doctor_mod.EXIT_NO_GPU: "no_gpu"}[code]
        print(json.dumps({"platform": platform.to_dict(), "packages": packages,
                          "health": {"status": status, "exit_code": code, "problems": problems}}, indent=2))
    else:
        print(doctor_mod.render(platform, packages, problems, code, origin))
    return code


def run_report(args) -> int:
    from pytest_rocm.groups import GROUPS, GroupMapError, load_group_map
    from pytest_rocm.jsonio import write_json_atomic
    from pytest_rocm.records import read_records
    from pytest_rocm.report import build_gate_report
    from pytest_rocm.summary import group_table, reason_lines
    from pytest_rocm.verdicts import SignatureError, build_signatures

    if not args.records.is_dir():
        print(f"rocm-gate verdict: {args.records} is not a folder of records", file=sys.stderr)
        return EXIT_BAD_INPUT
    loaded = read_records(args.records)
    if not loaded.files:
        print(f"rocm-gate verdict: no records-*.jsonl files in {args.records}", file=sys.stderr)
        return EXIT_BAD_INPUT
    manifest_path = args.records / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    group_of = None
    if args.group_map:
        try:
            group_of = load_group_map(args.group_map, set(GROUPS)).group_of
        except GroupMapError as exc:
            print(f"rocm-gate verdict: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        # The signatures the run used (its ini may have added some) travel in its manifest.
        signatures = build_signatures([f"{k}={v}" for k, v in manifest.get("verdict_config", {})
                                       .get("infra_signatures", {}).items()])
    except SignatureError as exc:
        print(f"rocm-gate verdict: {manifest_path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = build_gate_report(loaded.records, manifest, loaded.problems, group_of, signatures)
    out = write_json_atomic((args.out or args.records) / "gate-report.json", report)
    print("\n".join(group_table(report["groups"])))
    if report["skip_reasons"]:
        print("\ntests that did not run, by reason:")
        print("\n".join(reason_lines(report["skip_reasons"])))
    for problem in loaded.problems:
        print(f"record problem: {problem}")
    print(f"\nconclusion: {report['conclusion']} ({report['conclusion_reason']})\nwrote {out}")
    return 0


def run_baselines_diff(args) -> int:
    from pytest_rocm import baselines as baselines_mod

    try:
        changes = baselines_mod.diff(baselines_mod.load([args.old]), baselines_mod.load([args.new]))
    except baselines_mod.BaselineError as exc:
        print(f"rocm-gate baselines diff: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(changes, indent=2))
    else:
        for change in changes:
            what = f"{change['test']} :: {change['metric']} @ {change['platform']}"
            detail = " -> ".join(x for x in (change.get("before"), change.get("after")) if x)
            print(f"{change['change'].upper():<9} {what}: {detail}")
        counts = {kind: sum(c["change"] == kind for c in changes)
                  for kind in ("loosened", "tightened", "moved", "added", "removed")}
        print(", ".join(f"{n} {kind}" for kind, n in counts.items()))
    loosened = any(c["change"] == "loosened" for c in changes)
    return EXIT_BELOW_MIN_PARITY if loosened and args.fail_on_loosened else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        return run_doctor(args)
    if args.command == "parity":
        return run_parity(args)
    if args.command == "baselines":
        return run_baselines_diff(args)
    return run_report(args)


if __name__ == "__main__":
    sys.exit(main())
