"""The history store: one interface over two engines, a versioned schema, and validated ingest.

`connect(target)` opens a store and brings its schema up to date: `target` is a file path (SQLite: the
embedded default, one file in WAL mode, no set-up; several writers on one host wait on each other up
to BUSY_TIMEOUT_S while the dashboard reads) or a `postgresql://` / `postgres://` URL (PostgreSQL
through psycopg 3, imported only then: the deployment's store, where many runner pools write at once
and a year of upstream volume, about 150 M result rows, is kept). Both give the same `Connection`
(history/backends.py: `execute`, `executemany`, `insert_id`, `copy_rows`, `transaction`, `dialect`,
`target`, `test_ids`, `close`), and the same questions give the same answers on both
(tests/test_history_backends.py).

Why a thin adapter and not a query layer (SQLAlchemy Core): the SQL was already portable (plain types,
no engine's own functions), so a query layer would only add a dependency and a compile step to the hot
ingest path, and still leave the parts that differ (COPY, the migration lock, a handful of DDL words)
to driver code; history/backends.py keeps those differences in one place and every statement readable,
written once with `?` placeholders.

Migrations (`MIGRATIONS`): version -> statements, each written once in SQLite's words; a database at
version v gets every migration above v, in order, in one transaction, one migrator at a time (SQLite:
BEGIN IMMEDIATE; PostgreSQL: an advisory lock). On PostgreSQL CREATE/ALTER TABLE are translated
(backends.ddl_for_postgresql): `INTEGER PRIMARY KEY` becomes an identity column, `REAL` becomes
`DOUBLE PRECISION` (PostgreSQL's REAL is 4 bytes), `TEXT` is collated "C" (SQLite's byte order,
whatever the database's locale), `WITHOUT ROWID` is dropped, and `REFERENCES` too (SQLite declares
its foreign keys and does not enforce them; enforced, they made PostgreSQL's ingest 4.6 times
slower); INTEGER stays 4 bytes (every integer stored fits: ids, counts, flags, PR numbers).

Adding migration N (5 next) is one entry, `N: [statements]`, in SQLite's words; the translation does
the rest. A statement it cannot express (an engine's own function or syntax) is
`Dialects(sqlite=..., postgresql=...)`. tests/test_history_backends.py migrates and
compares both engines. A database newer than the code is refused by name. On PostgreSQL the
database's owner migrates: the writer and reader roles (`rocm-gate history grant`, history/roles.py)
may not change tables.

Ingest takes results folders (or gate-report.json files): the gate report and its manifest (the
folder's manifest.json, else the report's copy) and, when present, parity.json of the same run.
Every file is validated against its schema before anything is written; one run is one transaction
(a writer killed half-way leaves the store as it was); a run whose identity is stored already is
skipped, also when two writers add it at once (`INSERT ... ON CONFLICT (digest) DO NOTHING`); result
rows go in by COPY on PostgreSQL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pytest_rocm.results.fingerprint import of_test as fingerprint_of
from pytest_rocm.results.manifest import origin_kind
from pytest_rocm.schemas import values
from pytest_rocm.schemas.artifacts import describe_reference, manifest_stack
from pytest_rocm.schemas.loader import ArtifactError, load_artifact
from rocm_gate.history.backends import (
    BUSY_TIMEOUT_S,
    POSTGRESQL,
    SQLITE,
    Connection,
    HistoryError,
    StoreError,
    ddl_for_postgresql,
    describe,
    is_url,
    open_target,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "Connection",
    "Dialects",
    "HistoryError",
    "MIGRATIONS",
    "StoreError",
    "VERSION",
    "connect",
    "describe",
    "identity",
    "ingest",
    "insert_run",
    "is_url",
    "read_run",
    "version",
]


class Dialects(NamedTuple):
    """A migration's statement that differs by engine beyond what the translation does."""

    sqlite: str
    postgresql: str


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
    # What GitHub says of a run it lists (knowledge/sync.py), never its results: when it completed (a
    # blocking check written before main's newest result is judged again), and where its head came
    # from (`OWNER/REPO:BRANCH`: which PR it is, for a fork's run too, whose run lists no PR). The run's
    # event, head, base and PR columns take GitHub's values then too.
    5: [
        "ALTER TABLE runs ADD COLUMN completed TEXT",
        "ALTER TABLE runs ADD COLUMN head_ref TEXT",
    ],
}
VERSION = max(MIGRATIONS)
# pg_advisory_xact_lock's key for migrating ("rocm" in ASCII): one migrator at a time
MIGRATION_LOCK = 0x726F636D


