"""A small serving benchmark with the `openai` async client, in the shape of vLLM's `bench serve`:
random prompts of a fixed token length, fixed output length (EOS ignored), fixed concurrency, and
the figures vLLM reports: output token throughput, TTFT and TPOT (median and p99)."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass

import openai


@dataclass
class RequestTiming:
    ttft_s: float
    latency_s: float
    output_tokens: int

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (vLLM's definition)."""
        return (self.latency_s - self.ttft_s) / max(1, self.output_tokens - 1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def random_prompts(token_ids: list[int], count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.choice(token_ids) for _ in range(length)] for _ in range(count)]


async def _one(client, model: str, prompt: list[int], output_len: int) -> RequestTiming:
    start = time.perf_counter()
    first = None
    tokens = 0
    stream = await client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=output_len,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text and first is None:
            first = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    return RequestTiming(ttft_s=(first or end) - start, latency_s=end - start, output_tokens=tokens)


async def _run(
    base_url: str, model: str, prompts: list[list[int]], output_len: int, concurrency: int
):
    limit = asyncio.Semaphore(concurrency)
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="EMPTY", max_retries=0, timeout=600
    ) as client:

        async def bounded(prompt):
            async with limit:
                return await _one(client, model, prompt, output_len)

        start = time.perf_counter()
        timings = await asyncio.gather(*(bounded(p) for p in prompts))
        return timings, time.perf_counter() - start


def run_benchmark(
    base_url: str, model: str, prompts: list[list[int]], output_len: int, concurrency: int
) -> dict:
    timings, duration = asyncio.run(_run(base_url, model, prompts, output_len, concurrency))
    ttft_ms = [t.ttft_s * 1000 for t in timings]
    tpot_ms = [t.tpot_s * 1000 for t in timings]
    output_tokens = sum(t.output_tokens for t in timings)
    return {
        "requests": len(timings),
        "duration_s": duration,
        "output_tokens": output_tokens,
        "output_throughput_tok_s": output_tokens / duration,
        "ttft_median_ms": statistics.median(ttft_ms),
        "ttft_p99_ms": percentile(ttft_ms, 99),
        "tpot_median_ms": statistics.median(tpot_ms),
        "tpot_p99_ms": percentile(tpot_ms, 99),
    }
