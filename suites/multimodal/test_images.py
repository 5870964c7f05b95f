"""Images through the OpenAI chat API, served for real: a tiny Idefics3 model (a SigLIP-style tower,
4 tokens per image, random weights built at test time) gives transformers' greedy tokens for the
same image and question; the image decides the answer; several images per prompt work up to
`--limit-mm-per-prompt`; a bad image is a 400 in OpenAI's error shape and the server keeps serving.

On the CPU the server and the reference both run float32 on the same processor: tokens must be
equal. On GPU runners the server runs in the GPU's dtype against the CPU reference: vLLM's own rule
applies (at the first differing token each side's choice is in the other's top-5).
"""

from __future__ import annotations

import json

import openai
import pytest
from gate_support import (
    PROMPTS,
    answer_alone,
    assert_close_by_vllm_rule,
    assert_openai_error,
    assert_same_tokens,
    generated_side_by_side,
    gpu_runner,
    metrics,
    stream_together,
)
from media import ImageTextReference, chat_greedy, data_url, png_bytes, user_message

MAX_TOKENS = 8
IMAGE_LIMIT = 2
# Media fetching is limited to a domain that does not resolve: no test reaches the network, and an
# image URL from anywhere else must be refused as the client's error.
pytestmark = [
    pytest.mark.rocm_gate(group="multimodal"),
    pytest.mark.vllm_server(
        tiny_model={"architecture": "idefics3"},
        args=[
            "--limit-mm-per-prompt",
            json.dumps({"image": IMAGE_LIMIT}),
            "--allowed-media-domains",
            "media.pytest-rocm.invalid",
        ],
    ),
]
CASES = [("What is in the image?", [1]), ("Describe it.", [2]), ("Describe it.", [1])]

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {"test_image_chat_matches_transformers": ["messages"]}


@pytest.fixture(scope="module")
def reference(vllm_server):
    return ImageTextReference(vllm_server.model)  # the folder the module's server serves


def _served(client, model_name, question, seeds):
    return chat_greedy(
        client,
        model_name,
        user_message(question, [data_url(png_bytes(s)) for s in seeds]),
        MAX_TOKENS,
    )


def _refused(client, model_name, messages) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=model_name, messages=messages, max_tokens=2)
    return raised.value


def _compare(expected, measured, what):
    (assert_close_by_vllm_rule if gpu_runner() else assert_same_tokens)(expected, measured, what)


@pytest.mark.parametrize(
    "question,seeds", CASES, ids=["image1-what", "image2-describe", "image1-describe"]
)
def test_image_chat_matches_transformers(client, model_name, reference, question, seeds):
    served, served_prompt_tokens = _served(client, model_name, question, seeds)
    expected, expected_prompt_tokens = reference.greedy(question, seeds, MAX_TOKENS)
    assert served_prompt_tokens == expected_prompt_tokens, (
        f"the server's prompt has {served_prompt_tokens} tokens, transformers' processor makes "
        f"{expected_prompt_tokens} (the image's placeholder tokens or the chat template differ)"
    )
    _compare([expected], [served], f"vLLM against transformers for image {seeds} and {question!r}")


def test_the_image_decides_the_answer(client, model_name):
    first, _ = _served(client, model_name, "Describe it.", [1])
    second, _ = _served(client, model_name, "Describe it.", [2])
    assert first.token_ids != second.token_ids, (
        f"two different images gave the same {MAX_TOKENS} tokens {first.token_ids}: the image does not reach the "
        "language model"
    )


def test_images_up_to_the_limit_in_one_prompt(client, model_name, reference):
    served, served_prompt_tokens = _served(client, model_name, "Compare them.", [1, 2])
    expected, expected_prompt_tokens = reference.greedy("Compare them.", [1, 2], MAX_TOKENS)
    assert served_prompt_tokens == expected_prompt_tokens
    _compare([expected], [served], "vLLM against transformers with two images in one prompt")
    swapped, _ = _served(client, model_name, "Compare them.", [2, 1])
    assert swapped.token_ids != served.token_ids, (
        "the images' order in the prompt made no difference"
    )


