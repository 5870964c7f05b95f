"""GitHub Actions, as GitHub documents it, running the shipped workflow files against the loopback
GitHub.

The tests of the trigger chain need what an upstream repository would see: which workflow definition
runs for an event, with which GITHUB_SHA, GITHUB_REF, secrets and token, which runner takes a job,
and what the jobs' `run:` scripts (parsed from the files, run in bash) leave behind. Each rule is
GitHub's documented one:

- Which definition runs (docs.github.com/en/actions/concepts/workflows-and-actions/workflows: "Each workflow run
  will use the version of the workflow that is present in the associated commit SHA or Git ref of the event"):
  `pull_request` the PR's merge commit, so a fork's own copy (.../security/securely-using-pull_request_target);
  `workflow_dispatch` the dispatched ref; `merge_group` the merge group's commit; `workflow_run`, `schedule` and
  `check_run` the default branch (.../events-that-trigger-workflows).
- GITHUB_SHA and GITHUB_REF per event (.../events-that-trigger-workflows): `pull_request` the last merge commit
  and `refs/pull/N/merge`; `workflow_dispatch` the ref's last commit; `merge_group` the group's SHA and ref;
  `workflow_run` the default branch's last commit.
- Secrets: none but GITHUB_TOKEN for a run triggered from a fork, and that token is read-only
  (.../write-workflows/choose-what-workflows-do/use-secrets; .../workflow-syntax#how-permissions-are-calculated).
- Reusable workflows (.../reusing-workflow-configurations): the caller's workflow-level `env` is not passed on;
  an input or secret the called workflow does not declare is an error (the run fails to start:
  `startup_failure`); the `github` context is the caller's; `job.workflow_sha` and `job.workflow_repository` are
  the called file's (.../contexts#job-context); the run records each called workflow in `referenced_workflows`
  (REST "Get a workflow run"); its jobs are named "caller job / called job".
- Runner groups restricted to selected workflows (.../manage-runners/self-hosted-runners/manage-access): only
  jobs defined directly in a listed workflow ref get the group's runners; any other job waits for a runner that
  never comes (here: cancelled, with no runner).
- `workflow_run` (.../events-that-trigger-workflows#workflow_run): `requested` when a run of a named workflow
  starts, `completed` when it ends, each starting the listening workflows of the default branch, which get
  secrets even after a fork's run.
- Artifacts: a second upload of one name in a run fails (actions/upload-artifact README); a download through the
  REST API redirects to storage (REST "Download an artifact").

Actions the shipped workflows use are emulated: checkout (this project's own repository is not
copied: the harness records the ref; the installed pytest-rocm is this working tree, which is the pinned commit),
setup-python (nothing), upload- and download-artifact (the loopback GitHub's artifact store).
`python -m pip` is recorded, not run. A self-hosted GPU runner answers `amd-smi` with a real MI300X
capture (tests/data/samples).
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from actions_expressions import condition, render
from github_api import example, validate_webhook

# Every run of a test session starts two hours before the session did (created, then a job from
# minute 1 to 29, its artifact at 15, completed at 30): recent enough for the sweep's window (48
# hours), ended long enough ago for its `stuck_after` (30 minutes), whatever the date. Fixed dates
# made these tests fail once the calendar moved two days past them.
RUNS_START = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=2)


def at_minute(minute: int, start: dt.datetime | None = None) -> str:
    """GitHub's timestamp of `minute` minutes into a run started at `start` (default RUNS_START)."""
    return ((start or RUNS_START) + dt.timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


REPO = Path(__file__).resolve().parent.parent
PYTEST_ROCM = "rocm/pytest-rocm"
FORK_REPO = "someone/vllm-fork"  # where a fork PR's head commits come from
SAMPLES = REPO / "tests" / "data" / "samples" / "amd-smi"
# A step here takes seconds (15 s for the gates' `pytest -n 8` on a loaded 2-core machine). One that
# runs past this limit, well inside the test's own pytest-timeout (300 s), is hung: it fails its
# test with its own output and the stacks of its Python processes, which name where it hangs.
STEP_LIMIT_S = 150
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}
ACTION_PREFIXES = (
    "actions/checkout@",
    "actions/setup-python@",
    "actions/upload-artifact@",
    "actions/download-artifact@",
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout.strip()


def write_gpu_tools(folder: Path, sku: str = "mi300x-8") -> Path:
    """A bin folder whose `amd-smi` prints a real capture of 8 MI300X (tests/data/samples/amd-smi),
    as a GPU runner's does."""
    assert sku == "mi300x-8", "only the 8 x MI300X capture is vendored as JSON"
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "amd-smi"
    tool.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        f"  static) cat '{SAMPLES / 'mi300x_x8_amd-smi_static_json_rocm7.2.1_dell-ai.json'}' ;;\n"
        f"  version) cat '{SAMPLES / 'mi300x_amd-smi_version_json_rocm7.2.1_dell-ai.json'}' ;;\n"
        "  *) exit 2 ;;\nesac\n"
    )
    tool.chmod(0o755)
    return folder


class StepHung(AssertionError):
    """A `run:` step ran past STEP_LIMIT_S: its output ends with its Python processes' stacks."""

    def __init__(self, name: str, stdout: str, stderr: str):
        super().__init__(
            f"the step {name!r} ran past {STEP_LIMIT_S} s and was stopped; what it printed, ending "
            f"with the stacks of its Python processes (faulthandler):\n{stdout[-20000:]}\n"
            f"{stderr[-40000:]}"
        )


