"""A device fault (TRIAL_MODE: every attempt, the first only, or never), and two tests that run after it."""
import pytest

import gpu_runtime

pytestmark = pytest.mark.rocm_gate(group="engine", blocking=True)


@pytest.mark.hardware(gpus=1)
def test_gather_with_device_side_index(gpus):
    assert gpu_runtime.gather(out_of_range=gpu_runtime.fault_now("gather")) == 8.0


@pytest.mark.hardware(gpus=1)
def test_after_the_fault_in_the_same_process(gpus):
    assert gpu_runtime.ones_sum(1024) == 1024.0


@pytest.mark.hardware(gpus=1)
def test_layer_norm_numerics(gpus):
    assert gpu_runtime.layer_norm_mean_error() < 1e-4