def connect(target: str | Path) -> Connection:
    """Open (creating and migrating as needed) the store at `target`: a file path (SQLite) or a
    `postgresql://` URL. Raises HistoryError (StoreError where the store cannot be used) naming the
    target, its password masked, and the fix."""
    conn = open_target(target)
    try:
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


_HAS_TABLE = {
    SQLITE: "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
    POSTGRESQL: "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
    "AND tablename = ?",
}


def version(conn: Connection) -> int:
    has = conn.execute(_HAS_TABLE[conn.dialect], ("schema_version",)).fetchone()[0]
    return conn.execute("SELECT version FROM schema_version").fetchone()[0] if has else 0


def statement(entry: str | Dialects, dialect: str) -> str:
    """A migration's statement as `dialect` runs it."""
    if isinstance(entry, Dialects):
        return getattr(entry, dialect)
    return ddl_for_postgresql(entry) if dialect == POSTGRESQL else entry


def _migrate(conn: Connection) -> None:
    with conn.transaction():  # SQLite: BEGIN IMMEDIATE, one migrator at a time
        if conn.dialect == POSTGRESQL:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        current = version(conn)
        if current > VERSION:
            raise HistoryError(
                f"{conn.target}: the database is at schema version {current}, newer than this "
                f"pytest-rocm ({VERSION}): upgrade pytest-rocm"
            )
        for number in range(current + 1, VERSION + 1):
            try:
                for entry in MIGRATIONS[number]:
                    conn.execute(statement(entry, conn.dialect))
                conn.execute("UPDATE schema_version SET version = ?", (number,))
            except StoreError as exc:
                if conn.dialect == SQLITE:
                    raise
                raise StoreError(
                    f"{exc} (migrating the store from schema version {current} to {VERSION}: "
                    "connect once as the database's owner, e.g. `rocm-gate history add --db URL` "
                    "with no results)"
                ) from None


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
    facts: dict | None = None,
) -> Ingested:
    """Validate a results folder (or gate report) whole, then add it in one transaction. `origin`:
    `manifest` keeps where the manifest says the run comes from; `pr` or `other` overrides it, for
    results whose run GitHub says was not a main run (a PR's code wrote them, and may claim to be
    main). `run`: the GitHub run (`ID` or `ID-ATTEMPT`: one canonical `ID-ATTEMPT`,
    schemas/values.py) the caller took the results from, as GitHub lists it: the run's identity,
    with the results folder's name (one artifact per runner class; a gate report's own folder) and
    its report's content (`identity`). `sha`: the commit GitHub says the run is of; a run whose
    manifest names another commit as tested is no main run, whatever it claims (a dispatch that
    tested a fork's commit, or results a merge queue candidate's code forged), and is stored as
    `pr`. `facts`: what GitHub says of the run (`FACTS`: its event, head, base, PR, when it
    completed, where its head came from), which the store keeps over the manifest's claims."""
    try:
        run = None if run is None else values.github_run(run, "the GitHub run")
    except values.BadValue as exc:
        raise HistoryError(f"{source}: {exc}") from None
    # all validated before anything is written
    path = Path(source)
    report, manifest, parity, digest = read_run(path)
    # the content is kept beside the path: a second folder of the same name in the run is told
    # apart by it
    stored_as = f"{source} sha256:{digest}"
    key = None
    if run is not None:
        claimed = manifest.get("provenance")
        claimed = claimed if isinstance(claimed, dict) else {}
        kind = origin_kind(claimed) if origin == "manifest" else origin
        if kind == "main" and sha is not None and claimed.get("tested_sha") != sha.lower():
            kind = "pr"
        name = path.resolve().name if path.is_dir() else path.resolve().parent.name
        key = f"{run}/{name}"
        # the same folder stored before this form (`7/NAME` for attempt 1), or another folder of
        # this name in the run (kept under its content: `ID-ATTEMPT/NAME@DIGEST`)
        spellings = [key] + ([f"{run.split('-')[0]}/{name}"] if run.endswith("-1") else [])
        # (identity puts `7/NAME` in its one form: the spelling stored before is written out here)
        keys = [f"{kind}:run:{spelling}" for spelling in spellings]
        rows = conn.execute(
            f"SELECT digest, source FROM runs WHERE digest IN ({', '.join('?' for _ in keys)})",
            keys,
        ).fetchall()
        same = [d for d, s in rows if f"sha256:{digest}" in s or " sha256:" not in s]
        if same:
            key = same[0].split(":run:", 1)[1]
        elif rows:
            key = f"{key}@{digest[:16]}"
    return insert_run(conn, report, manifest, parity, digest, stored_as, origin, key, sha, facts)


