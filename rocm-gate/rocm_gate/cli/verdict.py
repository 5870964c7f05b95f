"""`rocm-gate verdict RESULTS_DIR`: rebuild gate-report.json (verdicts, conclusion) from a run's
records, offline.

RESULTS_DIR is the run's --rocm-report-dir (records-*.jsonl, manifest.json), named as
`rocm-gate publish RESULTS_DIR` and `rocm-gate history add RESULTS` name it. `--records DIR` is the
older spelling of the same argument, still accepted (deprecated: it says so on stderr).

Exit status follows the conclusion, so a workflow can gate on it without reading
JSON: 0 success or neutral (infrastructure fault, evidence attached: passes a
required check), 1 failure, 3 incomplete (the run did not execute what it
collected), 5 skipped (no blocking gate ran), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rocm_gate.cli import exits
from rocm_gate.cli.arguments import map_file


def add_parser(commands, name: str) -> None:
    report = commands.add_parser(
        name,
        help="rebuild gate-report.json (verdicts, conclusion) from a folder of "
        "records, offline" + (" (same as verdict)" if name == "report" else ""),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "results",
        nargs="?",
        type=Path,
        metavar="RESULTS_DIR",
        help="the --rocm-report-dir of a run (records-*.jsonl, manifest.json)",
    )
    report.add_argument(
        "--records", type=Path, metavar="DIR", help="deprecated spelling of RESULTS_DIR"
    )
    report.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write gate-report.json (default: RESULTS_DIR)",
    )
    report.add_argument(
        "--group-map",
        type=map_file,
        metavar="MAP",
        help="groups for records that carry none: a file, or a shipped map by name (vllm)",
    )


def _fail(message: str) -> int:
    print(f"rocm-gate verdict: {message}", file=sys.stderr)
    return exits.BAD_INPUT


def _results_folder(args) -> Path | None:
    """RESULTS_DIR, or the deprecated --records DIR; None (after saying why) when neither or two
    differ."""
    if args.records is not None:
        if args.results is not None and args.results != args.records:
            _fail(
                f"two results folders given: RESULTS_DIR {args.results} and --records {args.records}; give one "
                "(`rocm-gate verdict RESULTS_DIR`)"
            )
            return None
        print(
            f"rocm-gate verdict: --records is deprecated; give the folder alone: rocm-gate verdict {args.records}",
            file=sys.stderr,
        )
        return args.records
    if args.results is None:
        _fail(
            "give the results folder of a run: rocm-gate verdict RESULTS_DIR (its --rocm-report-dir)"
        )
    return args.results


def _epoch(stamp) -> float | None:
    """A manifest's ISO time as seconds since the epoch; None where absent or not a time."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    except ValueError:
        return None


def run(args) -> int:
    from pytest_rocm.catalog.groups import GROUPS, GroupMapError, load_group_map
    from pytest_rocm.results.conclusion import EXIT_BY_CONCLUSION
    from pytest_rocm.results.manifest import ManifestError, read_manifest
    from pytest_rocm.results.records import other_runs, read_records
    from pytest_rocm.results.report import build_gate_report
    from pytest_rocm.results.summary import platform_title, terminal_lines
    from pytest_rocm.results.verdicts import SignatureError, build_signatures
    from pytest_rocm.schemas.artifacts import write_json_atomic

    folder = _results_folder(args)
    if folder is None:
        return exits.BAD_INPUT
    if not folder.is_dir():
        return _fail(f"{folder} is not a folder of records")
    loaded = read_records(folder)
    # a report without one process's records would blame or excuse the wrong tests
    if loaded.unreadable:
        for problem in loaded.unreadable:
            _fail(problem)
        return exits.BAD_INPUT
    if not loaded.files:
        return _fail(f"no records-*.jsonl files in {folder}")
    manifest_path = folder / "manifest.json"
    try:
        manifest = read_manifest(manifest_path) if manifest_path.is_file() else {}
    except ManifestError as exc:
        return _fail(str(exc))
    mixed = other_runs(
        loaded.by_file, _epoch(manifest.get("started")), _epoch(manifest.get("finished"))
    )
    if mixed:
        return _fail(
            f"{folder}: these records are not one run's: "
            + "; ".join(mixed[:3])
            + ("; and more" if len(mixed) > 3 else "")
            + ". Give the --rocm-report-dir of one run, as that run wrote it"
        )
    group_of = None
    if args.group_map:
        try:
            group_of = load_group_map(args.group_map, set(GROUPS)).group_of
        except GroupMapError as exc:
            return _fail(str(exc))
    try:
        # The signatures the run used (its ini may have added some) travel in its manifest.
        signatures = build_signatures(
            [
                f"{k}={v}"
                for k, v in manifest.get("verdict_config", {}).get("infra_signatures", {}).items()
            ]
        )
    except SignatureError as exc:
        return _fail(f"{manifest_path}: {exc}")
    out_folder = args.out or folder
    if out_folder.exists() and not out_folder.is_dir():
        return _fail(
            f"--out {out_folder} is a file; --out names the folder gate-report.json goes in"
        )
    report = build_gate_report(loaded.records, manifest, loaded.problems, group_of, signatures)
    try:
        out = write_json_atomic(out_folder / "gate-report.json", report)
    except OSError as exc:
        return _fail(f"{out_folder}: cannot write gate-report.json there ({exc.strerror or exc})")
    print(platform_title(report))
    print("\n".join(line for line, _ in terminal_lines(report)))
    print(f"wrote {out}")
    return EXIT_BY_CONCLUSION[report["conclusion"]]
