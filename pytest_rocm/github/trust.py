"""The trust gate: may this event's code reach a self-hosted GPU runner, and exactly which commit?

A fork's code runs on our runners only after someone with write access approved that exact head SHA: by
adding the approval label (the `labeled` event carries the head SHA at that moment, and its sender is the
approver) or by a workflow dispatch naming the SHA (GitHub lets only writers dispatch). A later push is a
new SHA and needs a new approval; a label added by someone without write access (triage can label) approves
nothing; removing and re-adding the label is a new approval, judged by who re-added it.

`pull_request_target` is refused outright: it runs with the base repository's token and secrets, and
running a PR's code from it is the "pwn request" pattern. Callers use `pull_request`, `merge_group` and
`workflow_dispatch`; the decision is made from the event GitHub delivered, never from workflow inputs,
except the SHA of a dispatch (whose sender has write access by GitHub's rules, checked again here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

WRITERS = ("admin", "maintain", "write")
DEFAULT_LABEL = "rocm-ci-approved"
SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Decision:
    trusted: bool
    sha: str | None
    reason: str
    pr: int | None = None

    def to_dict(self) -> dict:
        return {"trusted": self.trusted, "sha": self.sha, "pr": self.pr, "reason": self.reason}


def _is_bot_of_this_repo(sender: dict) -> bool:
    # a dispatch made by this repository's own workflows (the rerun handler) with its GITHUB_TOKEN
    return sender.get("type") == "Bot" and sender.get("login") == "github-actions[bot]"


def decide(event_name: str, event: dict, permission_of: Callable[[str], str], label: str = DEFAULT_LABEL) -> Decision:
    """The decision for one delivered event; `permission_of(login)` asks GitHub for a user's permission."""
    sender = event.get("sender") or {}
    login = sender.get("login") or "unknown"
    if event_name == "pull_request_target":
        return Decision(False, None, "pull_request_target runs with the base repository's token and secrets; running "
                        "a PR's code from it is the 'pwn request' pattern: trigger the gate on pull_request instead")
    if event_name == "merge_group":
        sha = (event.get("merge_group") or {}).get("head_sha")
        return Decision(bool(sha), sha, "merge queue: its commits were queued by someone with write access"
                        if sha else "merge_group event without merge_group.head_sha")
    if event_name in ("push", "schedule"):
        sha = event.get("after") or event.get("sha")
        return Decision(True, sha, f"{event_name} on the repository's own branch")
    if event_name == "workflow_dispatch":
        sha = str((event.get("inputs") or {}).get("sha") or "").lower()
        pr = (event.get("inputs") or {}).get("pr")
        if not SHA.match(sha):
            return Decision(False, None, f"workflow_dispatch needs input `sha`, a full 40-hex commit SHA (got {sha!r})")
        bot = _is_bot_of_this_repo(sender)
        role = "bot of this repository" if bot else permission_of(login)
        if not bot and role not in WRITERS:
            return Decision(False, None, f"dispatch by {login} (permission {role}): only writers approve a commit")
        return Decision(True, sha, f"dispatched for {sha[:12]} by {login} ({role})", int(pr) if str(pr or "").isdigit() else None)
    if event_name != "pull_request":
        return Decision(False, None, f"{event_name} events never start the GPU gate")
    pull = event.get("pull_request") or {}
    head, base = pull.get("head") or {}, pull.get("base") or {}
    sha, number = head.get("sha"), pull.get("number")
    head_repo = (head.get("repo") or {}).get("full_name")
    if head_repo and head_repo == (base.get("repo") or {}).get("full_name"):
        return Decision(True, sha, f"branch of this repository ({head.get('ref')}): pushed by someone with write access",
                        number)
    action = event.get("action")
    if action == "labeled" and (event.get("label") or {}).get("name") == label:
        role = permission_of(login)
        if role in WRITERS:
            return Decision(True, sha, f"label {label!r} added by {login} ({role}) approves {sha[:12] if sha else sha}",
                            number)
        return Decision(False, None, f"label {label!r} added by {login} (permission {role}): only someone with write "
                        "access approves fork code", number)
    if action == "synchronize":
        why = f"new push ({sha[:12] if sha else '?'}) to a fork PR: a new approval is needed (label {label!r} again)"
    else:
        why = (f"fork PR ({head_repo or 'unknown repository'}), event {action!r}: waiting for someone with write access "
               f"to approve this exact head SHA (label {label!r} or a dispatch)")
    return Decision(False, None, why, number)
