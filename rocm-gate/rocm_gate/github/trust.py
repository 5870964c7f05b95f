"""The trust gate: may this event's code reach a self-hosted GPU runner, and exactly which commits?

A fork's code runs on the runners only after someone with write access approved that exact head SHA:
by adding the approval label (the `labeled` event carries the head SHA at that moment, and its
sender is the approver) or by a workflow dispatch naming the SHA (GitHub lets only writers, and the
App, dispatch). A later push is a new SHA and needs a new approval; a label added by someone without
write access (triage can label) approves nothing; removing and re-adding the label is a new
approval, judged by who re-added it.

The label is APPROVAL_LABEL, a constant of this code: nothing a fork edits (its copy of the caller
workflow, its inputs) chooses it, and the reusable gate workflow installs this code from its own
pinned commit before it asks (docs/architecture.md, "The trigger chain"). Any other label's event
changes nothing (`noop`).

A label approves only a fork PR that leaves `.github/` as it is: the labeled run uses the fork's
copy of the workflow files, whose own jobs and inputs (which suites, what to install) would come
with the approval. Such a PR is approved by a dispatch naming the SHA instead, which runs the
default branch's workflow files. The files are those of the labeled commit itself (GitHub's
compare of the event's base and head SHAs), never the PR's files when the question is asked: a
fork may push a commit that undoes its workflow change in between, and the labeled run would still
run the first.

Two commits come out: `head_sha`, the commit a check lands on (the PR's head), and `tested_sha`, the
commit the gate job checks out and runs: for `pull_request` the merge commit GitHub built for the
run (`GITHUB_SHA`, `refs/pull/N/merge`), whose parents include the head; otherwise the head itself
(merge group, dispatch, push).

`pull_request_target` is refused outright: it runs with the base repository's token and secrets, and
running a PR's code from it is the "pwn request" pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["APPROVAL_LABEL", "Decision", "WRITERS", "decide"]

WRITERS = ("admin", "maintain", "write")
APPROVAL_LABEL = "rocm-ci-approved"
SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Decision:
    trusted: bool
    head_sha: str | None
    tested_sha: str | None
    reason: str
    pr: int | None = None
    noop: bool = False  # the event asks for nothing (another label): no gate, and no check changes

    def to_dict(self) -> dict:
        return {
            "trusted": self.trusted,
            "head_sha": self.head_sha,
            "tested_sha": self.tested_sha,
            "pr": self.pr,
            "noop": self.noop,
            "reason": self.reason,
        }


def _sha(value) -> str | None:
    text = str(value or "").lower()
    return text if SHA.match(text) else None


def _is_bot(sender: dict) -> bool:
    # A dispatch by an App (the rerun relay's installation token) or by this repository's own
    # workflows (their GITHUB_TOKEN): GitHub let it through only with `actions: write` on the
    # repository, which only an admin grants.
    return sender.get("type") == "Bot" and str(sender.get("login") or "").endswith("[bot]")


def _refused(reason: str, pr: int | None = None, noop: bool = False) -> Decision:
    return Decision(False, None, None, reason, pr, noop)


def decide(
    event_name: str,
    event: dict,
    permission_of: Callable[[str], str],
    github_sha: str | None = None,
    files_of: Callable[[str, str], list[str] | None] = lambda base, head: None,
) -> Decision:
    """The decision for one delivered event. `permission_of(login)` asks GitHub for a user's
    permission; `github_sha` is the run's GITHUB_SHA (for `pull_request`, the merge commit GitHub
    built); `files_of(base, head)` the paths commit `head` changes since its merge base with `base`,
    None when GitHub cannot list them all."""
    if event_name == "pull_request_target":
        return _refused(
            "pull_request_target runs with the base repository's token and secrets; "
            "running a PR's code from it is the 'pwn request' pattern: trigger the gate on pull_request"
        )
    if event_name == "merge_group":
        return _merge_group(event)
    if event_name in ("push", "schedule"):
        sha = _sha(event.get("after")) if event_name == "push" else _sha(github_sha)
        return Decision(bool(sha), sha, sha, f"{event_name} on the repository's own branch")
    if event_name == "workflow_dispatch":
        return _dispatch(event, permission_of)
    if event_name == "pull_request":
        return _pull_request(event, permission_of, github_sha, files_of)
    return _refused(f"{event_name} events never start the GPU gate")


def _sender(event: dict) -> tuple[dict, str]:
    sender = event.get("sender")
    if not isinstance(sender, dict):
        sender = {}
    return sender, str(sender.get("login") or "unknown")


def _merge_group(event: dict) -> Decision:
    sha = _sha((event.get("merge_group") or {}).get("head_sha"))
    return Decision(
        bool(sha),
        sha,
        sha,
        "merge queue: its commits were queued by someone with write access"
        if sha
        else "merge_group event without a merge_group.head_sha",
    )


def _dispatch(event: dict, permission_of: Callable[[str], str]) -> Decision:
    """A dispatch approves the commit it names, when a writer (or an App) sent it."""
    sender, login = _sender(event)
    inputs = event.get("inputs") if isinstance(event.get("inputs"), dict) else {}
    sha, pr = _sha(inputs.get("sha")), inputs.get("pr")
    if sha is None:
        return _refused(
            f"workflow_dispatch needs input `sha`, a full 40-hex commit SHA (got "
            f"{str(inputs.get('sha'))[:60]!r})"
        )
    bot = _is_bot(sender)
    role = "an App with actions: write" if bot else permission_of(login)
    if not bot and role not in WRITERS:
        return _refused(f"dispatch by {login} (permission {role}): only writers approve a commit")
    return Decision(
        True,
        sha,
        sha,
        f"dispatched for {sha[:12]} by {login} ({role})",
        int(pr) if re.fullmatch(r"[0-9]{1,9}", str(pr or "")) else None,
    )


def _pull_request(
    event: dict,
    permission_of: Callable[[str], str],
    github_sha: str | None,
    files_of: Callable[[str, str], list[str] | None],
) -> Decision:
    """A branch of this repository runs as pushed; a fork's PR runs only on its approval label."""
    pull = event.get("pull_request") if isinstance(event.get("pull_request"), dict) else {}
    head, base = pull.get("head") or {}, pull.get("base") or {}
    sha = _sha(head.get("sha"))
    number = pull.get("number") if isinstance(pull.get("number"), int) else None
    tested = _sha(github_sha)
    action = event.get("action")
    label = (event.get("label") or {}).get("name") if isinstance(event.get("label"), dict) else None
    if action in ("labeled", "unlabeled") and label != APPROVAL_LABEL:
        return _refused(
            f"label {str(label)[:100]!r} is not the approval label: nothing to do", number, True
        )
    if sha is None or tested is None:
        return _refused(
            "pull_request event without a head SHA, or run without GITHUB_SHA (the merge commit)",
            number,
        )
    head_repo = (head.get("repo") or {}).get("full_name")
    if head_repo and head_repo == (base.get("repo") or {}).get("full_name"):
        if action == "unlabeled":
            return _refused(
                "approval label removed on a branch of this repository: nothing to do", number, True
            )
        return Decision(
            True,
            sha,
            tested,
            f"branch of this repository ({str(head.get('ref'))[:100]}): pushed by "
            "someone with write access",
            number,
        )
    if action == "labeled":
        return _fork_labeled(event, permission_of, files_of, sha, tested, base, number)
    if action == "synchronize":
        return _refused(
            f"new push ({sha[:12]}) to a fork PR: a new approval is needed (label "
            f"{APPROVAL_LABEL!r} again)",
            number,
        )
    return _refused(
        f"fork PR ({str(head_repo or 'unknown repository')[:100]}), event {str(action)[:40]!r}: waiting for "
        f"someone with write access to approve this exact head SHA (label {APPROVAL_LABEL!r} or a dispatch)",
        number,
    )


