"""Which gate run a check belongs to, which commit it lands on, and whether the run was approved:
from GitHub.

The publisher runs on `workflow_run`, from the default branch's definition, with the App's key. It
believes nothing the gated run wrote (docs/architecture.md, "Threat model"); it asks GitHub:

- the commit: `workflow_run.head_sha` for `pull_request` (the PR's head, while the run tested the merge commit),
  `merge_group` and `push` runs; for a `workflow_dispatch` run (an approval or a rerun button) the SHA its
  `run-name` names (`rocm-gate dispatch <sha>`, rendered by the default branch's caller from the dispatch's own
  input: `workflow_run.head_sha` is then the default branch's head, not the PR's);
- the approval: the run referenced the pinned reusable gate workflow (`referenced_workflows`: path and commit),
  and its gate job for the class ran on the class's self-hosted runner group with the class's label. That group
  admits only jobs of the pinned workflow (runner group "selected workflows"), whose gate job runs only after its
  trust job approved the exact commit, so no job a fork writes can produce such a job;
- the results' claims, checked against those facts (`check_results`): the head SHA they name is this one, the
  commit they tested is it or a merge commit whose parents include it (asked of the API), the platform is the
  class's (SKU and GPU count) and was detected, not simulated.
"""

from __future__ import annotations

import io
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas import markdown as md
from rocm_gate.github.api import Client
from rocm_gate.github.artifacts import (
    FILES,
    MAX_FILE_BYTES,
    ArtifactError,
    Results,
    ResultsMissing,
    read_results,
)

__all__ = [
    "DISPATCH_TITLE",
    "GateRun",
    "RESULTS_ARTIFACT",
    "RunRefused",
    "check_results",
    "fetch_results",
    "gate_run",
    "head_sha_of",
    "runner_class_of",
]

DISPATCH_TITLE = re.compile(r"^rocm-gate dispatch (?P<sha>[0-9a-fA-F]{40})\b")
RUNNER_CLASS = re.compile(r"^(?P<sku>[a-z0-9]+)-(?P<gpus>[1-9][0-9]*)$")
WORKFLOW_PIN = re.compile(
    r"^(?P<path>[\w.-]+/[\w.-]+/\.github/workflows/[\w./-]+\.ya?ml)@(?P<sha>[0-9a-f]{40})$"
)
RESULTS_ARTIFACT = "rocm-gate-results-{runner_class}"
# a fork's commit needs a writer's approval; the rest is the repository's own
NEEDS_APPROVAL = ("pull_request",)


class RunRefused(BadInput):
    """The publisher's inputs or the event cannot describe a gate run (a bad pin, a dispatch without
    run-name)."""


def runner_class_of(name: str) -> tuple[str, int]:
    """(SKU, GPU count) of a runner class such as `mi300x-8` (runners/classes.toml names them
    so)."""
    match = RUNNER_CLASS.match(name or "")
    if not match:
        raise RunRefused(f"runner class {name!r} is not SKU-GPUS (such as mi300x-8)")
    return match["sku"].upper(), int(match["gpus"])


@dataclass
class GateRun:
    run_id: int
    event: str
    head_sha: str
    status: str
    conclusion: str | None
    html_url: str | None
    attempt: int = 1
    approved: bool = False
    why: str = ""  # why it is or is not approved, in words
    gate_job: dict | None = None
    base_sha: str | None = (
        None  # the PR's base, as GitHub lists it on the run, else its merge commit's first parent
    )
    head_branch: str = ""  # as GitHub lists the run (github/runs.py: origin reads these)
    head_repository: str | None = None
    pr: int | None = None  # the PR GitHub lists on the run with this head (none for a fork's run)
    completed_at: str | None = None  # when GitHub says the run completed (its last update)
    # what the publisher checked, for the check's summary
    notes: list[str] = field(default_factory=list)

    @property
    def external_id(self) -> str:
        """The check's external_id: the run id, and the attempt after a re-run of the run (GitHub's
        "Re-run jobs" keeps the id), so a re-run gets a check of its own instead of the first
        attempt's annotations."""
        return str(self.run_id) if self.attempt <= 1 else f"{self.run_id}-{self.attempt}"


