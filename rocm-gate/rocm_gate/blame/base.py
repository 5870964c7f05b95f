"""The PR's base, in a second git work tree beside the tested checkout.

The base is the commit `--base` names, or else the tested checkout's first parent when HEAD is a
merge commit: a `pull_request` run tests GitHub's merge of the PR into its base, whose first parent
is the base (for a PR stacked on another PR's branch, that branch's head). The work tree is made with
`git worktree add --detach` and removed with `git worktree remove --force` whatever happens
(`work_tree` is a context manager; an interruption goes through its exit).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.errors import BadInput, NotDone

__all__ = ["Base", "BaseError", "NotPrepared", "choose_base", "git", "top_of", "work_tree"]

SHA = re.compile(r"[0-9a-fA-F]{7,40}")
GIT_TIMEOUT_S = 120  # a local git command; a fetch of one commit gets FETCH_TIMEOUT_S
FETCH_TIMEOUT_S = 300


class BaseError(BadInput):
    """The base or the checkout cannot be used as given (exit 2): the message names which and why."""


class NotPrepared(NotDone):
    """The base's work tree could not be made: the experiment catches it and says why in
    base-check.json (the command exits 0)."""


@dataclass
class Base:
    sha: str | None  # the full SHA; None: no base is known
    chosen: str  # how it was chosen, in words
    missing: str | None = None  # why its commit is not in the checkout (and could not be fetched)


def git(top: Path, *args: str, timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(top), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1][:300] if lines else f"exit status {done.returncode}"


def top_of(checkout: Path) -> Path:
    """The top of the git work tree `checkout` is in."""
    if not Path(checkout).is_dir():
        raise BaseError(f"--checkout {checkout}: no such folder")
    done = git(Path(checkout), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise BaseError(
            f"--checkout {checkout}: not a git checkout ({_last_line(done)}); give the tested "
            "checkout, where the gates ran"
        )
    return Path(done.stdout.strip()).resolve()


def _has_commit(top: Path, sha: str) -> bool:
    return git(top, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def _fetch(top: Path, sha: str) -> str | None:
    """Fetch one commit from `origin` (a shallow checkout lacks the merge commit's parents); why it
    failed, or None."""
    try:
        done = git(top, "fetch", "--no-tags", "--depth=1", "origin", sha, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"fetching it from origin took over {FETCH_TIMEOUT_S} s"
    if done.returncode != 0 or not _has_commit(top, sha):
        return f"fetching it from origin failed: {_last_line(done)}"
    return None


def _parents(top: Path) -> tuple[str, list[str]]:
    """HEAD's SHA and its parents' (read from the commit itself: a shallow clone knows them even
    where it lacks their objects)."""
    head = git(top, "rev-parse", "--verify", "HEAD^{commit}")
    if head.returncode != 0:
        raise BaseError(f"{top}: HEAD is no commit ({_last_line(head)})")
    sha = head.stdout.strip()
    body = git(top, "cat-file", "-p", sha).stdout
    parents = []
    for line in body.splitlines():
        if not line:
            break  # the headers end at the first empty line
        if line.startswith("parent "):
            parents.append(line.split()[1])
    return sha, parents


def choose_base(top: Path, given: str | None) -> tuple[str, Base]:
    """(the tested HEAD's SHA, the base): `given` (a SHA or a name git resolves, which must be a
    commit of the checkout or fetchable), else HEAD's first parent where HEAD is a merge commit,
    else no base (`Base.sha` None, `Base.missing` says why)."""
    tested, parents = _parents(top)
    if given is not None:
        text = given.strip()
        if not text or text.startswith("-") or any(c.isspace() or ord(c) < 32 for c in text):
            raise BaseError(f"--base {given[:80]!r}: not a commit")
        found = git(top, "rev-parse", "--verify", "--quiet", f"{text}^{{commit}}")
        if found.returncode != 0:
            if not SHA.fullmatch(text) or len(text) != 40 or _fetch(top, text.lower()):
                raise BaseError(
                    f"--base {text[:80]}: no such commit in {top} (give a full SHA the checkout "
                    "has, or can fetch from origin)"
                )
            found = git(top, "rev-parse", "--verify", f"{text}^{{commit}}")
        return tested, Base(found.stdout.strip(), f"given (--base {text[:60]})")
    if len(parents) < 2:
        return tested, Base(
            None,
            "none",
            missing=f"the tested commit {tested[:12]} is not a merge commit and no --base was "
            "given: there is no PR base to run on",
        )
    first = parents[0]
    chosen = (
        f"the first parent of the tested merge commit {tested[:12]} (the PR's base, as the "
        "merge commit GitHub made has it)"
    )
    missing = None
    if not _has_commit(top, first):
        why = _fetch(top, first)
        if why:
            missing = f"the base {first[:12]} is not in the checkout (a shallow clone?) and {why}"
    return tested, Base(first, chosen, missing)


def _remove(top: Path, tree: Path) -> None:
    try:
        git(top, "worktree", "remove", "--force", str(tree))
    except subprocess.TimeoutExpired:
        pass
    if tree.exists():  # a tree git no longer lists, or one it could not remove
        shutil.rmtree(tree, ignore_errors=True)
    try:
        git(top, "worktree", "prune")
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def work_tree(top: Path, sha: str, where: Path | None = None) -> Iterator[Path]:
    """A detached work tree of `sha` (at `where`, which must not exist yet, else in a new folder
    under $RUNNER_TEMP or the system's temporary folder), removed at the end whatever happens.
    NotPrepared when git cannot make it."""
    holder = None
    if where is None:
        runner_temp = os.environ.get("RUNNER_TEMP")
        holder = Path(
            tempfile.mkdtemp(
                prefix="rocm-gate-base-",
                dir=runner_temp if runner_temp and os.path.isdir(runner_temp) else None,
            )
        )
        tree = holder / "base"
    else:
        tree = Path(where).resolve()
        if tree.exists():
            raise BaseError(f"--worktree {where}: already exists; give a path that does not")
    try:
        try:
            done = git(top, "worktree", "add", "--detach", str(tree), sha)
        except subprocess.TimeoutExpired:
            raise NotPrepared(
                f"git worktree add of {sha[:12]} took over {GIT_TIMEOUT_S} s"
            ) from None
        if done.returncode != 0:
            raise NotPrepared(f"git worktree add of {sha[:12]} failed: {_last_line(done)}")
        yield tree
    finally:
        _remove(top, tree)
        if holder is not None:
            shutil.rmtree(holder, ignore_errors=True)
