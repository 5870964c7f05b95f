"""Cut the subset of GitHub's official OpenAPI descriptions that the loopback API (tests/github_api.py) serves.

Origin: the npm packages `@octokit/openapi` 23.0.2 (`generated/api.github.com.deref.json`, OpenAPI 3.0.3,
references already resolved), `@octokit/openapi-webhooks` 12.1.0 (`generated/api.github.com.json`,
OpenAPI 3.1.0) and `@octokit/webhooks-examples` 7.6.1 (`api.github.com/index.json`: real payloads, the first
of each event and action listed in EXAMPLES). Rebuild after
`npm pack @octokit/openapi@23.0.2 @octokit/openapi-webhooks@12.1.0 @octokit/webhooks-examples@7.6.1` and
unpacking each package's `package/` folder:

    python tests/data/github/extract.py OPENAPI_FOLDER WEBHOOKS_FOLDER EXAMPLES_FOLDER

The operations kept are those `rocm-gate publish`, `trust`, `rerun` and `tracker` call; the webhooks are the events the
workflows and the rerun handler read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = {"pull_request": ["opened", "labeled", "unlabeled", "synchronize"], "check_run": ["requested_action", "rerequested"],
            "merge_group": ["checks_requested"], "workflow_dispatch": [None], "workflow_run": ["requested", "completed"],
            "push": [None]}
OPERATIONS = {
    "/repos/{owner}/{repo}": ["get"],
    "/repos/{owner}/{repo}/check-runs": ["post"],
    "/repos/{owner}/{repo}/check-runs/{check_run_id}": ["get", "patch"],
    "/repos/{owner}/{repo}/commits/{ref}/check-runs": ["get"],
    "/repos/{owner}/{repo}/collaborators/{username}/permission": ["get"],
    "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches": ["post"],
    "/repos/{owner}/{repo}/pulls/{pull_number}": ["get"],
    "/repos/{owner}/{repo}/pulls/{pull_number}/files": ["get"],
    # `rocm-gate trust`: the files of the very commit a label approved (the PR's head may have moved on since)
    "/repos/{owner}/{repo}/compare/{basehead}": ["get"],
    "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations": ["get"],
    "/app/installations/{installation_id}/access_tokens": ["post"],
    # the publisher's provenance checks and the sweep: the gate run, its jobs and artifacts, a tested commit
    "/repos/{owner}/{repo}/actions/runs/{run_id}": ["get"],
    # which of two runs of one commit ended last (a re-run of an older run can end after a newer run)
    "/repos/{owner}/{repo}/actions/runs/{run_id}/attempts/{attempt_number}": ["get"],
    "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs": ["get"],
    "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts": ["get"],
    "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}": ["get"],
    "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs": ["get"],
    "/repos/{owner}/{repo}/commits/{ref}": ["get"],
    # main's state, live: main's first-parent commits, and the history store carried as an artifact of the
    # default branch's own publish runs (found by name across the repository's artifacts)
    "/repos/{owner}/{repo}/commits": ["get"],
    "/repos/{owner}/{repo}/actions/artifacts": ["get"],
    # `rocm-gate tracker`: one issue per SKU and framework, found by its label, written again when it changed
    "/repos/{owner}/{repo}/issues": ["get", "post"],
    "/repos/{owner}/{repo}/issues/{issue_number}": ["patch"],
}
WEBHOOKS = ["check-run-requested-action", "check-run-rerequested", "pull-request-labeled", "pull-request-synchronize",
            "pull-request-opened", "pull-request-unlabeled", "merge-group-checks-requested", "workflow-run-completed",
            "workflow-run-requested", "workflow-dispatch", "push"]


def refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def main(openapi: Path, webhooks: Path, examples: Path) -> None:
    api = json.loads((openapi / "generated/api.github.com.deref.json").read_text())
    paths = {path: {m: api["paths"][path][m] for m in methods} for path, methods in OPERATIONS.items()}
    (HERE / "openapi-subset.json").write_text(json.dumps(
        {"source": f"@octokit/openapi {api['info']['version']} generated/api.github.com.deref.json",
         "openapi": api["openapi"], "paths": paths}, separators=(",", ":")) + "\n")
    hooks = json.loads((webhooks / "generated/api.github.com.json").read_text())
    kept = {name: hooks["webhooks"][name] for name in WEBHOOKS}
    schemas = hooks["components"]["schemas"]
    needed: set[str] = set()
    refs(kept, needed)
    while True:  # the schemas those refer to, transitively
        more: set[str] = set()
        for name in needed:
            refs(schemas[name], more)
        if more <= needed:
            break
        needed |= more
    version = json.loads((webhooks / "package.json").read_text())["version"]
    (HERE / "webhooks-subset.json").write_text(json.dumps(
        {"source": f"@octokit/openapi-webhooks {version} generated/api.github.com.json",
         "openapi": hooks["openapi"], "webhooks": kept,
         "components": {"schemas": {name: schemas[name] for name in sorted(needed)}}}, separators=(",", ":")) + "\n")

    events = {e["name"]: e["examples"] for e in json.loads((examples / "api.github.com/index.json").read_text())}
    chosen = {f"{name}.{action}" if action else name: next(x for x in events[name] if x.get("action") == action)
              for name, actions in EXAMPLES.items() for action in actions}
    version = json.loads((examples / "package.json").read_text())["version"]
    (HERE / "webhook-examples.json").write_text(json.dumps(
        {"source": f"@octokit/webhooks-examples {version} api.github.com/index.json", "examples": chosen},
        indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
