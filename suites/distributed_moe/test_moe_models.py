"""Mixture-of-experts models served for real: a tiny Mixtral-style model (8 experts, top-2, random weights built
at test time) gives transformers' greedy tokens at TP=1, and the same tokens at TP=2 as at TP=1.

Compared by vLLM's own rule (at the first differing token each side's choice is in the other's top-5), since
two implementations may break near-ties differently. On the CPU, TP=2 binds one OpenMP thread to each core
(`VLLM_CPU_OMP_THREADS_BIND=0|1`); on GPU runners it takes two GPUs, and runners with fewer are skipped with
that reason.
"""

from __future__ import annotations

import os

import pytest

from gate_support import PROMPTS, assert_close_by_vllm_rule, client_for, generate, transformers_greedy

pytestmark = pytest.mark.rocm_gate(group="distributed_moe")
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def mixtral(tiny_model):
    return tiny_model(architecture="mixtral", num_local_experts=8, num_experts_per_tok=2)


def _prompt_ids(server, model_name: str) -> list[list[int]]:
    import json
    import urllib.request

    ids = []
    for prompt in PROMPTS[:4]:
        request = urllib.request.Request(server.url + "/tokenize", data=json.dumps({"model": model_name, "prompt": prompt}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            ids.append(json.loads(response.read())["tokens"])
    return ids


@pytest.fixture
def mixtral_tp1(vllm_server_factory, mixtral):
    return vllm_server_factory(model=mixtral)


def test_mixtral_tp1_matches_transformers(mixtral_tp1, mixtral):
    prompts = _prompt_ids(mixtral_tp1, mixtral.name)
    served = generate(client_for(mixtral_tp1), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    reference = transformers_greedy(mixtral.path, prompts, MAX_TOKENS)
    assert_close_by_vllm_rule(reference, served, "vLLM TP=1 against transformers")


def test_mixtral_tp2_matches_tp1(mixtral_tp1, vllm_server_factory, mixtral):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("TP=2 on the CPU needs two cores for its two workers")
    prompts = _prompt_ids(mixtral_tp1, mixtral.name)
    tp1 = generate(client_for(mixtral_tp1), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    tp2_server = vllm_server_factory(model=mixtral, args=["--tensor-parallel-size", "2"],
                                     env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})
    tp2 = generate(client_for(tp2_server), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    assert_close_by_vllm_rule(tp1, tp2, "vLLM TP=2 against TP=1")
