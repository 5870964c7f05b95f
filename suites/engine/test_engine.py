"""Engine behaviour that must not change the numbers: determinism, batching, prefix caching, chunked
prefill, preemption and aborts give the same greedy tokens as the plain run; golden outputs pin
them."""

from __future__ import annotations

import asyncio
import time

import pytest
from gate_support import (
    PROMPTS,
    SHARED_PREFIX,
    assert_same_tokens,
    async_client_for,
    client_for,
    generate,
    generate_each,
    metrics,
)

pytestmark = pytest.mark.rocm_gate(group="engine")

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {"test_golden_outputs": ["logprobs"]}

MIXED_LENGTHS = [
    PROMPTS[0],
    PROMPTS[1] * 6,
    PROMPTS[2],
    PROMPTS[4] * 3,
    PROMPTS[3],
    PROMPTS[6] * 4,
    PROMPTS[5] * 2,
    PROMPTS[7],
]
LONG_PROMPTS = [SHARED_PREFIX + p for p in PROMPTS[:4]]
ABORT_AFTER_CHUNKS = 5  # a long shared prefix, several 32-token chunks each

# The servers the tests below start beside the module's, declared with the test so the pool starts
# them ahead of need (pytest_rocm/serving/plan.py).
UNCACHED = ["--no-enable-prefix-caching"]
# No step may take more than 32 tokens, so every prompt is prefilled over several steps.
CHUNKED = ["--max-num-batched-tokens", "32", "--no-enable-prefix-caching"]
# 5 blocks of 64 tokens (one is kept back) hold one sequence of the longest length allowed (256), not 8
# sequences of 70 to 130 tokens: the scheduler must preempt and recompute.
TINY_KV_CACHE = [
    "--block-size",
    "64",
    "--num-gpu-blocks-override",
    "5",
    "--max-model-len",
    "256",
    "--no-enable-prefix-caching",
]
LONGEST_GENERATION = ["--max-model-len", "1024"]


def test_greedy_is_deterministic(client, model_name):
    runs = [generate(client, model_name, PROMPTS, max_tokens=24) for _ in range(3)]
    assert_same_tokens(runs[0], runs[1], "second run against the first")
    assert_same_tokens(runs[0], runs[2], "third run against the first")


def test_batch_invariance(client, model_name):
    """A prompt alone and inside a batch of 8 prompts of mixed lengths gives the same greedy tokens.
    Known to fail on some GPU kernels (batch-dependent reductions): the message names the first
    divergence."""
    alone = generate_each(client, model_name, MIXED_LENGTHS, max_tokens=24)
    batched = generate(client, model_name, MIXED_LENGTHS, max_tokens=24)
    assert_same_tokens(alone, batched, "batch of 8 against each prompt alone")


@pytest.mark.vllm_server_variant(args=UNCACHED)
def test_prefix_caching_on_and_off_agree(vllm_server, client, model_name, vllm_server_factory):
    before = metrics(vllm_server).get("vllm:prefix_cache_hits_total", 0.0)
    cached = generate_each(client, model_name, LONG_PROMPTS, max_tokens=24)
    hits = metrics(vllm_server).get("vllm:prefix_cache_hits_total", 0.0) - before
    assert hits > 0, (
        "the shared prefix never hit the prefix cache: this test would not test caching"
    )
    uncached_server = vllm_server_factory(args=UNCACHED)
    uncached = generate_each(client_for(uncached_server), model_name, LONG_PROMPTS, max_tokens=24)
    assert_same_tokens(
        uncached, cached, f"prefix caching on ({hits:.0f} cached tokens) against off"
    )


@pytest.mark.vllm_server_variant(args=CHUNKED)
def test_chunked_prefill_agrees(client, model_name, vllm_server_factory):
    reference = generate(client, model_name, LONG_PROMPTS, max_tokens=24)
    chunked_server = vllm_server_factory(args=CHUNKED)
    chunked = generate(client_for(chunked_server), model_name, LONG_PROMPTS, max_tokens=24)
    assert_same_tokens(reference, chunked, "prefill in chunks of 32 tokens against the default")


@pytest.mark.vllm_server_variant(args=TINY_KV_CACHE)
def test_preemption_under_tiny_kv_cache_agrees(client, model_name, vllm_server_factory):
    prompts = MIXED_LENGTHS
    reference = generate(client, model_name, prompts, max_tokens=64)
    small = vllm_server_factory(args=TINY_KV_CACHE)
    before = metrics(small).get("vllm:num_preemptions_total", 0.0)
    squeezed = generate(client_for(small), model_name, prompts, max_tokens=64)
    preemptions = metrics(small).get("vllm:num_preemptions_total", 0.0) - before
    assert preemptions > 0, (
        "no request was preempted: the KV cache was not small enough to test preemption"
    )
    assert_same_tokens(
        reference, squeezed, f"with {preemptions:.0f} preemptions against the default"
    )