def _stacks_and_stop(process: subprocess.Popen) -> tuple[str, str]:
    """Make every Python process of the step's group print its threads' stacks (faulthandler
    answers SIGABRT with them), then kill the group; what the step printed."""
    for sig in (signal.SIGABRT, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            continue
    return process.communicate()


def _on(definition: dict) -> dict:
    on = definition.get("on", definition.get(True))  # YAML 1.1 reads a bare `on` key as true
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return {name: {} for name in on}
    return {name: (spec or {}) for name, spec in (on or {}).items()}


DEFAULT_PR_TYPES = ("opened", "synchronize", "reopened")


@dataclass
class RunnerGroup:
    name: str
    labels: set[str]
    selected_workflows: list[str]  # workflow refs (path@sha) whose own jobs may use it
    tools: Path | None = None  # what the machine answers for its GPUs


@dataclass
class Pull:
    number: int
    head: str
    base: str
    merge: str
    head_repo: str
    author: str


@dataclass
class JobRecord:
    name: str
    workflow_ref: str
    runs_on: object
    runner_group: str | None
    conclusion: str
    steps: list[dict] = field(default_factory=list)  # name, conclusion, output
    outputs: dict = field(default_factory=dict)
    concurrency: str | None = None
    checkouts: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class RunRecord:
    id: int
    workflow: str
    event: str
    conclusion: str
    jobs: list[JobRecord] = field(default_factory=list)
    triggered: list[RunRecord] = field(default_factory=list)  # workflow_run runs it started

    def all(self):
        yield self
        for run in self.triggered:
            yield from run.all()

    def report(self, tail: int = 1500) -> str:
        """Every job and step of this run and the runs it started, with the end of each step's
        output."""
        lines = []
        for run in self.all():
            lines.append(f"run {run.id} {run.workflow} ({run.event}): {run.conclusion}")
            for job in run.jobs:
                lines.append(
                    f"  job {job.name}: {job.conclusion} on {job.runner_group or job.runs_on}"
                )
                lines += [
                    f"    step {s['name']}: {s['conclusion']}\n      "
                    + s["output"][-tail:].replace("\n", "\n      ")
                    for s in job.steps
                ]
        return "\n".join(lines)

    def job(self, suffix: str) -> JobRecord:
        found = [j for run in self.all() for j in run.jobs if j.name.endswith(suffix)]
        assert found, (
            f"no job named *{suffix} in {[j.name for run in self.all() for j in run.jobs]}"
        )
        return found[-1]


def args_attempt(state: dict) -> int:
    return int(state.get("run_attempt") or 1)


class StartupFailure(Exception):
    """GitHub refuses the workflow before any job runs (an input the called workflow does not
    declare...)."""


class Actions:
    """An upstream repository on the loopback GitHub, with the shipped workflows, runners and an
    App."""

    def __init__(
        self, fake, root: Path, repo: str = "vllm-project/vllm", secrets: dict | None = None
    ):
        self.fake, self.root, self.repo = fake, root, repo
        self.git_dir = root / "upstream"
        self.git_dir.mkdir(parents=True)
        git(self.git_dir, "init", "-q", "-b", "main")
        self.secrets = secrets or {}
        self.runner_groups: list[RunnerGroup] = []
        self.pip_log = root / "pip.log"
        self.pip_log.touch()
        self.shims = root / "shims"
        self._write_shims(self.shims)
        self._ids = itertools.count(700001)
        self._jobs = itertools.count(900001)
        self.pulls: dict[int, Pull] = {}
        self.runs: list[RunRecord] = []
        # workflow_run actions GitHub fails to deliver (it happens)
        self.undelivered: set[str] = set()
        self._started: dict[int, tuple] = {}  # run id -> what started it, for a re-run
        # the harness's clock: a run starts at it (created, a job from minute 1 to 29, its artifact at
        # 15, completed at 30) and a commit is made at it; `advance` moves it (a day of activity)
        self.clock = RUNS_START
        self.fake.branches["main"] = ""

    def advance(self, minutes: float) -> dt.datetime:
        self.clock += dt.timedelta(minutes=minutes)
        return self.clock

    # --- the repository ---
    def commit(
        self,
        files: dict[str, str],
        message: str,
        branch: str | None = "main",
        parent: str | None = None,
    ) -> str:
        """A commit with `files` written over `parent`'s tree (default: the branch's tip); returns
        its SHA."""
        work = self.root / f"work-{next(self._ids)}"
        git(self.root, "clone", "-q", "--shared", "--no-checkout", str(self.git_dir), str(work))
        start = parent or (
            git(self.git_dir, "rev-parse", branch) if branch and self._has(branch) else None
        )
        if start:
            git(work, "checkout", "-q", "--detach", start)
        for name, text in files.items():
            path = work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(work, "add", "-A")
        stamp = self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")
        subprocess.run(
            ["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", message],
            check=True,
            capture_output=True,
            env={**os.environ, **GIT_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp},
        )
        sha = git(work, "rev-parse", "HEAD")
        git(work, "push", "-q", str(self.git_dir), f"HEAD:refs/harness/{sha}")
        if branch:
            git(self.git_dir, "update-ref", f"refs/heads/{branch}", sha)
        self._register(sha)
        if branch:
            self.fake.branches[branch] = sha
        return sha

    def _has(self, ref: str) -> bool:
        return (
            subprocess.run(
                ["git", "-C", str(self.git_dir), "rev-parse", "--verify", "-q", ref],
                capture_output=True,
            ).returncode
            == 0
        )

    def _register(self, sha: str) -> None:
        line = git(self.git_dir, "rev-list", "--parents", "-n", "1", sha).split()
        self.fake.commits[sha] = line[1:]
        when = git(self.git_dir, "show", "-s", "--format=%ct", sha)
        self.fake.commit_dates[sha] = dt.datetime.fromtimestamp(int(when), dt.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )

    def merge(self, base: str, head: str, message: str) -> str:
        work = self.root / f"work-{next(self._ids)}"
        git(self.root, "clone", "-q", "--shared", "--no-checkout", str(self.git_dir), str(work))
        git(work, "checkout", "-q", "--detach", base)
        stamp = self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")
        subprocess.run(
            ["git", "-C", str(work), "merge", "-q", "--no-ff", "-m", message, head],
            check=True,
            capture_output=True,
            env={**os.environ, **GIT_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp},
        )
        sha = git(work, "rev-parse", "HEAD")
        git(work, "push", "-q", str(self.git_dir), f"HEAD:refs/harness/{sha}")
        self._register(sha)
        return sha

    def file_at(self, sha: str, path: str) -> str | None:
        done = subprocess.run(
            ["git", "-C", str(self.git_dir), "show", f"{sha}:{path}"],
            capture_output=True,
            text=True,
        )
        return done.stdout if done.returncode == 0 else None

    def workflows_at(self, sha: str) -> dict[str, dict]:
        names = git(self.git_dir, "ls-tree", "--name-only", f"{sha}:.github/workflows").split()
        return {
            f".github/workflows/{n}": yaml.safe_load(self.file_at(sha, f".github/workflows/{n}"))
            for n in names
            if n.endswith((".yml", ".yaml"))
        }

    def main(self) -> str:
        return git(self.git_dir, "rev-parse", "main")

    def open_pull(
        self, number: int, files: dict[str, str], fork: bool, author: str = "forker"
    ) -> Pull:
        base = self.main()
        head = self.commit(files, f"PR {number}", branch=None, parent=base)
        merge = self.merge(base, head, f"Merge {head} into {base}")
        pull = Pull(number, head, base, merge, FORK_REPO if fork else self.repo, author)
        self.pulls[number] = pull
        self._register_files(pull)
        return pull

    def push_to_pull(self, pull: Pull, files: dict[str, str]) -> Pull:
        pull.head = self.commit(files, f"PR {pull.number} again", branch=None, parent=pull.head)
        pull.merge = self.merge(pull.base, pull.head, f"Merge {pull.head} into {pull.base}")
        self._register_files(pull)
        return pull

    def _register_files(self, pull: Pull) -> None:
        """What GitHub answers about the PR's files: the PR's now, and its head commit's (compare)."""
        changed = git(self.git_dir, "diff", "--name-only", f"{pull.base}...{pull.head}").split()
        self.fake.pull_files[pull.number] = sorted(changed)
        self.fake.compare_files[f"{pull.base}...{pull.head}"] = sorted(changed)

    # --- events ---
    def pull_request(
        self, pull: Pull, action: str, sender: str, label: str | None = None
    ) -> RunRecord | None:
        name = {"reopened": "opened"}.get(action, action)
        event = example(f"pull_request.{name}")
        event["action"] = action
        event["number"] = pull.number
        pr = event["pull_request"]
        pr.update(number=pull.number, merge_commit_sha=pull.merge)
        pr["head"].update(sha=pull.head, ref=f"pr-{pull.number}")
        pr["head"]["repo"]["full_name"] = pull.head_repo
        pr["base"].update(sha=pull.base, ref="main")
        pr["base"]["repo"]["full_name"] = self.repo
        event["repository"]["full_name"] = self.repo
        event["repository"]["default_branch"] = "main"
        event["sender"]["login"] = sender
        if label is not None:
            event["label"]["name"] = label
        validate_webhook(f"pull-request-{name}", event)
        github = {
            "event_name": "pull_request",
            "event": event,
            "sha": pull.merge,
            "ref": f"refs/pull/{pull.number}/merge",
            "head_ref": f"pr-{pull.number}",
            "base_ref": "main",
            "actor": sender,
        }
        return self._deliver(
            "pull_request",
            event,
            github,
            definitions_at=pull.merge,
            head_sha=pull.head,
            fork=pull.head_repo != self.repo,
            head_branch=f"pr-{pull.number}",
            action=action,
        )

    def dispatch(
        self, workflow_file: str, inputs: dict, sender: str, ref: str = "main"
    ) -> RunRecord | None:
        """What GitHub does with POST .../dispatches (only writers and Apps with actions: write may
        make one); a sender ending in [bot] is an App's."""
        event = example("workflow_dispatch")
        event.update(
            inputs=inputs, ref=f"refs/heads/{ref}", workflow=f".github/workflows/{workflow_file}"
        )
        event["repository"]["full_name"] = self.repo
        event["repository"]["default_branch"] = "main"
        event["sender"]["login"] = sender
        event["sender"]["type"] = "Bot" if sender.endswith("[bot]") else "User"
        sha = git(self.git_dir, "rev-parse", ref)
        github = {
            "event_name": "workflow_dispatch",
            "event": event,
            "sha": sha,
            "ref": f"refs/heads/{ref}",
            "actor": sender,
        }
        return self._deliver(
            "workflow_dispatch",
            event,
            github,
            definitions_at=sha,
            head_sha=sha,
            fork=False,
            head_branch=ref,
            only=f".github/workflows/{workflow_file}",
        )

    def merge_group(self, pull: Pull) -> RunRecord | None:
        event = example("merge_group.checks_requested")
        group = self.merge(self.main(), pull.head, f"Merge queue: PR {pull.number}")
        event["merge_group"].update(
            head_sha=group,
            base_sha=self.main(),
            head_ref=f"refs/heads/gh-readonly-queue/main/pr-{pull.number}-{self.main()}",
        )
        event["repository"]["full_name"] = self.repo
        event["repository"]["default_branch"] = "main"
        validate_webhook("merge-group-checks-requested", event)
        github = {
            "event_name": "merge_group",
            "event": event,
            "sha": group,
            "ref": event["merge_group"]["head_ref"],
            "actor": "github-merge-queue[bot]",
        }
        return self._deliver(
            "merge_group",
            event,
            github,
            definitions_at=group,
            head_sha=group,
            fork=False,
            head_branch=event["merge_group"]["head_ref"].removeprefix("refs/heads/"),
        )

    def push(
        self, files: dict[str, str] | None = None, message: str = "", landed: str | None = None
    ) -> RunRecord | None:
        """A commit pushed to main (a PR merged) and the `push` event's runs on it; `landed`: a commit
        already on main (`commit`) whose push runs only now (its run started late)."""
        before = git(self.git_dir, "rev-parse", f"{landed}^") if landed else self.main()
        sha = landed or self.commit(files or {}, message)
        message = message or git(self.git_dir, "show", "-s", "--format=%s", sha)
        event = example("push")
        event.update(ref="refs/heads/main", before=before, after=sha, base_ref=None, created=False)
        event["head_commit"].update(id=sha, tree_id=sha, message=message)
        event["commits"] = [{**event["head_commit"]}]
        event["repository"]["full_name"] = self.repo
        event["repository"]["default_branch"] = "main"
        event["repository"]["master_branch"] = "main"
        event["repository"]["visibility"] = "public"
        validate_webhook("push", event)
        github = {
            "event_name": "push",
            "event": event,
            "sha": sha,
            "ref": "refs/heads/main",
            "actor": "maintainer",
        }
        return self._deliver(
            "push",
            event,
            github,
            definitions_at=sha,
            head_sha=sha,
            fork=False,
            head_branch="main",
        )

    def schedule(self, workflow_file: str) -> RunRecord | None:
        sha = self.main()
        event = {"schedule": "*/30 * * * *"}
        github = {
            "event_name": "schedule",
            "event": event,
            "sha": sha,
            "ref": "refs/heads/main",
            "actor": "github",
        }
        return self._deliver(
            "schedule",
            event,
            github,
            definitions_at=sha,
            head_sha=sha,
            fork=False,
            head_branch="main",
            only=f".github/workflows/{workflow_file}",
        )

    def _deliver(
        self,
        event_name,
        event,
        github,
        *,
        definitions_at,
        head_sha,
        fork,
        head_branch,
        action=None,
        only=None,
    ) -> RunRecord | None:
        started = None
        for path, definition in self.workflows_at(definitions_at).items():
            if only and path != only:
                continue
            spec = _on(definition)
            if event_name not in spec:
                continue
            types = spec[event_name].get("types") if isinstance(spec[event_name], dict) else None
            if event_name == "pull_request" and action not in (types or DEFAULT_PR_TYPES):
                continue
            record = self._run(
                path,
                definition,
                definitions_at,
                event_name,
                event,
                github,
                head_sha,
                fork,
                head_branch,
            )
            started = started or record
        return started

    # --- runs ---
    def rerun(self, record: RunRecord, files: dict[str, str] | None = None) -> RunRecord:
        """GitHub's "Re-run jobs": the same run id, the next attempt, the same definition and event;
        the `requested` event does not occur again
        (.../events-that-trigger-workflows#workflow_run)."""
        args = self._started[record.id]
        return self._run(
            *args, run_id=record.id, attempt=args_attempt(self.fake.workflow_runs[record.id]) + 1
        )

    def _run(
        self,
        path,
        definition,
        definitions_at,
        event_name,
        event,
        github,
        head_sha,
        fork,
        head_branch,
        run_id: int | None = None,
        attempt: int = 1,
    ) -> RunRecord:
        if run_id is None:
            run_id = next(self._ids)
            self._started[run_id] = (
                path,
                definition,
                definitions_at,
                event_name,
                event,
                github,
                head_sha,
                fork,
                head_branch,
            )
        token = f"ghs_actions_{run_id}"
        self.fake.tokens.add(token)
        if fork:
            self.fake.read_only_tokens.add(token)
        event_path = self.root / f"event-{run_id}.json"
        event_path.write_text(json.dumps(event))
        github = {
            **github,
            "repository": self.repo,
            "run_id": str(run_id),
            "run_attempt": str(attempt),
            "token": token,
            "workflow": definition.get("name") or path,
            "workflow_sha": definitions_at,
            "event_path": str(event_path),
            "workflow_ref": f"{self.repo}/{path}@{github['ref']}",
            "server_url": "https://github.com",
            "api_url": self.fake.url,
            "repository_owner": self.repo.split("/")[0],
        }
        inputs = dict(event.get("inputs") or {}) if event_name == "workflow_dispatch" else {}
        for name, spec in (
            (_on(definition).get("workflow_dispatch") or {}).get("inputs") or {}
        ).items():
            inputs.setdefault(name, (spec or {}).get("default", ""))
        contexts = {
            "github": github,
            "inputs": inputs,
            "vars": {},
            "secrets": {} if fork else dict(self.secrets),
            "env": {},
            "needs": {},
            "matrix": {},
            "steps": {},
            "job": {},
            "runner": {},
            "strategy": {},
        }
        title = render(definition.get("run-name"), contexts) if definition.get("run-name") else None
        start = self.clock
        now = at_minute(0, start)
        state = {
            "repo": self.repo,
            "id": run_id,
            "name": definition.get("name") or path,
            "event": event_name,
            "status": "queued",
            "conclusion": None,
            "head_sha": head_sha,
            "head_branch": head_branch,
            "path": path,
            "display_title": (
                str(title).strip() if title and str(title).strip() else f"{event_name} run {run_id}"
            ),
            "run_attempt": attempt,
            "referenced_workflows": [],
            "created_at": now,
            "updated_at": now,
            "head_repository": FORK_REPO if fork else self.repo,
            "_start": start,
        }
        self.fake.workflow_runs[run_id] = state
        self.fake.jobs[run_id] = []
        record = RunRecord(run_id, path, event_name, "queued")
        self.runs.append(record)
        plan = self._plan(definition, f"{self.repo}/{path}@{github['ref']}")
        try:
            self._check_calls(definition, definitions_at)
        except StartupFailure as exc:
            state.update(status="completed", conclusion="startup_failure")
            record.conclusion = "startup_failure"
            record.jobs.append(
                JobRecord(f"(startup failure: {exc})", "", None, None, "startup_failure")
            )
            return record
        if attempt == 1:
            self._notify(record, state, "requested")
        state["status"] = "in_progress"
        try:
            self._execute(plan, record, state, contexts, fork)
            conclusions = [j.conclusion for j in record.jobs]
            state["conclusion"] = (
                "failure"
                if "failure" in conclusions
                else "cancelled"
                if "cancelled" in conclusions
                else "skipped"
                if conclusions and all(c == "skipped" for c in conclusions)
                else "success"
            )
        except StartupFailure as exc:  # GitHub refuses an invalid call before any of its jobs run
            state["conclusion"] = "startup_failure"
            record.jobs.append(
                JobRecord(f"(startup failure: {exc})", "", None, None, "startup_failure")
            )
        state["status"] = "completed"
        state["updated_at"] = at_minute(30, start)
        record.conclusion = state["conclusion"]
        self.fake.run_attempts[(run_id, attempt)] = copy.deepcopy(
            {k: v for k, v in state.items() if k != "_start"}
        )
        self._notify(record, state, "completed")
        return record

    def _notify(self, record: RunRecord, state: dict, action: str) -> None:
        """workflow_run events: the listening workflows of the default branch run, with secrets."""
        if action in self.undelivered:
            return
        sha = self.main()
        for path, definition in self.workflows_at(sha).items():
            spec = _on(definition).get("workflow_run")
            if (
                spec is None
                or state["name"] not in (spec.get("workflows") or [])
                or action not in (spec.get("types") or ["completed", "requested"])
            ):
                continue
            event = example(f"workflow_run.{action}")
            run = event["workflow_run"]
            run.update(
                {
                    k: state[k]
                    for k in (
                        "id",
                        "name",
                        "event",
                        "status",
                        "conclusion",
                        "head_sha",
                        "head_branch",
                        "path",
                        "run_attempt",
                        "created_at",
                        "updated_at",
                    )
                }
            )
            run["display_title"] = state["display_title"]
            run["referenced_workflows"] = copy.deepcopy(state["referenced_workflows"])
            run["html_url"] = f"https://github.com/{self.repo}/actions/runs/{state['id']}"
            if action == "requested":
                run.update(status="queued", conclusion=None)
            event["action"] = action
            event["repository"]["full_name"] = self.repo
            event["repository"]["default_branch"] = "main"
            validate_webhook(f"workflow-run-{action}", event)
            github = {
                "event_name": "workflow_run",
                "event": event,
                "sha": sha,
                "ref": "refs/heads/main",
                "actor": "github",
            }
            record.triggered.append(
                self._run(path, definition, sha, "workflow_run", event, github, sha, False, "main")
            )

    def _load_called(self, uses: str, definitions_at: str) -> tuple[dict, str, str, str]:
        """(definition, workflow ref, repository, sha) of a called workflow: this project's file for
        a pin of rocm/pytest-rocm (the harness's working tree is every pinned commit), or the
        repository's own."""
        if uses.startswith("./"):
            return (
                yaml.safe_load(self.file_at(definitions_at, uses[2:])),
                f"{self.repo}/{uses[2:]}@{definitions_at}",
                self.repo,
                definitions_at,
            )
        target, _, ref = uses.partition("@")
        owner_repo = "/".join(target.split("/")[:2])
        file = "/".join(target.split("/")[2:])
        if owner_repo != PYTEST_ROCM:
            raise StartupFailure(f"the harness has no copy of {owner_repo}")
        return yaml.safe_load((REPO / file).read_text()), f"{target}@{ref}", PYTEST_ROCM, ref

    def _check_calls(self, definition: dict, definitions_at: str) -> None:
        """GitHub validates a workflow's calls before any job runs: inputs and secrets the called
        workflow does not declare, and required ones not given, fail the whole run
        (startup_failure)."""
        for job in (definition.get("jobs") or {}).values():
            if "uses" not in job:
                continue
            called = (
                _on(self._load_called(job["uses"], definitions_at)[0]).get("workflow_call") or {}
            )
            declared = called.get("inputs") or {}
            unknown = set(job.get("with") or {}) - set(declared)
            if unknown:
                raise StartupFailure(
                    f"Invalid input, {sorted(unknown)[0]} is not defined in the referenced workflow."
                )
            secrets = job.get("secrets")
            if isinstance(secrets, dict) and set(secrets) - set(called.get("secrets") or {}):
                raise StartupFailure(
                    f"Invalid secret, {sorted(set(secrets) - set(called.get('secrets') or {}))[0]} "
                    "is not defined in the referenced workflow."
                )
            missing = [
                k
                for k, v in declared.items()
                if (v or {}).get("required") and k not in (job.get("with") or {})
            ]
            if missing:
                raise StartupFailure(f"Input required and not supplied: {missing[0]}")

    def _plan(self, definition: dict, workflow_ref: str, prefix: str = "") -> list[dict]:
        """The jobs of a workflow (reusable calls expanded, inputs checked), in `needs` order."""
        jobs = definition.get("jobs") or {}
        order, seen = [], set()

        def visit(job_id):
            if job_id in seen:
                return
            seen.add(job_id)
            needs = jobs[job_id].get("needs") or []
            for need in [needs] if isinstance(needs, str) else needs:
                visit(need)
            order.append(job_id)

        for job_id in jobs:
            visit(job_id)
        return [
            {"id": job_id, "spec": jobs[job_id], "workflow_ref": workflow_ref, "prefix": prefix}
            for job_id in order
        ]

    def _execute(
        self, plan: list[dict], record: RunRecord, state: dict, contexts: dict, fork: bool
    ) -> None:
        results: dict[str, dict] = {}
        for item in plan:
            spec = item["spec"]
            needs = spec.get("needs") or []
            needs = [needs] if isinstance(needs, str) else needs
            local = {**contexts, "needs": {n: results[n] for n in needs if n in results}}
            ok = all(results.get(n, {}).get("result") == "success" for n in needs)
            if not condition(spec.get("if"), local, {"success": ok}):
                results[item["id"]] = {"result": "skipped", "outputs": {}}
                record.jobs.append(
                    JobRecord(
                        item["prefix"] + (spec.get("name") or item["id"]),
                        item["workflow_ref"],
                        None,
                        None,
                        "skipped",
                    )
                )
                self._job_state(state, record.jobs[-1])
                continue
            outcome = "success"
            for matrix in self._matrix(spec, local):
                label = spec.get("name") or item["id"]
                if matrix:
                    label = f"{label} ({', '.join(str(v) for v in matrix.values())})"
                name = item["prefix"] + label
                if "uses" in spec:
                    outcome = (
                        self._call(spec, name, {**local, "matrix": matrix}, record, state, fork)
                        if outcome == "success"
                        else outcome
                    )
                else:
                    job = self._job(
                        spec, name, item["workflow_ref"], {**local, "matrix": matrix}, state, fork
                    )
                    record.jobs.append(job)
                    self._job_state(state, job)
                    results.setdefault(item["id"], {"outputs": {}})["outputs"].update(job.outputs)
                    if job.conclusion != "success":
                        outcome = job.conclusion
            results.setdefault(item["id"], {"outputs": {}})["result"] = outcome

    def _matrix(self, spec: dict, contexts: dict) -> list[dict]:
        strategy = render((spec.get("strategy") or {}).get("matrix"), contexts)
        if not strategy:
            return [{}]
        include = strategy.pop("include", None) if isinstance(strategy, dict) else None
        keys = [k for k in strategy if k != "exclude"]
        combos = (
            [dict(zip(keys, values)) for values in itertools.product(*(strategy[k] for k in keys))]
            if keys
            else []
        )
        return combos + list(include or []) or [{}]

    def _call(
        self, spec: dict, name: str, contexts: dict, record: RunRecord, state: dict, fork: bool
    ) -> str:
        called, ref, repository, sha = self._load_called(spec["uses"], state["head_sha"])
        state["referenced_workflows"].append({"path": ref, "sha": sha})
        declared = _on(called).get("workflow_call") or {}
        given = render(spec.get("with") or {}, contexts)
        unknown = set(given) - set(declared.get("inputs") or {})
        if unknown:
            raise StartupFailure(
                f"Invalid input, {sorted(unknown)[0]} is not defined in the referenced workflow."
            )
        inputs = {}
        for key, input_spec in (declared.get("inputs") or {}).items():
            input_spec = input_spec or {}
            if key in given:
                inputs[key] = given[key]
            elif input_spec.get("required"):
                raise StartupFailure(f"Input required and not supplied: {key}")
            else:
                inputs[key] = input_spec.get(
                    "default", "" if input_spec.get("type") != "boolean" else False
                )
        passed = render(spec.get("secrets") or {}, contexts)
        secrets = (
            dict(contexts["secrets"])
            if passed == "inherit"
            else {k: v for k, v in passed.items() if k in (declared.get("secrets") or {})}
        )
        inner = {
            **contexts,
            "inputs": inputs,
            "secrets": secrets,
            "job": {
                "workflow_sha": sha,
                "workflow_repository": repository,
                "workflow_ref": ref,
                "workflow_file_path": ref.split("@")[0].split("/", 2)[2],
            },
        }
        before = len(record.jobs)
        self._execute(self._plan(called, ref, prefix=f"{name} / "), record, state, inner, fork)
        mine = [j.conclusion for j in record.jobs[before:]]
        return "failure" if "failure" in mine else "cancelled" if "cancelled" in mine else "success"

    def _runner(self, runs_on, workflow_ref: str) -> tuple[RunnerGroup | None, str | None]:
        """(group, refusal): `ubuntu-latest` is a GitHub-hosted runner; labels with `self-hosted`
        need a group with every label that admits jobs of `workflow_ref`."""
        labels = {runs_on} if isinstance(runs_on, str) else set(runs_on or [])
        if labels <= {"ubuntu-latest", "ubuntu-24.04"}:
            return None, None
        for group in self.runner_groups:
            if labels <= group.labels:
                if workflow_ref not in group.selected_workflows:
                    return group, (
                        f"runner group {group.name} admits only jobs of {group.selected_workflows}, not "
                        f"of {workflow_ref}: the job waits for a runner that never comes"
                    )
                return group, None
        return None, f"no runner has the labels {sorted(labels)}"

    def _job(
        self, spec: dict, name: str, workflow_ref: str, contexts: dict, state: dict, fork: bool
    ) -> JobRecord:
        runs_on = render(spec.get("runs-on"), contexts)
        group, refusal = self._runner(runs_on, workflow_ref)
        job = JobRecord(
            name, workflow_ref, runs_on, group.name if group and not refusal else None, "success"
        )
        concurrency = spec.get("concurrency")
        if concurrency:
            job.concurrency = str(
                render(
                    concurrency.get("group") if isinstance(concurrency, dict) else concurrency,
                    contexts,
                )
            )
        if refusal:
            job.conclusion = "cancelled"
            job.steps.append(
                {"name": "waiting for a runner", "conclusion": "cancelled", "output": refusal}
            )
            return job
        work = self.root / "runners" / f"{state['id']}-{next(self._jobs)}"
        work.mkdir(parents=True)
        env = {**contexts, "env": render(spec.get("env") or {}, contexts)}
        outputs_file = work / ".github_output"
        steps: dict[str, dict] = {}
        success = True
        for index, step in enumerate(spec.get("steps") or []):
            local = {
                **env,
                "steps": steps,
                "env": {**env["env"], **render(step.get("env") or {}, {**env, "steps": steps})},
            }
            step_name = step.get("name") or step.get("uses") or f"step {index}"
            if not condition(step.get("if"), local, {"success": success}):
                job.steps.append({"name": step_name, "conclusion": "skipped", "output": ""})
                continue
            outputs_file.write_text("")
            if "uses" in step:
                code, output = self._action(step, local, work, state, job, fork)
            else:
                code, output = self._bash(step, local, work, outputs_file, state, group)
            outputs = {}
            for line in outputs_file.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    outputs[key] = value
            if step.get("id"):
                steps[step["id"]] = {
                    "outputs": outputs,
                    "outcome": "success" if code == 0 else "failure",
                    "conclusion": "success"
                    if code == 0 or step.get("continue-on-error")
                    else "failure",
                }
            job.steps.append(
                {
                    "name": step_name,
                    "conclusion": "success" if code == 0 else "failure",
                    "output": output,
                }
            )
            if code != 0 and not step.get("continue-on-error"):
                success = False
        job.conclusion = "success" if success else "failure"
        job.outputs = {
            k: str(v) if v is not None else ""
            for k, v in render(spec.get("outputs") or {}, {**env, "steps": steps}).items()
        }
        return job

    def _bash(
        self, step: dict, contexts: dict, work: Path, outputs_file: Path, state: dict, group
    ) -> tuple[int, str]:
        # the shipped scripts keep ${{ }} out of run: (zizmor)
        script = render(step["run"], contexts)
        github = contexts["github"]
        environ = {
            "PATH": f"{self.shims}:{group.tools}:/usr/bin:/bin"
            if group and group.tools
            else f"{self.shims}:/usr/bin:/bin",
            "HOME": str(work),
            "LANG": "C.UTF-8",
            "HARNESS_PIP_LOG": str(self.pip_log),
            "GITHUB_ACTIONS": "true",
            "CI": "true",
            "GITHUB_EVENT_NAME": github["event_name"],
            "GITHUB_EVENT_PATH": github["event_path"],
            "GITHUB_SHA": github["sha"],
            "GITHUB_REF": github["ref"],
            "GITHUB_REPOSITORY": self.repo,
            "GITHUB_RUN_ID": github["run_id"],
            "GITHUB_RUN_ATTEMPT": github["run_attempt"],
            "GITHUB_API_URL": self.fake.url,
            "ROCM_GATE_PACE": "0",  # the loopback API has no secondary rate limit
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_WORKSPACE": str(work),
            "GITHUB_OUTPUT": str(outputs_file),
            "RUNNER_NAME": f"{group.name}-runner" if group else "GitHub Actions 2",
            "RUNNER_TEMP": str(work / ".tmp"),
            "TMPDIR": str(self.root / "tmp"),
        }
        (self.root / "tmp").mkdir(exist_ok=True)
        environ.update({k: str(v) for k, v in contexts["env"].items()})
        cwd = work / step.get("working-directory", ".")
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=cwd,
            env={**environ, "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group: a hung step is stopped whole
        )
        try:
            stdout, stderr = process.communicate(timeout=STEP_LIMIT_S)
        except subprocess.TimeoutExpired:
            raise StepHung(step.get("name") or script, *_stacks_and_stop(process)) from None
        return process.returncode, stdout + stderr

    def _action(
        self, step: dict, contexts: dict, work: Path, state: dict, job: JobRecord, fork: bool
    ) -> tuple[int, str]:
        uses = step["uses"]
        if not uses.startswith(ACTION_PREFIXES):
            return 1, f"the harness does not emulate {uses}"
        given = render(step.get("with") or {}, contexts)
        if uses.startswith("actions/setup-python@"):
            return 0, ""
        if uses.startswith("actions/checkout@"):
            repository = given.get("repository") or self.repo
            ref = str(given.get("ref") or contexts["github"]["sha"])
            dest = work / str(given.get("path") or ".")
            job.checkouts.append((repository, ref))
            if repository == PYTEST_ROCM:
                dest.mkdir(parents=True, exist_ok=True)
                (dest / "PINNED_COMMIT").write_text(ref)
                return 0, f"{PYTEST_ROCM} at {ref} (the installed pytest-rocm: this working tree)"
            if repository != self.repo:
                return 1, f"the harness has no repository {repository}"
            dest.mkdir(parents=True, exist_ok=True)
            git(dest, "init", "-q")
            (dest / ".git" / "objects" / "info" / "alternates").write_text(
                str(self.git_dir / ".git" / "objects") + "\n"
            )
            # a branch or tag name (the default branch's rules) is the source repository's: the
            # new clone shares its objects, not its refs
            commit = git(self.git_dir, "rev-parse", "--verify", f"{ref}^{{commit}}")
            git(dest, "checkout", "-q", "--detach", commit)
            return 0, f"checked out {ref}"
        if uses.startswith("actions/upload-artifact@"):
            name, source = str(given["name"]), work / str(given["path"])
            if any(
                a["run_id"] == state["id"]
                and a.get("attempt", 1) == state["run_attempt"]
                and a["name"] == name
                for a in self.fake.artifacts.values()
            ) and not given.get("overwrite"):
                return 1, f"an artifact named {name} already exists in this run"
            files = [p for p in source.rglob("*") if p.is_file()] if source.is_dir() else []
            if not files:
                return (
                    1 if given.get("if-no-files-found") == "error" else 0
                ), f"no files at {source}"
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                for path in files:
                    archive.write(path, path.relative_to(source).as_posix())
            # while the job runs (its started_at, completed_at below)
            self.fake.artifacts[max(self.fake.artifacts, default=5000) + 1] = {
                "run_id": state["id"],
                "attempt": state["run_attempt"],
                "name": name,
                "data": buffer.getvalue(),
                "created_at": at_minute(15, state["_start"]),
            }
            return 0, f"uploaded {len(files)} file(s) as {name}"
        if uses.startswith("actions/download-artifact@"):
            run_id = int(given.get("run-id") or state["id"])
            found = [
                a
                for a in self.fake.artifacts.values()
                if a["run_id"] == run_id and a["name"] == given.get("name")
            ]
            if not found:
                return (
                    1,
                    f"Unable to download artifact(s): {given.get('name')} not found in run {run_id}",
                )
            dest = work / str(given.get("path") or ".")
            dest.mkdir(parents=True, exist_ok=True)
            zipfile.ZipFile(io.BytesIO(found[-1]["data"])).extractall(dest)
            return 0, f"downloaded {given.get('name')}"
        return 1, uses

    def _job_state(self, state: dict, job: JobRecord) -> None:
        # Actions reports each job as a check run of its own App, on the head
        if job.conclusion != "skipped":
            self.fake.actions_check(self.repo, state["head_sha"], job.name, job.conclusion)
        self.fake.jobs[state["id"]].append(
            {
                "id": next(self._jobs),
                "name": job.name,
                "status": "completed",
                "conclusion": job.conclusion,
                "labels": [job.runs_on]
                if isinstance(job.runs_on, str)
                else list(job.runs_on or []),
                "runner_name": None
                if job.conclusion in ("skipped", "cancelled")
                else (f"{job.runner_group}-runner" if job.runner_group else "GitHub Actions 2"),
                "runner_group_name": job.runner_group
                or (None if job.conclusion in ("skipped", "cancelled") else "GitHub Actions"),
                "runner_group_id": 7 if job.runner_group else 1,
                "runner_id": 1,
                "started_at": at_minute(1, state["_start"]),
                "completed_at": at_minute(29, state["_start"]),
            }
        )

    def _write_shims(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        python = folder / "python"
        python.write_text(
            "#!/bin/sh\n"
            'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$*" >> "$HARNESS_PIP_LOG"; exit 0; fi\n'
            f"exec '{sys.executable}' \"$@\"\n"
        )
        python.chmod(0o755)
        (folder / "python3").symlink_to(python)
        pip = folder / "pip"
        pip.write_text('#!/bin/sh\necho "-m pip $*" >> "$HARNESS_PIP_LOG"\n')
        pip.chmod(0o755)
        gate = folder / "rocm-gate"
        gate.write_text(f"#!/bin/sh\nexec '{sys.executable}' -m rocm_gate.cli \"$@\"\n")
        gate.chmod(0o755)

    def installs(self) -> list[str]:
        return self.pip_log.read_text().splitlines()
