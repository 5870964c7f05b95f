# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A stand-in for vllm.utils.mem_utils: asks a compiled CUDA op, as vLLM's does."""

from vllm import _custom_ops as ops


def get_max_shared_memory_bytes(gpu: int = 0) -> int:
    return int(ops.get_max_shared_memory_per_block_device_attribute(gpu))
