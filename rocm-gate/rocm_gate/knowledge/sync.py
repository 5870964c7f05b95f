"""The history store caught up with GitHub: every completed gate run GitHub lists in a window, that the
store does not hold yet, is checked as a publish checks it and added.

A publish adds the run it publishes (`add_run`); what a publish missed (it failed, GitHub did not
deliver its event, a concurrent publish's copy of the store won, a job was cancelled while it
waited) is added by the next publish or sweep that looks (`catch_up`). So the store is a cache of
what GitHub already knows, and main's state at a publish is every main run GitHub lists as completed
by then, however the jobs before it fared.

A run is added only as a publish would believe it (github/provenance.py): it used the pinned gate
workflow and its gate job ran on the class's runner group; its results artifact is the gate job's;
the results' claims match GitHub's facts. Where it comes from is GitHub's (github/runs.py: `origin`),
never the results': a main run's results that tested another commit than GitHub lists are stored
as `pr` (history/store.py). A run refused is named, never added.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rocm_gate.github import runs as github_runs
from rocm_gate.github.api import Client, PublishError
from rocm_gate.github.artifacts import ArtifactError, Results
from rocm_gate.github.provenance import (
    RESULTS_ARTIFACT,
    GateRun,
    RunRefused,
    check_results,
    fetch_results,
    gate_run,
)
from rocm_gate.history import ledger, store

__all__ = ["Synced", "add_run", "catch_up", "run_key"]


@dataclass
class Synced:
    added: list[str] = field(default_factory=list)  # "run 123-1 mi300x-8 (main)"
    refused: list[str] = field(default_factory=list)  # why a run was not added
    main_added: int = 0  # main runs among the added
    main_failures: int = 0  # main runs added whose results hold a failure or a flake

    def merge(self, other: Synced) -> None:
        self.added += other.added
        self.refused += other.refused
        self.main_added += other.main_added
        self.main_failures += other.main_failures


def run_key(run_id: int, attempt: int, runner_class: str) -> str:
    """A GitHub run's results as the store keys them: `ID-ATTEMPT/ARTIFACT` (the dashboard's `history
    add --run ID-ATTEMPT` of the artifact's folder gives the same key)."""
    return f"{run_id}-{attempt}/{RESULTS_ARTIFACT.format(runner_class=runner_class)}"


def _failing(results: Results) -> bool:
    return any(
        t.get("verdict") in ("regression", "unconfirmed", "flaky")
        for t in results.report["tests"].values()
    )


def facts(run: GateRun) -> dict:
    """What GitHub says of the run, which the store keeps over the results' claims."""
    return {
        "event": run.event,
        "head_sha": run.head_sha,
        "base_sha": run.base_sha,
        "pr": run.pr,
        "completed": run.completed_at,
        "head_ref": f"{run.head_repository or '?'}:{run.head_branch}",
    }


def add_run(conn, run: GateRun, results: Results, runner_class: str, kind: str) -> Synced:
    """Store a checked run's results (`kind`: its origin by GitHub's facts); a no-op for a run the
    store holds."""
    done = Synced()
    folder = results.folder
    name = RESULTS_ARTIFACT.format(runner_class=runner_class)
    if folder.name != name:  # the store keys a run by its artifact's name
        named = Path(tempfile.mkdtemp(prefix="rocm-gate-ingest-")) / name
        shutil.copytree(folder, named)
        folder = named
    try:
        ingested = store.ingest(
            conn,
            folder,
            kind,
            f"{run.run_id}-{run.attempt}",
            run.head_sha if kind == github_runs.MAIN else None,
            facts(run),
        )
    finally:
        if folder is not results.folder:
            shutil.rmtree(folder.parent, ignore_errors=True)
    if ingested.added:
        done.added.append(f"run {run.run_id}-{run.attempt} {runner_class} ({kind})")
        if kind == github_runs.MAIN:
            done.main_added += 1
            done.main_failures += _failing(results)
    return done


def catch_up(
    conn,
    client: Client,
    workflow: str,
    classes: list[tuple[str, str]],
    gate_workflow: str,
    since: dt.datetime,
    until: dt.datetime | None = None,
    include_pr: bool = False,
    skip_run: int | None = None,
    allow_simulated: bool = False,
) -> Synced:
    """Add every completed gate run of `workflow` created in [since, until] that the store lacks,
    for each (runner class, runner group); PR runs too with `include_pr`. `skip_run`: the run a
    publish is judging (it is added after its check is written)."""
    until = until or dt.datetime.now(dt.UTC)
    default = github_runs.default_branch(client)
    listed = github_runs.listed(client, workflow, since, until)
    wanted = []
    for listing in listed:
        kind = github_runs.origin(listing, client.repo, default)
        if listing["id"] == skip_run or (kind == github_runs.PR and not include_pr):
            continue
        attempt = github_runs.attempt_of(listing)
        wanted += [(listing, kind, attempt, runner_class, group) for runner_class, group in classes]
    held = ledger.stored(conn, [run_key(w[0]["id"], w[2], w[3]) for w in wanted])
    done = Synced()
    for listing, kind, attempt, runner_class, group in wanted:
        if run_key(listing["id"], attempt, runner_class) in held:
            continue
        done.merge(
            _add_listed(
                conn, client, listing, kind, (runner_class, group), gate_workflow, allow_simulated
            )
        )
    return done


def _add_listed(
    conn,
    client: Client,
    listing: dict,
    kind: str,
    runner: tuple[str, str],
    gate_workflow: str,
    allow_simulated: bool,
) -> Synced:
    done = Synced()
    runner_class, group = runner
    where = f"run {listing['id']} {runner_class}"
    try:
        run = gate_run(client, {"id": listing["id"]}, runner_class, gate_workflow, group)
        if not run.approved:
            done.refused.append(f"{where}: not approved ({run.why})")
            return done
        with tempfile.TemporaryDirectory(prefix="rocm-gate-sync-") as scratch:
            results = fetch_results(client, run, runner_class, Path(scratch))
            problems = check_results(client, run, results, runner_class, allow_simulated)
            if problems:
                done.refused.append(f"{where}: results refused: {'; '.join(problems)}")
                return done
            done.merge(add_run(conn, run, results, runner_class, kind))
    except (RunRefused, ArtifactError, store.HistoryError) as exc:
        done.refused.append(f"{where}: {exc}")
    except PublishError as exc:
        done.refused.append(f"{where}: not read from GitHub ({exc})")
    return done
