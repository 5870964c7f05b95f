"""Requests that differ, batched together, on vLLM and SGLang: each answer equals the same request
sent alone. Structured output beside plain requests (a grammar's token mask must reach its own row
only), sampled beside greedy requests (a row's temperature must not leak into another's), long
beside short prompts. The requests are sent at once and streamed: the arrival times prove that a
structured (or sampled) request and a plain one were generated in the same steps, so the batch was
mixed, not only the intent.
"""

from __future__ import annotations

import re

import pytest
from gate_support import (
    PROMPTS,
    SHARED_PREFIX,
    answer_alone,
    generated_side_by_side,
    stream_together,
)

pytestmark = pytest.mark.rocm_gate(group="api")

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {
    "test_structured_requests_beside_plain_ones": ["structured_outputs", "regex"],
    "test_sampled_requests_beside_greedy_ones": ["temperature", "top_p"],
}

# Six short lowercase words and a full stop: the grammar ends there, so only EOS may follow.
WORDS = r"( [a-z]{1,5}){6}\."
# Two requests of a kind beside two plain ones, a short prompt and a long one (past one KV-cache block
# of the CPU's 128 tokens): SGLang runs four at a time here (servers.toml), and its steps take 0.07 s.
OTHER_PROMPTS = PROMPTS[:2]
PLAIN_PROMPTS = [PROMPTS[3], SHARED_PREFIX + PROMPTS[0]]
PLAIN_TOKENS = 32
STRUCTURED_TOKENS = 48


@pytest.fixture(scope="module")
def module_server(server):
    return server  # every framework's


def _structured(framework: str, model: str, prompt: str) -> tuple[str, dict]:
    grammar = {"structured_outputs": {"regex": WORDS}} if framework == "vllm" else {"regex": WORDS}
    return "completion", {
        "model": model,
        "prompt": prompt,
        "max_tokens": STRUCTURED_TOKENS,
        "temperature": 0.0,
        "extra_body": grammar,
    }


def _plain(model: str, prompt: str, **sampling) -> tuple[str, dict]:
    return "completion", {
        "model": model,
        "prompt": prompt,
        "max_tokens": PLAIN_TOKENS,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
        **sampling,
    }


def _compare(client, server, requests, groups: dict[str, range], compared: range) -> list:
    """Send `requests` one by one, then all at once; assert that every group generated side by
    side with another and that the answers at `compared` are equal both ways. Returns the answers
    alone."""
    alone = [answer_alone(client, kind, request) for kind, request in requests]
    together = stream_together(server, requests)
    (first_name, first), (second_name, second) = groups.items()
    assert any(generated_side_by_side(together[i], together[j]) for i in first for j in second), (
        f"no {first_name} request was generated in the same steps as a {second_name} one: the "
        "batch was never mixed, so this test would not test mixing"
    )
    different = [
        f"request {i} ({requests[i][1]['prompt'][:30]!r}...): alone {alone[i]!r}, batched {together[i].text!r}"
        for i in compared
        if alone[i] != together[i].text
    ]
    assert not different, (
        f"{len(different)} of {len(compared)} answers change when batched with requests that "
        "differ:\n" + "\n".join(different)
    )
    return alone


def test_structured_requests_beside_plain_ones(server, client, model_name, framework):
    structured = [_structured(framework, model_name, p) for p in OTHER_PROMPTS]
    plain = [_plain(model_name, p) for p in PLAIN_PROMPTS]
    requests = structured + plain
    groups = {
        "structured": range(len(structured)),
        "plain": range(len(structured), len(requests)),
    }
    alone = _compare(client, server, requests, groups, range(len(requests)))
    for index, text in enumerate(alone[: len(structured)]):
        assert re.fullmatch(WORDS, text), f"structured request {index} broke its grammar: {text!r}"


# SGLang applies a request's seed only in its deterministic mode, which the CPU cannot run
# (test_sampling_params.py): its sampled rows are not reproducible, so only the greedy rows beside
# them are compared there.
SAMPLED = {"temperature": 0.9, "top_p": 0.9, "seed": 1234}


def test_sampled_requests_beside_greedy_ones(server, client, model_name, framework):
    sampled = [_plain(model_name, p, **SAMPLED) for p in OTHER_PROMPTS]
    greedy = [_plain(model_name, p) for p in PLAIN_PROMPTS]
    requests = sampled + greedy
    groups = {"sampled": range(len(sampled)), "greedy": range(len(sampled), len(requests))}
    compared = range(len(requests)) if framework == "vllm" else groups["greedy"]
    _compare(client, server, requests, groups, compared)
