"""The `rocm-gate` command line: `doctor` (platform and health check), `report` (rebuild the gate report)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_rocm import doctor as doctor_mod
from pytest_rocm.groups import GroupMapError, load_group_map, GROUPS
from pytest_rocm.hw import detect as detect_mod
from pytest_rocm.hw.profiles import ProfileError
from pytest_rocm.hw.skus import ALL_SKUS, normalise_sku
from pytest_rocm.jsonio import write_json_atomic
from pytest_rocm.manifest import package_versions
from pytest_rocm.records import read_records
from pytest_rocm.report import build_gate_report
from pytest_rocm.summary import group_table, reason_lines

EXIT_BAD_INPUT = 2


def _source(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"expected TOOL=FILE, got {value!r}")
    if name not in detect_mod.SOURCE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown source {name!r}; use one of {', '.join(detect_mod.SOURCE_NAMES)}")
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
                             + ", ".join(detect_mod.SOURCE_NAMES))
    doctor.add_argument("--expect-gpus", type=int, metavar="N", help="exit 3 unless exactly N GPUs are visible")
    doctor.add_argument("--expect-sku", type=_sku, metavar="SKU", help="exit 3 unless every GPU is this SKU")
    doctor.add_argument("--require-gpu", action="store_true", help="exit 4 when no GPU is visible")

    report = commands.add_parser("report", help="rebuild gate-report.json from a folder of records")
    report.add_argument("--records", required=True, type=Path, metavar="DIR",
                        help="the --rocm-report-dir of a run (records-*.jsonl, manifest.json)")
    report.add_argument("--out", type=Path, metavar="DIR", help="where to write gate-report.json (default: DIR)")
    report.add_argument("--group-map", type=Path, metavar="TOML", help="groups for records that carry none")
    return parser


def run_doctor(args) -> int:
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
    if not args.records.is_dir():
        print(f"rocm-gate report: {args.records} is not a folder of records", file=sys.stderr)
        return EXIT_BAD_INPUT
    loaded = read_records(args.records)
    if not loaded.files:
        print(f"rocm-gate report: no records-*.jsonl files in {args.records}", file=sys.stderr)
        return EXIT_BAD_INPUT
    manifest_path = args.records / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    group_of = None
    if args.group_map:
        try:
            group_of = load_group_map(args.group_map, set(GROUPS)).group_of
        except GroupMapError as exc:
            print(f"rocm-gate report: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    report = build_gate_report(loaded.records, manifest, loaded.problems, group_of)
    out = write_json_atomic((args.out or args.records) / "gate-report.json", report)
    print("\n".join(group_table(report["groups"])))
    if report["skip_reasons"]:
        print("\ntests that did not run, by reason:")
        print("\n".join(reason_lines(report["skip_reasons"])))
    for problem in loaded.problems:
        print(f"record problem: {problem}")
    print(f"\nconclusion: {report['conclusion']} ({report['conclusion_reason']})\nwrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        return run_doctor(args)
    return run_report(args)


if __name__ == "__main__":
    sys.exit(main())
