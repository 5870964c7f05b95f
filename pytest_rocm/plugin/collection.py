"""Collection: each test's markers and group read and checked once, and applied on this platform.

A wrong marker is a collection error naming the test (`check_collected`). A test
whose hardware requirement is not met is skipped as not applicable; a known gap
applies on AMD platforms only; gate tests get their group's timeout.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_rocm.hw.model import Platform
from pytest_rocm.plugin.context import RunContext
from pytest_rocm.plugin.markers import (
    MARKER_HELP,
    SERVER_MARKERS,
    VARIANT_MARKERS,
    Gate,
    Hardware,
    KnownGap,
    MarkerError,
    parse_gate,
    parse_hardware,
    parse_known_gap,
    parse_server,
)

OUR_MARKERS = ("rocm_gate", "hardware", "rocm_known_gap")
_READ_MARKERS = frozenset(OUR_MARKERS + SERVER_MARKERS)


@dataclass(frozen=True)
class TestSpec:
    """What the markers and the group map say about one test, and how they apply on this
    platform."""

    __test__ = False  # not a pytest test class

    group: str | None = None
    blocking: bool = False
    gate: bool = False
    hardware: Hardware | None = None
    known_gap: KnownGap | None = None  # set only where the gap applies (AMD platforms)
    not_applicable: str | None = (
        None  # the both-sided reason, where the hardware requirement is not met
    )
    quarantine: dict[str, Any] | None = (
        None  # {reason, since}: listed in the quarantine file for this SKU; never blocks
    )

    def record_fields(self) -> dict[str, Any]:
        """The fields every record of this test carries."""
        fields: dict[str, object] = {
            "group": self.group,
            "blocking": self.blocking,
            "gate": self.gate,
        }
        if self.hardware:
            fields["requires"] = self.hardware.to_dict()
        if self.known_gap:
            fields["known_gap"] = {
                "reason": self.known_gap.reason,
                "issue": self.known_gap.issue,
                "mode": self.known_gap.mode,
            }
        if self.not_applicable:
            fields["not_applicable"] = self.not_applicable
        if self.quarantine:
            fields["quarantine"] = self.quarantine
        return fields

    def encoded_fields(self) -> str:
        """`record_fields` as JSON to append to a record (',"k":v,...')."""
        return "," + json.dumps(self.record_fields(), ensure_ascii=False)[1:-1]


def _folded(name: str) -> str:
    """A marker's name without case and separators: `Rocm_Gate` and `RocmGate` are `rocmgate`."""
    return "".join(c for c in name.lower() if c.isalnum())


def _registered_markers(config: pytest.Config) -> set[str]:
    """The names of the markers registered in the ini file and by plugins (ours too)."""
    return {line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}


def _check_not_stacked(item: pytest.Item) -> None:
    """The same marker twice on one function or class with other arguments: which one was meant is
    unknown (pytest would silently keep one, and a known gap's issue link would vanish)."""
    for node in item.listchain():
        seen: dict[str, object] = {}
        for mark in getattr(node, "own_markers", ()):
            if mark.name not in _READ_MARKERS:
                continue
            key = (mark.args, sorted(mark.kwargs.items(), key=lambda kv: kv[0]))
            if mark.name in seen and seen[mark.name] != key:
                raise MarkerError(
                    f"@pytest.mark.{mark.name} is given twice on {node.name} with different "
                    "arguments; keep one"
                )
            seen[mark.name] = key


def _check_server_markers_on_the_module(item: pytest.Item) -> None:
    """`vllm_server` / `sglang_server` set up the module's server (a module-scoped fixture reads the
    module's marker): on a test or a class it would be ignored without a word."""
    for node in item.listchain():
        if isinstance(node, pytest.Function | pytest.Class):
            for mark in node.own_markers:
                if mark.name in SERVER_MARKERS:
                    kind = mark.name.removesuffix("_server")
                    raise MarkerError(
                        f"@pytest.mark.{mark.name} on {node.name} is not read: it sets up the "
                        f"module's server, so give it in the module's `pytestmark`; for a server of "
                        f"this test's own, use @pytest.mark.{kind}_server_variant(...) with "
                        f"{kind}_server_factory"
                    )


def dropped_gates(
    specs: dict[str, TestSpec], kept: set[str], deselected: set[str], narrowed: set[str]
) -> dict[str, str]:
    """The blocking gates this process collected but will not run -> how they went: `deselected`
    (pytest's own deselection, whose hook -k, -m, --deselect, --last-failed and --stepwise call, as
    a plugin's or a conftest's hook may) or `dropped` (a hook took it out of the session's items
    without a word). Not counted: a gate that would not run here anyway (not applicable, a known
    gap), and the other tests of a file the command line named tests of (`narrowed`: the files of
    its `path::name` arguments, relative to the rootdir as node ids are), which were never the
    run's. What was never collected cannot be known here: a path the command line's `--ignore`
    skips, a conftest's `collect_ignore` (code a reviewer reads), a file no pattern matches."""
    dropped = {}
    for nodeid, spec in specs.items():
        if not spec.blocking or spec.not_applicable or spec.known_gap or nodeid in kept:
            continue
        if nodeid in deselected:
            dropped[nodeid] = "deselected"
        elif nodeid.split("::", 1)[0] not in narrowed:
            dropped[nodeid] = "dropped"
    return dict(sorted(dropped.items()))


