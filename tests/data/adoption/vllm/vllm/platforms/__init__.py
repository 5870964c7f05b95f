# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A stand-in for vllm.platforms.current_platform: like vLLM's, it is what the machine really is.

pytest-rocm's simulated platforms (--rocm-platform, PYTEST_ROCM_PLATFORM) change what the plugin sees,
never this object, so tests that skip on `current_platform.is_rocm()` behave alike on every simulated side.
"""

import os


class _Platform:
    def is_rocm(self) -> bool:
        return os.path.exists("/dev/kfd")

    def is_cuda(self) -> bool:
        return os.path.exists("/dev/nvidiactl")


current_platform = _Platform()
