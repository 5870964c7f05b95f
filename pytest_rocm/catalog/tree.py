"""How a test tree sorts into groups: a group map checked against a real tree.

The input is a tree's tests, as node ids (`pytest --collect-only -q`, or the
plugin's own collection) or as file paths (a file list, a walked checkout,
SGLang's registrations), each with the group a marker gave it, if any. The
answer says, per group, how many items and files land there (and how many are
gates and merge-blocking); which files no rule sorts (`ungrouped`); which
patterns of the map match nothing in the tree (a stale path, usually a file
upstream moved); which rules win no test (dead, or shadowed by an earlier
rule); and which files two rules of different groups both match (the first
rule wins; reported when the later rule is at least as narrow, so the map's
deliberate carve-outs, a folder taken before a broader catch-all, are not
noise). `rocm-gate groups` and the plugin under `pytest --collect-only` print
the same table from it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from pytest_rocm.catalog.applicability import Applicability
from pytest_rocm.catalog.groups import GROUPS, UNGROUPED, GroupMap, pattern_regex
from pytest_rocm.schemas.markdown import table

# pytest's default `python_files`: in a plain file list only these are test files.
DEFAULT_TEST_FILES = ("test_*.py", "*_test.py")
LIST_LIMIT = 20


@dataclass(frozen=True)
class TreeEntry:
    """One test (a node id) or one test file (a path), with what its markers said, if anything."""

    nodeid: str
    group: str | None = None  # from a `rocm_gate` marker; otherwise the map decides
    gate: bool = False
    blocking: bool = False

    @property
    def path(self) -> str:
        return self.nodeid.partition("::")[0]


def sort_tree(
    entries: list[TreeEntry],
    group_map: GroupMap | None,
    applicability: Applicability | None = None,
    items_known: bool = True,
    uncollected: frozenset[str] = frozenset(),
) -> dict:
    """The sorting of a tree into groups, as a JSON-able dict (see the module docstring).

    `items_known` is False for a file list: then each entry is a file and items are not counted.
    `uncollected` are files that exist but failed to collect (`--collect-only` with errors): they
    have no tests to count, and a pattern that names one of them is not stale (`rocm-gate groups` on
    the tree sees the file).
    """
    rules = group_map.rules if group_map else ()
    groups: dict[str, dict] = defaultdict(
        lambda: {"items": 0, "files": set(), "gates": 0, "blocking": 0}
    )
    won = [0] * len(rules)
    ungrouped_files: dict[str, int] = {}
    not_applicable: dict[str, set[str]] = defaultdict(set)
    overlaps: dict[str, dict] = {}
    # every file rules of two groups match (most are deliberate carve-outs)
    in_two_groups: set[str] = set()
    by_file: dict[str, tuple] = {}  # the map's answer for a file, when the map looks at paths only
    per_file = group_map is None or group_map.by_path
    for entry in entries:
        path = entry.path
        reason = applicability.reason_for(entry.nodeid) if applicability else None
        if reason:  # out of every group and of `ungrouped`: listed once, as not applicable
            not_applicable[reason].add(path)
            continue
        answer = by_file.get(path) if per_file else None
        if answer is None:
            matching = [i for i, rule in enumerate(rules) if rule.matches(path, entry.nodeid)]
            answer = (
                matching[0] if matching else None,
                _shadowed(rules, matching, path, entry.nodeid),
                len({rules[i].group for i in matching}) > 1,
            )
            if per_file:
                by_file[path] = answer
        first, also, two_groups = answer
        if two_groups:
            in_two_groups.add(path)
        if first is not None and entry.group is None:
            won[first] += 1
        if also and path not in overlaps:
            overlaps[path] = {"file": path, "group": rules[first].group, "also": also}
        group = entry.group or (rules[first].group if first is not None else UNGROUPED)
        blocking = entry.blocking if entry.group else (first is not None and rules[first].blocking)
        counts = groups[group]
        counts["items"] += 1
        counts["files"].add(path)
        counts["gates"] += entry.gate
        counts["blocking"] += blocking
        if group == UNGROUPED:
            ungrouped_files[path] = ungrouped_files.get(path, 0) + 1
    paths = {e.path for e in entries}
    nodeids = [e.nodeid for e in entries] if items_known else []
    order = {name: i for i, name in enumerate(GROUPS)}
    report = {
        "map": {"path": group_map.path, "source": group_map.source} if group_map else None,
        "groups": {
            name: {
                "items": c["items"] if items_known else None,
                "files": len(c["files"]),
                "gates": c["gates"],
                "blocking": c["blocking"],
            }
            for name, c in sorted(
                groups.items(),
                key=lambda kv: (kv[0] == UNGROUPED, order.get(kv[0], len(order)), kv[0]),
            )
        },
        "total": {"items": len(entries) if items_known else None, "files": len(paths)},
        "ungrouped_files": sorted(ungrouped_files),
        "uncollected_files": sorted(uncollected),
        "not_applicable": [
            {"reason": reason, "files": sorted(files)}
            for reason, files in sorted(not_applicable.items(), key=lambda kv: -len(kv[1]))
        ],
        "unused_patterns": _unused_patterns(rules, paths | set(uncollected), nodeids),
        "rules_winning_nothing": [
            {"rule": i + 1, "group": rule.group} for i, rule in enumerate(rules) if not won[i]
        ],
        "overlaps": sorted(overlaps.values(), key=lambda o: o["file"]),
        "files_in_two_groups_rules": len(in_two_groups),
    }
    return report


def _specificity(pattern: str) -> tuple[int, int]:
    """How narrow a pattern is: the length of its literal part before the first wildcard, then of
    all its literal parts (`tests/x/*moe*` is narrower than `tests/x/`)."""
    return len(re.split(r"[*?\[]", pattern, maxsplit=1)[0]), len(
        re.sub(r"[*?]|\[[^]]*\]", "", pattern)
    )


def _shadowed(rules, matching: list[int], path: str, nodeid: str) -> list[str]:
    """Groups of later rules that match this test at least as narrowly as the rule that wins it.

    A broad later rule (`tests/models/`) under a narrow earlier one (`tests/models/multimodal/`) is
    the map's normal carve-out and is not reported; a narrow rule losing to a broader or equal
    earlier one is (an MTP accuracy eval taken by `*mtp*` before `amd/accuracy/` was ever tried)."""
    if len(matching) < 2:
        return []

    def narrowest(rule) -> tuple[int, int]:
        return max(
            (
                _specificity(p)
                for p in rule.include.patterns
                if re.match(pattern_regex(p), nodeid if "::" in p else path)
            ),
            default=(0, 0),
        )

    winner = rules[matching[0]]
    bar = narrowest(winner)
    return sorted(
        {
            rules[i].group
            for i in matching[1:]
            if rules[i].group != winner.group and narrowest(rules[i]) >= bar
        }
    )


def _unused_patterns(rules, paths: set[str], nodeids: list[str]) -> list[dict]:
    """Patterns (plain and `!`) that match nothing in the tree. Node id patterns are checked only
    when the tree's node ids are known; against a file list they are reported as unchecked."""
    found = []
    for number, rule in enumerate(rules, start=1):
        for negated, patterns in ((False, rule.include.patterns), (True, rule.exclude.patterns)):
            for pattern in patterns:
                on_nodeid = "::" in pattern
                if on_nodeid and not nodeids:
                    found.append(
                        {
                            "rule": number,
                            "group": rule.group,
                            "pattern": ("!" if negated else "") + pattern,
                            "unchecked": True,
                        }
                    )
                    continue
                regex = re.compile(pattern_regex(pattern))
                if not any(
                    regex.match(candidate) for candidate in (nodeids if on_nodeid else paths)
                ):
                    found.append(
                        {
                            "rule": number,
                            "group": rule.group,
                            "pattern": ("!" if negated else "") + pattern,
                        }
                    )
    return found


