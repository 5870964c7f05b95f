"""History: every run's gate report, manifest and parity report in one store, and the questions asked of it.

- `store`: `connect(target)`, a SQLite file (the embedded default: WAL, safe for several writers on one host)
  or a `postgresql://` URL (the deployment's store: many writers, a year of volume), the versioned schema and
  its migrations, and ingest (validated against the artifacts' schemas; a duplicate is a no-op, also between
  two writers at once; a bad file is refused whole);
- `backends`: the one connection type over sqlite3 and psycopg 3 (SQL written once with `?`, COPY on
  PostgreSQL, the migrations' DDL translated, driver errors as one line naming the store, its password masked);
- `queries`: what the dashboard and `rocm-gate history` ask (suspects, flaky tests, known gaps, accepted
  stacks and drift, parity over time, the commit x group grid), as functions over portable SQL that give the
  same answers on both engines;
- `flakes`: the one rule of what is flaky on main (a pass and a fail on one commit, or a test failing on
  alternate commits), which the trunk state and the flaky list both apply;
- `roles`: PostgreSQL's writer and reader roles (`rocm-gate history grant`);
- `ledger`: which GitHub runs the store holds (a publish's catch-up asks before it downloads a run), when
  main's newest result completed, a stored run's blocking failures;
- `commits`: main's first-parent commits from a checkout (what counts as landed).
"""

__all__ = ["backends", "commits", "flakes", "ledger", "queries", "roles", "store"]
