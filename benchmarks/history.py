"""History at scale: ingest a synthetic 90 days, build the dashboard, and extrapolate to a year.

Synthetic history (issue 13): every night 3 SKUs x 2 vendors run 5,000 tests, and every day 50 PR
runs of 500 tests (MI300X), about 4.9 million results in 90 days. A few tests are flaky, a few hit
infra faults on one runner or on several, a few are known gaps; everything else passes.

Prints, side by side in one run:
- the ingest rate through `history.store.insert_run` (the runs, results and parity rows in one transaction per
  run, as `rocm-gate history add` does after validating a file), against the limit: the same result rows
  bulk-inserted into one bare table of the same engine (goal: within 2x);
- the database size;
- the dashboard build time (goal < 30 s) and the site size (goal < 20 MB);
- a year extrapolated from the 90 days.
Schema validation of the files is not in the ingest figure (a 5,000-test report validates in about
0.3 s; it is timed once and printed).

    .venv/bin/python benchmarks/history.py [--days 90]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_rocm.dashboard import site  # noqa: E402
from pytest_rocm.history import store  # noqa: E402

NIGHTLY = [
    ("MI300X", "amd"),
    ("MI325X", "amd"),
    ("MI355X", "amd"),
    ("H100", "nvidia"),
    ("H200", "nvidia"),
    ("B200", "nvidia"),
]
GROUPS = [
    "attention",
    "engine",
    "api",
    "multimodal",
    "spec_decode",
    "distributed_moe",
    "accuracy",
    "performance",
]


def test_names(count: int) -> list[str]:
    return [
        f"tests/{GROUPS[i % len(GROUPS)]}/test_mod_{i // 50:03d}.py::test_case_{i}[param-{i % 7}]"
        for i in range(count)
    ]


def synthetic_run(
    rng: random.Random, day: int, number: int, sku: str, vendor: str, tests: list[str]
) -> tuple:
    results = {}
    for i, name in enumerate(tests):
        verdict, status, attempts = (
            "pass",
            "passed",
            [{"status": "passed", "worker": "gw0", "gpus": [i % 8], "duration": 1.0}],
        )
        gap = None
        if i % 997 == 0 and rng.random() < 0.4:
            verdict, status = "flaky", "passed"
            attempts = [{**attempts[0], "status": "failed"}, attempts[0]]
        elif i % 1999 == 0 and rng.random() < 0.5:
            verdict, status = "infra", "failed"
            attempts = [{**attempts[0], "status": "failed"}, attempts[0]]
        elif i % 2503 == 0:
            verdict, status = "known_gap", "known_gap"
            gap = {
                "reason": "fp8 kv cache",
                "issue": f"https://github.com/vllm-project/vllm/issues/{i}",
            }
        results[name] = {
            "group": name.split("/")[1],
            "blocking": True,
            "gate": True,
            "status": status,
            "verdict": verdict,
            "verdict_reason": "",
            "attempts": attempts,
            "probes": [],
            "duration": 1.0,
            "detail": "",
            "message": "",
            "known_gap": gap,
        }
    started = (
        f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T{number % 24:02d}:{number % 60:02d}:00+00:00"
    )
    report = {"conclusion": "success", "complete": True, "tests": results}
    manifest = {
        "started": started,
        "finished": started,
        "runner": f"node-{rng.randrange(40)}",
        "git_sha": f"{rng.getrandbits(160):040x}",
        "container_image": "rocm/vllm@sha256:" + "ab" * 32,
        "platform": {"vendor": vendor, "gpus": [{"sku": sku}] * 8, "versions": {"rocm": "7.0.2"}},
        "packages": {"torch": "2.9.0", "vllm": "0.12.0"},
    }
    parity = (
        {
            "groups": {
                g: {
                    "parity": 0.9,
                    "both_passing": 90,
                    "reference_passing": 100,
                    "blocking": "all",
                    "gaps": [],
                }
                for g in GROUPS
            }
        }
        if vendor == "amd" and len(tests) > 1000
        else None
    )
    return report, manifest, parity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    args = parser.parse_args()
    rng = random.Random(0)
    nightly_tests, pr_tests = test_names(5000), test_names(500)
    plan = []
    for day in range(args.days):
        plan += [(day, sku, vendor, nightly_tests) for sku, vendor in NIGHTLY]
        plan += [(day, "MI300X", "amd", pr_tests) for _ in range(50)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        conn = store.connect(tmp / "history.db")
        bare = sqlite3.connect(tmp / "bare.db", isolation_level=None)
        bare.execute("PRAGMA journal_mode=WAL")
        bare.execute("PRAGMA synchronous=NORMAL")
        bare.execute(
            "CREATE TABLE results (run_id INTEGER, test TEXT, grp TEXT, blocking INTEGER, status TEXT, "
            "verdict TEXT, duration REAL, devices TEXT, attempts INTEGER, gap_issue TEXT, gap_reason TEXT)"
        )
        ingest_s = bare_s = 0.0
        rows = 0
        for number, (day, sku, vendor, tests) in enumerate(plan):
            report, manifest, parity = synthetic_run(rng, day, number, sku, vendor, tests)
            start = time.perf_counter()
            store.insert_run(conn, report, manifest, parity, f"digest-{number}", f"run-{number}")
            ingest_s += time.perf_counter() - start
            flat = [
                (
                    number,
                    t,
                    r["group"],
                    1,
                    r["status"],
                    r["verdict"],
                    r["duration"],
                    None,
                    len(r["attempts"]),
                    None,
                    None,
                )
                for t, r in report["tests"].items()
            ]
            start = time.perf_counter()
            bare.execute("BEGIN")
            bare.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", flat)
            bare.execute("COMMIT")
            bare_s += time.perf_counter() - start
            rows += len(tests)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_bytes = (tmp / "history.db").stat().st_size
        start = time.perf_counter()
        sizes = site.build(conn, tmp / "site")
        build_s = time.perf_counter() - start

        from pytest_rocm.history.store import _validated  # noqa: E402 (one real validation, for scale)

        sample = tmp / "gate-report.json"
        report, manifest, _ = synthetic_run(rng, 0, 0, "MI300X", "amd", nightly_tests)
        full = {
            "schema": "pytest-rocm/gate-report/1",
            "conclusion_reason": "",
            "incomplete_causes": [],
            "collection_errors": [],
            "never_ran": [],
            "groups": {},
            "skip_reasons": [],
            "record_problems": [],
            "manifest": {
                **manifest,
                "schema": "pytest-rocm/manifest/1",
                "packages": {},
                "args": [],
                "finished": manifest["started"],
            },
            **report,
        }
        sample.write_text(json.dumps(full))
        start = time.perf_counter()
        _validated(sample, "gate-report")
        validate_s = time.perf_counter() - start

    site_bytes = sum(sizes.values())
    scale = 365 / args.days
    print(f"history: {args.days} days, {len(plan):,} runs, {rows:,} results")
    print(f"  ingest (insert_run)      {rows / ingest_s:,.0f} results/s  ({ingest_s:.1f} s)")
    print(f"  bare bulk insert (limit) {rows / bare_s:,.0f} results/s  ({bare_s:.1f} s)")
    print(
        f"  ratio ingest / limit     {ingest_s / bare_s:.2f}x  (goal <= 2x: {'met' if ingest_s / bare_s <= 2 else 'NOT met'})"
    )
    print(
        f"  database                 {db_bytes / 2**20:,.0f} MiB  ({db_bytes / rows:.0f} bytes a result)"
    )
    print(
        f"  site build               {build_s:.1f} s  (goal < 30 s: {'met' if build_s < 30 else 'NOT met'})"
    )
    print(
        f"  site size                {site_bytes / 2**20:.2f} MiB in {len(sizes)} files  (goal < 20 MB: "
        f"{'met' if site_bytes < 20e6 else 'NOT met'})"
    )
    print(f"  validating one 5,000-test gate report: {validate_s:.2f} s (not in the ingest figure)")
    print(
        f"  a year (x{scale:.2f}): {rows * scale / 1e6:.1f} M results, about {db_bytes * scale / 2**30:.1f} GiB of "
        f"database, about {ingest_s * scale / 60:.0f} min of ingest spread over the year"
    )


if __name__ == "__main__":
    main()
