"""Test groups and the map that assigns upstream test paths to them (no editing of upstream trees).

Map file (TOML)::

    schema = "pytest-rocm/groups/1"
    source = "vllm-project/vllm@28be48f (2026-05-24)"   # where the paths were read from

    [[rule]]
    group = "attention"
    paths = ["tests/kernels/attention/", "tests/v1/attention/", "!tests/kernels/attention/test_cutlass_mla.py"]
    blocking = false                                     # optional; mapped tests are shadow coverage by default

Rules are tried in order and the first that matches wins. A rule matches a test when one of
its plain patterns matches and none of its `!` patterns does, so an excluded path falls
through to later rules. Patterns: `dir/` matches everything under a folder; a pattern with
`*`, `?` or `[` is a glob (`*` also crosses `/`); anything else matches that file (or a node id
prefix when it holds `::`).
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

GROUPS = ("attention", "engine", "api", "multimodal", "spec_decode", "distributed_moe", "accuracy", "performance")
OTHER = "other"


class GroupMapError(ValueError):
    pass


def pattern_matches(pattern: str, path: str, nodeid: str) -> bool:
    if pattern.endswith("/"):
        return path.startswith(pattern)
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(nodeid, pattern)
    if "::" in pattern:
        return nodeid == pattern or nodeid.startswith(pattern + "::") or nodeid.startswith(pattern + "[")
    return path == pattern or path.startswith(pattern + "/")


@dataclass(frozen=True)
class Rule:
    group: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    blocking: bool = False

    def matches(self, path: str, nodeid: str) -> bool:
        return any(pattern_matches(p, path, nodeid) for p in self.include) and not any(
            pattern_matches(p, path, nodeid) for p in self.exclude
        )


@dataclass(frozen=True)
class GroupMap:
    rules: tuple[Rule, ...] = ()
    source: str = ""
    path: str = ""

    @property
    def groups(self) -> set[str]:
        return {r.group for r in self.rules}

    def rule_for(self, nodeid: str) -> Rule | None:
        """The first rule matching this node id (a path, or `path::Class::test[param]`)."""
        path = nodeid.split("::", 1)[0]
        for rule in self.rules:
            if rule.matches(path, nodeid):
                return rule
        return None

    def group_of(self, nodeid: str, default: str | None = None) -> str | None:
        rule = self.rule_for(nodeid)
        return rule.group if rule else default


def load_group_map(path: str | Path, allowed: set[str] | None = None) -> GroupMap:
    """Read a map file; every error names the file and the rule, and says what is allowed."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise GroupMapError(f"group map {path}: cannot read it ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GroupMapError(f"group map {path}: not valid TOML: {exc}") from exc
    rules = []
    for number, raw in enumerate(data.get("rule", []), start=1):
        where = f"group map {path}, rule {number}"
        group = raw.get("group")
        if not isinstance(group, str) or not group:
            raise GroupMapError(f"{where}: needs `group = \"name\"`")
        if allowed is not None and group not in allowed:
            raise GroupMapError(f"{where}: unknown group {group!r}; allowed: {', '.join(sorted(allowed))} "
                                "(add more with the `rocm_groups` ini option)")
        paths = raw.get("paths")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise GroupMapError(f"{where}: needs `paths = [\"tests/dir/\", ...]` (a non-empty list of strings)")
        unknown = set(raw) - {"group", "paths", "blocking", "note"}
        if unknown:
            raise GroupMapError(f"{where}: unknown keys {', '.join(sorted(unknown))}; allowed: group, paths, blocking, note")
        rules.append(Rule(group=group,
                          include=tuple(p for p in paths if not p.startswith("!")),
                          exclude=tuple(p[1:] for p in paths if p.startswith("!")),
                          blocking=bool(raw.get("blocking", False))))
    if not rules:
        raise GroupMapError(f"group map {path}: no [[rule]] entries")
    return GroupMap(rules=tuple(rules), source=str(data.get("source", "")), path=str(path))


@lru_cache(maxsize=None)
def cached_group_map(path: str, allowed: frozenset[str] | None) -> GroupMap:
    return load_group_map(path, set(allowed) if allowed is not None else None)
