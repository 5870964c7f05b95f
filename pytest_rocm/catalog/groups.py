"""Test groups and the map that assigns upstream test paths to them (no editing of upstream trees).

Map file (TOML)::

    schema = "pytest-rocm/groups/1"
    source = "vllm-project/vllm@28be48f (2026-05-24)"   # where the paths were read from

    [[rule]]
    group = "attention"
    paths = ["tests/kernels/attention/", "tests/v1/attention/", "!tests/kernels/attention/test_cutlass_mla.py"]
    blocking = false                                     # optional; mapped tests are shadow coverage by default
    sources = ["vllm/attention/"]                        # optional: a change there selects these tests on a PR

    [selection]                                          # optional, for `rocm-gate select`
    everything = ["setup.py", "vllm/envs.py"]            # a change here runs every group
    ignore = ["docs/", "*.md"]                           # a change here runs nothing

Rules are tried in order and the first that matches wins. A rule matches a test when one of
its plain patterns matches and none of its `!` patterns does, so an excluded path falls
through to later rules. Patterns: `dir/` matches everything under a folder; a pattern with
`*`, `?` or `[` is a glob (`*` also crosses `/`); anything else matches that file or folder.
A pattern holding `::` is matched against the whole node id (`tests/x.py::test_y[*]`), any
other against the test's file path.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.config import check_keys, read_config

GROUPS = (
    "attention",
    "engine",
    "api",
    "multimodal",
    "spec_decode",
    "distributed_moe",
    "accuracy",
    "performance",
)
# The label of tests no rule and no marker puts in a group: one word, the same in every report.
UNGROUPED = "ungrouped"


class GroupMapError(BadInput):
    pass


def pattern_regex(pattern: str) -> str:
    if "::" in pattern:  # a node id pattern
        if any(c in pattern for c in "*?["):
            return fnmatch.translate(pattern)
        return re.escape(pattern) + r"(?:::.*|\[.*)?\Z"
    if pattern.endswith("/"):
        return re.escape(pattern) + r".*\Z"
    if any(c in pattern for c in "*?["):
        return fnmatch.translate(pattern)
    return re.escape(pattern) + r"(?:/.*)?\Z"


class PatternSet:
    """Patterns compiled into two regular expressions: one for file paths, one for node ids.

    Matching runs once per test of runs with 100,000s of tests, so each set is one regex
    match instead of a loop over patterns.
    """

    def __init__(self, patterns: tuple[str, ...] | list[str]):
        self.patterns = tuple(patterns)
        on_path = [pattern_regex(p) for p in self.patterns if "::" not in p]
        on_nodeid = [pattern_regex(p) for p in self.patterns if "::" in p]
        self._path = re.compile("|".join(f"(?:{r})" for r in on_path)) if on_path else None
        self._nodeid = re.compile("|".join(f"(?:{r})" for r in on_nodeid)) if on_nodeid else None
        self.uses_nodeid = self._nodeid is not None

    def matches(self, path: str, nodeid: str) -> bool:
        return bool(
            (self._path is not None and self._path.match(path))
            or (self._nodeid is not None and self._nodeid.match(nodeid))
        )


@dataclass(frozen=True)
class Rule:
    group: str
    include: PatternSet
    exclude: PatternSet
    blocking: bool = False
    # source files whose change selects this rule's tests (PR selection)
    sources: PatternSet = PatternSet(())

    def matches(self, path: str, nodeid: str) -> bool:
        return self.include.matches(path, nodeid) and not self.exclude.matches(path, nodeid)


@dataclass(frozen=True)
class GroupMap:
    rules: tuple[Rule, ...] = ()
    source: str = ""
    path: str = ""
    # PR selection (`[selection]`): files whose change runs every group, and files that run none
    everything: PatternSet = PatternSet(())
    ignore: PatternSet = PatternSet(())
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def by_path(self) -> bool:
        """True when no pattern looks at node ids, so all tests of a file share one answer."""
        return self._by_path

    def __post_init__(self):
        object.__setattr__(
            self,
            "_by_path",
            not any(r.include.uses_nodeid or r.exclude.uses_nodeid for r in self.rules),
        )

    @property
    def groups(self) -> set[str]:
        return {r.group for r in self.rules}

    def rule_for(self, nodeid: str) -> Rule | None:
        """The first rule matching this node id (a path, or `path::Class::test[param]`)."""
        path = nodeid.split("::", 1)[0]
        if self.by_path and path in self._cache:
            return self._cache[path]
        found = next((rule for rule in self.rules if rule.matches(path, nodeid)), None)
        if self.by_path:
            self._cache[path] = found  # every test of a file lands in the same group
        return found

    def group_of(self, nodeid: str, default: str | None = None) -> str | None:
        rule = self.rule_for(nodeid)
        return rule.group if rule else default


def load_group_map(path: str | Path, allowed: set[str] | None = None) -> GroupMap:
    """Read a map file; every error names the file and the rule, and says what is allowed."""
    path = Path(path)
    data = read_config(
        path, "group map", GroupMapError, "groups", tables=("rule",), sections=("selection",)
    )
    rules = []
    for number, raw in enumerate(data.get("rule", []), start=1):
        where = f"group map {path}, rule {number}"
        group = raw.get("group")
        if not isinstance(group, str) or not group:
            raise GroupMapError(f'{where}: needs `group = "name"`')
        if allowed is not None and group not in allowed:
            raise GroupMapError(
                f"{where}: unknown group {group!r}; allowed: {', '.join(sorted(allowed))} "
                "(add more with the `rocm_groups` ini option, or `rocm-gate groups --extra-group`)"
            )
        paths = raw.get("paths")
        if (
            not isinstance(paths, list)
            or not paths
            or not all(isinstance(p, str) and p for p in paths)
        ):
            raise GroupMapError(
                f'{where}: needs `paths = ["tests/dir/", ...]` (a non-empty list of strings)'
            )
        check_keys(raw, where, ("group", "paths", "blocking", "note", "sources"), GroupMapError)
        sources = raw.get("sources", [])
        if not isinstance(sources, list) or not all(isinstance(p, str) and p for p in sources):
            raise GroupMapError(
                f'{where}: `sources` must be a list of source path patterns ("vllm/attention/")'
            )
        if not isinstance(raw.get("blocking", False), bool):
            raise GroupMapError(
                f"{where}: `blocking` must be true or false, got {raw['blocking']!r}"
            )
        rules.append(
            Rule(
                group=group,
                include=PatternSet([p for p in paths if not p.startswith("!")]),
                exclude=PatternSet([p[1:] for p in paths if p.startswith("!")]),
                blocking=bool(raw.get("blocking", False)),
                sources=PatternSet(sources),
            )
        )
    if not rules:
        raise GroupMapError(f"group map {path}: no [[rule]] entries")
    selection = data.get("selection", {})
    check_keys(
        selection, f"group map {path}, [selection]", ("everything", "ignore", "note"), GroupMapError
    )
    for key in ("everything", "ignore"):
        value = selection.get(key, [])
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            raise GroupMapError(
                f"group map {path}, [selection]: `{key}` must be a list of path patterns"
            )
    return GroupMap(
        rules=tuple(rules),
        source=str(data.get("source", "")),
        path=str(path),
        everything=PatternSet(selection.get("everything", [])),
        ignore=PatternSet(selection.get("ignore", [])),
    )


@cache
def cached_group_map(path: str, allowed: frozenset[str] | None) -> GroupMap:
    return load_group_map(path, set(allowed) if allowed is not None else None)
