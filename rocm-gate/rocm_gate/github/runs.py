"""The gate runs GitHub lists, and where each comes from, by GitHub's facts alone.

- `listed`: every run of a workflow created in a window. GitHub's run listing returns at most 1,000
  results for a search filtered by `created`, `status`, `branch`, `event` or the like
  (docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-workflow: "This endpoint
  will return up to 1,000 results for each search when using the following parameters: actor,
  branch, check_suite_id, created, event, head_sha, status"), so a window whose first page counts
  more is cut in two, and each half again, until every slice fits: a busy repository's oldest runs
  of the window are seen too.
- `origin`: `main` for a run GitHub lists as the default branch's (a push or schedule on it, of this
  repository; a merge queue's candidate of it), `pr` for every other run, whose results a PR's code
  (or a dispatch of a PR's commit) wrote. Never from the run's own results, and never from a payload
  field some events lack: the default branch is the repository's, read once from the API
  (`default_branch`; a `schedule` event's payload has no repository object).
"""

from __future__ import annotations

import datetime as dt

from rocm_gate.github.api import Client

__all__ = ["MAIN", "PR", "attempt_of", "default_branch", "listed", "origin", "when"]

MAIN, PR = "main", "pr"
SEARCH_CAP = 1000  # results GitHub returns for one filtered search
_DEFAULT_BRANCH: dict[str, str] = {}  # repository -> its default branch, asked once per process


def default_branch(client: Client) -> str:
    """The repository's default branch, from the API (once per process and repository)."""
    if client.repo not in _DEFAULT_BRANCH:
        body = client.get("/repos/{repo}") or {}
        branch = body.get("default_branch")
        if not isinstance(branch, str) or not branch:
            from rocm_gate.github.api import PublishError

            raise PublishError(f"GitHub names no default branch for {client.repo}", refused=True)
        _DEFAULT_BRANCH[client.repo] = branch
    return _DEFAULT_BRANCH[client.repo]


def when(text) -> dt.datetime | None:
    """GitHub's timestamp as an aware datetime, or None."""
    try:
        value = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def listed(
    client: Client,
    workflow: str,
    since: dt.datetime,
    until: dt.datetime,
    status: str | None = "completed",
) -> list[dict]:
    """Every run of `workflow` (a file name) created in [since, until], newest first, each once."""
    found: dict[int, dict] = {}
    slices = [(since, until)]
    while slices:
        start, end = slices.pop()
        params = {"created": f"{_stamp(start)}..{_stamp(end)}"}
        if status:
            params["status"] = status
        path = f"/repos/{{repo}}/actions/workflows/{workflow}/runs"
        first = client.get(path, {**params, "per_page": 100, "page": 1}) or {}
        count = first.get("total_count")
        total = count if isinstance(count, int) else 0
        if total > SEARCH_CAP and (end - start) > dt.timedelta(seconds=2):
            middle = start + (end - start) / 2
            # the halves share no second: GitHub's `created` range is inclusive at both ends
            slices += [(start, middle), (middle + dt.timedelta(seconds=1), end)]
            continue
        runs = list(first.get("workflow_runs") or [])
        if len(runs) >= 100:
            runs += client.paged(path, "workflow_runs", params, start_page=2)
        for run in runs:
            if isinstance(run, dict) and isinstance(run.get("id"), int):
                found[run["id"]] = run
    return sorted(
        found.values(), key=lambda r: (str(r.get("created_at") or ""), r["id"]), reverse=True
    )


def attempt_of(run: dict) -> int:
    """The run's attempt as GitHub lists it (a re-run keeps the id: attempt 2, 3, ...)."""
    attempt = run.get("run_attempt")
    return attempt if isinstance(attempt, int) and attempt > 0 else 1


def origin(run: dict, repo: str, default: str) -> str:
    """`main` or `pr` for a run GitHub lists (see the module docstring). A dispatch names a commit
    a writer approved, which need not be main's (a fork's head): `pr`."""
    head_repo = (run.get("head_repository") or {}).get("full_name")
    own = head_repo == repo  # a run of the repository's own branches (a fork's names its fork)
    branch = str(run.get("head_branch") or "")
    event = run.get("event")
    if event in ("push", "schedule") and own and branch == default:
        return MAIN
    if event == "merge_group" and own and branch.startswith(f"gh-readonly-queue/{default}/"):
        return MAIN
    return PR
