"""Co-change learned from history: which test folders change together with a source path.

History is one JSON object per commit, `{"sha": ..., "files": [...]}` (the shape of
`git log --first-parent --name-only`; `rocm-gate select --help` shows the command). Every commit
that changes source files and test files counts, for each source file and each of its folders down
to `MIN_DEPTH` path parts, how often each test folder changed with it. A test file right in the
tree's root (`tests/test_sequence.py`) counts as itself, not as its folder: the root folder is the
whole tree. A commit of more than `MAX_COMMIT_FILES` files is not learned from.

For a source file the answer comes from the most specific of its paths (the file, then its folders)
that changed with tests in at least `SUPPORT` commits. Its test folders are taken in order of how
often they changed with that path, until those taken account for more than `cover` of all the
test-folder changes that came with it (`COVER`, more than half, by default): the fewest folders
that explain most of its history, and not the one-off folders of its history's tail. Of folders
that changed with it equally often, the one that changed with fewer commits overall goes first: it
is the more specific to this path (a folder that changes with everything, `tests/distributed/`, is
the weaker sign). A path never seen enough has no answer (the caller runs everything). Each folder
comes with its evidence: "vllm/attention/ changed with tests/kernels/ in 5 of 16 commits that
changed it with tests".

`cover` is the knob of the selection's recall/GPU-time curve (`benchmarks/selection.py` prints it):
0 takes only the folder that changed with a path most, 1 every folder that ever did.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pytest_rocm.errors import BadInput

MIN_DEPTH = 2  # `vllm/attention/` is a path worth counting; `vllm/` is not
# The defaults were chosen on vLLM's history with the learning commits only (`benchmarks/selection.py
# --validate`: learn from the first 1,000, 1,250, 1,500 and 1,750 of the 2,000 older commits, check
# each next 250); the 947 evaluation commits played no part. There vLLM's own AMD rules found 93.08%
# of the groups a change touched and saved 71.4% of the GPU time.
# - COVER 0.5 (more than half): 96.83%, 72.5% saved, the point farthest from vLLM's on its nearer
#   axis; 0.4: 93.95%, 74.2%; 0.6: 97.69% but 70.5%, less than vLLM's rules. Half or more (a path
#   whose history splits evenly between two folders gets one of them): 94.24%, 73.1%. (Measured
#   before MIN_TOGETHER below was added back: with it, 0.5 finds 97.69% and saves 69.2% there, and
#   the curve passes above vLLM's point between 0.3 and 0.4; the default was not moved.)
# - SUPPORT 2: the same groups as 3, and 72.5% saved against 70.3%: a path seen twice answers from
#   its own history instead of a broader folder's.
# - MAX_COMMIT_FILES 50: a commit of more (a refactor across the tree, a mass rename) links every
#   source it touches to every test folder it touches. Learning from up to 500 files: 96.25%, 69.9%;
#   80: 96.83%, 71.0%; 30: 96.25%, 72.4%.
# - Of folders changed with a path equally often, the more specific first: without that (by name),
#   97.12% and 70.8%.
SUPPORT = 2
COVER = 0.5
# A path answers only when a folder changed with it in two commits at least: one coincidence is no
# reason a maintainer would accept (issue 29). Folders linked once may follow the first, when the
# cover needs them. (Requiring two of every folder: the default then finds 94.75% on the evaluation
# commits, no more than vLLM's rules, and saves 73.0%.)
MIN_TOGETHER = 2
MAX_COMMIT_FILES = 50


class CommitHistoryError(BadInput):
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
        except RecursionError:
            raise CommitHistoryError(
                f"{path}:{number}: not a commit line (nested too deep)"
            ) from None
        except (ValueError, TypeError) as exc:
            raise CommitHistoryError(f"{path}:{number}: not a commit line ({exc})") from None
        commits.append(row)
    return commits


def check_cover(cover: float) -> float:
    """`cover` as a share from 0 to 1; ValueError saying so for anything else (NaN included)."""
    if not 0 <= cover <= 1:
        raise ValueError(f"cover is a share from 0 to 1, got {cover}")
    return cover


@dataclass
class CoChange:
    # source path -> commits that changed it with tests
    seen: Counter = field(default_factory=Counter)
    # source path -> test folder -> commits
    together: dict = field(default_factory=lambda: defaultdict(Counter))
    # test folder -> commits that changed it with sources (how specific a link to it is)
    changed: Counter = field(default_factory=Counter)
    commits: int = 0  # commits that changed sources and tests together (those it learns from)
    read: int = 0  # commits read, those too large or without both kinds of file included
    # the knob: the folders selected for a path account for more than this share of its test-folder
    # changes
    cover: float = COVER

    def __post_init__(self):
        check_cover(self.cover)

    @classmethod
    def learn(cls, commits: list[dict], cover: float = COVER) -> CoChange:
        model = cls(cover=cover)
        for commit in commits:
            model.read += 1
            if len(commit["files"]) > MAX_COMMIT_FILES:
                continue
            tests = {test_folder(f) for f in commit["files"] if is_test_file(f)}
            sources = [f for f in commit["files"] if not is_test_path(f)]
            if not tests or not sources:
                continue
            model.commits += 1
            model.changed.update(tests)
            for path in {p for f in sources for p in source_paths(f)}:
                model.seen[path] += 1
                for folder in tests:
                    model.together[path][folder] += 1
        return model

    def tests_for(self, path: str, support: int = SUPPORT) -> dict[str, str] | None:
        """The test folders (or root test files) that changed with one source file, each with its
        evidence; None when history knows too little: every path of it seen with tests in fewer than
        `support` commits, or linked to no folder in `MIN_TOGETHER` of them."""
        for candidate in source_paths(path):
            seen = self.seen.get(candidate, 0)
            if seen < support:
                continue
            linked = self.together[candidate]
            # most often first; of equals, the one that changes with fewer commits overall
            ranked = sorted(
                linked.items(), key=lambda item: (-item[1], self.changed[item[0]], item[0])
            )
            # a path whose every folder changed with it once has coincidences, not a link: a broader
            # path (its folder) may have one, else it is unknown
            if ranked[0][1] < MIN_TOGETHER:
                continue
            found: dict[str, str] = {}
            explained, changes = 0, sum(linked.values())
            for folder, together in ranked:
                if explained > self.cover * changes:
                    break
                found[folder] = (
                    f"{candidate} changed with {folder} in {together} of {seen} "
                    "commits that changed it with tests"
                )
                explained += together
            if found:
                return found
            # no link of two commits on this path: a broader one (its folder) may have them
        return None

    def seen_with_tests(self, path: str) -> int:
        """How many commits changed the most-seen path of this file (it or a folder of it) together
        with tests."""
        return max(self.seen.get(candidate, 0) for candidate in source_paths(path))
