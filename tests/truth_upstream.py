"""The shapes of vLLM's real main history that the truth harness (tests/truth.py) grows its histories
from: breaks reverted (a `Revert "S"` subject names the culprit S) and re-landed (a later subject that
names S again: `Reapply ...`, a `Redo`/`rework` of it, or all of its words), test files moved to
another folder (one commit changes a test file that the tree no longer has and one of the same name
that it has), and `[ROCm]` fixes. Read from tests/data/upstream/ (vLLM's first-parent history, its
subjects and its test tree: tests/data/upstream/README.md).
"""

from __future__ import annotations

import functools
import json
import posixpath
import random
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "upstream"
AGAIN = re.compile(r"(?i)\b(reapply|re-?land|redo|rework)\b")
ROCM_FIX = re.compile(r"(?i)\[ROCm\]\s*\[?(bug)?fix")
COMMON = {"and", "the", "for", "with", "fix", "bugfix", "revert", "add"}


@dataclass(frozen=True)
class Episode:
    """A break main reverted, and re-landed where the history says so: indexes in `commits()`."""

    culprit: int
    revert: int
    reland: int | None
    subject: str


@dataclass(frozen=True)
class Move:
    """A test file moved by one commit (its index in `commits()`)."""

    commit: int
    old: str
    new: str


@functools.cache
def commits() -> list[dict]:
    """Main's commits oldest first: sha, date, subject, files."""
    subjects = [json.loads(line) for line in (DATA / "vllm-main-subjects.jsonl").open() if line]
    files = {
        entry["sha"]: entry["files"]
        for entry in map(json.loads, (DATA / "vllm-main-history.jsonl").open())
    }
    return [{**c, "files": files.get(c["sha"], [])} for c in reversed(subjects)]


def _core(subject: str) -> str:
    return re.sub(r"\s*\(#\d+\)", "", subject).strip()


def _words(subject: str) -> set[str]:
    return set(re.findall(r"[a-z0-9_.]{3,}", _core(subject).lower())) - COMMON


def _reland(history: list[dict], revert: int, name: str) -> int | None:
    """The first commit after the revert that lands the reverted change again."""
    wanted = _words(name)
    for j in range(revert + 1, len(history)):
        subject = history[j]["subject"]
        if subject.startswith("Revert"):
            continue
        shared = wanted & _words(subject)
        if (AGAIN.search(subject) and len(shared) >= 2) or (
            wanted and len(shared) >= 0.8 * len(wanted)
        ):
            return j
    return None


@functools.cache
def episodes() -> list[Episode]:
    history = commits()
    found = []
    for i, commit in enumerate(history):
        reverted = re.match(r'Revert "(.+)"', commit["subject"])
        if not reverted:
            continue
        name = _core(reverted.group(1))
        culprit = next(
            (j for j in range(i - 1, -1, -1) if _core(history[j]["subject"]).startswith(name)),
            None,
        )
        if culprit is not None:
            found.append(Episode(culprit, i, _reland(history, i, name), name))
    return found


@functools.cache
def moves() -> list[Move]:
    tree = set((DATA / "vllm-tests-tree.txt").read_text().split())
    found = []
    for i, commit in enumerate(commits()):
        tests = [
            f
            for f in commit["files"]
            if f.startswith("tests/") and posixpath.basename(f).startswith("test_")
        ]
        for old in (f for f in tests if f not in tree):
            for new in (f for f in tests if f in tree):
                if posixpath.basename(old) == posixpath.basename(new):
                    found.append(Move(i, old, new))
    return found


def window(rng: random.Random, n: int, keys: list[int]) -> tuple[list[str], list[int]]:
    """n of main's real commits, in their order, around the commits `keys` (indexes in `commits()`,
    ascending, at most n - 2): (their SHAs, where each key landed among them). One to three commits
    before the first key and after the last, a commit between two keys where they have one, the
    rest from between the keys at random, then from after the last (or before the first)."""
    history = commits()
    pre = min(keys[0], rng.randint(1, 3))
    post = rng.randint(1, 3)
    chosen = set(keys) | set(range(keys[0] - pre, keys[0]))
    chosen |= set(range(keys[-1] + 1, min(len(history), keys[-1] + 1 + post)))
    gaps = [list(range(a + 1, b)) for a, b in zip(keys, keys[1:])]
    room = n - len(chosen)
    must = [rng.choice(gap) for gap in gaps if gap][: max(0, room)]
    rest = [i for gap in gaps for i in gap if i not in must]
    chosen |= set(must) | set(rng.sample(rest, max(0, min(len(rest), room - len(must)))))
    after, before = max(chosen) + 1, min(chosen) - 1
    while len(chosen) < n and (after < len(history) or before >= 0):
        chosen.add(after if after < len(history) else before)
        after, before = (after + 1, before) if after < len(history) else (after, before - 1)
    picked = sorted(chosen)[:n]
    return [history[i]["sha"] for i in picked], [picked.index(k) for k in keys]


def rocm_fixes(shas: list[str]) -> list[int]:
    """Where `[ROCm]` fixes are among these commits (positions)."""
    subject = {c["sha"]: c["subject"] for c in commits()}
    return [i for i, sha in enumerate(shas) if ROCM_FIX.search(subject.get(sha, ""))]
