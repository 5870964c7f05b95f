"""Serving performance against the platform's baseline: three rounds of the same benchmark are the
performance gate's samples (a regression only when all three are past the threshold)."""

from __future__ import annotations

import pytest
from gate_support import check_all
from serving_benchmark import random_prompts, run_benchmark

pytestmark = pytest.mark.rocm_gate(group="performance")

INPUT_LEN, OUTPUT_LEN, NUM_PROMPTS, CONCURRENCY, ROUNDS = 64, 32, 32, 4, 3
# metric -> which direction is better
METRICS = {
    "output_throughput_tok_s": "higher",
    "ttft_median_ms": "lower",
    "ttft_p99_ms": "lower",
    "tpot_median_ms": "lower",
    "tpot_p99_ms": "lower",
}


@pytest.fixture(scope="module")
def prompt_token_ids(served_model) -> list[int]:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(served_model.path)
    special = set(tokenizer.all_special_ids)
    return [i for i in range(tokenizer.vocab_size) if i not in special]


def test_serving_throughput_and_latency(
    vllm_server, model_name, prompt_token_ids, perf_gate, record_property
):
    prompts = random_prompts(prompt_token_ids, NUM_PROMPTS, INPUT_LEN, seed=0)
    # warm-up
    run_benchmark(vllm_server.base_url, model_name, prompts[:CONCURRENCY], OUTPUT_LEN, CONCURRENCY)
    rounds = [
        run_benchmark(vllm_server.base_url, model_name, prompts, OUTPUT_LEN, CONCURRENCY)
        for _ in range(ROUNDS)
    ]
    for figures in rounds:
        assert figures["output_tokens"] == NUM_PROMPTS * OUTPUT_LEN, figures
    for metric in METRICS:
        record_property(metric, ", ".join(f"{figures[metric]:.4g}" for figures in rounds))
    check_all(
        lambda metric=metric, direction=direction: perf_gate.check(
            metric, [figures[metric] for figures in rounds], direction=direction
        )
        for metric, direction in METRICS.items()
    )
