"""Gates beside the fault: numerics, hardware requirements this runner does not meet, device pinning."""
import os

import pytest

import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="attention", blocking=True)


@pytest.mark.hardware(gpus=1)
def test_sdpa_matches_math_reference(gpus):
    assert gpu_runtime.sdpa_error() < 3e-3


@pytest.mark.hardware(gpus=2)
def test_needs_two_gpus(gpus):
    pass


@pytest.mark.hardware(gpus=1, min_memory_gb=1000)
def test_needs_1000_gb(gpus):
    pass


@pytest.mark.hardware(gpus=1)
def test_visible_devices_pinned(gpus):
    assert gpu_runtime.visible_devices() >= 1
    assert len(gpus) == 1
    variable = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in os.environ else "CUDA_VISIBLE_DEVICES"
    assert os.environ[variable] == str(gpus[0])
