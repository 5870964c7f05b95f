"""Scheduling on GPU runners: which test runs when and where, from each test's GPU demand and
expected duration. `dispatch` is the rule (longest first, under the runner's GPU capacity),
`xdist_scheduler` applies it to an xdist run (`--rocm-scheduler=gpu`), `simulate` predicts makespans
with it and with the anchors, `durations` keeps measured durations per test and platform, `shards`
splits a run across runners (`rocm-gate shard`), a module whose servers take time to start kept on
one."""

__all__ = ["dispatch", "durations", "shards", "simulate", "xdist_scheduler"]
