"""Clients for the suites: the official `openai` client against the module's server."""

from __future__ import annotations

import pytest

from gate_support import client_for


@pytest.fixture(scope="module")
def client(vllm_server):
    return client_for(vllm_server)


@pytest.fixture(scope="module")
def model_name(vllm_server) -> str:
    return vllm_server.served_name
