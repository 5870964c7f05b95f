"""What a gate run may write on its commit's check, at each stage of its `workflow_run` events.

One check per (runner class name, head SHA, gate run), and GitHub requires the newest check of a
name on the PR's head. So a run that proves nothing must never put a check over one that proved
something:

  stage      the run                        the commit's checks of this name      writes
  requested  any                            none                                  its own check, in_progress
             any                            some                                  nothing (they stand until it ends)
  completed  approved (provenance.gate_run) -                                     its result on its own check, or
                                                                                  on the newest check if that is a
                                                                                  placeholder (below); newer
                                                                                  placeholders copy its result
             not approved                   an approved run's completed check     its own check, if any, copies it
             not approved                   none, or only its own                 "waiting for approval" (blocks)
             not approved                   others (a placeholder, a running run) nothing

A placeholder is the check of an unapproved run ("waiting for approval", or a copy of an approved
result), or one the sweep could not finish: it has no annotations, so an approved run takes it over
instead of adding a second check, and an approved fork PR ends with one check on its head. An
approved run with no check of its own never writes its result where a newer run's result stands
(GitHub shows the newest check: a late publish or the sweep would put an older `success` over a
newer `failure`). A rerun (another approved run) gets a check
of its own, the newest: the older one keeps its annotations, which GitHub cannot remove. A completed
check is only ever completed again.

"Approved" is established from GitHub (`provenance.gate_run`), never from the results; an approved
run's results whose claims do not match GitHub's facts (`provenance.check_results`) make a blocking
check that says why. A label other than the approval label starts no gate run at all (the caller's
`if:`), and would change nothing here if it did: its run is not approved.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rocm_gate.github import checks
from rocm_gate.github.api import Client, Published, converge
from rocm_gate.github.artifacts import ArtifactError, Results, ResultsMissing
from rocm_gate.github.provenance import GateRun, check_results, fetch_results, gate_run

__all__ = ["MainKnowledge", "MainState", "Options", "Outcome", "publish_run"]


@dataclass
class MainKnowledge:
    """What a check is judged against, at its publish: main's state on the run's SKU (None: none
    could be had, and every failure is judged on the run alone), what the check says of it (which
    knowledge, how old), and why it was unavailable."""

    trunk: dict | None
    said: list[str] = field(default_factory=list)
    unavailable: str | None = None


class MainState(Protocol):
    """Main's state, live (knowledge/live.py): asked for each approved run's check, and told of the
    run once its check is written (a main run's results join main's state then)."""

    def knowledge(self, run: GateRun, results: Results, runner_class: str) -> MainKnowledge: ...

    def record(self, run: GateRun, results: Results, options: Options) -> list[str]: ...

    def newest_result(self, runner_class: str) -> dt.datetime | None: ...


@dataclass
class Options:
    runner_class: str
    gate_workflow: str  # OWNER/REPO/.github/workflows/rocm-gate.yml@<sha>: the pin the caller uses
    runner_group: str  # the self-hosted runner group of the class
    incomplete: str = "block"
    allow_simulated: bool = False
    path_prefix: str = ""
    base_parity: dict | None = None
    # main's states per SKU (`rocm-gate history trunk`), from the default branch
    trunk: dict | list[dict] | None = None
    trunk_max_age_h: float = 48.0  # an older trunk state excuses nothing
    # main's state, live (knowledge/live.py): built at each publish, over `trunk`
    main_state: MainState | None = None


@dataclass
class Outcome:
    run: GateRun
    name: str
    action: str  # what was written, in words
    content: checks.CheckContent | None = None
    published: Published | None = None
    problems: list[str] = field(default_factory=list)  # results refused: why (exit 2)
    recorded: list[str] = field(default_factory=list)  # what main's state did with the run


def _own(existing: list[dict], run: GateRun) -> list[dict]:
    return [c for c in existing if c.get("external_id") == run.external_id]


def _standing(existing: list[dict], run: GateRun) -> dict | None:
    """The newest completed check of an approved run (not this one) on the commit."""
    approved = [
        c
        for c in existing
        if c.get("external_id") != run.external_id
        and c["status"] == "completed"
        and not _placeholder(c)
    ]
    return max(approved, key=lambda c: c["id"]) if approved else None


def publish_run(client: Client, event_run: dict, stage: str, options: Options) -> Outcome:
    run = gate_run(
        client,
        event_run,
        options.runner_class,
        options.gate_workflow,
        options.runner_group,
        wait_completed=stage == "completed",
    )
    name = checks.check_name(None, options.runner_class)
    existing = client.checks(run.head_sha, name)
    external_id, details = run.external_id, run.html_url
    if stage != "completed" or run.status != "completed":
        if existing:
            return Outcome(
                run,
                name,
                "nothing: the commit has a check already; it stands until this run completes",
            )
        content = checks.CheckContent(name=name, conclusion="", title="running", summary="")
        done = converge(client, run.head_sha, content, external_id, details, in_progress=True)
        return Outcome(run, name, "marked running", content, done)
    if run.approved:
        return _publish_approved(client, run, name, existing, options)
    own, standing = _own(existing, run), _standing(existing, run)
    if standing is not None:
        if not own:
            return Outcome(
                run,
                name,
                f"nothing: not approved ({run.why}); the approved check {standing['id']} stands",
            )
        content = checks.mirror(name, standing, run.why, details)
    elif own or not existing:
        content = checks.waiting_for_approval(name, run.why, details)
    else:
        return Outcome(
            run,
            name,
            f"nothing: not approved ({run.why}); the commit's check already says it is not proven",
        )
    done = converge(client, run.head_sha, content, external_id, details)
    return Outcome(run, name, f"not approved ({run.why}): {content.title}", content, done)


def _commit_date(client: Client, sha: str | None):
    """When commit `sha` was made (its committer's date, from GitHub), or None."""
    import datetime as dt

    if not sha:
        return None
    commit = client.get(f"/repos/{{repo}}/commits/{sha}", ok_missing=True) or {}
    when = ((commit.get("commit") or {}).get("committer") or {}).get("date")
    try:
        return dt.datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        return None


def _placeholder(check: dict) -> bool:
    return (check.get("output") or {}).get("title") in checks.PLACEHOLDER_TITLES


def _take_over(client: Client, run: GateRun, existing: list[dict]) -> None:
    """Make the newest check this run's, when it is a placeholder (no annotations to inherit)."""
    if _own(existing, run) or not existing:
        return
    newest = max(existing, key=lambda c: c["id"])
    if _placeholder(newest):
        client.write_again(
            "PATCH", f"/repos/{{repo}}/check-runs/{newest['id']}", {"external_id": run.external_id}
        )


def run_key(external_id) -> tuple[int, int] | None:
    """(run id, attempt) of a check's `external_id` (`<run id>` or `<run id>-<attempt>`): GitHub's
    run ids grow with time, so a larger key is a newer run; None for anything else."""
    run, _, attempt = str(external_id or "").partition("-")
    if not run.isdigit() or not (attempt == "" or attempt.isdigit()):
        return None
    return int(run), int(attempt or 1)


def _newer_result(client: Client, existing: list[dict], run: GateRun) -> dict | None:
    """A check of a run that ended after this one on the commit, a result (not a placeholder),
    where this run has no check of its own: writing this run's result would make it the newest, over
    the later one (a sweep finishing a run whose publish was lost, a publish that came late). Time
    orders runs, not ids: attempt 2 of an older run that ends after a newer run is the later result."""
    if _own(existing, run):
        return None
    mine = run_key(run.external_id)
    newer = [
        c
        for c in existing
        if not _placeholder(c) and mine is not None and _ended_after(client, c, run, mine)
    ]
    return max(newer, key=lambda c: c["id"]) if newer else None


def _ended_after(client: Client, check: dict, run: GateRun, mine: tuple[int, int]) -> bool:
    """Whether the run (attempt) a check belongs to ended after `run`: attempts of one run end in
    their order; runs apart by when GitHub says each attempt completed (their ids where it cannot
    say)."""
    theirs = run_key(check.get("external_id"))
    if theirs is None:
        return False
    if theirs[0] == mine[0]:
        return theirs[1] > mine[1]
    attempt = client.get(
        f"/repos/{{repo}}/actions/runs/{theirs[0]}/attempts/{theirs[1]}", ok_missing=True
    )
    ended, ours = _moment((attempt or {}).get("updated_at")), _moment(run.completed_at)
    if ended is None or ours is None:
        return theirs > mine
    return ended > ours


def _moment(text):
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _publish_approved(
    client: Client, run: GateRun, name: str, existing: list[dict], options: Options
) -> Outcome:
    newer = _newer_result(client, existing, run)
    if newer is not None:
        return Outcome(
            run,
            name,
            f"nothing: a later run's check ({newer['id']}, run {newer.get('external_id')}) stands; "
            "this older result is never put over it",
        )
    problems: list[str] = []
    results = None
    with tempfile.TemporaryDirectory(prefix="rocm-gate-publish-") as scratch:
        try:
            results = fetch_results(client, run, options.runner_class, Path(scratch))
            problems = check_results(
                client, run, results, options.runner_class, options.allow_simulated
            )
            if problems:
                content = checks.missing_results(
                    name, None, "the results are refused: " + "; ".join(problems), run.html_url
                )
            else:
                content = _judged(client, run, name, results, options)
        except ResultsMissing as exc:
            content = checks.missing_results(name, run.conclusion, str(exc), run.html_url)
        except ArtifactError as exc:
            problems = [str(exc)]
            content = checks.missing_results(name, None, str(exc), run.html_url)
        _take_over(client, run, existing)
        done = converge(client, run.head_sha, content, run.external_id, run.html_url)
        _copy_onto_newer_unapproved(client, run, name, done, content)
        outcome = Outcome(run, name, f"published: {content.conclusion}", content, done, problems)
        if options.main_state is not None and results is not None and not problems:
            # once its check is written: a main run's results join main's state for what follows
            outcome.recorded = options.main_state.record(run, results, options)
    return outcome


def _judged(
    client: Client, run: GateRun, name: str, results: Results, options: Options
) -> checks.CheckContent:
    """The check of checked results, against main's state: live where a store is given, else the
    trunk state files given."""
    trunk, notes, unavailable = options.trunk, list(run.notes), None
    if options.main_state is not None:
        known = options.main_state.knowledge(run, results, options.runner_class)
        notes += known.said
        unavailable = known.unavailable
        trunk = [known.trunk] if known.trunk is not None else None
    return checks.build(
        results,
        name,
        run.html_url,
        options.path_prefix,
        options.incomplete,
        options.base_parity,
        notes=notes,
        trunk=trunk,
        base_sha=run.base_sha,
        base_date=_commit_date(client, run.base_sha) if trunk else None,
        trunk_max_age_h=options.trunk_max_age_h,
        unavailable=unavailable,
    )


def _copy_onto_newer_unapproved(
    client: Client, run: GateRun, name: str, done: Published, content: checks.CheckContent
) -> None:
    """Checks of unapproved runs created after this one (a race of two runs' starts) must not stand
    over it."""
    standing = {"id": done.check_id, "html_url": done.html_url, "conclusion": content.conclusion}
    for check in client.checks(run.head_sha, name):
        if check["id"] > done.check_id and _placeholder(check):
            copy = checks.mirror(
                name, standing, "an unapproved run of the same commit", check.get("details_url")
            )
            client.write_again(
                "PATCH",
                f"/repos/{{repo}}/check-runs/{check['id']}",
                {"status": "completed", "conclusion": copy.conclusion, "output": copy.output()},
            )
