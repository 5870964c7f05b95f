"""The scheduled sweep: no check stays `in_progress` after its gate run ended, and no finished run
goes unpublished.

A publish can fail where nothing can repair it at once: GitHub down past the attempts (exit 4), a
create that GitHub applied after the publisher gave up, a publish job that never started. So a
scheduled job (`rocm-gate sweep`, `.github/workflows/rocm-gate-sweep.yml`) looks at the gate runs
that completed in the last hours and, for each runner class, publishes their completed stage again
through `publishing.publish_run`, which reads everything from GitHub and the run's artifact again
(the same result a first publish would have written; nothing kept from the failed attempt is
trusted). A check it still cannot finish, once its run ended more than `stuck_after` ago, is
completed `timed_out` with the reason, as PyTorch's relay marks stuck jobs; one whose publish fails
for any other reason (results that break the publisher) at once. Each run is handled on its
own: one that fails never stops the sweep of the others.

With trunk states (`--trunk`), a completed check that blocks (`failure`) and was written before the
newest state is published again: the publish judges against the newest state, so a failure main
turned out to have already stops blocking the PR (the old annotations stay: GitHub cannot remove
them).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pytest_rocm.github import checks
from pytest_rocm.github.api import Client, PublishError, converge
from pytest_rocm.github.provenance import RunRefused, head_sha_of
from pytest_rocm.github.publishing import Options, publish_run
from pytest_rocm.trunk.judgement import moment

__all__ = ["Swept", "sweep"]


@dataclass
class Swept:
    run_id: int
    runner_class: str
    action: str


def _ended(run: dict) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(run.get("updated_at")).replace("Z", "+00:00"))
    except ValueError:
        return None


def sweep(
    client: Client,
    workflow: str,
    classes: list[tuple[Options, str]],
    hours: float = 48.0,
    stuck_after_min: float = 30.0,
    now: dt.datetime | None = None,
) -> list[Swept]:
    """`classes`: (options, runner class) pairs, as the publish job is called per class. Returns
    what was done for each gate run that needed something."""
    now = now or dt.datetime.now(dt.UTC)
    since = (now - dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs = client.paged(
        f"/repos/{{repo}}/actions/workflows/{workflow}/runs",
        "workflow_runs",
        {"status": "completed", "created": f">={since}"},
    )
    done = []
    for run in runs:
        try:
            head = head_sha_of(run)
        except RunRefused as exc:
            done.append(Swept(run.get("id"), "-", f"skipped: {exc}"))
            continue
        for options, runner_class in classes:
            name = checks.check_name(None, runner_class)
            attempt = run.get("run_attempt") if isinstance(run.get("run_attempt"), int) else 1
            external_id = str(run["id"]) if attempt <= 1 else f"{run['id']}-{attempt}"
            own = [c for c in client.checks(head, name) if c.get("external_id") == external_id]
            if own and all(c["status"] == "completed" for c in own):
                if not _judged_before(own, options.trunk):
                    continue  # published
                action = "judged again against a newer trunk state: "
            else:
                action = ""
            try:
                outcome = publish_run(client, {"id": run["id"]}, "completed", options)
                done.append(Swept(run["id"], runner_class, action + outcome.action))
            # GitHub unreachable or refusing: this run waits for the next sweep
            except PublishError as exc:
                done.append(Swept(run["id"], runner_class, f"not yet: {exc}"))
                ended = _ended(run)
                if (
                    own
                    and ended is not None
                    and (now - ended).total_seconds() > stuck_after_min * 60
                ):
                    _timed_out(client, head, name, external_id, run, exc, done, runner_class)
            except Exception as exc:  # noqa: BLE001 - one run whose results break the publisher must not stop the rest
                done.append(
                    Swept(
                        run["id"], runner_class, f"failed: {type(exc).__name__}: {str(exc)[:200]}"
                    )
                )
                if own:
                    _timed_out(client, head, name, external_id, run, exc, done, runner_class)
    return done


def _judged_before(own: list[dict], trunk) -> bool:
    """Whether a completed check blocks (`failure`) and was written before the newest trunk state
    given: what main has learned since may excuse its failures (publish judges against the newest
    state; the check was judged against an older one, or none)."""
    states = trunk if isinstance(trunk, list) else [trunk] if trunk else []
    newest = max((t for s in states if (t := moment(s.get("generated")))), default=None)
    if newest is None:
        return False
    check = max(own, key=lambda c: c["id"])
    completed = moment(check.get("completed_at"))
    return check.get("conclusion") == "failure" and (completed is None or completed < newest)


def _timed_out(client, head, name, external_id, run, exc, done, runner_class) -> None:
    stuck = checks.unfinished(
        name,
        f"the check could not be published after the run ended "
        f"({type(exc).__name__}: {str(exc)[:300]})",
        run.get("html_url"),
    )
    try:
        converge(client, head, stuck, external_id, run.get("html_url"))
        done.append(Swept(run["id"], runner_class, "timed_out"))
    except PublishError as again:
        done.append(Swept(run["id"], runner_class, f"still unfinished: {again}"))
