"""What a change needs to run, and why: groups and test paths, or everything.

Per changed file, the first that applies:
1. a test file: it runs, and its group is selected; any other file under the test tree (a conftest, a helper,
   or a test file the change deleted): the tests at or below its folder, or the nearest folder above it that
   holds tests where the head's tree is known (every group, for the tree's root);
2. `[selection] ignore` of the group map (documentation, other platforms' and vLLM's own CI files): nothing;
3. `[selection] everything` (build files, ROCm images and requirements, the AMD CI and platform): every group;
4. a rule's `sources`: that rule's group and test paths;
5. co-change learned from history (`cochange`): the test folders that changed with it most, and their groups;
6. anything else is unknown: every group (an unknown file never lets a regression through).

An empty change (no path at all) also runs everything: a list that came out empty is more often a
step that failed to write it than a pull request that changes nothing.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

from pytest_rocm.catalog.groups import GROUPS, UNGROUPED, GroupMap, PatternSet
from rocm_gate.selection.cochange import (
    MIN_TOGETHER,
    SUPPORT,
    CoChange,
    is_test_file,
    is_test_path,
)


@dataclass
class Selection:
    everything: bool = False
    why_everything: str | None = None
    # group -> reasons
    groups: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # test path -> reasons
    tests: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    ignored: list[str] = field(default_factory=list)
    # where the tree is known: the test files under each selected path, and in the whole tree
    under: dict[str, set[str]] = field(default_factory=dict, repr=False)
    test_files: int | None = None

    def to_dict(self) -> dict:
        return {
            "everything": self.everything,
            "why_everything": self.why_everything,
            # reasons strongest first (`by_strength`)
            "groups": {g: by_strength(r) for g, r in sorted(self.groups.items())},
            "tests": {t: by_strength(r) for t, r in sorted(self.tests.items())},
            "ignored": self.ignored,
            "test_files": {
                "selected": self.selected_files(),
                "total": self.test_files,
                "per_path": dict(sorted(self.sizes.items())),
            },
        }

    def selected_files(self) -> int | None:
        """Test files the selected paths hold (a path under another counted once), where the tree
        is known."""
        if self.test_files is None:
            return None
        if self.everything:
            return self.test_files
        return len(set().union(*self.under.values()))

    @property
    def sizes(self) -> dict[str, int]:
        """Each selected path's size in test files, where the tree is known."""
        return {target: len(files) for target, files in self.under.items()}


_CO_CHANGED = re.compile(r"in (\d+) of (\d+) commits")


def by_strength(reasons: list[str]) -> list[str]:
    """Reasons, each once, strongest first: a changed or deleted test file and `everything`, then a
    map rule's `sources`, then a helper the tests under a folder use, then co-change, the larger
    share of commits first."""

    def strength(reason: str) -> tuple:
        if (
            reason == "changed test file"
            or reason.startswith("everything")
            or reason.endswith((" changed", " deleted"))
        ):
            return (0, 0.0)
        if "rule `sources`" in reason:
            return (1, 0.0)
        if "co-changed" in reason:
            found = _CO_CHANGED.search(reason)
            share = int(found[1]) / int(found[2]) if found and int(found[2]) else 0.0
            return (3, -share)
        return (2, 0.0)

    return sorted(set(reasons), key=lambda reason: (*strength(reason), reason))


def select(
    changed: list[str],
    group_map: GroupMap,
    history: CoChange | None = None,
    tree: set[str] | None = None,
) -> Selection:
    """`tree`: the files of the tree the selection will run in (the change's head), where known.
    With it, a test file the change deleted is not run (pytest refuses a path that does not exist,
    and the whole run with it): the tests beside it are; and a helper's tests are those of the
    nearest folder at or above it that holds tests, not a folder of helpers alone (pytest would
    collect nothing there)."""
    selection = Selection()
    tested = _tested_folders(tree) if tree is not None else None
    if not any(path.strip() for path in changed):
        return everything(
            selection, "no changed file was given: an empty change is nothing to decide from"
        )
    for path in changed:
        path = path.strip().removeprefix("./")
        if not path:
            continue
        if is_test_path(path):
            if is_test_file(path) and (tree is None or path in tree):
                group = group_map.group_of(path) or UNGROUPED
                selection.tests[path].append("changed test file")
                selection.groups[group].append(f"{path} changed")
                continue
            # a conftest, helper or data file (or a test file the change deleted): every test at
            # or below its folder depends on it
            what = "deleted" if is_test_file(path) else "not a test"
            if is_test_file(path):
                group = group_map.group_of(path) or UNGROUPED
                selection.groups[group].append(f"{path} deleted")
            folder = _folder_with_tests(path.rsplit("/", 1)[0] + "/", tested)
            if folder is None:  # the test tree's own root (tests/conftest.py)
                return everything(selection, f"{path} is shared by the whole test tree")
            for group in _groups_under(group_map, folder):
                selection.groups[group].append(f"{path}: the tests under {folder} use it")
            selection.tests[folder].append(
                f"{path} changed ({what}: the tests under {folder} use it)"
            )
            continue
        if group_map.ignore.matches(path, path):
            selection.ignored.append(path)
            continue
        if group_map.everything.matches(path, path):
            return everything(selection, f"{path} is in the map's `[selection] everything`")
        ruled = [rule for rule in group_map.rules if rule.sources.matches(path, path)]
        for rule in ruled:
            selection.groups[rule.group].append(f"{path}: rule `sources` of group {rule.group}")
            for pattern in rule.include.patterns:
                selection.tests[pattern].append(f"{path}: rule `sources` of group {rule.group}")
        linked = history.tests_for(path) if history is not None else None
        for target, evidence in sorted((linked or {}).items()):
            # a folder, or a test file right in the tree's root (cochange.test_folder)
            group = (
                group_map.group_of(target if target.endswith(".py") else target + "test_x.py")
                or UNGROUPED
            )
            selection.groups[group].append(f"{path}: co-changed with {target} ({evidence})")
            selection.tests[target].append(f"{path}: co-changed ({evidence})")
        if not ruled and linked is None:
            return everything(
                selection,
                f"{path}: no rule's `sources` names it and " + _why_unlinked(path, history),
            )
    return _sized(selection, tree)


