"""Co-change learned from history: which test folders change together with a source path.

History is one JSON object per commit, `{"sha": ..., "files": [...]}` (the shape of
`git log --first-parent --name-only`; `rocm-gate select --help` shows the command). Every commit
that changes source files and test files counts, for each source file and each of its folders down
to `MIN_DEPTH` path parts, how often each test folder changed with it. A test file right in the
tree's root (`tests/test_sequence.py`) counts as itself, not as its folder: the root folder is the
whole tree.

For a source file the answer comes from the most specific of its paths seen in at least `support`
commits (and `levels - 1` broader ones): the test folders that changed with it in at least `rate` of
those commits and in at least `MIN_TOGETHER` of them (one coincidence is no link). A commit of more
than `MAX_COMMIT_FILES` files is not learned from. A path never seen
enough has no answer (the caller runs everything). Each folder comes with its evidence, counted for
that
link: "vllm/attention/ changed with tests/kernels/ in 5 of 16 commits".
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

MIN_DEPTH = 2  # `vllm/attention/` is a path worth counting; `vllm/` is not
# Chosen on vLLM's history with a validation split of the learning commits only (learn on the oldest
# 1,500, validate on the next 500; the 947 evaluation commits of benchmarks/selection.py played no
# part): recall first, then GPU time. Rate 0.05 kept recall >= 0.99 there; one level or two gave the
# same recall (38% and 34% saved), and the broader one is kept: a missed group costs more than GPU
# time. MIN_TOGETHER 2: a folder that changed with a path once (1 of 16 commits) is a coincidence a
# maintainer would not accept as a reason; it costs recall (0.9917 -> 0.9834 on the evaluation
# commits, still above vLLM's rules'
# 0.9475) and saves GPU time (50.5% -> 56.4%). `min_together` and `rate` are the knobs benchmarks/selection.py
# moves along the curve.
SUPPORT = 3
RATE = 0.05
LEVELS = 2
MIN_TOGETHER = 2
# A commit that changes more files than this (a mass move, a vendored drop, a tree-wide reformat)
# says nothing about which tests go with which source; none of vLLM's 3,000 commits changes more
# than 150.
MAX_COMMIT_FILES = 500


class CommitHistoryError(ValueError):
    """A history file of commits (--history) that cannot be read, naming the file and line."""


def is_test_path(path: str) -> bool:
    return path.startswith(("tests/", "test/"))


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return (
        is_test_path(path)
        and name.endswith(".py")
        and (name.startswith("test_") or name.endswith("_test.py"))
    )


def test_folder(path: str) -> str:
    """What a changed test file links a source path to: its folder, or the file itself when its
    folder is the test tree's root (that folder would be every test)."""
    folder = path.rsplit("/", 1)[0] + "/"
    return path if folder.count("/") == 1 else folder


def source_paths(path: str) -> list[str]:
    """The file, then its folders from the deepest up to MIN_DEPTH parts."""
    parts = path.split("/")
    return [path] + ["/".join(parts[:i]) + "/" for i in range(len(parts) - 1, MIN_DEPTH - 1, -1)]


def read_history(path: Path) -> list[dict]:
    """Commits, newest first as `git log` prints them; CommitHistoryError names the line that is not
    one."""
    commits = []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommitHistoryError(f"{path}: cannot read it as UTF-8 text ({exc})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("files"), list)
                or not all(isinstance(f, str) for f in row["files"])
            ):
                raise TypeError("needs `files`, a list of paths")
        except (ValueError, TypeError) as exc:
            raise CommitHistoryError(f"{path}:{number}: not a commit line ({exc})") from None
        commits.append(row)
    return commits


@dataclass
class CoChange:
    # source path -> commits that changed it with tests
    seen: Counter = field(default_factory=Counter)
    # source path -> test folder -> commits
    together: dict = field(default_factory=lambda: defaultdict(Counter))
    commits: int = 0
    rate: float = RATE  # the share of a path's commits a folder must have changed in
    min_together: int = MIN_TOGETHER  # and how many of them at least

    @classmethod
    def learn(cls, commits: list[dict]) -> CoChange:
        model = cls()
        for commit in commits:
            if len(commit["files"]) > MAX_COMMIT_FILES:
                continue
            tests = {test_folder(f) for f in commit["files"] if is_test_file(f)}
            sources = [f for f in commit["files"] if not is_test_path(f)]
            if not tests or not sources:
                continue
            model.commits += 1
            for path in {p for f in sources for p in source_paths(f)}:
                model.seen[path] += 1
                for folder in tests:
                    model.together[path][folder] += 1
        return model

    def tests_for(
        self, path: str, support: int = SUPPORT, levels: int = LEVELS
    ) -> dict[str, str] | None:
        """The test folders (or root test files) that changed with one source file, each with its
        evidence; None when history knows too little: every path of it seen with tests in fewer than
        `support` commits, or no folder linked often enough."""
        found: dict[str, list[str]] = {}
        used = 0
        for candidate in source_paths(path):
            seen = self.seen.get(candidate, 0)
            if seen < support:
                continue
            for folder, together in sorted(self.together[candidate].items()):
                if together >= self.min_together and together / seen >= self.rate:
                    found.setdefault(folder, []).append(
                        f"{candidate} changed with {folder} in {together} of {seen} "
                        "commits that changed it with tests"
                    )
            used += 1
            if used >= levels:
                break
        # seen, but linked to no folder often enough: as unknown as never seen (the caller runs
        # everything)
        return (
            {folder: "; ".join(evidence) for folder, evidence in found.items()} if found else None
        )

    def seen_with_tests(self, path: str) -> int:
        """How many commits changed the most-seen path of this file (it or a folder of it) together
        with tests."""
        return max(self.seen.get(candidate, 0) for candidate in source_paths(path))
