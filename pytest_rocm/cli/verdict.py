"""`rocm-gate verdict --records DIR`: rebuild gate-report.json (verdicts, conclusion) from a run's records, offline.

Exit status follows the conclusion, so a workflow can gate on it without reading
JSON: 0 success or neutral (infrastructure fault, evidence attached: passes a
required check), 1 failure, 3 incomplete (the run did not execute what it
collected), 5 skipped (no blocking gate ran), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


def add_parser(commands, name: str) -> None:
    report = commands.add_parser(name, help="rebuild gate-report.json (verdicts, conclusion) from a folder of "
                                            "records, offline" + (" (same as verdict)" if name == "report" else ""),
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("--records", required=True, type=Path, metavar="DIR",
                        help="the --rocm-report-dir of a run (records-*.jsonl, manifest.json)")
    report.add_argument("--out", type=Path, metavar="DIR", help="where to write gate-report.json (default: DIR)")
    report.add_argument("--group-map", type=Path, metavar="TOML", help="groups for records that carry none")


def _fail(message: str) -> int:
    print(f"rocm-gate verdict: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args) -> int:
    from pytest_rocm.catalog.groups import GROUPS, GroupMapError, load_group_map
    from pytest_rocm.results.conclusion import EXIT_BY_CONCLUSION
    from pytest_rocm.results.manifest import ManifestError, read_manifest
    from pytest_rocm.results.records import read_records
    from pytest_rocm.results.report import build_gate_report
    from pytest_rocm.results.summary import terminal_lines
    from pytest_rocm.results.verdicts import SignatureError, build_signatures
    from pytest_rocm.schemas.artifacts import write_json_atomic

    if not args.records.is_dir():
        return _fail(f"{args.records} is not a folder of records")
    loaded = read_records(args.records)
    if not loaded.files:
        return _fail(f"no records-*.jsonl files in {args.records}")
    manifest_path = args.records / "manifest.json"
    try:
        manifest = read_manifest(manifest_path) if manifest_path.is_file() else {}
    except ManifestError as exc:
        return _fail(str(exc))
    group_of = None
    if args.group_map:
        try:
            group_of = load_group_map(args.group_map, set(GROUPS)).group_of
        except GroupMapError as exc:
            return _fail(str(exc))
    try:
        # The signatures the run used (its ini may have added some) travel in its manifest.
        signatures = build_signatures([f"{k}={v}" for k, v in manifest.get("verdict_config", {})
                                       .get("infra_signatures", {}).items()])
    except SignatureError as exc:
        return _fail(f"{manifest_path}: {exc}")
    report = build_gate_report(loaded.records, manifest, loaded.problems, group_of, signatures)
    out = write_json_atomic((args.out or args.records) / "gate-report.json", report)
    print("\n".join(line for line, _ in terminal_lines(report)))
    print(f"wrote {out}")
    return EXIT_BY_CONCLUSION[report["conclusion"]]
