"""The history store: one SQLite file in WAL mode, a versioned schema, and validated ingest.

Why SQLite: stdlib, one file, and WAL lets several runners on one host add results while the
dashboard reads (writers wait on each other up to BUSY_TIMEOUT_S). The SQL is kept portable (plain
types, no SQLite-only functions in queries) so the same schema and queries run on PostgreSQL when
one file is not enough.

Ingest takes results folders (or gate-report.json files): the gate report and its manifest (the
folder's manifest.json, else the report's copy) and, when present, parity.json of the same run.
Every file is validated against its schema before anything is written; one folder is one
transaction; a report already ingested (same SHA-256) is skipped.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.results.fingerprint import of_test as fingerprint_of
from pytest_rocm.results.manifest import origin_kind
from pytest_rocm.schemas.artifacts import describe_reference, manifest_stack
from pytest_rocm.schemas.loader import ArtifactError, load_artifact

BUSY_TIMEOUT_S = 60
# version -> statements; a database at version v gets every migration above v, in order
MIGRATIONS = {
    1: [
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            digest TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            started TEXT, finished TEXT,
            vendor TEXT NOT NULL, sku TEXT NOT NULL, runner TEXT, git_sha TEXT,
            conclusion TEXT NOT NULL, complete INTEGER NOT NULL,
            rocm TEXT, driver TEXT, torch TEXT, framework TEXT, image TEXT)""",
        # test names once (a year of nightly runs repeats each name hundreds of times)
        "CREATE TABLE tests (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, grp TEXT)",
        """CREATE TABLE results (
            run_id INTEGER NOT NULL REFERENCES runs(id), test_id INTEGER NOT NULL REFERENCES tests(id),
            blocking INTEGER NOT NULL, status TEXT NOT NULL, verdict TEXT NOT NULL, duration REAL,
            devices TEXT, attempts INTEGER NOT NULL, gap_issue TEXT, gap_reason TEXT,
            PRIMARY KEY (run_id, test_id)) WITHOUT ROWID""",
        # The questions start from what did not pass: a partial index keeps passes out of it. There
        # is no index by test: keeping one cost ingest more than twice the bare insert, and the few
        # tests whose whole history a build reads (those that did not pass) are found in one scan.
        "CREATE INDEX results_not_passed ON results (verdict, test_id) WHERE verdict <> 'pass'",
        """CREATE TABLE parity (
            run_id INTEGER NOT NULL REFERENCES runs(id), grp TEXT NOT NULL,
            parity REAL, both_passing INTEGER NOT NULL, reference_passing INTEGER NOT NULL,
            blocking TEXT NOT NULL, gaps INTEGER NOT NULL,
            PRIMARY KEY (run_id, grp))""",
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        "INSERT INTO schema_version (version) VALUES (0)",
    ],
    # Where a run comes from (the manifest's provenance): main runs say what state the default
    # branch is in, PR runs do not (results/manifest.py: origin_kind). Runs stored before this are
    # `other`. A failure keeps its fingerprint, so a PR's failure can be told from main's failure of
    # the same test.
    2: [
        "ALTER TABLE runs ADD COLUMN origin TEXT NOT NULL DEFAULT 'other'",
        "ALTER TABLE runs ADD COLUMN event TEXT",
        "ALTER TABLE runs ADD COLUMN ref TEXT",
        "ALTER TABLE runs ADD COLUMN default_branch TEXT",
        "ALTER TABLE runs ADD COLUMN repository TEXT",
        "ALTER TABLE runs ADD COLUMN pr INTEGER",
        "ALTER TABLE runs ADD COLUMN head_sha TEXT",
        "ALTER TABLE runs ADD COLUMN base_sha TEXT",
        "ALTER TABLE runs ADD COLUMN merge_base TEXT",
        "ALTER TABLE runs ADD COLUMN gh_run_id TEXT",
        "ALTER TABLE runs ADD COLUMN reference TEXT",  # the parity report's reference (CUDA, H100 nightly, ...)
        "ALTER TABLE runs ADD COLUMN parity_overall REAL",
        "ALTER TABLE results ADD COLUMN fingerprint TEXT",
        "CREATE INDEX runs_by_origin ON runs (origin, sku)",
    ],
    # A run's identity is its origin and its GitHub run (where the caller names it), never the bytes of
    # its report alone: a PR's run that uploaded a byte copy of a main run's report made the real main
    # run a no-op. The `digest` column holds that identity (`identity`); the runs stored before keep
    # their report's digest, under their origin.
    3: ["UPDATE runs SET digest = origin || ':' || digest"],
    # A quarantined gate that fails still fails main: trunk health counts it (shown as quarantined),
    # and a quarantine is no recovery. 1 where the quarantine held a test that would block.
    4: ["ALTER TABLE results ADD COLUMN quarantined INTEGER"],
}
VERSION = max(MIGRATIONS)


class HistoryError(BadInput):
    """Bad input or a store this version cannot use; the message names the file and the fix."""