def test_aborted_request_does_not_disturb_others(vllm_server, client, model_name):
    reference = generate_each(client, model_name, PROMPTS[:4], max_tokens=32)

    async def run():
        async def long_then_abort():
            async with async_client_for(vllm_server) as async_client:
                stream = await async_client.completions.create(
                    model=model_name,
                    prompt=PROMPTS[5],
                    max_tokens=400,
                    temperature=0,
                    stream=True,
                    extra_body={"ignore_eos": True},
                )
                received = 0
                async for _ in stream:
                    received += 1
                    if received == ABORT_AFTER_CHUNKS:
                        break  # closing the stream closes the connection: the server aborts the request
                await stream.close()

        others = [
            asyncio.to_thread(generate_each, client, model_name, [p], max_tokens=32)
            for p in PROMPTS[:4]
        ]
        results = await asyncio.gather(long_then_abort(), *others)
        return [r[0] for r in results[1:]]

    before = metrics(vllm_server).get("vllm:generation_tokens_total", 0.0)
    during = asyncio.run(run())
    assert_same_tokens(reference, during, "requests running beside an aborted one against alone")
    idle = _wait_for(lambda: metrics(vllm_server).get("vllm:num_requests_running", 1.0) == 0)
    assert idle, "requests were still running 30 s after every client had finished or gone"
    # The engine, not only the API server, must have stopped the aborted request: every token
    # generated is one of the others' (counted exactly: they may stop early at EOS), one the closed
    # stream received, or one in flight when it closed. An abort the engine never got runs on to 400
    # tokens, far past this.
    others = sum(len(g.token_ids) for g in during)
    generated = metrics(vllm_server).get("vllm:generation_tokens_total", 0.0) - before
    in_flight = 32
    assert generated <= others + ABORT_AFTER_CHUNKS + in_flight, (
        f"{generated:.0f} tokens generated, {others} of them by the other requests: the aborted request went on "
        f"generating ({generated - others:.0f} tokens; it had streamed {ABORT_AFTER_CHUNKS} when it was closed)"
    )
    settled = metrics(vllm_server).get("vllm:generation_tokens_total", 0.0)
    time.sleep(2.0)
    assert metrics(vllm_server).get("vllm:generation_tokens_total", 0.0) == settled, (
        "the engine kept generating after every request had finished or been aborted"
    )
    assert_same_tokens(
        reference,
        generate_each(client, model_name, PROMPTS[:4], max_tokens=32),
        "after the abort against before",
    )


@pytest.mark.vllm_server_variant(args=LONGEST_GENERATION)
def test_an_abort_stops_the_engine_promptly(vllm_server_factory, model_name):
    """An aborted request must leave the engine, not only the API server: the engine's own count of
    running requests falls to zero within a fraction of the time the request would have taken to
    finish. (The API server's token counters cannot show this: it drops the outputs of requests it
    has forgotten.) The tiny model decodes a token in about 2 ms here, so its own server takes the
    longest generation its positions allow, which an abort that never arrives runs to the end."""
    vllm_server = vllm_server_factory(args=LONGEST_GENERATION)
    max_tokens = 1000

    async def stream_then_close() -> tuple[float, float]:
        async with async_client_for(vllm_server) as async_client:
            stream = await async_client.completions.create(
                model=model_name,
                prompt=PROMPTS[5],
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            stamps = []
            async for _ in stream:
                stamps.append(time.monotonic())
                if len(stamps) == 12:
                    break
            await stream.close()
            return (stamps[-1] - stamps[1]) / (len(stamps) - 2), time.monotonic()

    per_token, closed = asyncio.run(stream_then_close())
    while (
        metrics(vllm_server).get("vllm:num_requests_running", 1.0) != 0
        and time.monotonic() - closed < 60
    ):
        time.sleep(0.05)
    stopped_after = time.monotonic() - closed
    would_run = (max_tokens - 12) * per_token
    assert stopped_after < max(1.0, would_run / 4), (
        f"the engine ran the aborted request for {stopped_after:.2f} s after its stream closed; finishing it would "
        f"take about {would_run:.2f} s ({per_token * 1000:.1f} ms a token): the abort did not reach the engine"
    )


def test_golden_outputs(vllm_server, client, model_name, golden):
    """Token ids with top-5 logprobs for a fixed prompt set, against those recorded on the reference
    platform. Same platform and dtype: exact tokens and logprobs within 0.02; across platforms,
    vLLM's check_logprobs_close rule (a different token is accepted only inside the other side's
    top-5)."""
    generations = generate(client, model_name, PROMPTS, max_tokens=32)
    command = list(vllm_server.command)
    dtype = command[command.index("--dtype") + 1] if "--dtype" in command else "auto"
    golden.check(
        f"{model_name}-greedy-32",
        [g.token_ids for g in generations],
        [g.top_logprobs for g in generations],
        dtype=dtype,
    )


def _wait_for(condition, timeout_s: float = 30.0) -> bool:
    for _ in range(int(timeout_s / 0.5)):
        if condition():
            return True
        time.sleep(0.5)
    return condition()
