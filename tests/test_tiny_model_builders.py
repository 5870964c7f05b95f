"""The tiny image-text models for GPU runners (LLaVA, PaliGemma, Gemma 3), checked where they are
built: every machine. vLLM cannot serve them on the CPU (suites/multimodal/test_images_gpu_architectures.py says why), so what
this machine can check is checked here: the weights are where vLLM loads them from, transformers
loads every weight, the image placeholders are as many as the tower gives, the processors' lookups
that vLLM repeats succeed, and the random model's answer depends on the image (a tiny model that
ignores its image gates nothing).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_rocm.serving.tiny_models import (
    GPU_ONLY_IMAGE_ARCHITECTURES,
    TinyModelSpec,
    ensure_tiny_model,
)

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed here: bash scripts/setup-env.sh suites,test",
)
# Image tokens per 32x32 image: CLIP and SigLIP towers give 4x4 patches; LLaVA drops CLIP's class
# token, Gemma 3 pools the 16 patches to 4.
IMAGE_TOKENS = {"llava": 16, "paligemma": 16, "gemma3": 4}
IMAGE_TOKEN = {"llava": "<image>", "paligemma": "<image>", "gemma3": "<image_soft_token>"}


@pytest.fixture(scope="module")
def built(model_cache):
    def build(architecture: str) -> Path:
        with FileLock(str(model_cache / "build.lock")):
            return ensure_tiny_model(model_cache, TinyModelSpec(architecture=architecture))

    return build


@pytest.fixture
def media(monkeypatch):
    """The multimodal suite's media and transformers reference (the GPU tests compare against
    it)."""
    monkeypatch.syspath_prepend(str(REPO / "suites" / "multimodal"))
    monkeypatch.syspath_prepend(str(REPO / "suites"))
    import media

    return media


@pytest.mark.slow
@pytest.mark.parametrize("architecture", GPU_ONLY_IMAGE_ARCHITECTURES)
def test_weights_are_where_vllm_loads_them_and_transformers_loads_all(built, architecture):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForImageTextToText

    path = built(architecture)
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        keys = list(weights.keys())
    tower = [key for key in keys if key.startswith("vision_tower.")]
    assert tower and all(key.startswith("vision_tower.vision_model.") for key in tower), (
        f"{architecture}: vLLM's CLIP/SigLIP towers load from vision_tower.vision_model.*, got "
        f"{sorted({'.'.join(k.split('.')[:3]) for k in tower})}"
    )
    model, info = AutoModelForImageTextToText.from_pretrained(
        path, dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), (
        f"{architecture}: transformers did not load the folder cleanly: {info}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("architecture", GPU_ONLY_IMAGE_ARCHITECTURES)
def test_the_answer_depends_on_the_image(built, media, architecture):
    model = media.ImageTextReference(str(built(architecture)))
    first, prompt_tokens = model.greedy("Describe it.", [1], 8)
    second, _ = model.greedy("Describe it.", [2], 8)
    assert first.token_ids != second.token_ids, (
        f"{architecture}: two images gave the same tokens {first.token_ids}"
    )
    assert len(set(first.token_ids)) >= 3, (
        f"{architecture}: a degenerate random model: {first.token_ids}"
    )
    text = model.processor.tokenizer.decode(
        model.processor(
            text=model.prompt("Describe it.", 2), images=[[media.image(1), media.image(2)]]
        )["input_ids"][0]
    )
    assert text.count(IMAGE_TOKEN[architecture]) == 2 * IMAGE_TOKENS[architecture], (
        f"{architecture}: two images should be {2 * IMAGE_TOKENS[architecture]} placeholder tokens: {text!r}"
    )


@pytest.mark.parametrize("architecture", ["paligemma", "gemma3"])
def test_gemma_vocabularies_have_the_newline_tokens_vllm_looks_up(built, architecture):
    vocabulary = json.loads((built(architecture) / "tokenizer.json").read_text())
    added = {token["content"] for token in vocabulary["added_tokens"]}
    assert {"\n", "\n\n", "\n\n\n", "\n\n\n\n"} <= added, (
        f"{architecture}: vLLM's processor reads vocab['\\n'] (and Gemma 3's the runs up to four)"
    )


def test_gemma3_projection_is_not_the_zero_init(built):
    from safetensors import safe_open

    with safe_open(str(built("gemma3") / "model.safetensors"), "pt") as weights:
        projection = weights.get_tensor("multi_modal_projector.mm_input_projection_weight")
    assert projection.abs().max() > 0, (
        "Gemma 3's projection is all zeros: images would not reach the decoder"
    )
