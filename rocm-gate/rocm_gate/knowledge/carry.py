"""The embedded store carried between jobs: a SQLite file kept as the `rocm-gate-history` artifact.

A repository without a database server keeps its history as one SQLite file. The publish
workflow's history job (one at a time: a concurrency group) downloads the newest copy, catches it up
with GitHub (knowledge/sync.py) and uploads it again; publishes, the sweep and the dashboard
download the newest copy to read. A copy lost to a race or a cancelled job loses nothing for good:
the next catch-up adds every run GitHub still lists.

Only a copy that the default branch's own workflows made is read (`newest`): an artifact of a run
of this repository, on the default branch, started by `workflow_run`, `schedule` or
`workflow_dispatch`, the events whose workflow definitions come from the default branch
(docs.github.com/en/actions/reference/workflows-and-actions/events-that-trigger-workflows). A fork's
PR, or any branch's own workflow, can upload an artifact of that name too; its runs are never one of
those.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rocm_gate.github import runs as github_runs
from rocm_gate.github.api import Client, PublishError

__all__ = ["ARTIFACT", "FILE", "Carried", "download", "newest"]

ARTIFACT = "rocm-gate-history"
FILE = "history.db"
TRUSTED_EVENTS = ("workflow_run", "schedule", "workflow_dispatch")
MAX_STORE_BYTES = 8 * 1024**3  # a carried store past this wants a database server (docs/github.md)


@dataclass
class Carried:
    artifact_id: int
    run_id: int
    created_at: str


def newest(client: Client, name: str = ARTIFACT) -> Carried | None:
    """The newest unexpired `name` artifact that a default-branch run of this repository made."""
    default = github_runs.default_branch(client)
    listed = client.paged("/repos/{repo}/actions/artifacts", "artifacts", {"name": name})
    candidates = sorted(
        (a for a in listed if a.get("name") == name and not a.get("expired")),
        key=lambda a: (str(a.get("created_at") or ""), a.get("id", 0)),
        reverse=True,
    )
    for artifact in candidates:
        source = artifact.get("workflow_run") or {}
        if source.get("head_branch") != default or not isinstance(source.get("id"), int):
            continue
        run = client.get(f"/repos/{{repo}}/actions/runs/{source['id']}", ok_missing=True) or {}
        if (
            run.get("event") in TRUSTED_EVENTS
            and run.get("head_branch") == default
            and (run.get("head_repository") or {}).get("full_name") == client.repo
        ):
            return Carried(artifact["id"], source["id"], str(artifact.get("created_at") or ""))
    return None


def download(client: Client, out: Path) -> Carried | None:
    """Write the newest carried store to `out` (None: there is none yet; `out` is left alone, its
    folder made, where a new store starts)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    found = newest(client)
    if found is None:
        return None
    with tempfile.TemporaryFile() as spool:
        client.download_to(
            f"/repos/{{repo}}/actions/artifacts/{found.artifact_id}/zip",
            spool.write,
            MAX_STORE_BYTES,
            lambda: (spool.seek(0), spool.truncate()),
        )
        spool.seek(0)
        try:
            with zipfile.ZipFile(spool) as archive:
                info = archive.getinfo(FILE)
                if info.file_size > MAX_STORE_BYTES:
                    raise PublishError(
                        f"artifact {ARTIFACT} of run {found.run_id}: {FILE} is {info.file_size:,} "
                        "bytes, over the cap",
                        refused=True,
                    )
                out.parent.mkdir(parents=True, exist_ok=True)
                partial = out.with_name(out.name + ".part")
                with archive.open(info) as source, open(partial, "wb") as target:
                    while chunk := source.read(1 << 20):
                        target.write(chunk)
                partial.replace(out)
        except (KeyError, zipfile.BadZipFile, OSError, io.UnsupportedOperation) as exc:
            raise PublishError(
                f"artifact {ARTIFACT} of run {found.run_id}: no readable {FILE} in it ({exc})",
                refused=True,
            ) from None
    return found
