"""A results folder as untrusted input: what `rocm-gate publish` may believe of it.

The folder may come from a fork's run (downloaded by the `workflow_run` publish job), so nothing in it is
trusted: every file is a plain file under a size cap, every JSON artifact validates against its published
schema, and the SHA the run claims to have tested (`manifest.git_sha`) must be the SHA being published.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.schemas.artifacts import schema_error

MAX_FILE_BYTES = 64 * 1024 * 1024  # a gate report of 100,000 tests is about 40 MB
FILES = {"gate-report.json": "gate-report", "manifest.json": "manifest", "parity.json": "parity"}


class ArtifactError(ValueError):
    """A results folder that cannot be believed; the message names the file and what is wrong."""


class ResultsMissing(ArtifactError):
    """No gate report: the run died before writing one (its check must still conclude, and block)."""


@dataclass
class Results:
    folder: Path
    report: dict
    manifest: dict
    parity: dict | None


def _read_json(path: Path, kind: str) -> dict:
    if path.is_symlink() or not path.is_file():
        raise ArtifactError(f"{path}: not a plain file (a link or folder is refused in a results folder)")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ArtifactError(f"{path}: {size:,} bytes, over the {MAX_FILE_BYTES:,}-byte cap for one artifact")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArtifactError(f"{path}: not JSON ({exc})") from None
    problem = schema_error(data, kind)
    if problem is not None:
        raise ArtifactError(f"{path}: not a valid {kind} artifact at {problem[0]}: {problem[1]}")
    return data


def read_results(folder: Path, sha: str | None = None) -> Results:
    """The folder's gate report (required), manifest (its own file, else the report's copy) and parity report.

    `sha`: the commit being published; a run that claims to have tested another commit is refused."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsMissing(f"{folder}: no such results folder")
    if not (folder / "gate-report.json").exists():
        raise ResultsMissing(f"{folder}: no gate-report.json (the run ended before writing its report)")
    report = _read_json(folder / "gate-report.json", "gate-report")
    manifest = _read_json(folder / "manifest.json", "manifest") if (folder / "manifest.json").exists() \
        else report["manifest"]
    parity = _read_json(folder / "parity.json", "parity") if (folder / "parity.json").exists() else None
    claimed = manifest.get("git_sha")
    if sha and claimed and claimed != sha:
        raise ArtifactError(f"{folder / 'manifest.json'}: the run tested {claimed}, not {sha}: refusing to publish "
                            "its results for another commit")
    return Results(folder, report, manifest, parity)