def test_more_images_than_the_limit_are_refused(client, model_name):
    error = _refused(
        client,
        model_name,
        user_message("Too many.", [data_url(png_bytes(seed)) for seed in range(IMAGE_LIMIT + 1)]),
    )
    assert_openai_error(
        error,
        f"{IMAGE_LIMIT + 1} images with --limit-mm-per-prompt image={IMAGE_LIMIT}",
        status=400,
    )


BAD_IMAGES = {
    "not-an-image": data_url(b"this is not an image"),
    "truncated-png": data_url(png_bytes(1)[:200]),
    "url-not-allowed": "http://example.com/cat.png",
}


@pytest.mark.parametrize("name", BAD_IMAGES)
def test_a_bad_image_is_a_400_and_the_server_keeps_serving(client, model_name, name):
    error = _refused(client, model_name, user_message("What is it?", [BAD_IMAGES[name]]))
    assert_openai_error(error, f"a bad image ({name})", status=400)
    after, _ = _served(client, model_name, "Describe it.", [1])
    assert len(after.token_ids) == MAX_TOKENS, (
        f"after the bad image ({name}) the server answered {after}"
    )


# A question long enough that the prompt passes one KV-cache block (128 tokens on the CPU, 16 on GPU
# runners) with the image in the first block: that block is hashed and cached, so only the image's
# own key tells two images' blocks apart. 177 tokens with the image (measured).
LONG_QUESTION = (
    "Describe every part of this image in detail: its colours, its shapes and what is where. " * 3
)
CACHE_BLOCK_TOKENS = 128


def test_a_cached_image_prefix_is_keyed_by_the_image(vllm_server, client, model_name, reference):
    """Prefix caching with images: the second image's request must not be answered from the first
    image's cached blocks (equal text, equal placeholder tokens). Each image against transformers;
    the first image asked again must hit the cache, so a block holding an image was cached."""
    first, prompt_tokens = _served(client, model_name, LONG_QUESTION, [1])
    assert prompt_tokens > CACHE_BLOCK_TOKENS, (
        f"the prompt has {prompt_tokens} tokens, not more than a cache block: no block with the "
        "image would be cached"
    )
    before = metrics(vllm_server).get("vllm:prefix_cache_hits_total", 0.0)
    again, _ = _served(client, model_name, LONG_QUESTION, [1])
    hits = metrics(vllm_server).get("vllm:prefix_cache_hits_total", 0.0) - before
    assert hits >= CACHE_BLOCK_TOKENS and again.token_ids == first.token_ids, (
        f"the same image and question again: {hits:.0f} cached tokens, tokens {again.token_ids} "
        f"(first {first.token_ids}): the block holding the image was not reused"
    )
    second, _ = _served(client, model_name, LONG_QUESTION, [2])
    for seeds, measured in (([1], first), ([2], second)):
        expected, _ = reference.greedy(LONG_QUESTION, seeds, MAX_TOKENS)
        _compare(
            [expected],
            [measured],
            f"image {seeds} with a {prompt_tokens}-token prompt after image [1] was cached",
        )


def _image_chat(model_name: str, seed: int) -> tuple[str, dict]:
    return "chat", {
        "model": model_name,
        "messages": user_message("Describe it.", [data_url(png_bytes(seed))]),
        "max_tokens": 24,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
    }


def _text_chat(model_name: str, text: str) -> tuple[str, dict]:
    return "chat", {
        "model": model_name,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 32,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
    }


def test_images_beside_text_requests_equal_alone(vllm_server, client, model_name):
    """Image requests batched with text-only ones: every answer equals its request alone (the
    image's embeddings must land in its own row's positions)."""
    requests = [_image_chat(model_name, seed) for seed in (1, 2)] + [
        _text_chat(model_name, p) for p in PROMPTS[:4]
    ]
    alone = [answer_alone(client, kind, request) for kind, request in requests]
    together = stream_together(vllm_server, requests)
    assert any(
        generated_side_by_side(together[i], together[j]) for i in (0, 1) for j in range(2, 6)
    ), "no image request was generated in the same steps as a text one: nothing was batched"
    different = [
        f"request {i}: alone {alone[i]!r}, batched {together[i].text!r}"
        for i in range(len(requests))
        if alone[i] != together[i].text
    ]
    assert not different, "answers change when images and text share a batch:\n" + "\n".join(
        different
    )
