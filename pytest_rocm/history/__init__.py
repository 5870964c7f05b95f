"""History: every run's gate report, manifest and parity report in one store, and the questions asked of it.

- `store`: the SQLite file (WAL, safe for several writers on one host), its versioned schema and migrations,
  and ingest (validated against the artifacts' schemas; a duplicate is a no-op; a bad file is refused whole);
- `queries`: what the dashboard and `rocm-gate history` ask (suspects, flaky tests, known gaps, accepted
  stacks and drift, parity over time, the commit x group grid), as functions over portable SQL;
- `commits`: main's first-parent commits from a checkout (what counts as landed).
"""

__all__ = ["commits", "queries", "store"]
