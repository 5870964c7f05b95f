"""Trunk-aware verdicts: the state of the default branch per SKU, and what a PR's failures mean
against it.

- `state`: from history's main runs of one SKU (read through history/queries.py) (results/manifest.py: origin_kind), per test: its state now,
  the main commit it has failed since, the last green commit before it, the suspect commits between them,
  flips, time red, whether it is flaky (history/flakes.py: a pass and a fail on one commit, or failures on
  alternate commits), and whether main still runs it (a gone id; a moved file's test continues). Written as a small
  `pytest-rocm/trunk/1` file by `rocm-gate history trunk`, read by publish;
- `judgement`: the one decision (failures compared by results/fingerprint.py): each failure's class, each passing test's, the check's conclusion (the
  README's "Conclusions" table), trunk health's cell;
- `health`: trunk health per SKU and group over main runs (the dashboard's);
- `attribution`: the classes over a run's blocking failures, the base of its code, and whether a trunk state
  may be used at all;
- `quarantine`: the quarantine file's lifecycle (the rules: docs/architecture.md, "Trunk-aware verdicts").
"""

__all__ = ["attribution", "health", "judgement", "quarantine", "state"]