def _listed_base(run: dict, head: str) -> str | None:
    """The base SHA of the PR GitHub lists on the run with this head (GitHub lists none for a fork's
    PR)."""
    for pull in run.get("pull_requests") or []:
        if isinstance(pull, dict) and (pull.get("head") or {}).get("sha") == head:
            base = (pull.get("base") or {}).get("sha")
            if isinstance(base, str) and len(base) == 40:
                return base.lower()
    return None


def _listed_pr(run: dict, head: str) -> int | None:
    """The number of the PR GitHub lists on the run with this head."""
    for pull in run.get("pull_requests") or []:
        if isinstance(pull, dict) and (pull.get("head") or {}).get("sha") == head:
            number = pull.get("number")
            return number if isinstance(number, int) else None
    return None


def head_sha_of(run: dict) -> str:
    if run.get("event") == "workflow_dispatch":
        match = DISPATCH_TITLE.match(run.get("display_title") or "")
        if not match:
            raise RunRefused(
                f"workflow_dispatch run {run.get('id')} does not name the commit it gated: its title "
                f"is {run.get('display_title')!r}; the caller must set "
                "`run-name: rocm-gate dispatch <inputs.sha>` (examples/upstream/rocm-gate.yml)"
            )
        return match["sha"].lower()
    sha = str(run.get("head_sha") or "")
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise RunRefused(f"workflow run {run.get('id')} has no head SHA")
    return sha


def gate_run(
    client: Client,
    event_run: dict,
    runner_class: str,
    gate_workflow: str,
    runner_group: str,
    wait_completed: bool = False,
) -> GateRun:
    """The gate run of a `workflow_run` event, read again from the API (the event's copy is only its
    id), with its commit and, once it completed, whether its gate job for `runner_class` was an
    approved one. `wait_completed`: the event said it completed; wait a little for the API to say so
    too."""
    pin = WORKFLOW_PIN.match(gate_workflow or "")
    if not pin:
        raise RunRefused(
            f"--gate-workflow {gate_workflow!r} must be OWNER/REPO/.github/workflows/FILE.yml@<40-hex "
            "commit>, the pin the caller workflow uses"
        )
    runner_class_of(runner_class)
    run_id = event_run.get("id")
    if not isinstance(run_id, int):
        raise RunRefused("the workflow_run event has no run id")
    run = client.get(f"/repos/{{repo}}/actions/runs/{run_id}")
    # the API may lag behind the event
    for attempt in range(client.attempts if wait_completed else 0):
        if run.get("status") == "completed":
            break
        client.sleep(min(client.backoff * 2**attempt, 30.0))
        run = client.get(f"/repos/{{repo}}/actions/runs/{run_id}")
    attempt = run.get("run_attempt") if isinstance(run.get("run_attempt"), int) else 1
    found = GateRun(
        run_id=run_id,
        event=str(run.get("event")),
        head_sha=head_sha_of(run),
        status=str(run.get("status")),
        conclusion=run.get("conclusion"),
        html_url=run.get("html_url"),
        attempt=attempt,
        base_sha=_listed_base(run, head_sha_of(run)),
        head_branch=str(run.get("head_branch") or ""),
        head_repository=(run.get("head_repository") or {}).get("full_name"),
        pr=_listed_pr(run, head_sha_of(run)),
        completed_at=str(run.get("updated_at")) if run.get("status") == "completed" else None,
    )
    if found.status != "completed":
        found.why = "the run has not completed"
        return found
    referenced = [w for w in run.get("referenced_workflows") or [] if isinstance(w, dict)]
    if not any(
        str(w.get("path", "")).split("@")[0] == pin["path"] and w.get("sha") == pin["sha"]
        for w in referenced
    ):
        seen = (
            ", ".join(f"{w.get('path')} at {str(w.get('sha'))[:12]}" for w in referenced) or "none"
        )
        found.why = (
            f"the run did not use the pinned gate workflow {gate_workflow} (it referenced: {seen})"
        )
        return found
    jobs = client.paged(f"/repos/{{repo}}/actions/runs/{run_id}/jobs", "jobs")
    on_group = [
        j
        for j in jobs
        if j.get("runner_group_name") == runner_group
        and runner_class in (j.get("labels") or [])
        and j.get("runner_name")
    ]
    if not on_group:
        groups = sorted(
            {str(j.get("runner_group_name")) for j in jobs if j.get("runner_group_name")}
        ) or ["none"]
        found.why = (
            f"no job of the run ran on the runner group {runner_group!r} with the label {runner_class!r} "
            f"(its jobs ran on: {', '.join(groups)}): the trust job did not approve it, or it never started"
        )
        return found
    found.gate_job = max(on_group, key=lambda j: j.get("id", 0))
    found.approved = True
    found.why = (
        f"gate job {found.gate_job.get('name')!r} ran on runner {found.gate_job.get('runner_name')!r} of the "
        f"group {runner_group!r}, from {gate_workflow}"
    )
    # a fork's caller names its jobs: shown as text
    found.notes.append(
        f"Run {run_id} ({md.code(found.event)}) used the pinned gate workflow; gate job "
        f"{md.code(found.gate_job.get('name'))} ran on runner {md.code(found.gate_job.get('runner_name'))} "
        f"of the group {md.code(runner_group)}."
    )
    return found


