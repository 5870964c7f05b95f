# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import pytest


@pytest.mark.core_model
def test_schedule_prefill_then_decode():
    assert [1, 2][::-1] == [2, 1]


def test_preemption():
    assert True
