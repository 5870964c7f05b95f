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
    assert_close_by_vllm_rule,
    assert_openai_error,
    assert_same_tokens,
    gpu_runner,
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