class Annotator:
    """Reads the markers of collected tests, keeps their specs for the records of this process."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.specs: dict[str, TestSpec] = {}
        self._quarantined: dict[str, dict[str, Any]] | None = None
        self._parent_markers: dict[str, Any] = {}  # a module or class -> `_inherited`
        self._checked_names: set[str] = set()  # other markers' names found not to be a misspelling

    def _check_marker_name(self, name: str, config: pytest.Config) -> None:
        """A marker named like one of ours that pytest does not know is a misspelling: read as
        nothing, `@pytest.mark.rocm_gates(blocking=True)` made a failing gate an ungrouped test
        and the run `success`, with only pytest's warning. A project's own marker of such a name,
        registered in its ini `markers`, is its own."""
        # `Rocm_Gate`, `RocmGate`, `rocm-gate`: ours but for case and separators
        same = {_folded(ours): ours for ours in MARKER_HELP}.get(_folded(name))
        suggestion = (
            [same]
            if same is not None and same != name
            else difflib.get_close_matches(name, MARKER_HELP, n=1, cutoff=0.8)
        )
        if (_folded(name).startswith("rocm") or suggestion) and name not in _registered_markers(
            config
        ):
            raise MarkerError(
                f"@pytest.mark.{name} is not a pytest-rocm marker"
                + (f" (did you mean @pytest.mark.{suggestion[0]}?)" if suggestion else "")
                + f"; its markers are {', '.join(MARKER_HELP)}. A marker of the project's own of "
                "this name goes in the ini file's `markers`"
            )
        self._checked_names.add(name)

    @property
    def quarantined(self) -> dict[str, dict[str, Any]]:
        """test id -> quarantine entry, for this platform's SKUs (read once)."""
        if self._quarantined is None:
            from pytest_rocm.plugin.quarantine import applying

            document = self.context.settings.quarantine
            self._quarantined = applying(document, self.platform.skus()) if document else {}
        return self._quarantined

    @property
    def platform(self) -> Platform:
        return self.context.platform

    def tree_entries(self, nodeids: Iterable[str]) -> list[Any]:
        """The collected tests as `rocm-gate groups` sees a tree: a marker's group where one gave
        it."""
        from pytest_rocm.catalog.tree import TreeEntry

        entries = []
        for nodeid in nodeids:
            spec = self.specs.get(nodeid)
            gated = spec if spec is not None and spec.gate else None
            entries.append(
                TreeEntry(
                    nodeid,
                    group=gated.group if gated else None,
                    gate=gated is not None,
                    blocking=gated is not None and gated.blocking,
                )
            )
        return entries

    def _markers(self, item: pytest.Item) -> list[Any]:
        """The markers `item.iter_markers()` gives, in its order (the item's own, then each
        parent's), with the parents' part read once per module or class rather than once per
        test."""
        inherited = self._inherited(item.parent)
        return item.own_markers + inherited if item.own_markers else inherited

    def _inherited(self, node: Any) -> list[Any]:
        if node is None:
            return []
        found = self._parent_markers.get(node)
        if found is None:
            found = self._parent_markers[node] = [
                *node.own_markers,
                *self._inherited(node.parent),
            ]
        return found

    def forget(self, items: list[Any]) -> None:
        """Items a collection error took back (`hooks.pytest_make_collect_report`): never the run's
        tests."""
        for item in items:
            if isinstance(item, pytest.Item):
                self.specs.pop(item.nodeid, None)

    def check_collected(self, items: list[Any]) -> str | None:
        """Annotate collected items; return the collection error text (every bad test) or None."""
        errors = []
        for item in items:
            if not isinstance(item, pytest.Item):
                continue
            try:
                self.annotate(item)
            except MarkerError as exc:
                errors.append(f"{item.nodeid}: {exc}")
        return "\n".join(errors) if errors else None

    def annotate(self, item: pytest.Item) -> None:
        """Read and check the markers of one test, apply skips and known gaps; raise MarkerError."""
        closest: dict[str, pytest.Mark] = {}
        variants = False
        for mark in self._markers(item):  # closest first, as item.iter_markers() gives them
            if mark.name in _READ_MARKERS:
                closest.setdefault(mark.name, mark)
            elif mark.name in VARIANT_MARKERS:
                parse_server(mark, mark.name)
                variants = True
            elif mark.name not in self._checked_names:
                self._check_marker_name(mark.name, item.config)
        if variants:
            self.context.activation.marked = True
        if closest:
            self.context.activation.marked = True
            _check_not_stacked(item)
        gate_mark, hardware_mark, gap_mark = (closest.get(name) for name in OUR_MARKERS)
        server_marks = [name for name in SERVER_MARKERS if name in closest]
        for name in server_marks:
            parse_server(closest[name], name)
        if server_marks:
            _check_server_markers_on_the_module(item)  # (their arguments first)
        settings = self.context.settings
        gate: Gate | None = parse_gate(gate_mark, settings.allowed_groups) if gate_mark else None
        hardware = parse_hardware(hardware_mark) if hardware_mark else None
        gap = parse_known_gap(gap_mark) if gap_mark else None
        group_map = self.context.group_map
        rule = group_map.rule_for(item.nodeid) if group_map and gate is None else None
        if gate is None and rule is None and hardware is None and gap is None:
            return
        not_applicable = hardware.unmet_reason(self.platform) if hardware else None
        applied_gap = gap if gap and not not_applicable and self.platform.is_amd else None
        spec = TestSpec(
            group=gate.group if gate else (rule.group if rule else None),
            blocking=gate.blocking if gate else (rule.blocking if rule else False),
            gate=gate is not None,
            hardware=hardware,
            known_gap=applied_gap,
            not_applicable=not_applicable,
        )
        entry = self.quarantined.get(item.nodeid)
        if entry is not None:
            spec = dataclasses.replace(
                spec,
                blocking=False,
                # the fingerprints it was entered with: it fails another way, it blocks as it
                # would have (`blocks`; results/report.py: fingerprint.quarantine_excuses)
                quarantine={
                    "reason": entry["reason"],
                    "since": entry.get("since"),
                    "sku": entry.get("sku"),
                    "fingerprints": list(entry.get("fingerprints") or []),
                    "blocks": spec.blocking,
                },
            )
        self.specs[item.nodeid] = spec
        timeout = settings.timeouts.get(spec.group or "", settings.timeouts.get("default"))
        if (
            timeout
            and not item.get_closest_marker("timeout")
            and item.config.pluginmanager.hasplugin("timeout")
        ):
            # pytest-timeout applies it; a hang becomes infra
            item.add_marker(pytest.mark.timeout(timeout))
        if not_applicable:
            item.add_marker(pytest.mark.skip(reason=f"not applicable: {not_applicable}"))
        elif applied_gap and applied_gap.mode == "skip":
            item.add_marker(pytest.mark.skip(reason=applied_gap.label()))
        elif applied_gap:
            item.add_marker(pytest.mark.xfail(reason=applied_gap.label(), strict=False))
        self._add_junit_properties(item, spec)

    def _add_junit_properties(self, item: pytest.Item, spec: TestSpec) -> None:
        """By default only what a reader cannot know otherwise: a marker's group, `rocm_blocking`
        where a test blocks merges, the known gap's issue. A group the map gave is not repeated on
        every test case (parity reads the same map with `--groups`, and the gate report has every
        group); the platform is written once per file (`junit_platform_properties`).
        `--rocm-junit-properties=full` writes everything on every test case. A property costs about
        75 bytes per test case (benchmarks/junit_size.py)."""
        # user_properties ride on every report (through xdist too) into pytest's --junitxml.
        props = item.user_properties
        full = self.context.settings.junit_properties == "full"
        if spec.group and (full or spec.gate or spec.blocking):
            props.append(("rocm_group", spec.group))
            if spec.blocking or full:
                props.append(("rocm_blocking", str(spec.blocking).lower()))
        if spec.known_gap:
            props.append(("rocm_known_gap", spec.known_gap.issue))
        if spec.quarantine:
            props.append(("rocm_quarantined", spec.quarantine["reason"]))
        if full:
            platform = self.platform
            props.append(("rocm_sku", ",".join(platform.skus()) or "none"))
            props.append(("rocm_arch", ",".join(platform.archs()) or "none"))
            if spec.hardware:
                props.append(("rocm_requires", spec.hardware.describe()))


def junit_platform_properties(config: pytest.Config, platform: Platform) -> None:
    """The runner's SKUs and architectures, once per JUnit file (`<testsuite><properties>`), where
    pytest writes one (`--junitxml`). This is the process that writes the file, under xdist the
    controller."""
    from pytest_rocm.plugin.internals import junit_writer

    xml = junit_writer(config)
    if xml is not None:
        xml.add_global_property("rocm_sku", ",".join(platform.skus()) or "none")
        xml.add_global_property("rocm_arch", ",".join(platform.archs()) or "none")
        xml.add_global_property("rocm_platform", platform.profile or platform.describe())