def _sized(selection: Selection, tree: set[str] | None) -> Selection:
    """Each selected path's size in test files, where the tree is known; paths that together hold
    every test file of the tree are everything, and say so. A plain path (a file, a folder) is
    found in the sorted files by bisection, so the work grows with the files it holds, not with
    the tree for every path (10,000 changed test files took 25 s of CPU); only a map's glob
    pattern is matched against every file."""
    if tree is None:
        return selection
    files = sorted(path for path in tree if is_test_file(path))
    selection.test_files = len(files)
    for target in selection.tests:
        # a file, a folder or a map's pattern, matched as the map matches it; a node id: its file
        path = target.split("::", 1)[0]
        if any(c in path for c in "*?["):
            pattern = PatternSet((path,))
            selection.under[target] = {f for f in files if pattern.matches(f, f)}
        else:
            selection.under[target] = _files_under(files, path)
    if files and selection.selected_files() == len(files) and not selection.everything:
        return everything(selection, f"the selected paths hold every test file ({len(files)})")
    return selection


def _files_under(files: list[str], path: str) -> set[str]:
    """The sorted `files` a plain path matches as the map matches it (`catalog/groups.py:
    pattern_regex`): the path itself, and the files below it (a path ending in `/` only those)."""
    found = set()
    if not path.endswith("/"):
        at = bisect.bisect_left(files, path)
        if at < len(files) and files[at] == path:
            found.add(path)
    folder = path if path.endswith("/") else path + "/"
    at = bisect.bisect_left(files, folder)
    while at < len(files) and files[at].startswith(folder):
        found.add(files[at])
        at += 1
    return found


def _tested_folders(tree: set[str]) -> set[str]:
    """Every folder ("a/b/") that holds a test file at or below it."""
    folders = set()
    for path in tree:
        if is_test_file(path):
            parts = path.split("/")[:-1]
            folders.update("/".join(parts[:end]) + "/" for end in range(1, len(parts) + 1))
    return folders


def _folder_with_tests(folder: str, tested: set[str] | None) -> str | None:
    """`folder`, or the nearest folder above it that holds tests (`tested`: those folders, None
    when unknown); None when that is the test tree's own root (every test)."""
    while folder.count("/") > 1 and tested is not None and folder not in tested:
        folder = folder.rsplit("/", 2)[0] + "/"
    return None if folder.count("/") <= 1 else folder


def _why_unlinked(path: str, history: CoChange | None) -> str:
    if history is None:
        return "no history was given to learn co-change from (--history FILE or --learn-from-git N)"
    seen = history.seen_with_tests(path)
    if seen < SUPPORT:
        return (
            f"history has too little on it: it (or a folder of it) changed together with tests in "
            f"{seen} of the {history.commits} commits that changed sources and tests together "
            f"({history.read} commits read), fewer than {SUPPORT}"
        )
    return (
        f"history links it to no test folder often enough (it changed with tests in {seen} commits; "
        f"a link needs {MIN_TOGETHER} of them)"
    )


def _groups_under(group_map: GroupMap, folder: str) -> set[str]:
    """The groups of the tests at or below a folder: those of map rules that name a path under it,
    and the group a test right in it would get."""
    groups = {
        rule.group
        for rule in group_map.rules
        for pattern in rule.include.patterns
        if pattern.startswith(folder)
    }
    groups.add(group_map.group_of(folder + "test_x.py") or UNGROUPED)
    return groups


def everything(selection: Selection, why: str) -> Selection:
    """Every group, saying why."""
    selection.everything, selection.why_everything = True, why
    for group in GROUPS:
        selection.groups[group].append(f"everything: {why}")
    return selection
