"""Mixture-of-experts models served for real: tiny Mixtral-, Qwen3-MoE- and DeepSeek-V2-style models
(8 experts, top-2, random weights built at test time; DeepSeek-V2's with multi-head latent
attention, a shared expert and a dense first layer) give transformers' greedy tokens at TP=1, and
the Mixtral model the same tokens at TP=2 as at TP=1.

Compared by vLLM's own rule (at the first differing token each side's choice is in the other's
top-5), since two implementations may break near-ties differently. On the CPU, TP=2 binds one OpenMP
thread to each core (`VLLM_CPU_OMP_THREADS_BIND=0|1`); on GPU runners it takes two GPUs, and runners
with fewer are skipped with that reason. The Mixtral TP=1 server is the module's, shared by the
tests that compare with it (one start less).
"""

from __future__ import annotations

import os

import pytest
from gate_support import (
    PROMPTS,
    assert_close_by_vllm_rule,
    client_for,
    generate,
    gpu_runner,
    tokenize,
    transformers_greedy,
)

MIXTRAL = {"architecture": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
pytestmark = [
    pytest.mark.rocm_gate(group="distributed_moe"),
    pytest.mark.vllm_server(tiny_model=MIXTRAL),
]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def mixtral(tiny_model):
    return tiny_model(**MIXTRAL)  # the folder the module's server serves


def _prompt_ids(server, model_name: str) -> list[list[int]]:
    return [tokenize(server, model_name, prompt) for prompt in PROMPTS[:4]]


@pytest.fixture
def mixtral_tp1(vllm_server):
    return vllm_server


def test_mixtral_tp1_matches_transformers(mixtral_tp1, mixtral):
    _assert_matches_transformers(mixtral_tp1, mixtral)


# DeepSeek-V2 on vLLM's CPU backend: its multi-head latent attention hands the rotary op a [tokens,
# heads, head_size] query, which the CPU kernel rotates wrongly
# (suites/attention/test_rotary_kernel.py pins it: xfail on the CPU); the served model then leaves
# transformers' greedy path within the first tokens, differently from run to run (the kernel reads
# positions past its input). With the op replaced by vLLM's plain-torch form it matched 4 of 4
# prompts.
CPU_MLA_ROPE_GAP = (
    "known gap on vLLM's CPU backend: MLA's rotary embedding goes through the CPU rotary_embedding op "
    "with a [tokens, heads, head_size] query, which it rotates wrongly (see attention/"
    "test_rotary_kernel.py per_head); runs on GPU runners"
)


def _other_moe(architecture: str) -> dict:
    return {"architecture": architecture, "num_local_experts": 8, "num_experts_per_tok": 2}


@pytest.mark.parametrize(
    "architecture",
    [
        pytest.param(
            "qwen3_moe", marks=pytest.mark.vllm_server_variant(tiny_model=_other_moe("qwen3_moe"))
        ),
        pytest.param(
            "deepseek_v2",
            marks=[
                pytest.mark.skipif(not gpu_runner(), reason=CPU_MLA_ROPE_GAP),
                pytest.mark.vllm_server_variant(tiny_model=_other_moe("deepseek_v2")),
            ],
        ),
    ],
)
def test_moe_model_matches_transformers(vllm_server_factory, tiny_model, architecture):
    model = tiny_model(**_other_moe(architecture))
    _assert_matches_transformers(vllm_server_factory(model=model), model)


def _assert_matches_transformers(server, model):
    prompts = _prompt_ids(server, model.name)
    served = generate(client_for(server), model.name, prompts, max_tokens=MAX_TOKENS)
    reference = transformers_greedy(model.path, prompts, MAX_TOKENS)
    assert_close_by_vllm_rule(reference, served, f"{model.name}: vLLM TP=1 against transformers")


# TP=2 on the CPU binds one OpenMP thread to each core
TP2 = {"args": ["--tensor-parallel-size", "2"], "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}}
EXPERT_PARALLEL = {
    "args": ["--tensor-parallel-size", "2", "--enable-expert-parallel"],
    "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
}


@pytest.mark.vllm_server_variant(tiny_model=MIXTRAL, **TP2)
def test_mixtral_tp2_matches_tp1(mixtral_tp1, vllm_server_factory, mixtral):
    if gpu_runner():
        import torch

        if torch.cuda.device_count() < 2:
            pytest.skip(f"TP=2 needs two GPUs; this runner has {torch.cuda.device_count()}")
    elif (os.cpu_count() or 1) < 2:
        pytest.skip("TP=2 on the CPU needs two cores for its two workers")
    prompts = _prompt_ids(mixtral_tp1, mixtral.name)
    tp1 = generate(client_for(mixtral_tp1), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    tp2_server = vllm_server_factory(model=mixtral, **TP2)
    tp2 = generate(client_for(tp2_server), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    assert_close_by_vllm_rule(tp1, tp2, "vLLM TP=2 against TP=1")


# On the CPU backend, --enable-expert-parallel with TP=2 passes /health and then a worker segfaults
# on the first request (csrc/cpu/cpu_fused_moe.cpp:242: the CPU experts accept the parallel config,
# but apply() never passes expert_map). vLLM tracks expert parallelism on the CPU backend in issue
# 57837. `rocm_known_gap` applies on AMD platforms only, so on the CPU the test skips itself naming the gap
# and the issue; on GPU runners it runs.
CPU_EP_GAP = (
    "known gap on vLLM's CPU backend: with expert parallelism a TP=2 worker segfaults on the first request "
    "(cpu_fused_moe is never given expert_map); tracked in https://github.com/vllm-project/vllm/issues/57837"
)


@pytest.mark.skipif(not gpu_runner(), reason=CPU_EP_GAP)  # decided before any server starts
@pytest.mark.vllm_server_variant(tiny_model=MIXTRAL, **EXPERT_PARALLEL)
def test_mixtral_expert_parallel_matches_tp1(mixtral_tp1, vllm_server_factory, mixtral):
    prompts = _prompt_ids(mixtral_tp1, mixtral.name)
    tp1 = generate(client_for(mixtral_tp1), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    ep_server = vllm_server_factory(model=mixtral, **EXPERT_PARALLEL)
    ep = generate(client_for(ep_server), mixtral.name, prompts, max_tokens=MAX_TOKENS)
    assert_close_by_vllm_rule(tp1, ep, "vLLM TP=2 with expert parallelism against TP=1")