def identity(origin: str, digest: str, run: str | None) -> str:
    """What makes a stored run one run: its origin, and its GitHub run where known (`run`:
    `ID-ATTEMPT/NAME`, the results folder's name in the run, as `history/ledger.py` asks for it;
    `ID-ATTEMPT/NAME@DIGEST` for a second folder of that name in the run whose report differs, its
    first 16 hex digits), else its report's bytes (`digest`, its SHA-256). The GitHub run is put in
    its one form first (`7/NAME` and `007-1/NAME` are `7-1/NAME`), so no spelling splits a run."""
    if not run:
        return f"{origin}:{digest}"
    github_run, sep, rest = run.partition("/")
    try:
        github_run = values.github_run(github_run)
    except values.BadValue:
        pass  # not a GitHub run's spelling: kept as given
    return f"{origin}:run:{github_run}{sep}{rest}"


RUN_COLUMNS = (
    "digest", "source", "started", "finished", "vendor", "sku", "runner", "git_sha", "conclusion",
    "complete", "rocm", "driver", "torch", "framework", "image", "origin", "event", "ref",
    "default_branch", "repository", "pr", "head_sha", "base_sha", "merge_base", "gh_run_id",
    "reference", "parity_overall", "completed", "head_ref",
)  # fmt: skip
# GitHub's facts of a run it lists that `ingest(facts=...)` takes over the manifest's claims
FACTS = ("event", "head_sha", "base_sha", "pr", "completed", "head_ref")
RESULT_COLUMNS = (
    "run_id", "test_id", "blocking", "status", "verdict", "duration", "devices", "attempts",
    "gap_issue", "gap_reason", "fingerprint", "quarantined",
)  # fmt: skip
PARITY_COLUMNS = (
    "run_id", "grp", "parity", "both_passing", "reference_passing", "blocking", "gaps",
)  # fmt: skip
_INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in RUN_COLUMNS)}) "
    "ON CONFLICT (digest) DO NOTHING"
)
_INSERT_PARITY = (
    f"INSERT INTO parity ({', '.join(PARITY_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in PARITY_COLUMNS)})"
)
LARGEST_INTEGER = 2**31 - 1  # PostgreSQL's INTEGER


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
    facts: dict | None = None,
) -> Ingested:
    """Add one validated run, in one transaction (a no-op when its identity is already stored, also
    when another writer stores it at the same moment; but for the parity report a stored copy
    lacks, which it takes: the dashboard computes a main run's CUDA parity after the publish
    stored the run)."""
    provenance = manifest.get("provenance")
    origin: dict = provenance if isinstance(provenance, dict) else {}
    kind = origin_kind(origin) if origin_override == "manifest" else origin_override
    if kind == "main" and sha is not None and origin.get("tested_sha") != sha.lower():
        kind = "pr"
    given = {k: v for k, v in (facts or {}).items() if k in FACTS and v is not None}
    origin = {**origin, **given}
    key = identity(kind, digest, run)
    tests = report["tests"]
    with conn.transaction():
        # looked up first: an INSERT that meets the key spends an id of PostgreSQL's sequence
        stored = _stored(conn, key)
        run_id = None
        if stored is None:
            row = _run_row(key, str(source), report, manifest, origin, kind, parity)
            run_id = conn.insert_id(_INSERT_RUN, row)
        if run_id is None:  # stored before, or by another writer while this one waited on it
            stored = stored or _stored(conn, key) or 0
            if parity and stored and not _has_parity(conn, stored):
                _insert_parity(conn, stored, parity)
            return Ingested(str(source), False, stored, len(tests))
        ids = _test_ids(conn, tests)
        conn.copy_rows("results", RESULT_COLUMNS, _result_rows(run_id, ids, tests))
        if parity:
            _insert_parity(conn, run_id, parity)
    return Ingested(str(source), True, run_id, len(tests))


