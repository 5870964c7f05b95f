"""Request fields beyond sampling, each against a reference that cannot share its bug: the same
request without the field, and what the field's definition makes of that answer. On vLLM and
SGLang where each has the field (the name may differ: `FIELD_NAMES`); a field a framework lacks is
skipped there, saying so.

- `echo`: the prompt, then the same text as without it.
- `max_completion_tokens` (chat): as many tokens as `max_tokens` would give, and the same text.
- keeping a stop string (vLLM's `include_stop_str_in_output`, SGLang's `no_stop_trim`): the text
  without it, then the stop string.
- `skip_special_tokens`: a special token the model is made to generate (a logit bias on BOS) is in
  the text exactly when it is false.
- `truncate_prompt_tokens` (vLLM): the answer to the prompt's last tokens alone.
"""

from __future__ import annotations

import pytest
from gate_support import PROMPTS, tokenize

pytestmark = pytest.mark.rocm_gate(group="api")

# Request parameters whose effect each test compares against a reference
# (benchmarks/request_surface.py lists every parameter, and these or the reason none does).
COMPARES = {
    "test_echo_puts_the_prompt_first": ["echo"],
    "test_max_completion_tokens_is_max_tokens": ["max_completion_tokens"],
    "test_a_kept_stop_string_ends_the_text": ["include_stop_str_in_output", "no_stop_trim"],
    "test_skip_special_tokens_decides_whether_they_show": ["skip_special_tokens"],
    "test_truncate_prompt_tokens_keeps_the_last_tokens": ["truncate_prompt_tokens"],
}
NO_EOS = {"ignore_eos": True}
# field -> its name on each framework (None: the framework has no such field)
FIELD_NAMES = {
    "keep_stop": {"vllm": "include_stop_str_in_output", "sglang": "no_stop_trim"},
    "truncate_prompt_tokens": {"vllm": "truncate_prompt_tokens", "sglang": None},
}
BOS_ID = 0  # the tiny model's <s> (pytest_rocm/serving/tiny_models.py)


@pytest.fixture(scope="module")
def module_server(server):
    return server  # every framework's


def _field(framework: str, name: str) -> str:
    field = FIELD_NAMES[name][framework]
    if field is None:
        pytest.skip(f"{framework} has no {name} request field")
    return field


def _text(client, model_name, prompt, max_tokens=12, **fields) -> str:
    return (
        client.completions.create(
            model=model_name, prompt=prompt, max_tokens=max_tokens, temperature=0, **fields
        )
        .choices[0]
        .text
    )


def test_echo_puts_the_prompt_first(client, model_name):
    plain = _text(client, model_name, PROMPTS[4], extra_body=NO_EOS)
    echoed = _text(client, model_name, PROMPTS[4], echo=True, extra_body=NO_EOS)
    assert echoed == PROMPTS[4] + plain, f"echo: {echoed!r}, expected the prompt then {plain!r}"


def test_max_completion_tokens_is_max_tokens(client, model_name):
    messages = [{"role": "user", "content": PROMPTS[0]}]
    by_max_tokens = client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=9, temperature=0, extra_body=NO_EOS
    )
    by_completion_tokens = client.chat.completions.create(
        model=model_name,
        messages=messages,
        max_completion_tokens=9,
        temperature=0,
        extra_body=NO_EOS,
    )
    assert by_completion_tokens.usage.completion_tokens == 9
    assert by_completion_tokens.choices[0].finish_reason == "length"
    assert (
        by_completion_tokens.choices[0].message.content == by_max_tokens.choices[0].message.content
    )


def test_a_kept_stop_string_ends_the_text(client, model_name, framework):
    full = _text(client, model_name, PROMPTS[3], max_tokens=24, extra_body=NO_EOS)
    # a stop string from the middle of the greedy text (as test_stop_string_cuts_text)
    middle = len(full) // 2
    stop = next(
        (full[i : i + 2] for i in range(middle, len(full) - 1) if full[i : i + 2].strip()), None
    )
    assert stop is not None, f"the greedy text has no visible characters to stop on: {full!r}"
    kept = _text(
        client,
        model_name,
        PROMPTS[3],
        max_tokens=24,
        stop=[stop],
        extra_body={**NO_EOS, _field(framework, "keep_stop"): True},
    )
    assert kept == full[: full.index(stop)] + stop, f"stop={stop!r}: {kept!r}"


def test_skip_special_tokens_decides_whether_they_show(client, model_name):
    """BOS made the only likely token: with `skip_special_tokens` (the default) the text has none
    of it, without it the text is BOS's text, once a token."""
    forced = {"logit_bias": {str(BOS_ID): 100}}
    skipped = _text(client, model_name, PROMPTS[1], max_tokens=3, extra_body=NO_EOS, **forced)
    shown = _text(
        client,
        model_name,
        PROMPTS[1],
        max_tokens=3,
        extra_body={**NO_EOS, "skip_special_tokens": False},
        **forced,
    )
    assert skipped == "", f"special tokens skipped, yet the text is {skipped!r}"
    assert shown == "<s>" * 3, f"special tokens kept: {shown!r}, expected '<s>' three times"


def test_truncate_prompt_tokens_keeps_the_last_tokens(server, client, model_name, framework):
    field = _field(framework, "truncate_prompt_tokens")
    prompt_ids = tokenize(server, model_name, PROMPTS[0])
    truncated = _text(client, model_name, PROMPTS[0], extra_body={**NO_EOS, field: 6})
    last_six = _text(client, model_name, prompt_ids[-6:], extra_body=NO_EOS)
    assert truncated == last_six, (
        f"the prompt cut to its last 6 tokens: {truncated!r}, {last_six!r}"
    )
