"""Each framework's greedy tokens against transformers' on the same weights and prompts: golden
outputs that no re-recording can drift from, and the cross-framework comparison in the gate report
(`frameworks_against_reference`: vLLM and SGLang side by side, where each first differs from
transformers, both tokens and logprobs)."""

from __future__ import annotations

import pytest
from gate_support import PROMPTS, golden_layout, greedy_generations, transformers_greedy

pytestmark = pytest.mark.rocm_gate(group="engine")

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {"test_greedy_matches_transformers": ["logprobs"]}

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def prompt_ids(served_model) -> list[list[int]]:
    """The prompts as token ids, from the model's own tokenizer: both frameworks and the reference
    get the same input, whatever each one's tokenizer endpoint does."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(served_model.path)
    return [tokenizer(prompt)["input_ids"] for prompt in PROMPTS]


@pytest.fixture(scope="module")
def reference(served_model, prompt_ids):
    """transformers' greedy tokens with their top-k logprobs (float32, on the CPU), computed once
    per module."""
    import transformers

    generations = transformers_greedy(served_model.path, prompt_ids, MAX_TOKENS)
    return f"transformers {transformers.__version__}", generations


def test_greedy_matches_transformers(
    server, framework, served_model, prompt_ids, reference, golden
):
    reference_name, expected = reference
    measured = greedy_generations(server, framework, served_model.name, prompt_ids, MAX_TOKENS)
    golden.check_live(
        f"{served_model.name}-greedy-{MAX_TOKENS}",
        golden_layout(expected),
        golden_layout(measured),
        reference_name=reference_name,
        framework=framework,
    )
