"""Trunk-aware verdicts: the state of the default branch per SKU, and what a PR's failures mean
against it.

- `state`: from history's main runs of one SKU (results/manifest.py: origin_kind), per test: its state now,
  the main commit it has failed since, the last green commit before it, the suspect commits between them,
  flips, time red, and whether it is flaky (pass and fail on the same commit and SKU). Written as a small
  `pytest-rocm/trunk/1` file by `rocm-gate history trunk`, read by publish;
- `fingerprint`: what a failure says, with numbers, addresses and temporary paths taken out;
- `attribution`: each blocking failure of a PR run is new, pre-existing on main, or flaky on main; main's
  failures that pass here are fixed by the PR (the rules: docs/architecture.md, "Trunk-aware verdicts").
"""

__all__ = ["attribution", "fingerprint", "state"]
