"""GitHub: the merge-blocking check run, the trust gate, the rerun buttons and the sweep. Reads artifacts and
GitHub's API; never imports the plugin or test code (docs/architecture.md, "The GitHub side").

- `trust`: whether an event's exact head SHA may reach a self-hosted GPU runner, and which commit runs;
- `artifacts`: a results folder as untrusted input, through the strict loader;
- `provenance`: a gate run as GitHub describes it: its commit, whether it was approved, its results artifact,
  and the results' claims checked against those facts;
- `publishing`: what a run may write on its commit's check at each stage of its `workflow_run` events;
- `checks`: from the artifacts to one check run's content (conclusion table, summary, annotations, buttons),
  cut to GitHub's limits, every string from the results escaped;
- `api`: github3.py, one retry rule per request, and writes that converge to one check per name, SHA and run;
- `rerun`: a `check_run` webhook payload (a button click, "Re-run") to a workflow dispatch;
- `sweep`: the scheduled job that finishes what a failed or lost publish left;
- `tracker`: one issue per SKU and framework saying what is red on main, kept up to date idempotently.
"""

__all__ = [
    "api",
    "artifacts",
    "checks",
    "provenance",
    "publishing",
    "rerun",
    "sweep",
    "tracker",
    "trust",
]
