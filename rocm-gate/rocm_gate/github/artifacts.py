"""A results folder as untrusted input: what `rocm-gate publish` may believe of it.

The folder comes from a job that ran the PR's code, so nothing in it is trusted
(docs/architecture.md, "Threat model"). Each file goes through the strict loader
(`schemas/loader.py`: plain file, size cap, JSON bounded in nesting, every field typed by its
schema). What the results claim about their origin (the commits, the platform) is only ever compared
with what GitHub says (`github/provenance.py`), never used to decide where a check goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.schemas.loader import MAX_FILE_BYTES, ArtifactError, check_document, load_artifact

__all__ = ["ArtifactError", "FILES", "MAX_FILE_BYTES", "Results", "ResultsMissing", "read_results"]

FILES = {
    "gate-report.json": "gate-report",
    "manifest.json": "manifest",
    "parity.json": "parity",
    # the PR's blocking failures run on its base in the gate job (`rocm-gate blame`)
    "base-check.json": "base-check",
}


class ResultsMissing(ArtifactError):
    """No gate report: the run died before writing one (its check must still conclude, and
    block)."""


@dataclass
class Results:
    folder: Path
    report: dict
    manifest: dict
    parity: dict | None
    # what the PR's blocking failures did on its base (rocm-gate/rocm_gate/blame/), None when not run
    base_check: dict | None = None

    @property
    def provenance(self) -> dict:
        return self.manifest.get("provenance") or {}

    @property
    def head_sha(self) -> str | None:
        return self.provenance.get("head_sha")

    @property
    def tested_sha(self) -> str | None:
        """The commit the run says ran: its provenance, else (results older than provenance)
        `git_sha`."""
        return self.provenance.get("tested_sha") or self.manifest.get("git_sha")

    @property
    def simulated_profile(self) -> str | None:
        """The simulated platform profile the run used (`--rocm-platform`), None when detected
        live."""
        return (self.manifest.get("platform") or {}).get("profile")


def read_results(folder: Path) -> Results:
    """The folder's gate report (required), manifest (its own file, else the report's copy),
    parity report and base check, each checked by the strict loader."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise ResultsMissing(f"{folder}: no such results folder")
    if (
        not (folder / "gate-report.json").exists()
        and not (folder / "gate-report.json").is_symlink()
    ):
        raise ResultsMissing(
            f"{folder}: no gate-report.json (the run ended before writing its report)"
        )
    report = load_artifact(folder / "gate-report.json", "gate-report")
    if (folder / "manifest.json").exists() or (folder / "manifest.json").is_symlink():
        manifest = load_artifact(folder / "manifest.json", "manifest")
    else:
        manifest = check_document(
            report["manifest"], "manifest", f"{folder / 'gate-report.json'}: manifest"
        )
    parity = None
    if (folder / "parity.json").exists() or (folder / "parity.json").is_symlink():
        parity = load_artifact(folder / "parity.json", "parity")
    base_check = None
    if (folder / "base-check.json").exists() or (folder / "base-check.json").is_symlink():
        base_check = load_artifact(folder / "base-check.json", "base-check")
    return Results(folder, report, manifest, parity, base_check)
