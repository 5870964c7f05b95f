# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import pytest

from vllm.platforms import current_platform
from vllm.utils.mem_utils import get_max_shared_memory_bytes

FLOAT32_BYTES = 4
# This will change depending on the compute capability.
# - 512 as a buffer
MAX_SEQ_LEN = get_max_shared_memory_bytes() // FLOAT32_BYTES - 512


@pytest.mark.parametrize("head_size", [64, 128])
def test_paged_attention(head_size):
    assert head_size % 64 == 0


@pytest.mark.skipif(not current_platform.is_rocm(), reason="ROCm-only AITER path")
def test_aiter_paged_attention():
    assert current_platform.is_rocm()


@pytest.mark.optional
def test_long_context_sweep():
    assert True
