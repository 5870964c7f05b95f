# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import pytest

pytestmark = pytest.mark.cpu_test


def test_add_requests():
    assert len([object() for _ in range(10)]) == 10


@pytest.mark.parametrize("enable_prefix_caching", [False, True])
def test_schedule(enable_prefix_caching):
    assert [1, 2][::-1] == [2, 1]


def test_schedule_fp8_kv_cache():
    assert True


def test_preemption():
    assert True
