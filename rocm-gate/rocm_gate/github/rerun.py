"""The check run's buttons and GitHub's "Re-run": from a `check_run` webhook payload to a workflow
dispatch.

`requested_action` (our buttons: `rerun-amd` reruns the failed and infra gates, `rerun-all` every
gate) and `rerequested` (GitHub's own re-run link: every gate) become one dispatch of the gate
workflow for the check's head SHA. Only checks of this gate (name `rocm-gate / ...`, and the App's
own when its id is given) are acted on, and only for a sender with write access.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rocm_gate.github.checks import ACTIONS, PLACEHOLDER_TITLES
from rocm_gate.github.provenance import RUNNER_CLASS
from rocm_gate.github.trust import SHA, WRITERS

SCOPES = {"rerun-amd": "failed", "rerun-all": "all"}


@dataclass
class Rerun:
    sha: str
    scope: str  # failed | all
    runner_class: str
    pr: int | None
    ref: str  # the branch whose workflow file is dispatched (the default branch: trusted YAML)
    previous_run: (
        str  # the run whose results the check shows (its external_id): `failed` reruns its failures
    )

    def inputs(self) -> dict:
        return {
            "sha": self.sha,
            "scope": self.scope,
            "runner-class": self.runner_class,
            "pr": str(self.pr) if self.pr is not None else "",
            "previous-run": self.previous_run,
        }


class Ignored(ValueError):
    """The payload asks for nothing this handler does; the message says why."""


def plan(payload: dict, permission_of: Callable[[str], str], app_id: int | None = None) -> Rerun:
    action = payload.get("action")
    run = payload.get("check_run") or {}
    name = run.get("name") or ""
    if not name.startswith("rocm-gate / "):
        raise Ignored(f"check {name!r} is not a rocm-gate check")
    if app_id is not None and (run.get("app") or {}).get("id") != app_id:
        raise Ignored(
            f"check {name!r} belongs to another App ({(run.get('app') or {}).get('id')}), not {app_id}"
        )
    if action == "requested_action":
        identifier = (payload.get("requested_action") or {}).get("identifier")
        if identifier not in ACTIONS:
            raise Ignored(f"unknown button {identifier!r} (known: {', '.join(ACTIONS)})")
        scope = SCOPES[identifier]
    elif action == "rerequested":
        scope = "all"
    else:
        raise Ignored(f"check_run action {action!r} asks for no rerun")
    sender = (payload.get("sender") or {}).get("login") or "unknown"
    role = permission_of(sender)
    if role not in WRITERS:
        raise Ignored(f"{sender} (permission {role}) may not rerun the AMD gates")
    title = (run.get("output") or {}).get("title")
    # a dispatch approves: a click to refresh must not approve unreviewed code
    if title in PLACEHOLDER_TITLES:
        raise Ignored(
            f"check {name!r} says {title!r}: no approved run's result is on it, and a rerun would "
            "approve its commit; approve it on purpose (the label, or a dispatch naming the SHA)"
        )
    runner_class, sha = name.removeprefix("rocm-gate / ").lower(), str(run.get("head_sha") or "")
    if not RUNNER_CLASS.match(runner_class) or not SHA.match(sha):
        raise Ignored(
            f"check {name!r} on {sha[:40]!r} names no runner class and commit this handler dispatches"
        )
    pulls = run.get("pull_requests") or []
    repo = payload.get("repository") or {}
    # "<run id>-<attempt>" after a re-run
    return Rerun(
        sha=sha,
        scope=scope,
        runner_class=runner_class,
        pr=pulls[0]["number"] if pulls else None,
        ref=repo.get("default_branch") or "main",
        previous_run=str(run.get("external_id") or "").split("-")[0],
    )


RERUN_VERDICTS = ("regression", "unconfirmed", "infra")


def failed_gates(report: dict) -> list[str]:
    """The gates "Re-run AMD" runs again: those whose verdict was a failure or an infrastructure
    fault, and the gates that never ran. The ids come from a previous run's results (the PR's code
    wrote them) and become pytest arguments: one that pytest would read as an option (a leading `-`)
    or that spans lines is left out."""
    ids = {n for n, t in report["tests"].items() if t["verdict"] in RERUN_VERDICTS} | set(
        report["never_ran"]
    )
    # `-` starts an option, `@` an arguments file (pytest 8.2 and later)
    return sorted(
        n
        for n in ids
        if n and n[0] not in "-@" and "\n" not in n and "\r" not in n and "\0" not in n
    )
