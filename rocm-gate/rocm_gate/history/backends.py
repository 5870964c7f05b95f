"""The two engines behind the history store, as one connection type: SQLite (a file: the embedded
default, no set-up) and PostgreSQL (a server, through psycopg 3: many runner pools writing at once,
a year of upstream volume).

`Connection` has the same surface on both: `execute(sql, params=())` returning the driver's cursor
(`fetchone`, `fetchall`, iteration), `executemany(sql, rows)`, `insert_id(sql, params)` (an INSERT's
new id, or None where `ON CONFLICT ... DO NOTHING` added nothing), `copy_rows(table, columns, rows)`
(bulk rows: COPY on PostgreSQL, an executemany elsewhere), `transaction()`, `dialect` (`"sqlite"` or
`"postgresql"`), `target` (the store, described for messages, its password masked), `test_ids` and
`close()`.

SQL is written once, for both, with `?` placeholders: on PostgreSQL each `?` outside a quoted string
becomes `%s` and a literal `%` is doubled (`to_psycopg`). Statements that create or change tables
(the migrations) are translated where the engines differ (`ddl_for_postgresql`).

Why not SQLAlchemy Core: the questions are a few dozen hand-written statements, already portable
(plain types, `COALESCE`, `CASE`, `ON CONFLICT`), and what differs is not the query language but the
bulk path (COPY), the placeholder style and a handful of DDL words. A query layer would add a
dependency to the default install (the store is SQLite there), a compile step on every call of a hot
ingest loop, and would still leave COPY and the migration lock to driver code. A thin adapter over
sqlite3 and psycopg keeps the SQL readable where it is and the engines' differences in one place.

Driver errors never leave as tracebacks: each becomes a `StoreError` (a `BadInput`) that names the
store (password masked) and the fix. psycopg is imported only when a PostgreSQL URL is opened.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from pytest_rocm.errors import BadInput

SQLITE, POSTGRESQL = "sqlite", "postgresql"
URL_SCHEMES = ("postgresql", "postgres")
BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 10
INSTALL_PSYCOPG = "pip install 'rocm-gate[postgres]' (psycopg 3)"


class HistoryError(BadInput):
    """Bad input or a store this version cannot use; the message names the file and the fix."""


class StoreError(HistoryError):
    """The store itself cannot be used (unreachable, refused, damaged, read-only for this role):
    nothing more can be read or added through this connection."""


# --- targets ----------------------------------------------------------------------------------


def is_url(target: str | Path) -> bool:
    """Whether `target` is a URL (`scheme://...`) rather than a file path."""
    return isinstance(target, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target) is not None


def describe(target: str | Path) -> str:
    """The target for a message: a path as given, a URL with its password (in the user part or a
    `password=` parameter) replaced by `***`."""
    if not is_url(target):
        return str(target)
    parts = urlsplit(str(target))
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="/*"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def with_database(url: str, name: str) -> str:
    """The URL of another database on the same server (the tests' fresh databases)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name), parts.query, parts.fragment))


# --- SQL, written once --------------------------------------------------------------------------

_QUOTED = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")


def _outside_quotes(sql: str, change) -> str:
    """`change` applied to the parts of `sql` outside quoted strings and identifiers."""
    parts = _QUOTED.split(sql)
    return "".join(part if i % 2 else change(part) for i, part in enumerate(parts))


@functools.lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """`?` placeholders as psycopg's `%s`; a literal `%` (in strings too) doubled."""
    doubled = sql.replace("%", "%%")
    return _outside_quotes(doubled, lambda part: part.replace("?", "%s"))


_DDL = re.compile(r"^\s*(CREATE|ALTER)\s+TABLE\b", re.IGNORECASE)
_DDL_WORDS = [
    # SQLite's rowid alias: an identity column (BY DEFAULT: a bulk load may give ids itself)
    (
        re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b", re.IGNORECASE),
        "INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    # SQLite's REAL is 8 bytes; PostgreSQL's REAL is 4
    (re.compile(r"\bREAL\b", re.IGNORECASE), "DOUBLE PRECISION"),
    # SQLite compares text by its bytes; a PostgreSQL database sorts by its locale (en_US would put
    # `a_b` after `a:b` and ignore case first): "C" is the same order as SQLite's
    (re.compile(r"\bTEXT\b", re.IGNORECASE), 'TEXT COLLATE "C"'),
    (re.compile(r"\)\s*WITHOUT\s+ROWID\s*$", re.IGNORECASE), ")"),
    # Foreign keys are declared for the reader; SQLite does not enforce them (store.py: ingest
    # writes result rows only for the run it has just added and test ids it has just read), and
    # checking two keys per COPY row took PostgreSQL's ingest of a 47,000-test run from 0.12 s to
    # 0.55 s: the same rule there, by leaving them out
    (re.compile(r"\s+REFERENCES\s+\w+\s*\(\s*\w+\s*\)", re.IGNORECASE), ""),
]


def ddl_for_postgresql(statement: str) -> str:
    """A migration's statement as PostgreSQL takes it: CREATE and ALTER TABLE translated word by word
    (outside quoted strings); any other statement as it is."""
    if not _DDL.match(statement):
        return statement

    def translate(part: str) -> str:
        for pattern, replacement in _DDL_WORDS:
            part = pattern.sub(replacement, part)
        return part

    return _outside_quotes(statement, translate)


# --- the connection -----------------------------------------------------------------------------


class Connection:
    """One store, on either engine. `test_ids`: test name -> id, as this connection has seen them
    (a name, once added, keeps its id; emptied when a transaction rolls back)."""

    def __init__(self, raw: Any, dialect: str, target: str):
        self.raw = raw
        self.dialect = dialect
        self.target = target  # described: no password
        self.test_ids: dict[str, int] = {}
        self._errors: tuple[type[BaseException], ...] = (
            (sqlite3.DatabaseError,) if dialect == SQLITE else (_psycopg().Error,)
        )

    def __repr__(self) -> str:
        return f"<history store {self.dialect} {self.target}>"

    def _sql(self, sql: str) -> str:
        return sql if self.dialect == SQLITE else to_psycopg(sql)

    def execute(self, sql: str, params: Sequence | None = ()) -> Any:
        """Run one statement; the driver's cursor (fetchone, fetchall, iteration)."""
        try:
            # always a sequence: psycopg reads `%%` as `%` only when it is given parameters
            return self.raw.execute(self._sql(sql), params or ())
        except self._errors as exc:
            raise self.explain(exc) from None

    def executemany(self, sql: str, rows: Iterable[Sequence]) -> None:
        try:
            if self.dialect == SQLITE:
                self.raw.executemany(sql, rows)
            else:
                with self.raw.cursor() as cursor:
                    cursor.executemany(self._sql(sql), rows)
        except self._errors as exc:
            raise self.explain(exc) from None

    def insert_id(self, sql: str, params: Sequence = ()) -> int | None:
        """An INSERT of one row into a table with an `id` column: the new row's id, or None where the
        statement added nothing (`ON CONFLICT ... DO NOTHING`). SQLite's lastrowid; PostgreSQL's
        `RETURNING id`."""
        if self.dialect == SQLITE:
            cursor = self.execute(sql, params)
            return cursor.lastrowid if cursor.rowcount == 1 else None
        row = self.execute(f"{sql} RETURNING id", params).fetchone()
        return row[0] if row else None

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        """Bulk rows into `table`: PostgreSQL's COPY (the fastest way in), an executemany on
        SQLite."""
        names = ", ".join(columns)
        if self.dialect == SQLITE:
            marks = ", ".join("?" for _ in columns)
            self.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
            return
        try:
            with self.raw.cursor() as cursor:
                with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        except self._errors as exc:
            raise self.explain(exc) from None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction: committed at the end of the block, rolled back by any exception (the
        test id cache with it). SQLite takes the write lock at once (BEGIN IMMEDIATE: writers wait
        on each other up to BUSY_TIMEOUT_S, never fail half-way); PostgreSQL writers run side by
        side."""
        try:
            if self.dialect == SQLITE:
                self.execute("BEGIN IMMEDIATE")
                try:
                    yield self
                except BaseException:
                    if self.raw.in_transaction:  # SQLite may have ended it on the error itself
                        self.raw.execute("ROLLBACK")
                    raise
                self.execute("COMMIT")
            else:
                with self.raw.transaction():
                    yield self
        except BaseException as exc:
            self.test_ids.clear()
            if isinstance(exc, self._errors):
                raise self.explain(exc) from None
            raise

    def close(self) -> None:
        try:
            self.raw.close()
        except self._errors:
            pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def explain(self, exc: BaseException) -> StoreError:
        """A driver's error as one line naming the store and the fix."""
        return StoreError(f"{self.target}: {_explained(exc, self.dialect)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _explained(exc: BaseException, dialect: str) -> str:
    what = _first_line(exc)
    if dialect == SQLITE:
        if "locked" in what or "busy" in what:
            return (
                f"the history database stayed locked by another writer for {BUSY_TIMEOUT_S} s ({what}); "
                "try again, or move a store this busy to PostgreSQL"
            )
        return (
            f"not a usable history database ({what}): restore it from a backup, or rebuild it with "
            "`rocm-gate history add` from the results folders"
        )
    psycopg = _psycopg()
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return (
            f"this role may not do that ({what}): a reader's role may only read; add results with the "
            "writer's role (`rocm-gate history grant`), and create or migrate the store as the "
            "database's owner"
        )
    if isinstance(exc, psycopg.DataError):
        return f"a value the store cannot hold ({what})"
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return (
            f"lost the connection to the server ({what}); check that PostgreSQL is up, then run "
            "the command again (a run being added when it broke was not stored)"
        )
    return f"the server refused a statement ({what})"


def _psycopg():
    import psycopg

    return psycopg


# --- opening ------------------------------------------------------------------------------------


def open_sqlite(path: Path) -> Connection:
    """The SQLite file at `path`, created when missing, in WAL mode (several writers on one host)."""
    try:
        raw = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.DatabaseError as exc:  # a folder that is not there, or not ours
        raise StoreError(
            f"{path}: cannot open or create the history database there ({exc}): give a file in a "
            "folder that exists and this user may write"
        ) from None
    conn = Connection(raw, SQLITE, str(path))
    try:
        _use_wal(raw)
        raw.execute("PRAGMA synchronous=NORMAL")
        # Foreign keys are declared for the reader and for other engines; not enforced here: ingest
        # writes result rows only for the run it has just added and test ids it has just read, and
        # checking two keys per row cost a tenth of the ingest time.
        raw.execute("PRAGMA foreign_keys=OFF")
    except sqlite3.DatabaseError as exc:
        raw.close()
        raise HistoryError(f"{path}: not a usable history database ({exc})") from None
    return conn


def _use_wal(raw: sqlite3.Connection) -> None:
    """Switch to WAL, waiting for other writers. SQLite answers a journal-mode switch that meets
    another connection's lock with "database is locked" at once, without its busy timeout: two
    runners that create the store together hit that (measured: 1 in 90 connections of 6 processes
    starting at once)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            raw.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def open_postgresql(url: str) -> Connection:
    """The PostgreSQL database at `url` (psycopg 3, autocommit: every transaction is explicit)."""
    shown = describe(url)
    try:
        psycopg = _psycopg()
    except ImportError:
        raise StoreError(f"{shown}: psycopg is not installed: {INSTALL_PSYCOPG}") from None
    try:
        raw = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="rocm-gate history",
        )
    except psycopg.Error as exc:
        raise StoreError(f"{shown}: {_not_connected(exc)}") from None
    return Connection(raw, POSTGRESQL, shown)


def _not_connected(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "password" in text.lower() or "authentication" in text.lower():
        return (
            "the server refused these credentials (authentication failed): check the URL's user and "
            "password (or PGPASSWORD, ~/.pgpass)"
        )
    missing = re.search(r'database "([^"]+)" does not exist', text)
    if missing:
        return (
            f"no database {missing.group(1)!r} on that server: create it (createdb {missing.group(1)}, "
            "as its owner) or fix the URL"
        )
    if re.search(r'role "([^"]+)" does not exist', text):
        return "no such role on that server: fix the URL's user (`rocm-gate history grant` makes the roles)"
    return (
        f"cannot reach the server ({text[:300]}): check that PostgreSQL is running and the URL's host, "
        "port and socket folder"
    )


def open_target(target: str | Path) -> Connection:
    """A path (SQLite) or a `postgresql://` / `postgres://` URL; any other URL is refused by name."""
    if is_url(target):
        scheme = str(target).split("://", 1)[0].lower()
        if scheme not in URL_SCHEMES:
            raise StoreError(
                f"{describe(target)}: {scheme}:// is not a history store: give a file path (SQLite) or a "
                "postgresql://USER@HOST/DATABASE URL"
            )
        return open_postgresql(str(target))
    return open_sqlite(Path(target))
