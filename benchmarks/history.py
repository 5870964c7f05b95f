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

Scale mode (`--scale`): a year of vLLM-like volume in each backend, SQLite and PostgreSQL, side by
side: every night 47,000 tests on 3 SKUs (main runs of the day's commit) and every day 50 PR runs of
5,400 tests, about 150 million result rows (`--results` sets the size: a small figure is a smoke
test). The bulk is generated inside the engine (a recursive CTE on SQLite, generate_series on
PostgreSQL), not through ingest. Then, medians of `--repeats`:
- (a) ingest of one nightly run of 47,000 results through `store.insert_run` (as `rocm-gate history
  add` in a fresh process: the test id cache empty; and with it warm, as for the second run of one
  command), against its bare baseline: the same rows into a bare table with no key or index (COPY on
  PostgreSQL, an executemany on SQLite), in one transaction; goal within 2x;
- (b) main's state of one SKU (`trunk/state.build`, what `rocm-gate history trunk` does) against a
  bare SELECT of the same rows: every result of the window's main runs, fetched;
and both stores' trunk state is checked to be the same document. PostgreSQL is a server of its own
in `--dir` (scripts/postgres.sh, durable settings: fsync on) unless `--postgres URL` names one (a
superuser's; a database `rocm_gate_scale` is made there and dropped after).

    .venv/bin/python benchmarks/history.py --scale [--results 150000000] [--backends sqlite,postgresql]
        [--dir /tmp/rocm-gate-scale] [--postgres URL] [--repeats 5] [--keep] [--reuse]

`--keep` leaves the stores (and the server) for another look; `--reuse` measures them again without
generating (the runs of earlier measurements stay in them: a few of 47,000 rows, not main's).
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

from rocm_gate.dashboard import site  # noqa: E402
from rocm_gate.history import store  # noqa: E402

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
    parser.add_argument("--scale", action="store_true", help="a year in both backends (below)")
    parser.add_argument("--results", type=int, default=150_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--dir", default="/tmp/rocm-gate-scale")
    parser.add_argument("--postgres", help="a PostgreSQL server's superuser URL")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument(
        "--reuse", action="store_true", help="measure stores a --keep run left (no generation)"
    )
    args = parser.parse_args()
    if args.scale:
        run_scale(args)
        return
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

        from rocm_gate.history.store import _validated  # noqa: E402 (one real validation, for scale)

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


# --- scale mode: a year in both backends ------------------------------------------------------------

YEAR_SKUS = ["MI300X", "MI325X", "MI355X"]
NIGHTLY_TESTS = 47_000
PR_TESTS = 5_400
PRS_PER_DAY = 50
RUNS_PER_DAY = len(YEAR_SKUS) + PRS_PER_DAY
RESULTS_PER_DAY = len(YEAR_SKUS) * NIGHTLY_TESTS + PRS_PER_DAY * PR_TESTS
SCALE_DB = "rocm_gate_scale"
GENERATED = "2027-01-01T00:00:00+00:00"  # the trunk state's time, the same on both
# a result's verdict, from its run and test ids alone (the same rows on both engines): known gaps, a
# break every 40 days on each of 23 tests (15 days red), flakes, infra faults; PR runs fail a few
# tests of their own
VERDICT = (
    "CASE WHEN test_id % 2503 = 0 THEN 'known_gap' "
    "WHEN origin = 'main' AND test_id % 1999 = 0 AND ((id - 1) / ? + test_id / 1999) % 40 >= 25 "
    "THEN 'regression' "
    "WHEN origin = 'main' AND (test_id * 7 + id) % 4999 = 0 THEN 'flaky' "
    "WHEN origin = 'main' AND (test_id + id * 13) % 9973 = 0 THEN 'infra' "
    "WHEN origin = 'pr' AND test_id % 997 = 0 AND id % 3 = 0 THEN 'regression' "
    "ELSE 'pass' END"
)
RESULT_ROW = (
    "SELECT id, test_id, 1, CASE v WHEN 'pass' THEN 'passed' WHEN 'flaky' THEN 'passed' "
    "WHEN 'known_gap' THEN 'known_gap' ELSE 'failed' END, v, test_id % 100, "
    "CASE WHEN v = 'infra' THEN '3' END, CASE WHEN v IN ('pass', 'known_gap') THEN 1 ELSE 2 END, "
    "CASE WHEN v = 'known_gap' THEN 'https://github.com/vllm-project/vllm/issues/' || test_id END, "
    "CASE WHEN v = 'known_gap' THEN 'fp8 kv cache' END, "
    "CASE WHEN v IN ('regression', 'flaky') THEN 'AssertionError: gsm8k accuracy below 0.700 in case ' "
    "|| test_id END, NULL"
)
# a run's test ids: a nightly runs them all, a PR run a window of PR_TESTS that moves with the run
TEST_ID = (
    f"CASE WHEN r.origin = 'main' THEN s.x ELSE (r.id * {PR_TESTS} + s.x) % {NIGHTLY_TESTS} + 1 END"
)
SOURCE = {
    "sqlite": (
        "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < ?) ",
        "runs r JOIN s ON s.x <= CASE WHEN r.origin = 'main' THEN ? ELSE ? END",
    ),
    "postgresql": (
        "",
        "runs r CROSS JOIN LATERAL generate_series(1, CASE WHEN r.origin = 'main' THEN ? ELSE ? END) AS s(x)",
    ),
}


def generate_sql(dialect: str) -> tuple[str, list]:
    """The statement that adds the result rows of runs `first` to `last` (its last two parameters),
    and its leading parameters."""
    prefix, source = SOURCE[dialect]
    columns = ", ".join(store.RESULT_COLUMNS)
    sql = (
        f"{prefix}INSERT INTO results ({columns}) {RESULT_ROW} FROM (SELECT id, test_id, {VERDICT} AS v "
        f"FROM (SELECT r.id AS id, r.origin AS origin, {TEST_ID} AS test_id FROM {source} "
        "WHERE r.id BETWEEN ? AND ?) a) b ORDER BY id, test_id"
    )
    head = [NIGHTLY_TESTS] if dialect == "sqlite" else []
    return sql, head + [RUNS_PER_DAY, NIGHTLY_TESTS, PR_TESTS]


def year_runs(days: int) -> list[tuple]:
    """The runs rows, oldest first: each day 3 nightly main runs of the day's commit, then 50 PR
    runs."""
    import datetime as dt
    import hashlib

    rows = []
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for day in range(days):
        sha = hashlib.sha1(f"main-{day}".encode()).hexdigest()
        for k, sku in enumerate(YEAR_SKUS):
            at = (start + dt.timedelta(days=day, hours=2, minutes=10 * k)).isoformat()
            rows.append((f"main:scale:{day}:{sku}", f"nightly-{day}-{sku}", at, at, sku, f"node-{k}",
                         sha, "failure", "main", "schedule", "refs/heads/main", None, str(day * 100 + k)))  # fmt: skip
        for k in range(PRS_PER_DAY):
            at = (start + dt.timedelta(days=day, hours=3, minutes=20 * k)).isoformat()
            number = 10_000 + day * PRS_PER_DAY + k
            rows.append((f"pr:scale:{day}:{k}", f"pr-{number}", at, at, "MI300X", f"node-pr-{k % 8}",
                         hashlib.sha1(f"pr-{number}".encode()).hexdigest(), "success", "pr",
                         "pull_request", f"refs/pull/{number}/merge", number, str(day * 100 + 50 + k)))  # fmt: skip
    return rows


def generate(target, days: int) -> float:
    """The year's runs, tests and results in a new store at `target`; seconds taken."""
    start = time.perf_counter()
    conn = store.connect(target)
    if conn.dialect == "sqlite":
        conn.execute("PRAGMA cache_size = -1000000")  # generation only: the measurements reopen
    with conn.transaction():
        conn.executemany(
            "INSERT INTO tests (name, grp) VALUES (?, ?)",
            [(name, name.split("/")[1]) for name in test_names(NIGHTLY_TESTS)],
        )
        conn.executemany(
            "INSERT INTO runs (digest, source, started, finished, sku, runner, git_sha, conclusion, origin, "
            "event, ref, pr, gh_run_id, vendor, complete, repository, default_branch, rocm, torch) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'amd', 1, 'vllm-project/vllm', 'main', '7.0.2', '2.9.0')",
            year_runs(days),
        )
    sql, head = generate_sql(conn.dialect)
    batch = 5  # days a transaction
    for first_day in range(0, days, batch):
        first = first_day * RUNS_PER_DAY + 1
        last = min(days, first_day + batch) * RUNS_PER_DAY
        with conn.transaction():
            conn.execute(sql, [*head, first, last])
        done = min(days, first_day + batch)
        print(
            f"    {conn.dialect}: {done}/{days} days, {time.perf_counter() - start:,.0f} s",
            file=sys.stderr,
            flush=True,
        )
    if conn.dialect == "postgresql":
        conn.execute("VACUUM ANALYZE")  # what autovacuum does over a year
    else:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - start


def size_of(conn, target) -> int:
    if conn.dialect == "postgresql":
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return sum(p.stat().st_size for p in Path(target).parent.glob(Path(target).name + "*"))


BARE_COLUMNS = ("run_id", "test", "grp", "blocking", "status", "verdict", "duration", "devices",
                "attempts", "gap_issue", "gap_reason")  # fmt: skip


def measure_ingest(target, repeats: int) -> dict:
    """(a): one nightly of 47,000 results through insert_run, the test id cache cold (a fresh
    `rocm-gate history add`) and warm, and the same rows into a bare table."""
    import statistics

    rng = random.Random(1)
    names = test_names(NIGHTLY_TESTS)
    conn = store.connect(target)
    bare_target = (
        conn if conn.dialect == "postgresql" else store.connect(Path(target).with_name("bare.db"))
    )
    bare_target.execute(
        "CREATE TABLE IF NOT EXISTS bare (run_id INTEGER, test TEXT, grp TEXT, blocking INTEGER, status TEXT, "
        "verdict TEXT, duration REAL, devices TEXT, attempts INTEGER, gap_issue TEXT, gap_reason TEXT)"
    )
    cold, warm, bare = [], [], []
    tag = time.time_ns()  # digests of this measurement's own (a --reuse run adds its runs anew)
    for number in range(repeats):
        report, manifest, parity = synthetic_run(rng, 0, number, "MI300X", "amd", names)
        conn.test_ids.clear()
        start = time.perf_counter()
        store.insert_run(conn, report, manifest, parity, f"scale-cold-{tag}-{number}", "scale")
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.insert_run(conn, report, manifest, parity, f"scale-warm-{tag}-{number}", "scale")
        warm.append(time.perf_counter() - start)
        flat = [
            (number, t, r["group"], 1, r["status"], r["verdict"], r["duration"], None, len(r["attempts"]), None, None)
            for t, r in report["tests"].items()
        ]  # fmt: skip
        start = time.perf_counter()
        with bare_target.transaction():
            bare_target.copy_rows("bare", BARE_COLUMNS, flat)
        bare.append(time.perf_counter() - start)
    if bare_target is not conn:
        bare_target.close()
    conn.close()
    return {
        "cold": statistics.median(cold),
        "warm": statistics.median(warm),
        "bare": statistics.median(bare),
    }


def measure_trunk(target, repeats: int, sku: str = "MI300X") -> dict:
    """(b): main's state of one SKU, against a bare SELECT of every result of the window's runs."""
    import statistics

    from rocm_gate.trunk import state

    conn = store.connect(target)
    runs, _ = state.main_runs(conn, sku)
    ids = [r[0] for r in runs][-state.WINDOW :]
    marks = ", ".join("?" for _ in ids)
    builds, bares, document, rows = [], [], None, 0
    for _ in range(repeats):
        start = time.perf_counter()
        document = state.build(conn, sku, generated=GENERATED)
        builds.append(time.perf_counter() - start)
        start = time.perf_counter()
        rows = len(
            conn.execute(
                f"SELECT run_id, test_id, verdict, fingerprint FROM results WHERE run_id IN ({marks})",
                ids,
            ).fetchall()
        )
        bares.append(time.perf_counter() - start)
    conn.close()
    return {
        "build": statistics.median(builds),
        "bare": statistics.median(bares),
        "rows": rows,
        "document": document,
    }


def scale_target(args, backend: str):
    """Where a backend's store goes, and how to drop it."""
    folder = Path(args.dir)
    if backend == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "history-scale.db"
        for old in folder.glob("*.db*"):
            if not args.reuse:
                old.unlink()

        def drop():
            for made in folder.glob("*.db*"):
                made.unlink()

        return path, drop
    import subprocess

    import psycopg

    from rocm_gate.history.backends import with_database

    server = args.postgres
    if not server:
        server = subprocess.run(
            ["bash", str(REPO / "scripts" / "postgres.sh"), "start", str(folder / "postgres"),
             "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
             "-c", "shared_buffers=4GB", "-c", "effective_cache_size=12GB", "-c", "work_mem=64MB",
             "-c", "maintenance_work_mem=1GB", "-c", "max_wal_size=16GB", "-c", "checkpoint_timeout=30min"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    if not args.reuse:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {SCALE_DB} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {SCALE_DB}")

    def drop():
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {SCALE_DB} WITH (FORCE)")
        if not args.postgres:
            subprocess.run(
                ["bash", str(REPO / "scripts" / "postgres.sh"), "stop", str(folder / "postgres")]
            )

    return with_database(server, SCALE_DB), drop


def run_scale(args) -> None:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    days = max(1, round(args.results / RESULTS_PER_DAY))
    results = days * RESULTS_PER_DAY
    print(
        f"history at scale: {days} days, {days * RUNS_PER_DAY:,} runs, {results:,} results (each day "
        f"{len(YEAR_SKUS)} nightly main runs of {NIGHTLY_TESTS:,} tests and {PRS_PER_DAY} PR runs of "
        f"{PR_TESTS:,}); medians of {args.repeats}"
    )
    found = {}
    for backend in backends:
        target, drop = scale_target(args, backend)
        try:
            generated_s = None if args.reuse else generate(target, days)
            with store.connect(target) as conn:
                size = size_of(conn, target)
            found[backend] = {
                "generate": generated_s,
                "size": size,
                "ingest": measure_ingest(target, args.repeats),
                "trunk": measure_trunk(target, args.repeats),
            }
        finally:
            if not args.keep:
                drop()
    print_scale(found, results)


def print_scale(found: dict, results: int) -> None:
    names = list(found)

    def row(label: str, cells: list[str]) -> None:
        print(f"  {label:<42}" + "".join(f"{c:>27}" for c in cells))

    row("", names)
    row(
        "bulk generation (not ingest)",
        [
            "reused" if f["generate"] is None else f"{f['generate'] / 60:,.1f} min"
            for f in found.values()
        ],
    )
    row(
        "store size",
        [f"{f['size'] / 2**30:,.1f} GiB ({f['size'] / results:.0f} B/row)" for f in found.values()],
    )
    for kind, label in (
        ("cold", "(a) ingest 47,000, fresh process"),
        ("warm", "(a) ingest 47,000, ids cached"),
    ):
        row(label, [f"{f['ingest'][kind]:.3f} s" for f in found.values()])
        row(
            "    / bare (COPY; executemany)",
            [f"{f['ingest'][kind] / f['ingest']['bare']:.2f}x" for f in found.values()],
        )
    row("(a) bare: same rows, bare table", [f"{f['ingest']['bare']:.3f} s" for f in found.values()])
    row(
        "(b) trunk state of MI300X (state.build)",
        [f"{f['trunk']['build']:.3f} s" for f in found.values()],
    )
    row(
        "(b) bare SELECT of the same rows",
        [f"{f['trunk']['bare']:.3f} s ({f['trunk']['rows']:,} rows)" for f in found.values()],
    )
    row(
        "    build / bare",
        [f"{f['trunk']['build'] / f['trunk']['bare']:.2f}x" for f in found.values()],
    )
    documents = [f["trunk"]["document"] for f in found.values()]
    failing = (
        sum(t["state"] == "failing" for t in documents[0]["tests"].values()) if documents else 0
    )
    print(
        f"  trunk state: {len(documents[0]['tests']) if documents else 0} tests listed ({failing} failing) over "
        f"{documents[0]['main_runs'] if documents else 0} main runs; the same document on every backend: "
        f"{'yes' if all(d == documents[0] for d in documents) else 'NO'}"
    )
    ingest_met = all(f["ingest"]["cold"] / f["ingest"]["bare"] <= 2 for f in found.values())
    print(
        f"  ingest within 2x of its bare baseline (fresh process): {'met' if ingest_met else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