class Connection(sqlite3.Connection):
    """A connection that remembers test ids (a name, once added, keeps its id)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.test_ids: dict[str, int] = {}


def connect(path: str | Path) -> Connection:
    """Open (creating and migrating as needed) the store at `path`."""
    path = Path(path)
    try:
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=Connection
        )
        _use_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        # Foreign keys are declared for the reader and for other engines; not enforced here: ingest
        # writes result rows only for the run it has just added and test ids it has just read, and
        # checking two keys per row cost a tenth of the ingest time.
        conn.execute("PRAGMA foreign_keys=OFF")
        _migrate(conn)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: not a usable history database ({exc})") from None
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, waiting for other writers. SQLite answers a journal-mode switch that meets
    another connection's lock with "database is locked" at once, without its busy timeout: two
    runners that create the store together hit that (measured: 1 in 90 connections of 6 processes
    starting at once)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def version(conn: sqlite3.Connection) -> int:
    has = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_version'"
    ).fetchone()[0]
    return conn.execute("SELECT version FROM schema_version").fetchone()[0] if has else 0


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")  # one migrator at a time; the others see the result
    try:
        current = version(conn)
        if current > VERSION:
            raise HistoryError(
                f"the database is at schema version {current}, newer than this pytest-rocm ({VERSION}): "
                "upgrade pytest-rocm"
            )
        for number in range(current + 1, VERSION + 1):
            for statement in MIGRATIONS[number]:
                conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = ?", (number,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@dataclass
class Ingested:
    source: str
    added: bool  # False: already in the store
    run_id: int
    tests: int


def _validated(path: Path, kind: str) -> tuple[dict, bytes]:
    """The artifact through the strict loader (results are written by the gated code), and its
    bytes."""
    try:
        return load_artifact(path, kind), path.read_bytes()
    except (ArtifactError, OSError) as exc:
        raise HistoryError(str(exc)) from None


def _stack(manifest: dict) -> dict:
    """The stack columns of a run: the SKUs joined (the vendor without GPUs), and CUDA where there
    is no ROCm."""
    stack = manifest_stack(manifest)
    return {
        **stack,
        "sku": "/".join(stack["skus"]) or stack["vendor"],
        "rocm": stack["rocm"] or stack["cuda"],
    }


def read_run(source: Path) -> tuple[dict, dict, dict | None, str]:
    """(gate report, manifest, parity report or None, digest) of a results folder or a
    gate-report.json."""
    source = Path(source)
    report_path = source / "gate-report.json" if source.is_dir() else source
    if not report_path.is_file():
        raise HistoryError(
            f"{source}: no gate-report.json (give a results folder or a gate report)"
        )
    report, raw = _validated(report_path, "gate-report")
    folder = report_path.parent
    manifest = (
        _validated(folder / "manifest.json", "manifest")[0]
        if (folder / "manifest.json").is_file()
        else report["manifest"]
    )
    parity = (
        _validated(folder / "parity.json", "parity")[0]
        if (folder / "parity.json").is_file()
        else None
    )
    return report, manifest, parity, hashlib.sha256(raw).hexdigest()


ORIGINS = ("manifest", "pr", "other")


def ingest(
    conn: Connection,
    source: str | Path,
    origin: str = "manifest",
    run: str | None = None,
    sha: str | None = None,
) -> Ingested:
    """Validate a results folder (or gate report) whole, then add it in one transaction. `origin`:
    `manifest` keeps where the manifest says the run comes from; `pr` or `other` overrides it, for
    results whose run GitHub says was not a main run (a PR's code wrote them, and may claim to be
    main). `run`: the GitHub run (`ID` or `ID-ATTEMPT`) the caller took the results from, as GitHub
    lists it: the run's identity, with the folder's name (one artifact per runner class). `sha`: the
    commit GitHub says the run is of; a run whose manifest names another commit as tested is no main
    run, whatever it claims (a dispatch that tested a fork's commit, or results a merge queue
    candidate's code forged), and is stored as `pr`."""
    # all validated before anything is written
    report, manifest, parity, digest = read_run(Path(source))
    return insert_run(
        conn,
        report,
        manifest,
        parity,
        digest,
        str(source),
        origin,
        run and f"{run}/{Path(source).name}",
        sha,
    )


def identity(origin: str, digest: str, run: str | None) -> str:
    """What makes a stored run one run: its origin, and its GitHub run where known, else its report's
    bytes."""
    return f"{origin}:run:{run}" if run else f"{origin}:{digest}"


def insert_run(
    conn: Connection,
    report: dict,
    manifest: dict,
    parity: dict | None,
    digest: str,
    source: str,
    origin_override: str = "manifest",
    run: str | None = None,
    sha: str | None = None,
) -> Ingested:
    """Add one validated run (a no-op when its identity is already stored)."""
    stack = _stack(manifest)
    origin = manifest.get("provenance") if isinstance(manifest.get("provenance"), dict) else {}
    kind = origin_kind(origin) if origin_override == "manifest" else origin_override
    if kind == "main" and sha is not None and origin.get("tested_sha") != sha.lower():
        kind = "pr"
    key = identity(kind, digest, run)
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT id FROM runs WHERE digest = ?", (key,)).fetchone()
        if row:
            conn.execute("COMMIT")
            return Ingested(str(source), False, row[0], len(report["tests"]))
        cursor = conn.execute(
            "INSERT INTO runs (digest, source, started, finished, vendor, sku, runner, git_sha, conclusion, complete, "
            "rocm, driver, torch, framework, image, origin, event, ref, default_branch, repository, pr, head_sha, "
            "base_sha, merge_base, gh_run_id, reference, parity_overall) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                str(source),
                manifest.get("started"),
                manifest.get("finished"),
                stack["vendor"],
                stack["sku"],
                manifest.get("runner"),
                manifest.get("git_sha"),
                report["conclusion"],
                int(report["complete"]),
                stack["rocm"],
                stack["driver"],
                stack["torch"],
                stack["framework"],
                stack["image"],
                kind,
                origin.get("event"),
                origin.get("ref"),
                origin.get("default_branch"),
                origin.get("repository"),
                origin.get("pr"),
                origin.get("head_sha"),
                origin.get("base_sha"),
                origin.get("merge_base"),
                origin.get("run_id"),
                *_reference(parity),
            ),
        )
        run_id = cursor.lastrowid
        ids = _test_ids(conn, report["tests"])
        conn.executemany(
            "INSERT INTO results (run_id, test_id, blocking, status, verdict, duration, devices, attempts, gap_issue, "
            "gap_reason, fingerprint, quarantined) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _result_rows(run_id, ids, report["tests"]),
        )
        if parity:
            conn.executemany(
                "INSERT INTO parity (run_id, grp, parity, both_passing, reference_passing, blocking, gaps) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        group,
                        g["parity"],
                        g["both_passing"],
                        g["reference_passing"],
                        g["blocking"],
                        len(g["gaps"]),
                    )
                    for group, g in parity["groups"].items()
                ],
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Ingested(str(source), True, run_id, len(report["tests"]))


