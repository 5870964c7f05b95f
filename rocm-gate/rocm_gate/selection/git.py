"""What selection reads from a git checkout: a commit's full id, the files a range changes, the
first-parent history to learn co-change from, and a commit's tree. Every failure is
`CannotDecide`, naming the command and what git said: `rocm-gate select` then fails closed
(selects everything)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_rocm.errors import BadInput

__all__ = ["CannotDecide", "changed_files", "commit", "first_parent_history", "tree_files"]


class CannotDecide(BadInput):
    """Something the selection needs that cannot be read or trusted: it runs everything."""


def _git(repo: Path, *args: str, text: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text)


def _last_line(stderr: str | bytes) -> str:
    said = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    return (said.strip() or "no output").splitlines()[-1]


def commit(repo: Path, option: str, value: str | None) -> str:
    """`value` (given as `option`) as the full id of a commit of `repo`; CannotDecide for an empty
    value (an unset workflow variable), an option in its place, or no such commit."""
    if value is None or not value.strip():
        raise CannotDecide(f"{option} is empty (an unset workflow variable?): give the commit's id")
    if value.startswith("-"):
        raise CannotDecide(
            f"{option} {value!r} is not a commit: it starts with '-' (give {option}=SHA)"
        )
    done = _git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{value}^{{commit}}",
        text=True,
    )
    if done.returncode != 0:
        inside = _git(repo, "rev-parse", "--git-dir", text=True)
        if inside.returncode != 0:  # not the commit's fault: there is no repository to ask
            raise CannotDecide(
                f"{repo} is not a git checkout ({_last_line(inside.stderr)}): run in the checkout, "
                "or give --repo DIR"
            )
        raise CannotDecide(
            f"{option} {value!r} is no commit of {repo} (fetch it first, or check the id)"
        )
    return done.stdout.strip()


def changed_files(repo: Path, base: str, head: str, shown: tuple[str, str]) -> list[str]:
    """The files `base...head` changes (full ids; `shown`: how the user gave them). A rename is a
    change to both paths (`--no-renames`): a ROCm kernel moved to another folder changes what its
    old path's rules select as much as what its new path's do."""
    done = _git(
        repo, "diff", "--name-only", "--no-renames", "-z", "--end-of-options", f"{base}...{head}"
    )
    if done.returncode != 0:
        raise CannotDecide(
            f"git diff {shown[0]}...{shown[1]} in {repo} failed: {_last_line(done.stderr)}"
        )
    try:
        names = [name for name in done.stdout.decode("utf-8").split("\0") if name.strip()]
    except UnicodeDecodeError as exc:
        raise CannotDecide(
            f"git diff {shown[0]}...{shown[1]} names a path that is not UTF-8 (byte {exc.start})"
        ) from None
    if not names:
        _empty_range(repo, base, head, shown)
    return names


def _empty_range(repo: Path, base: str, head: str, shown: tuple[str, str]) -> None:
    """A range that changes nothing because it was given the wrong way round (the head an
    ancestor of the base: `base...head` starts at the head) or names one commit twice: the
    mistake, not "no changed file"."""
    if base == head:
        raise CannotDecide(
            f"--base {shown[0]} and --head {shown[1]} are the same commit ({base[:12]}): nothing "
            "changed between them; give the commit the change is based on as --base"
        )
    if _git(repo, "merge-base", "--is-ancestor", head, base).returncode == 0:
        raise CannotDecide(
            f"--head {shown[1]} is an ancestor of --base {shown[0]}: the range is the wrong way "
            f"round, so it changes nothing; swap them (--base {shown[1]} --head {shown[0]})"
        )


def first_parent_history(repo: Path, commits: int, before: str | None) -> list[dict]:
    """The last `commits` first-parent commits (before `before`, when given) as {"sha", "files"}."""
    args = ["log", "--first-parent", f"-n{commits}", "--name-only", "--format=@%H"]
    done = _git(repo, *args, "--end-of-options", *([before] if before else []), text=True)
    if done.returncode != 0:
        raise CannotDecide(f"git log in {repo} failed: {_last_line(done.stderr)}")
    history: list[dict] = []
    for line in done.stdout.splitlines():
        if line.startswith("@"):
            history.append({"sha": line[1:], "files": []})
        elif line.strip() and history:
            history[-1]["files"].append(line.strip())
    return history


def tree_files(repo: Path, head: str | None, shown: str | None = None) -> set[str] | None:
    """The files of commit `head`'s tree, or without it the checkout's tracked files; None where
    `repo` is no checkout and no commit was asked for."""
    if head is not None:
        done = _git(repo, "ls-tree", "-r", "--name-only", "-z", "--end-of-options", head)
    else:
        done = _git(repo, "ls-files", "-z")
    if done.returncode != 0:
        if head is not None:
            raise CannotDecide(
                f"git ls-tree {shown or head} in {repo} failed: {_last_line(done.stderr)}"
            )
        return None  # --changed-files outside a checkout
    return {name for name in done.stdout.decode("utf-8", "replace").split("\0") if name}
