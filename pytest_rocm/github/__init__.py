"""GitHub: the merge-blocking check run, the trust gate and the rerun buttons. Reads artifacts only.

- `artifacts`: a results folder as untrusted input (sizes, schemas, the SHA it claims);
- `checks`: from the artifacts to one check run's content (conclusion table, summary, annotations, buttons),
  cut to GitHub's limits;
- `api`: github3.py with bounded retries mounted on its session, App or Actions-token auth, and the
  publish that converges to one check per name and head SHA;
- `trust`: whether a PR's exact head SHA may reach a self-hosted GPU runner;
- `rerun`: a `check_run` webhook payload (a button click, "Re-run") to a workflow dispatch.

Nothing here imports the plugin or test code (DESIGN section 2).
"""

__all__ = ["api", "artifacts", "checks", "rerun", "trust"]