def _reference(parity: dict | None) -> tuple[str | None, float | None]:
    """The parity report's reference label and overall parity (None when there is no report)."""
    if not parity:
        return None, None
    inputs = parity.get("inputs") if isinstance(parity.get("inputs"), dict) else {}
    side = inputs.get("reference") if isinstance(inputs.get("reference"), dict) else {}
    label = describe_reference(side) if isinstance(side.get("label"), str) else None
    return (label[:200] if label else "reference (unnamed)"), (parity.get("overall") or {}).get(
        "parity"
    )


def _test_ids(conn: Connection, tests: dict[str, dict]) -> dict[str, int]:
    """Ids of the run's test names, adding the new ones (a test's group is the one it was first seen
    with)."""
    known = conn.test_ids
    new = [name for name in tests if name not in known]
    if new:
        conn.executemany(
            "INSERT INTO tests (name, grp) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            [(name, tests[name]["group"]) for name in new],
        )
        # another writer may have added some: read them all back
        for start in range(0, len(new), 500):
            chunk = new[start : start + 500]
            known.update(
                conn.execute(
                    f"SELECT name, id FROM tests WHERE name IN ({', '.join('?' for _ in chunk)})",
                    chunk,
                )
            )
    return known


def _result_rows(run_id: int, ids: dict[str, int], tests: dict[str, dict]):
    # The hot loop of ingest (millions of rows a year): a pass needs no devices and has no gap.
    for name, t in tests.items():
        verdict = t["verdict"]
        if verdict == "pass":
            yield (
                run_id,
                ids[name],
                t["blocking"],
                t["status"],
                verdict,
                _duration(t["duration"]),
                None,
                len(t["attempts"]),
                None,
                None,
                None,
                _quarantined(t),
            )
        else:
            gap = t.get("known_gap") or {}
            yield (
                run_id,
                ids[name],
                t["blocking"],
                t["status"],
                verdict,
                _duration(t["duration"]),
                _devices(t),
                len(t["attempts"]),
                gap.get("issue"),
                gap.get("reason"),
                fingerprint_of(t) if verdict in ("regression", "unconfirmed", "flaky") else None,
                _quarantined(t),
            )


def _quarantined(test: dict) -> int | None:
    """1 where a quarantine held a test that would have blocked (its entry's `blocks`; reports
    made before it said so: any)."""
    held = test.get("quarantine")
    return 1 if held and held.get("blocks", True) else None


def _duration(value: float) -> float | None:
    """A duration as stored: a finite number of seconds under a year, else unknown (the schema
    checks the type; 10**30 or a negative figure says the run's clock or writer was wrong, not how
    long a test took)."""
    return float(value) if 0 <= value < 366 * 86400 else None


def _devices(test: dict) -> str | None:
    """The devices of the failing attempts (where an infra fault happened), as `0,3`."""
    seen = []
    for attempt in test["attempts"]:
        if attempt["status"] != "passed":
            for gpu in attempt.get("gpus") or []:
                if gpu not in seen:
                    seen.append(gpu)
    return ",".join(map(str, seen)) if seen else None