def fetch_results(client: Client, run: GateRun, runner_class: str, into: Path) -> Results:
    """The run's results artifact, downloaded through the API and read by the strict loader. Only
    the artifacts a check is built from (`artifacts.FILES`: the gate report, manifest, parity report
    and base check) are taken out of the zip, each as a plain file under the size cap."""
    name = RESULTS_ARTIFACT.format(runner_class=runner_class)
    artifacts = [
        a
        for a in client.paged(
            f"/repos/{{repo}}/actions/runs/{run.run_id}/artifacts", "artifacts", {"name": name}
        )
        if a.get("name") == name and not a.get("expired")
    ]
    # Only what the gate job itself can have uploaded: made while it ran (another job of the run, or
    # an earlier attempt of a re-run, could upload an artifact of that name too).
    job = run.gate_job or {}
    started, completed = str(job.get("started_at") or ""), str(job.get("completed_at") or "")
    artifacts = [
        a
        for a in artifacts
        if not started
        or (
            started <= str(a.get("created_at") or "")
            and (not completed or str(a.get("created_at")) <= completed)
        )
    ]
    if not artifacts:
        raise ResultsMissing(
            f"run {run.run_id} has no artifact {name} made by its gate job (the job ended before "
            "uploading it)"
        )
    newest = max(artifacts, key=lambda a: a.get("id", 0))
    data = client.download(f"/repos/{{repo}}/actions/artifacts/{newest['id']}/zip")
    # named as the artifact (the history store keys a run's results by it), where that is free
    folder = into / name
    if folder.exists():
        folder = Path(tempfile.mkdtemp(prefix="rocm-gate-results-", dir=into))
    else:
        folder.mkdir()
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ArtifactError(f"artifact {name} of run {run.run_id}: not a zip archive") from None
    try:
        _extract(archive, name, folder)
    except ArtifactError:
        raise
    except (
        zipfile.BadZipFile,
        RuntimeError,
        NotImplementedError,
        EOFError,
        OSError,
        ValueError,
    ) as exc:
        raise ArtifactError(
            f"artifact {name} of run {run.run_id}: cannot be read ({type(exc).__name__}: "
            f"{str(exc)[:200]})"
        ) from None
    return read_results(folder)


