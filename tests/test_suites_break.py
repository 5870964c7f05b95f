"""The served-model suites, broken on purpose: a served Mistral that ignores its sliding window, a
served Mixtral with two experts swapped in one layer, and a served Idefics3 whose image connector
has its rows reversed (the image reaches the language model scrambled), each against transformers on
the intact weights, must end as `regression` naming the first divergence. The break is in the served
copy of the weights only."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import copy_suites, run_suites

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed here: bash scripts/setup-env.sh suites,test",
    ),
]

BREAK_WINDOW = """
import json, shutil
import pytest
from gate_support import (PROMPTS, SHARED_PREFIX, assert_close_by_vllm_rule, client_for, generate, tokenize,
                          transformers_greedy)
from pytest_rocm.serving.pool import ServedModel
from test_attention_engine import MAX_TOKENS, WINDOW

pytestmark = pytest.mark.rocm_gate(group="attention")

def test_window_ignored(vllm_server_factory, tiny_model, tmp_path_factory):
    model = tiny_model(architecture="mistral", sliding_window=WINDOW)
    copy = tmp_path_factory.getbasetemp() / "no-window"
    if not copy.exists():
        shutil.copytree(model.path, copy)
        config = json.loads((copy / "config.json").read_text())
        config["sliding_window"] = None
        (copy / "config.json").write_text(json.dumps(config))
    server = vllm_server_factory(model=ServedModel(path=str(copy), name=model.name))
    prompts = [tokenize(server, model.name, t) for t in [PROMPTS[1], (SHARED_PREFIX * 3) + PROMPTS[3]]]
    served = generate(client_for(server), model.name, prompts, max_tokens=MAX_TOKENS)
    assert_close_by_vllm_rule(transformers_greedy(model.path, prompts, MAX_TOKENS), served, "window ignored")
"""

BREAK_EXPERT = """
import shutil
import pytest
from safetensors.torch import load_file, save_file
from gate_support import assert_close_by_vllm_rule, client_for, generate, transformers_greedy
from pytest_rocm.serving.pool import ServedModel
from test_moe_models import MAX_TOKENS, _prompt_ids

pytestmark = pytest.mark.rocm_gate(group="distributed_moe")

def test_swapped_expert(vllm_server_factory, tiny_model, tmp_path_factory):
    model = tiny_model(architecture="mixtral", num_local_experts=8, num_experts_per_tok=2)
    copy = tmp_path_factory.getbasetemp() / "swapped"
    if not copy.exists():
        shutil.copytree(model.path, copy)
        weights = load_file(copy / "model.safetensors")
        for part in ("w1", "w2", "w3"):
            a, b = (f"model.layers.0.block_sparse_moe.experts.{e}.{part}.weight" for e in (0, 1))
            weights[a], weights[b] = weights[b].clone(), weights[a].clone()
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    server = vllm_server_factory(model=ServedModel(path=str(copy), name=model.name))
    prompts = _prompt_ids(server, model.name)
    served = generate(client_for(server), model.name, prompts, max_tokens=MAX_TOKENS)
    assert_close_by_vllm_rule(transformers_greedy(model.path, prompts, MAX_TOKENS), served, "swapped expert")
"""


BREAK_CONNECTOR = """
import shutil
import pytest
from safetensors.torch import load_file, save_file
from gate_support import assert_same_tokens, client_for
from media import ImageTextReference, chat_greedy, data_url, png_bytes, user_message
from pytest_rocm.serving.pool import ServedModel

pytestmark = pytest.mark.rocm_gate(group="multimodal")

def test_scrambled_connector(vllm_server_factory, tiny_model, tmp_path_factory):
    model = tiny_model(architecture="idefics3")
    copy = tmp_path_factory.getbasetemp() / "scrambled"
    if not copy.exists():
        shutil.copytree(model.path, copy)
        weights = load_file(copy / "model.safetensors")
        [key] = [k for k in weights if "connector" in k]
        weights[key] = weights[key].flip(0).contiguous()
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    server = vllm_server_factory(model=ServedModel(path=str(copy), name=model.name))
    messages = user_message("Describe it.", [data_url(png_bytes(1))])
    served, _ = chat_greedy(client_for(server), model.name, messages, 8)
    expected, _ = ImageTextReference(model.path).greedy("Describe it.", [1], 8)
    assert_same_tokens([expected], [served], "scrambled connector")
"""


@pytest.mark.parametrize(
    "where, name, text, what",
    [
        ("attention", "test_break_window.py", BREAK_WINDOW, "window ignored"),
        ("distributed_moe", "test_break_expert.py", BREAK_EXPERT, "swapped expert"),
        ("multimodal", "test_break_connector.py", BREAK_CONNECTOR, "scrambled connector"),
    ],
)
def test_a_broken_served_model_is_a_regression_naming_the_divergence(
    pytester, model_cache, where, name, text, what
):
    copy_suites(pytester)
    (pytester.path / "suites" / where / name).write_text(text)
    report = run_suites(pytester, model_cache, f"suites/{where}/{name}")
    [test] = report["tests"].values()
    assert test["verdict"] == "regression", test["verdict_reason"]
    assert f"{what}: sequence" in test["message"] and "diverges at position" in test["message"]
