"""Who may do what to a PostgreSQL history store: a writer's role for the jobs that add results and
read them (publish, sweep, the dashboard workflow), a reader's role for those that only read (a
dashboard). `rocm-gate history grant --db URL --writer ROLE --reader ROLE`, as the database's owner
(who creates and migrates the tables: neither role may change them).

- writer: SELECT and INSERT on the store's tables (ingest adds rows, never changes or deletes one),
  USAGE on their id sequences;
- reader: SELECT only;
- both: CONNECT on the database and USAGE on the schema; whatever either held on the tables before is
  revoked first, so granting again makes exactly this;
- tables a later migration adds get the same (ALTER DEFAULT PRIVILEGES of the owner who migrates).

A role that does not exist is created (LOGIN, no password: give it one with ALTER ROLE ... PASSWORD, or
authenticate it otherwise in pg_hba.conf). A SQLite store has no roles: its readers and writers are
whoever may read and write its file.
"""

from __future__ import annotations

import re

from rocm_gate.history.backends import POSTGRESQL, Connection, HistoryError

__all__ = ["ROLE", "grant", "statements"]

ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _quoted(role: str) -> str:
    if not ROLE.fullmatch(role):
        raise HistoryError(
            f"{role!r} is not a role name this command takes: lower-case letters, digits and _, "
            "starting with a letter or _, at most 63"
        )
    return f'"{role}"'


def statements(database: str, schema: str, writer: str, reader: str) -> list[str]:
    """The grants, in order, for a store in `database` and `schema`."""
    w, r = _quoted(writer), _quoted(reader)
    db, sc = (
        f'"{database.replace(chr(34), chr(34) * 2)}"',
        f'"{schema.replace(chr(34), chr(34) * 2)}"',
    )
    return [
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {sc} FROM {w}, {r}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {sc} FROM {w}, {r}",
        f"GRANT CONNECT ON DATABASE {db} TO {w}, {r}",
        f"GRANT USAGE ON SCHEMA {sc} TO {w}, {r}",
        f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA {sc} TO {w}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {sc} TO {w}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {sc} TO {r}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {sc} GRANT SELECT, INSERT ON TABLES TO {w}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {sc} GRANT USAGE ON SEQUENCES TO {w}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {sc} GRANT SELECT ON TABLES TO {r}",
    ]


def grant(conn: Connection, writer: str, reader: str) -> list[str]:
    """Make the two roles (creating those missing) and grant them; what was done, one line each."""
    if conn.dialect != POSTGRESQL:
        raise HistoryError(
            f"{conn.target}: a SQLite store has no roles: who may read or write it is who may read or "
            "write its file; roles are for a postgresql:// store"
        )
    if writer == reader:
        raise HistoryError(f"--writer and --reader are both {writer!r}: give two roles")
    done = []
    with conn.transaction():
        for role in (writer, reader):
            quoted = _quoted(role)
            if conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = ?", (role,)).fetchone()[
                0
            ]:
                continue
            conn.execute(f"CREATE ROLE {quoted} LOGIN")
            done.append(
                f"created role {role} (LOGIN, no password: set one with ALTER ROLE {role} PASSWORD ...)"
            )
        database, schema = conn.execute("SELECT current_database(), current_schema()").fetchone()
        for sql in statements(database, schema, writer, reader):
            conn.execute(sql)
    done.append(f"{writer}: may read the store and add runs to it (SELECT, INSERT)")
    done.append(f"{reader}: may only read it (SELECT)")
    return done