def _extract(archive: zipfile.ZipFile, name: str, folder: Path) -> None:
    with archive:
        for info in archive.infolist():
            if info.filename not in FILES or info.is_dir():
                # records, JUnit, logs and anything else: not read by the publisher (base-check.json,
                # the base experiment's, is one of FILES: read_results loads it as the rest)
                continue
            if (info.external_attr >> 16) & 0o170000 not in (0, 0o100000):
                raise ArtifactError(f"artifact {name}: {info.filename} is not a plain file")
            if info.file_size > MAX_FILE_BYTES:
                raise ArtifactError(
                    f"artifact {name}: {info.filename} is {info.file_size:,} bytes, over the cap"
                )
            with archive.open(info) as source:
                body = source.read(MAX_FILE_BYTES + 1)
            if len(body) > MAX_FILE_BYTES:
                raise ArtifactError(
                    f"artifact {name}: {info.filename} is over the {MAX_FILE_BYTES:,}-byte cap"
                )
            (folder / info.filename).write_bytes(body)


def merge_base(client: Client, head: str) -> str | None:
    """The commit `head` forked from the default branch at (GitHub's compare), or None."""
    from rocm_gate.github.runs import default_branch

    body = client.get(f"/repos/{{repo}}/compare/{default_branch(client)}...{head}", ok_missing=True)
    sha = ((body or {}).get("merge_base_commit") or {}).get("sha")
    return sha.lower() if isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{40}", sha) else None


def check_results(
    client: Client, run: GateRun, results: Results, runner_class: str, allow_simulated: bool = False
) -> list[str]:
    """What is wrong with the results' claims against GitHub's facts (empty when nothing is); notes
    of what was checked go to `run.notes`."""
    problems = []
    claimed_head, tested = results.head_sha, results.tested_sha
    if claimed_head and claimed_head != run.head_sha:
        problems.append(
            f"the results say the head commit was {claimed_head}, but run {run.run_id} is for "
            f"{run.head_sha}"
        )
    if not tested:
        problems.append("the results name no tested commit")
    elif not re.fullmatch(r"[0-9a-f]{40}", str(tested)):
        problems.append(
            f"the results name {str(tested)[:60]!r} as the tested commit, not a full commit SHA"
        )
    elif tested != run.head_sha:
        commit = client.get(f"/repos/{{repo}}/commits/{tested}", ok_missing=True)
        parents = [p.get("sha") for p in (commit or {}).get("parents") or [] if isinstance(p, dict)]
        if commit is None:
            problems.append(
                f"the results say they tested {tested}, which this repository does not have"
            )
        elif len(parents) != 2 or parents[1] != run.head_sha:
            # GitHub's test merge commit of a PR has two parents: the base, then the head
            problems.append(
                f"the results say they tested {tested}, which is neither {run.head_sha} nor a merge "
                f"commit of it into a base (its parents: {', '.join(str(p)[:12] for p in parents) or 'none'})"
            )
        else:
            run.notes.append(
                f"Tested commit {tested[:12]}: the merge of {run.head_sha[:12]} into its base "
                f"{str(parents[0])[:12]}."
            )
            # the base the code that ran was built on is the merge commit's first parent, as GitHub
            # has it: exact where the PR's listed base may have moved on, and the only base GitHub
            # gives for a fork's run, which lists no PR (its date is the commit's own)
            if re.fullmatch(r"[0-9a-f]{40}", str(parents[0])):
                run.base_sha = str(parents[0])
    if not problems and tested == run.head_sha and run.event == "workflow_dispatch":
        # a dispatch gates the head itself (an approval of a fork's commit, a rerun): its base is
        # where that head forked from main, as GitHub computes it
        run.base_sha = run.base_sha or merge_base(client, run.head_sha)
    sku, gpus = runner_class_of(runner_class)
    platform = results.manifest.get("platform") or {}
    seen = sorted({str(g.get("sku")) for g in platform.get("gpus") or []})
    if results.simulated_profile and not allow_simulated:
        problems.append(
            f"the results come from the simulated platform profile {results.simulated_profile!r}, not "
            "from a GPU: a simulated run never makes a check (--allow-simulated for a demo repository)"
        )
    elif not results.simulated_profile and (
        seen != [sku] or len(platform.get("gpus") or []) != gpus
    ):
        problems.append(
            f"the runner class is {runner_class} ({gpus} x {sku}), but the results saw "
            f"{len(platform.get('gpus') or [])} GPU(s) of {', '.join(seen) or 'no SKU'}"
        )
    return problems
