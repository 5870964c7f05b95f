# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Shaped like vLLM's tests/conftest.py: its own option and marker handling, and a
test-only import."""

import pytest

# vLLM's conftest imports tblib: nothing collects where it is missing
import tblib.pickling_support

tblib.pickling_support.install()


def pytest_addoption(parser):
    parser.addoption(
        "--optional", action="store_true", default=False, help="run optional test"
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--optional"):
        return
    skip_optional = pytest.mark.skip(reason="need --optional option to run")
    for item in items:
        if "optional" in item.keywords:
            item.add_marker(skip_optional)
