"""Accuracy and performance gates: the objects behind their fixtures, checked against baselines.

Each check records what it measured (it reaches the records and the gate report)
and fails the test with a message that shows the measurement, the expectation,
the tolerance and where the expectation came from.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import pytest

from pytest_rocm.gates import baselines as baselines_mod
from pytest_rocm.gates.baselines import DEFAULT_MAX_REGRESSION_PCT, DEFAULT_RTOL

MIN_PERF_SAMPLES = 3


@dataclass
class GateContext:
    """What a gate needs from the run: the test, the platform keys, the baselines, where to
    record."""

    nodeid: str
    platform_keys: list[str]  # most specific first: SKU, arch, vendor
    baselines: dict
    baseline_files: list[str]
    measurements: list[dict] = field(default_factory=list)

    def missing(self, kind: str, metric: str, measured: float, direction: str, **tolerance) -> None:
        platform = self.platform_keys[0]
        entry = baselines_mod.entry_text(
            self.nodeid,
            metric,
            platform,
            measured,
            direction,
            "<run URL, date, stack>",
            **tolerance,
        )
        where = (
            self.baseline_files[0]
            if self.baseline_files
            else "suites/baselines/<suite>.toml (ini rocm_baselines)"
        )
        self.measurements.append(
            {
                "kind": kind,
                "metric": metric,
                "value": measured,
                "median": measured,
                "passed": False,
                "baseline": None,
                "direction": direction,
                **tolerance,
            }
        )
        pytest.fail(
            f"{kind} gate {metric!r}: no baseline for this test on this platform (looked for "
            f"{', '.join(self.platform_keys)}); measured {measured:.6g}. "
            f"If that is right, add to {where}:\n\n{entry}\n(or write proposals for every gate with "
            "--rocm-propose-baselines FILE)",
            pytrace=False,
        )


class AccuracyGate:
    def __init__(self, context: GateContext):
        self.context = context

    def check(self, metric: str, value: float, direction: str = "higher") -> None:
        """Compare a measured metric with its baseline (one- or two-sided, rtol and atol from the
        baseline; `direction` only shapes the entry proposed when there is no baseline yet)."""
        context = self.context
        baseline = baselines_mod.lookup(
            context.baselines, context.nodeid, metric, context.platform_keys
        )
        if baseline is None:
            context.missing("accuracy", metric, float(value), direction, rtol=DEFAULT_RTOL)
        low, high = baseline.bounds()
        passed = low <= value <= high
        context.measurements.append(
            {
                "kind": "accuracy",
                "metric": metric,
                "value": float(value),
                "direction": baseline.direction,
                "expected": baseline.expected,
                "low": low,
                "high": high,
                "tolerance": baseline.tolerance_text(),
                "platform": baseline.platform,
                "source": baseline.source,
                "passed": passed,
            }
        )
        if not passed:
            pytest.fail(
                f"accuracy gate {metric!r}: measured {value:.6g}, expected {baseline.expected:.6g} "
                f"({_direction(baseline)}, {baseline.tolerance_text()}: accepts "
                f"{_interval(low, high)}); baseline for {baseline.platform} from {baseline.source or '?'} "
                f"({baseline.where})",
                pytrace=False,
            )


class PerfGate:
    def __init__(self, context: GateContext):
        self.context = context

    def check(self, metric: str, samples: list[float], direction: str = "higher") -> None:
        """A regression only when every sample is past the threshold (vLLM's "all runs regress"
        rule). `direction` (higher or lower is better) shapes the entry proposed when there is no
        baseline yet."""
        context = self.context
        samples = [float(s) for s in samples]
        if len(samples) < MIN_PERF_SAMPLES:
            pytest.fail(
                f"performance gate {metric!r}: needs at least {MIN_PERF_SAMPLES} samples, got {len(samples)}",
                pytrace=False,
            )
        median = statistics.median(samples)
        baseline = baselines_mod.lookup(
            context.baselines, context.nodeid, metric, context.platform_keys
        )
        if baseline is None:
            context.missing(
                "performance",
                metric,
                median,
                direction,
                max_regression_pct=DEFAULT_MAX_REGRESSION_PCT,
            )
        low, high = baseline.bounds()
        past = [s for s in samples if not low <= s <= high]
        passed = len(past) < len(samples)
        context.measurements.append(
            {
                "kind": "performance",
                "metric": metric,
                "samples": samples,
                "median": median,
                "direction": baseline.direction,
                "expected": baseline.expected,
                "low": low,
                "high": high,
                "tolerance": baseline.tolerance_text(),
                "platform": baseline.platform,
                "source": baseline.source,
                "passed": passed,
            }
        )
        if not passed:
            shown = ", ".join(f"{s:.6g}" for s in samples)
            pytest.fail(
                f"performance gate {metric!r}: all {len(samples)} samples regressed ({shown}; median "
                f"{median:.6g}), expected {baseline.expected:.6g} ({_direction(baseline)}, "
                f"{baseline.tolerance_text()}: accepts {_interval(low, high)}); baseline for "
                f"{baseline.platform} from {baseline.source or '?'} ({baseline.where})",
                pytrace=False,
            )


def _direction(baseline) -> str:
    return "two-sided" if baseline.direction == "both" else f"{baseline.direction} is better"


def _interval(low: float, high: float) -> str:
    if high == float("inf"):
        return f">= {low:.6g}"
    if low == float("-inf"):
        return f"<= {high:.6g}"
    return f"[{low:.6g}, {high:.6g}]"
