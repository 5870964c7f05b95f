# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A stand-in for the vllm package: only what the fixture tree's tests import."""