def _fork_labeled(
    event: dict,
    permission_of: Callable[[str], str],
    files_of: Callable[[str, str], list[str] | None],
    sha: str,
    tested: str,
    base: dict,
    number: int | None,
) -> Decision:
    """The approval label on a fork PR: a writer's approves the labeled commit, unless that commit
    changes the workflow files its run would use."""
    _, login = _sender(event)
    role = permission_of(login)
    if role not in WRITERS:
        return _refused(
            f"label {APPROVAL_LABEL!r} added by {login} (permission {role}): only "
            "someone with write access approves fork code",
            number,
        )
    # the files of the labeled commit itself, not the PR's now: a fork may push a commit that undoes
    # its workflow change between the label and this question
    base_sha = _sha(base.get("sha"))
    files = files_of(base_sha, sha) if base_sha else None
    workflows = [f for f in files or [] if f.startswith(".github/")]
    if files is None or workflows:
        what = (
            f"changes {', '.join(sorted(workflows)[:3])}"
            if workflows
            else "changes files GitHub cannot list in full"
        )
        return _refused(
            f"label {APPROVAL_LABEL!r} by {login}: this fork PR {what}, and its "
            "labeled run would use the fork's workflow files: review them and approve by "
            f"dispatching the gate for {sha[:12]} (it runs the default branch's files)",
            number,
        )
    return Decision(
        True,
        sha,
        tested,
        f"label {APPROVAL_LABEL!r} added by {login} ({role}) approves {sha[:12]}",
        number,
    )
