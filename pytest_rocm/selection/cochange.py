"""Co-change learned from history: which test folders change together with a source path.

History is one JSON object per commit, `{"sha": ..., "files": [...]}` (the shape of
`git log --first-parent --name-only`; `rocm-gate select --help` shows the command). Every commit that
changes source files and test files counts, for each source file and each of its folders down to
`MIN_DEPTH` path parts, how often each test folder changed with it.

For a source file the answer comes from the most specific of its paths seen in at least `support`
commits (and `levels - 1` broader ones): the test folders that changed with it in at least `rate` of
those commits. A path never seen enough has no answer (the caller runs everything).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

MIN_DEPTH = 2  # `vllm/attention/` is a path worth counting; `vllm/` is not
# Chosen on vLLM's history with a validation split of the learning commits only (learn on the oldest 1,500,
# validate on the next 500; the 947 evaluation commits of benchmarks/selection.py played no part): recall
# >= 0.99 first, then GPU time. Rate 0.05 is the only one that keeps recall >= 0.99 (0.9946); one level or
# two gave the same recall there (38% and 34% saved), and the broader one is kept: a missed group costs more
# than GPU time.
SUPPORT = 3
RATE = 0.05
LEVELS = 2


class HistoryError(ValueError):
    pass


def is_test_path(path: str) -> bool:
    return path.startswith(("tests/", "test/"))


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return is_test_path(path) and name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def test_folder(path: str) -> str:
    return path.rsplit("/", 1)[0] + "/"


def source_paths(path: str) -> list[str]:
    """The file, then its folders from the deepest up to MIN_DEPTH parts."""
    parts = path.split("/")
    return [path] + ["/".join(parts[:i]) + "/" for i in range(len(parts) - 1, MIN_DEPTH - 1, -1)]


def read_history(path: Path) -> list[dict]:
    """Commits, newest first as `git log` prints them; HistoryError names the line that is not one."""
    commits = []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: cannot read it as UTF-8 text ({exc})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("files"), list) \
                    or not all(isinstance(f, str) for f in row["files"]):
                raise TypeError("needs `files`, a list of paths")
        except (ValueError, TypeError) as exc:
            raise HistoryError(f"{path}:{number}: not a commit line ({exc})") from None
        commits.append(row)
    return commits


@dataclass
class CoChange:
    seen: Counter = field(default_factory=Counter)  # source path -> commits that changed it with tests
    together: dict = field(default_factory=lambda: defaultdict(Counter))  # source path -> test folder -> commits
    commits: int = 0

    @classmethod
    def learn(cls, commits: list[dict]) -> CoChange:
        model = cls()
        for commit in commits:
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

    def tests_for(self, path: str, support: int = SUPPORT, rate: float = RATE, levels: int = LEVELS):
        """(test folders, the evidence) for one source file, or (None, None) when history knows too little."""
        found: set[str] = set()
        evidence = []
        used = 0
        for candidate in source_paths(path):
            seen = self.seen.get(candidate, 0)
            if seen < support:
                continue
            folders = {folder for folder, n in self.together[candidate].items() if n / seen >= rate}
            found |= folders
            evidence.append(f"{candidate} changed with tests in {seen} commit(s)")
            used += 1
            if used >= levels:
                break
        return (found, "; ".join(evidence)) if used else (None, None)
