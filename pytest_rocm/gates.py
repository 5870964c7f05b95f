"""Accuracy, performance and numerical-parity (golden) gates: the objects behind their fixtures.

Each check records what it measured (it reaches the records and the gate report)
and fails the test with a message that shows the measurement, the expectation,
the tolerance and where the expectation came from.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_rocm import baselines as baselines_mod
from pytest_rocm.jsonio import schema, write_json_atomic

GOLDEN_SCHEMA = schema("golden")
MIN_PERF_SAMPLES = 3
DEFAULT_RTOL = 0.08  # vLLM's lm-eval configs
DEFAULT_MAX_REGRESSION_PCT = 10.0


@dataclass
class GateContext:
    """What a gate needs from the run: the test, the platform keys, the baselines, where to record."""

    nodeid: str
    platform_keys: list[str]  # most specific first: SKU, arch, vendor
    baselines: dict
    baseline_files: list[str]
    measurements: list[dict] = field(default_factory=list)

    def missing(self, kind: str, metric: str, measured: float, direction: str, **tolerance) -> None:
        platform = next(k for k in self.platform_keys if k)
        entry = baselines_mod.entry_text(self.nodeid, metric, platform, measured, direction,
                                         "<run URL, date, stack>", **tolerance)
        where = self.baseline_files[0] if self.baseline_files else "suites/baselines/<suite>.toml (ini rocm_baselines)"
        self.measurements.append({"kind": kind, "metric": metric, "value": measured, "median": measured,
                                  "passed": False, "baseline": None, "direction": direction, **tolerance})
        pytest.fail(f"{kind} gate {metric!r}: no baseline for this test on this platform (looked for "
                    f"{', '.join(k for k in self.platform_keys if k)}); measured {measured:.6g}. "
                    f"If that is right, add to {where}:\n\n{entry}\n(or write proposals for every gate with "
                    "--rocm-propose-baselines FILE)", pytrace=False)


class AccuracyGate:
    def __init__(self, context: GateContext):
        self.context = context

    def check(self, metric: str, value: float, direction: str = "higher") -> None:
        """Compare a measured metric with its baseline (one- or two-sided, rtol and atol from the baseline;
        `direction` only shapes the entry proposed when there is no baseline yet)."""
        context = self.context
        baseline = baselines_mod.lookup(context.baselines, context.nodeid, metric, context.platform_keys)
        if baseline is None:
            context.missing("accuracy", metric, float(value), direction, rtol=DEFAULT_RTOL)
        low, high = baseline.bounds()
        passed = low <= value <= high
        context.measurements.append({"kind": "accuracy", "metric": metric, "value": float(value),
                                     "direction": baseline.direction, "expected": baseline.expected, "low": low, "high": high,
                                     "tolerance": baseline.tolerance_text(), "platform": baseline.platform,
                                     "source": baseline.source, "passed": passed})
        if not passed:
            pytest.fail(f"accuracy gate {metric!r}: measured {value:.6g}, expected {baseline.expected:.6g} "
                        f"({_direction(baseline)}, {baseline.tolerance_text()}: accepts "
                        f"{_interval(low, high)}); baseline for {baseline.platform} from {baseline.source or '?'} "
                        f"({baseline.where})", pytrace=False)


class PerfGate:
    def __init__(self, context: GateContext):
        self.context = context

    def check(self, metric: str, samples: list[float], direction: str = "higher") -> None:
        """A regression only when every sample is past the threshold (vLLM's "all runs regress" rule).
        `direction` (higher or lower is better) shapes the entry proposed when there is no baseline yet."""
        context = self.context
        samples = [float(s) for s in samples]
        if len(samples) < MIN_PERF_SAMPLES:
            pytest.fail(f"performance gate {metric!r}: needs at least {MIN_PERF_SAMPLES} samples, got {len(samples)}",
                        pytrace=False)
        median = statistics.median(samples)
        baseline = baselines_mod.lookup(context.baselines, context.nodeid, metric, context.platform_keys)
        if baseline is None:
            context.missing("performance", metric, median, direction, max_regression_pct=DEFAULT_MAX_REGRESSION_PCT)
        low, high = baseline.bounds()
        past = [s for s in samples if not low <= s <= high]
        passed = len(past) < len(samples)
        context.measurements.append({"kind": "performance", "metric": metric, "samples": samples, "median": median,
                                     "direction": baseline.direction, "expected": baseline.expected, "low": low, "high": high,
                                     "tolerance": baseline.tolerance_text(), "platform": baseline.platform,
                                     "source": baseline.source, "passed": passed})
        if not passed:
            shown = ", ".join(f"{s:.6g}" for s in samples)
            pytest.fail(f"performance gate {metric!r}: all {len(samples)} samples regressed ({shown}; median "
                        f"{median:.6g}), expected {baseline.expected:.6g} ({_direction(baseline)}, "
                        f"{baseline.tolerance_text()}: accepts {_interval(low, high)}); baseline for "
                        f"{baseline.platform} from {baseline.source or '?'} ({baseline.where})", pytrace=False)


def _direction(baseline) -> str:
    return "two-sided" if baseline.direction == "both" else f"{baseline.direction} is better"


def _interval(low: float, high: float) -> str:
    if high == float("inf"):
        return f">= {low:.6g}"
    if low == float("-inf"):
        return f"<= {high:.6g}"
    return f"[{low:.6g}, {high:.6g}]"


def golden_path(folder: Path, nodeid: str, name: str) -> Path:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-80:]
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:10]
    return folder / f"{readable}-{digest}" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.json"


def first_divergence(reference: dict, measured: dict) -> str | None:
    """vLLM's check_logprobs_close: walk both token sequences to the first mismatch; there each side's
    token must be in the other side's top-k. Returns the failure message, or None when close."""
    for index, (ref_ids, got_ids) in enumerate(zip(reference["token_ids"], measured["token_ids"], strict=True)):
        for position, (ref_token, got_token) in enumerate(zip(ref_ids, got_ids)):
            if ref_token == got_token:
                continue
            ref_top = dict(map(tuple, reference["logprobs"][index][position]))
            got_top = dict(map(tuple, measured["logprobs"][index][position]))
            problems = []
            if got_token not in ref_top:
                problems.append(f"{got_token} is not in the reference's top-{len(ref_top)}")
            if ref_token not in got_top:
                problems.append(f"{ref_token} is not in this run's top-{len(got_top)}")
            if problems:
                return (f"sequence {index} diverges at position {position}: this run chose token {got_token} "
                        f"(logprob {got_top.get(got_token, float('nan')):.4f}), the reference chose {ref_token} "
                        f"(logprob {ref_top.get(ref_token, float('nan')):.4f}); " + "; ".join(problems))
            break  # close enough at the first mismatch; the sequences differ from here on
    return None


class GoldenGate:
    def __init__(self, context: GateContext, compare_dir: Path | None, record_dir: Path | None, platform: str):
        self.context = context
        self.compare_dir = compare_dir
        self.record_dir = record_dir
        self.platform = platform

    def check(self, name: str, token_ids: list[list[int]], logprobs: list[list[dict[int, float]]]) -> None:
        """Record (with --rocm-golden-record DIR) or compare token ids with their top-k logprobs."""
        if len(token_ids) != len(logprobs) or any(len(t) != len(lp) for t, lp in zip(token_ids, logprobs, strict=True)):
            pytest.fail(f"golden {name!r}: token_ids and logprobs must have the same shape", pytrace=False)
        measured = {"schema": GOLDEN_SCHEMA, "test": self.context.nodeid, "name": name, "platform": self.platform,
                    "token_ids": [list(map(int, seq)) for seq in token_ids],
                    "logprobs": [[sorted(((int(t), float(lp)) for t, lp in top.items()), key=lambda x: -x[1])
                                  for top in seq] for seq in logprobs]}
        if self.record_dir is not None:
            path = write_json_atomic(golden_path(self.record_dir, self.context.nodeid, name), measured)
            self.context.measurements.append({"kind": "golden", "metric": name, "recorded": str(path), "passed": True})
            return
        if self.compare_dir is None:
            pytest.fail(f"golden {name!r}: no golden folder given: compare with --rocm-golden DIR (ini rocm_golden_dir), "
                        "or record on the reference platform with --rocm-golden-record DIR", pytrace=False)
        path = golden_path(self.compare_dir, self.context.nodeid, name)
        if not path.is_file():
            pytest.fail(f"golden {name!r}: {path} does not exist; record it on the reference platform with "
                        f"--rocm-golden-record {self.compare_dir}", pytrace=False)
        reference = json.loads(path.read_text())
        if len(reference["token_ids"]) != len(measured["token_ids"]):
            pytest.fail(f"golden {name!r}: {len(measured['token_ids'])} sequences, the reference has "
                        f"{len(reference['token_ids'])} ({path})", pytrace=False)
        problem = first_divergence(reference, measured)
        self.context.measurements.append({"kind": "golden", "metric": name, "reference": str(path),
                                          "reference_platform": reference.get("platform"), "passed": problem is None,
                                          "divergence": problem})
        if problem is not None:
            pytest.fail(f"golden {name!r}: {problem} (reference recorded on {reference.get('platform')}, {path})",
                        pytrace=False)
