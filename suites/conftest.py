"""Clients for the suites (the official `openai` client against the module's server), and the
`framework` parameter that runs a module's OpenAI-API tests against vLLM and SGLang."""

from __future__ import annotations

import pytest
from gate_support import client_for

FRAMEWORKS = ("vllm", "sglang")


@pytest.fixture(scope="module")
def module_server(vllm_server):
    """The server `client` and `model_name` talk to: the module's vLLM server; a module whose tests
    run on every framework overrides it with `server`."""
    return vllm_server


@pytest.fixture(scope="module")
def client(module_server):
    return client_for(module_server)


@pytest.fixture(scope="module")
def model_name(module_server) -> str:
    return module_server.served_name


@pytest.fixture(scope="module", params=FRAMEWORKS)
def framework(request) -> str:
    """The framework that serves this test: a module's tests that ask for it (or for `server`) run
    once per framework, named `[vllm]` and `[sglang]` in node ids, the gate report and JUnit."""
    return request.param


@pytest.fixture(scope="module")
def server(request, framework):
    """The module's server of `framework` (its `vllm_server` or `sglang_server` fixture)."""
    return request.getfixturevalue(f"{framework}_server")


def pytest_collection_modifyitems(items):
    # The order tests run in on the CPU, where the pool keeps a single idle server, so a server
    # starts again whenever the next test wants another (a stable sort keeps every other order, and
    # a module's tests stay together, so its module-scoped fixtures are set up once):
    # 1. each framework's tests together, vLLM's first: each framework's server starts once, not per module;
    # 2. within vLLM, the modules served by the plain tiny model first (accuracy, API, engine, performance,
    #    and spec_decode's reference): they share one server instead of starting it again after each
    #    module that serves another model;
    # 3. of those, the ones that measure speed first: while they run nothing may start beside them
    #    (pytest_rocm/serving/ahead.py), and at the start of the run that costs the least (the
    #    servers started beside the first one are ready by the time it is).
    on_plain_server = {
        item.module
        for item in items
        if (
            {"vllm_server", "server"} & set(item.fixturenames)
            and not item.get_closest_marker("vllm_server")
        )
        # a test that starts the plain server beside its module's (spec_decode's reference)
        or any(not mark.kwargs for mark in item.iter_markers("vllm_server_variant"))
    }
    measures_speed = {
        item.module
        for item in items
        if (gate := item.get_closest_marker("rocm_gate")) is not None
        and gate.kwargs.get("group", gate.args[0] if gate.args else None) == "performance"
    }
    items.sort(
        key=lambda item: (
            getattr(item, "callspec", None) is not None
            and item.callspec.params.get("framework") == "sglang",
            item.module not in on_plain_server,
            item.module not in measures_speed,
        )
    )
