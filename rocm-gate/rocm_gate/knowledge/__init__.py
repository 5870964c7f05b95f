"""What a check knows of main when it is judged (docs/architecture.md, "Main's state, live").

Every main run reaches the next PR check: the history store is caught up with the gate runs GitHub
lists as completed whenever a publish or a sweep judges a check, so main's state is as of that
moment, not as of a daily job. This package joins the three parts that know their own piece and
nothing of each other: `github/` (what GitHub lists, and what a publish believes of a run),
`history/` (the store and its questions) and `trunk/` (main's state per SKU and the one decision).

- `sync`: the store caught up with GitHub (a run added as a publish would believe it, under the
  origin GitHub gives it);
- `live`: main's state for a publish or a sweep, built at that moment, what the check says of it,
  and the blocked checks judged again when a main run shows a failure;
- `carry`: the embedded store (one SQLite file) carried between jobs as an artifact of the default
  branch's own workflows.
"""

__all__ = ["carry", "live", "sync"]