# what lists every entry a cut list leaves out: `rocm-gate groups` has --json; pytest's
# --collect-only does not
ALL_OF_GROUPS = "--json lists all"
ALL_OF_COLLECT_ONLY = "`rocm-gate groups --map MAP . --json` lists all"


def _listed(title: str, values: list[str], limit: int, more: str = ALL_OF_GROUPS) -> list[str]:
    if not values:
        return []
    lines = [f"{title} ({len(values)}):"] + [f"  {v}" for v in values[:limit]]
    if len(values) > limit:
        lines.append(f"  and {len(values) - limit} more ({more})")
    return lines


def tree_lines(report: dict, limit: int = LIST_LIMIT, map_details: bool = True) -> list[str]:
    """The per-group table and the map's problems, as printed by `rocm-gate groups` and
    `--collect-only`.

    Without `map_details` (`--collect-only`, often of a part of the tree, where most patterns match
    nothing for that reason alone) the map's unused patterns and rules are counted, not listed."""
    items_known = report["total"]["items"] is not None
    more = ALL_OF_GROUPS if map_details else ALL_OF_COLLECT_ONLY
    headers = ["group", *(["items"] if items_known else []), "files", "gates", "blocking"]
    rows = [
        [
            name,
            *([str(c["items"])] if items_known else []),
            str(c["files"]),
            str(c["gates"]),
            str(c["blocking"]),
        ]
        for name, c in report["groups"].items()
    ]
    total = report["total"]
    rows.append(
        [
            "all",
            *([str(total["items"])] if items_known else []),
            str(total["files"]),
            str(sum(c["gates"] for c in report["groups"].values())),
            str(sum(c["blocking"] for c in report["groups"].values())),
        ]
    )
    lines = table(headers, rows)
    where = report["map"]
    lines.insert(
        0,
        f"group map: {where['path']}"
        + (f" (paths read from {where['source']})" if where["source"] else "")
        if where
        else "group map: none (only rocm_gate markers give groups)",
    )
    for entry in report["not_applicable"]:
        lines += _listed(
            f"not applicable to ROCm, in no group: {entry['reason']}", entry["files"], limit, more
        )
    lines += _listed(
        f"files in no group (counted as `{UNGROUPED}`)", report["ungrouped_files"], limit, more
    )
    lines += _listed(
        "files that failed to collect, so none of their tests is counted (pytest's errors say why)",
        report.get("uncollected_files", []),
        limit,
        more,
    )
    checked = [p for p in report["unused_patterns"] if not p.get("unchecked")]
    if not map_details:
        if checked or report["rules_winning_nothing"]:
            lines.append(
                f"map: {len(checked)} pattern(s) match none of these tests and "
                f"{len(report['rules_winning_nothing'])} rule(s) sort none of them; on the whole tree "
                "`rocm-gate groups --map MAP .` lists them"
            )
        return lines + _listed(
            "files a later rule of another group matches as narrowly as the rule that wins them",
            [f"{o['file']}: {o['group']}, also {', '.join(o['also'])}" for o in report["overlaps"]],
            limit,
            more,
        )
    lines += _listed(
        "patterns that match nothing in this tree (stale paths, or only part of the tree was given)",
        [f"rule {p['rule']} ({p['group']}): {p['pattern']}" for p in checked],
        limit,
    )
    # a map made for one commit, read on a tree at another
    if checked and where and where["source"]:
        lines.append(
            f"the map was made for {where['source']}: a tree at another commit moves or removes the files "
            "those patterns name; check out that commit, or update the map (and its `source`) to this tree"
        )
    unchecked = [p for p in report["unused_patterns"] if p.get("unchecked")]
    if unchecked:
        lines.append(f"node id patterns not checked against a file list: {len(unchecked)}")
    lines += _listed(
        "rules that sort no test (every test they match is taken by an earlier rule, or none)",
        [f"rule {r['rule']} ({r['group']})" for r in report["rules_winning_nothing"]],
        limit,
    )
    if report["files_in_two_groups_rules"]:
        narrow = len(report["overlaps"])
        lines.append(
            f"files rules of two groups match: {report['files_in_two_groups_rules']}; the first rule wins, and "
            f"{narrow} of them are matched as narrowly by a later rule{' (listed below)' if narrow else ''}; "
            "the rest are carve-outs taken before a broader rule"
        )
    lines += _listed(
        "files a later rule of another group matches as narrowly as the rule that wins them",
        [f"{o['file']}: {o['group']}, also {', '.join(o['also'])}" for o in report["overlaps"]],
        limit,
    )
    return lines
