"""Tests that can never apply to ROCm (NVFP4, Blackwell-only kernels, CUDA-only libraries).

They leave the parity denominator and are listed on their own, so parity is not
diluted by them, and they are never confused with a known gap (which should work
on ROCm and does not yet). Config (TOML)::

    schema = "pytest-rocm/applicability/1"

    [[not_applicable]]
    reason = "NVFP4 needs Blackwell FP4 tensor cores; MI355X has its own FP4 (MXFP4) path"
    paths = ["tests/kernels/quantization/test_nvfp4_*", "tests/*::*nvfp4*"]   # files, and node ids

    [[not_applicable]]
    reason = "registered only on NVIDIA Blackwell runners"
    suites = ["*-b200", "*-gb200", "*-gb300"]   # SGLang CI suites: a file registered only there

Path patterns are those of the group maps (`pytest_rocm.catalog.groups`); suite patterns are globs
matched against SGLang suite names (all of a file's CUDA suites must match).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.catalog.groups import PatternSet
from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.config import check_keys, read_config


class ApplicabilityError(BadInput):
    pass


@dataclass(frozen=True)
class NotApplicable:
    reason: str
    patterns: PatternSet = PatternSet(())
    suites: tuple[str, ...] = ()


@dataclass(frozen=True)
class Applicability:
    rules: tuple[NotApplicable, ...] = ()

    @property
    def by_path(self) -> bool:
        """True when no pattern looks at node ids, so all tests of a file share one answer."""
        return not any(rule.patterns.uses_nodeid for rule in self.rules)

    def reason_for(self, nodeid: str) -> str | None:
        path = nodeid.split("::", 1)[0]
        for rule in self.rules:
            if rule.patterns.matches(path, nodeid):
                return rule.reason
        return None

    def reason_for_suites(self, suites: list[str]) -> str | None:
        """Not applicable when every suite a file is registered in matches one rule's suite
        patterns."""
        for rule in self.rules:
            if (
                suites
                and rule.suites
                and all(any(fnmatch.fnmatchcase(s, p) for p in rule.suites) for s in suites)
            ):
                return f"{rule.reason} ({', '.join(sorted(set(suites)))})"
        return None


def load_applicability(path: str | Path) -> Applicability:
    path = Path(path)
    data = read_config(
        path,
        "applicability config",
        ApplicabilityError,
        "applicability",
        tables=("not_applicable",),
    )
    rules = []
    for number, raw in enumerate(data.get("not_applicable", []), start=1):
        reason, paths, suites = raw.get("reason"), raw.get("paths", []), raw.get("suites", [])
        where = f"applicability config {path}, entry {number}"
        if not isinstance(reason, str) or not reason.strip():
            raise ApplicabilityError(f'{where}: needs `reason = "..."`')
        for key, value in (("paths", paths), ("suites", suites)):
            if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
                raise ApplicabilityError(f"{where}: `{key}` must be a list of non-empty strings")
        if not paths and not suites:
            raise ApplicabilityError(f"{where}: needs `paths = [...]` and/or `suites = [...]`")
        check_keys(raw, where, ("reason", "paths", "suites", "note"), ApplicabilityError)
        rules.append(
            NotApplicable(reason=reason.strip(), patterns=PatternSet(paths), suites=tuple(suites))
        )
    return Applicability(tuple(rules))
