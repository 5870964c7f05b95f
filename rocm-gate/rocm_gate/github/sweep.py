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

With main's state (trunk state files, or a live store: knowledge/live.py), a completed check that
blocks (`failure`) and was written before main's newest result is published again (`rejudge`): the
publish judges against main's newest state, so a failure main turned out to have already stops
blocking the PR (the old annotations stay: GitHub cannot remove them). A main run's own publish
does the same at once for the checks its failures may excuse, so the sweep is the safety net, not
the path.

The runs come from GitHub's listing through `github/runs.py: listed`, which cuts the window into
slices past GitHub's 1,000-result cap: on a busy repository the window's oldest runs are seen too.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from rocm_gate.github import checks
from rocm_gate.github.api import Client, PublishError, converge
from rocm_gate.github.provenance import RunRefused, head_sha_of
from rocm_gate.github.publishing import Options, publish_run
from rocm_gate.github.runs import attempt_of, listed
from rocm_gate.trunk.judgement import moment

__all__ = ["Swept", "rejudge", "sweep"]


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
    runs = listed(client, workflow, now - dt.timedelta(hours=hours), now)
    done = []
    for run in runs:
        try:
            head = head_sha_of(run)
        except RunRefused as exc:
            done.append(Swept(run["id"], "-", f"skipped: {exc}"))
            continue
        for options, runner_class in classes:
            done += _sweep_one(client, run, head, options, runner_class, now, stuck_after_min)
    return done


def rejudge(
    client: Client,
    workflow: str,
    options: Options,
    since: dt.datetime,
    might_change=None,
) -> list[Swept]:
    """Publish again every check of `options.runner_class` that blocks (`failure`) on a gate run
    created since `since`, against main's state now. `might_change(run, runner_class)`: False where
    main's newest results cannot change the check (none of its failures is among them), to spare
    the requests."""
    now = dt.datetime.now(dt.UTC)
    done = []
    name = checks.check_name(None, options.runner_class)
    for run in listed(client, workflow, since, now):
        if might_change is not None and not might_change(run, options.runner_class):
            continue
        try:
            head = head_sha_of(run)
        except RunRefused:
            continue
        own = [c for c in client.checks(head, name) if c.get("external_id") == _external_id(run)]
        if not own or max(own, key=lambda c: c["id"]).get("conclusion") != "failure":
            continue
        try:
            outcome = publish_run(client, {"id": run["id"]}, "completed", options)
            done.append(Swept(run["id"], options.runner_class, outcome.action))
        except PublishError as exc:
            done.append(Swept(run["id"], options.runner_class, f"not yet: {exc}"))
    return done


def _external_id(run: dict) -> str:
    attempt = attempt_of(run)
    return str(run["id"]) if attempt <= 1 else f"{run['id']}-{attempt}"


def _sweep_one(
    client: Client,
    run: dict,
    head: str,
    options: Options,
    runner_class: str,
    now: dt.datetime,
    stuck_after_min: float,
) -> list[Swept]:
    name = checks.check_name(None, runner_class)
    external_id = _external_id(run)
    own = [c for c in client.checks(head, name) if c.get("external_id") == external_id]
    if own and all(c["status"] == "completed" for c in own):
        if not _judged_before(own, _newest_main(options, runner_class)):
            return []  # published, and judged with main's newest knowledge
        action = "judged again against main's newer state: "
    else:
        action = ""
    try:
        outcome = publish_run(client, {"id": run["id"]}, "completed", options)
        return [Swept(run["id"], runner_class, action + outcome.action)]
    # GitHub unreachable or refusing: this run waits for the next sweep
    except PublishError as exc:
        done = [Swept(run["id"], runner_class, f"not yet: {exc}")]
        ended = _ended(run)
        if own and ended is not None and (now - ended).total_seconds() > stuck_after_min * 60:
            _timed_out(client, head, name, external_id, run, exc, done, runner_class)
        return done
    except Exception as exc:  # noqa: BLE001 - one run whose results break the publisher must not stop the rest
        done = [Swept(run["id"], runner_class, f"failed: {type(exc).__name__}: {str(exc)[:200]}")]
        if own:
            _timed_out(client, head, name, external_id, run, exc, done, runner_class)
        return done


def _newest_main(options: Options, runner_class: str) -> dt.datetime | None:
    """When main's newest result that the check could be judged against became known: the newest
    trunk state given (`generated`), or, with a live store, the newest main run's completion."""
    if options.main_state is not None:
        return options.main_state.newest_result(runner_class)
    states = (
        options.trunk
        if isinstance(options.trunk, list)
        else [options.trunk]
        if options.trunk
        else []
    )
    return max((t for s in states if (t := moment(s.get("generated")))), default=None)


def _judged_before(own: list[dict], newest: dt.datetime | None) -> bool:
    """Whether a completed check blocks (`failure`) and was written before main's newest result:
    what main has learned since may excuse its failures."""
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