def _has_parity(conn: Connection, run_id: int) -> bool:
    return conn.execute("SELECT 1 FROM parity WHERE run_id = ?", (run_id,)).fetchone() is not None


def _insert_parity(conn: Connection, run_id: int, parity: dict) -> None:
    conn.executemany(
        _INSERT_PARITY,
        [
            (
                run_id,
                _clean(group),
                g["parity"],
                g["both_passing"],
                g["reference_passing"],
                _clean(g["blocking"]),
                len(g["gaps"]),
            )
            for group, g in parity["groups"].items()
        ],
    )
    reference, overall = _reference(parity)
    conn.execute(
        "UPDATE runs SET reference = ?, parity_overall = ? WHERE id = ?",
        (_clean(reference), overall, run_id),
    )


def _stored(conn: Connection, key: str) -> int | None:
    row = conn.execute("SELECT id FROM runs WHERE digest = ?", (key,)).fetchone()
    return row[0] if row else None


def _run_row(
    key: str,
    source: str,
    report: dict,
    manifest: dict,
    origin: dict,
    kind: str,
    parity: dict | None,
) -> tuple:
    """The runs row of a run, in RUN_COLUMNS' order."""
    stack = _stack(manifest)
    pr = origin.get("pr")
    return tuple(
        _clean(value)
        for value in (
            key,
            source,
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
            # a PR number no engine's integer holds is no PR's
            pr if isinstance(pr, int) and 0 < pr <= LARGEST_INTEGER else None,
            origin.get("head_sha"),
            origin.get("base_sha"),
            origin.get("merge_base"),
            origin.get("run_id"),
            *_reference(parity),
            origin.get("completed"),
            origin.get("head_ref"),
        )
    )


def _clean(value):
    """Text as every engine stores it: PostgreSQL's text holds no NUL character (a report may carry
    one), so it becomes U+FFFD on both."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


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
    with). Names another run added are read first (an INSERT that meets a name spends an id of
    PostgreSQL's sequence); new ones are added in sorted order, so two writers adding the same new
    names wait on each other rather than deadlock."""
    known = conn.test_ids
    missing = [name for name in tests if name not in known]
    if missing:
        _read_ids(conn, missing, _most_ids(conn))
        new = sorted(name for name in missing if name not in known)
        if new:
            conn.executemany(
                "INSERT INTO tests (name, grp) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                [(_clean(name), _clean(tests[name]["group"])) for name in new],
            )
            _read_ids(conn, new)  # another writer may have added some meanwhile
    return known


def _most_ids(conn: Connection) -> int:
    """The largest test id: about how many names the store holds (read from the key's index)."""
    return conn.execute("SELECT COALESCE(MAX(id), 0) FROM tests").fetchone()[0]


def _read_ids(conn: Connection, names: list[str], stored: int = 0) -> None:
    """Into the connection's cache: the stored ids of `names`. Where they are a good part of what
    the store holds (a nightly's names in a fresh process), every name in one read (measured on
    PostgreSQL: 47,000 names in 0.04 s, against 0.6 s in IN lists of 500); else bounded IN lists,
    for any engine."""
    known = conn.test_ids
    if len(names) * 4 >= stored > 0:
        known.update(conn.execute("SELECT name, id FROM tests"))
        for name in names:  # a name stored with its NUL replaced (`_clean`)
            if "\x00" in name and _clean(name) in known:
                known[name] = known[_clean(name)]
        return
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        asked = {_clean(name): name for name in chunk}
        for name, test_id in conn.execute(
            f"SELECT name, id FROM tests WHERE name IN ({', '.join('?' for _ in asked)})",
            list(asked),
        ):
            known[asked[name]] = test_id


def _result_rows(run_id: int, ids: dict[str, int], tests: dict[str, dict]):
    # The hot loop of ingest (millions of rows a year): a pass needs no devices and has no gap.
    for name, t in tests.items():
        verdict = t["verdict"]
        if verdict == "pass":
            yield (
                run_id,
                ids[name],
                1 if t["blocking"] else 0,
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
                1 if t["blocking"] else 0,
                t["status"],
                verdict,
                _duration(t["duration"]),
                _devices(t),
                len(t["attempts"]),
                _clean(gap.get("issue")),
                _clean(gap.get("reason")),
                _clean(fingerprint_of(t))
                if verdict in ("regression", "unconfirmed", "flaky")
                else None,
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
