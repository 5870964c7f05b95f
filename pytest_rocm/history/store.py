"""The history store: one SQLite file in WAL mode, a versioned schema, and validated ingest.

Why SQLite: stdlib, one file, and WAL lets several runners on one host add results while the dashboard reads
(writers wait on each other up to BUSY_TIMEOUT_S). The SQL is kept portable (plain types, no SQLite-only
functions in queries) so the same schema and queries run on PostgreSQL when one file is not enough.

Ingest takes results folders (or gate-report.json files): the gate report and its manifest (the folder's
manifest.json, else the report's copy) and, when present, parity.json of the same run. Every file is
validated against its schema before anything is written; one folder is one transaction; a report already
ingested (same SHA-256) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.schemas.artifacts import schema_document

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
        """CREATE TABLE results (
            run_id INTEGER NOT NULL REFERENCES runs(id),
            test TEXT NOT NULL, grp TEXT, blocking INTEGER NOT NULL,
            status TEXT NOT NULL, verdict TEXT NOT NULL, duration REAL,
            devices TEXT, attempts INTEGER NOT NULL, gap_issue TEXT, gap_reason TEXT,
            PRIMARY KEY (run_id, test))""",
        "CREATE INDEX results_by_test ON results (test, run_id)",
        "CREATE INDEX results_by_verdict ON results (verdict, run_id)",
        """CREATE TABLE parity (
            run_id INTEGER NOT NULL REFERENCES runs(id), grp TEXT NOT NULL,
            parity REAL, both_passing INTEGER NOT NULL, reference_passing INTEGER NOT NULL,
            blocking TEXT NOT NULL, gaps INTEGER NOT NULL,
            PRIMARY KEY (run_id, grp))""",
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        "INSERT INTO schema_version (version) VALUES (0)",
    ],
}
VERSION = max(MIGRATIONS)


class HistoryError(ValueError):
    """Bad input or a store this version cannot use; the message names the file and the fix."""


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating and migrating as needed) the store at `path`."""
    path = Path(path)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        _migrate(conn)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: not a usable history database ({exc})") from None
    return conn


def version(conn: sqlite3.Connection) -> int:
    has = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()[0]
    return conn.execute("SELECT version FROM schema_version").fetchone()[0] if has else 0


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")  # one migrator at a time; the others see the result
    try:
        current = version(conn)
        if current > VERSION:
            raise HistoryError(f"the database is at schema version {current}, newer than this pytest-rocm ({VERSION}): "
                               "upgrade pytest-rocm")
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
    import jsonschema

    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HistoryError(f"{path}: cannot read it as a JSON {kind} ({exc})") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema_document(kind)).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise HistoryError(f"{path}: not a valid {kind} at {where}: {error.message[:300]}")
    return data, raw


def _stack(manifest: dict) -> dict:
    platform = manifest.get("platform") or {}
    versions = platform.get("versions") or {}
    packages = manifest.get("packages") or {}
    gpus = platform.get("gpus") or []
    skus = sorted({g.get("sku") or g.get("arch") or "?" for g in gpus})
    framework = ", ".join(f"{n} {packages[n]}" for n in sorted(packages) if n.split("-")[0] in ("vllm", "sglang"))
    return {"vendor": platform.get("vendor") or "unknown", "sku": "/".join(skus) or platform.get("vendor") or "unknown",
            "rocm": versions.get("rocm") or versions.get("hip") or versions.get("cuda"), "driver": versions.get("driver"),
            "torch": packages.get("torch") or versions.get("torch"), "framework": framework or None,
            "image": manifest.get("container_image")}


def read_run(source: Path) -> tuple[dict, dict, dict | None, str]:
    """(gate report, manifest, parity report or None, digest) of a results folder or a gate-report.json."""
    source = Path(source)
    report_path = source / "gate-report.json" if source.is_dir() else source
    if not report_path.is_file():
        raise HistoryError(f"{source}: no gate-report.json (give a results folder or a gate report)")
    report, raw = _validated(report_path, "gate-report")
    folder = report_path.parent
    manifest = _validated(folder / "manifest.json", "manifest")[0] if (folder / "manifest.json").is_file() \
        else report["manifest"]
    parity = _validated(folder / "parity.json", "parity")[0] if (folder / "parity.json").is_file() else None
    return report, manifest, parity, hashlib.sha256(raw).hexdigest()


def ingest(conn: sqlite3.Connection, source: str | Path) -> Ingested:
    report, manifest, parity, digest = read_run(Path(source))  # all validated before anything is written
    stack = _stack(manifest)
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT id FROM runs WHERE digest = ?", (digest,)).fetchone()
        if row:
            conn.execute("COMMIT")
            return Ingested(str(source), False, row[0], len(report["tests"]))
        cursor = conn.execute(
            "INSERT INTO runs (digest, source, started, finished, vendor, sku, runner, git_sha, conclusion, complete, "
            "rocm, driver, torch, framework, image) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (digest, str(source), manifest.get("started"), manifest.get("finished"), stack["vendor"], stack["sku"],
             manifest.get("runner"), manifest.get("git_sha"), report["conclusion"], int(report["complete"]),
             stack["rocm"], stack["driver"], stack["torch"], stack["framework"], stack["image"]))
        run_id = cursor.lastrowid
        conn.executemany(
            "INSERT INTO results (run_id, test, grp, blocking, status, verdict, duration, devices, attempts, gap_issue, "
            "gap_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_id, test, t["group"], int(t["blocking"]), t["status"], t["verdict"], t["duration"],
              _devices(t), len(t["attempts"]), (t.get("known_gap") or {}).get("issue"),
              (t.get("known_gap") or {}).get("reason")) for test, t in report["tests"].items()])
        if parity:
            conn.executemany(
                "INSERT INTO parity (run_id, grp, parity, both_passing, reference_passing, blocking, gaps) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run_id, group, g["parity"], g["both_passing"], g["reference_passing"], g["blocking"], len(g["gaps"]))
                 for group, g in parity["groups"].items()])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Ingested(str(source), True, run_id, len(report["tests"]))


def _devices(test: dict) -> str | None:
    """The devices of the failing attempts (where an infra fault happened), as `0,3`."""
    seen = []
    for attempt in test["attempts"]:
        if attempt["status"] != "passed":
            for gpu in attempt.get("gpus") or []:
                if gpu not in seen:
                    seen.append(gpu)
    return ",".join(map(str, seen)) if seen else None
