"""Attention in the served engine: a tiny Mistral-style model with a sliding window of 32 tokens
(random weights built at test time) gives transformers' greedy tokens on short prompts inside the
window and on long prompts that cross several KV-cache blocks and reach far past the window.

Compared by vLLM's own rule (at the first differing token each side's choice is in the other's
top-5). The kernel-level cases are in test_attention_kernels.py; this is the same attention through
the whole engine: block tables, prefill then decode, the window applied in both.
"""

from __future__ import annotations

import pytest
from gate_support import (
    PROMPTS,
    SHARED_PREFIX,
    assert_close_by_vllm_rule,
    client_for,
    generate,
    tokenize,
    transformers_greedy,
)

pytestmark = pytest.mark.rocm_gate(group="attention")
WINDOW = 32
MAX_TOKENS = 24
MISTRAL = {"architecture": "mistral", "sliding_window": WINDOW}


@pytest.fixture(scope="module")
def mistral(tiny_model):
    return tiny_model(**MISTRAL)


@pytest.mark.vllm_server_variant(tiny_model=MISTRAL)  # declared: started ahead of need
def test_sliding_window_and_long_prompts_match_transformers(vllm_server_factory, mistral):
    server = vllm_server_factory(model=mistral)
    texts = [PROMPTS[1], PROMPTS[0], SHARED_PREFIX + PROMPTS[2], (SHARED_PREFIX * 3) + PROMPTS[3]]
    prompts = [tokenize(server, mistral.name, text) for text in texts]
    assert len(prompts[0]) < WINDOW and len(prompts[-1]) > 8 * WINDOW, [len(p) for p in prompts]
    served = generate(client_for(server), mistral.name, prompts, max_tokens=MAX_TOKENS)
    reference = transformers_greedy(mistral.path, prompts, MAX_TOKENS)
    assert_close_by_vllm_rule(
        reference,
        served,
        f"vLLM against transformers (window {WINDOW}, prompts of "
        f"{', '.join(str(len(p)) for p in prompts)} tokens)",
    )
