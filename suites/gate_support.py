"""Helpers the suites share: greedy token ids with their top-k logprobs, comparisons that name the
first divergence, and the server's Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from dataclasses import dataclass

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

TOP_K = 5


def client_for(server) -> openai.OpenAI:
    # No retries: a retried request would hide exactly the faults the suites are here to see.
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=300)


def async_client_for(server) -> openai.AsyncOpenAI:
    """Make one inside the event loop that uses it (its connections belong to that loop)."""
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=300)


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    top_logprobs: list[dict[int, float]]  # per position: token id -> logprob (top-k)
    finish_reason: str


def token_id(token: str) -> int:
    # `return_tokens_as_token_ids` makes vLLM name every token "token_id:N", so tokens that decode
    # to the same text (or to nothing) stay distinct.
    return int(token.removeprefix("token_id:"))


def generate(
    client, model: str, prompts: list, max_tokens: int = 16, top_k: int = TOP_K, **extra
) -> list[Generation]:
    """Greedy completions of `prompts` in one request (one batch), ignoring EOS so every sequence
    has `max_tokens` tokens; in the order of `prompts`."""
    response = client.completions.create(
        model=model,
        prompt=prompts,
        max_tokens=max_tokens,
        temperature=0.0,
        logprobs=top_k,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True, **extra},
    )
    generations = []
    for choice in sorted(response.choices, key=lambda c: c.index):
        lp = choice.logprobs
        generations.append(
            Generation(
                text=choice.text,
                token_ids=[token_id(t) for t in lp.tokens],
                top_logprobs=[{token_id(t): v for t, v in top.items()} for top in lp.top_logprobs],
                finish_reason=choice.finish_reason,
            )
        )
    return generations


def sglang_generate(
    server, prompts: list[list[int]], max_tokens: int = 16, top_k: int = TOP_K
) -> list[Generation]:
    """Greedy generations of token-id prompts through SGLang's native `/generate` (one batch),
    ignoring EOS: its logprobs name tokens by id (its OpenAI endpoints name them by text, which
    several tokens share)."""
    body = {
        "input_ids": prompts,
        "return_logprob": True,
        "top_logprobs_num": top_k,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": True},
    }
    request = urllib.request.Request(
        server.url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        answers = json.loads(response.read())
    generations = []
    for answer in answers:
        meta = answer["meta_info"]
        # Each logprob entry is [logprob, token id, text or None].
        generations.append(
            Generation(
                text=answer["text"],
                token_ids=[int(entry[1]) for entry in meta["output_token_logprobs"]],
                top_logprobs=[
                    {int(entry[1]): float(entry[0]) for entry in top}
                    for top in meta["output_top_logprobs"]
                ],
                finish_reason=(meta.get("finish_reason") or {}).get("type", ""),
            )
        )
    return generations


def greedy_generations(
    server,
    framework: str,
    model: str,
    prompts: list[list[int]],
    max_tokens: int,
    top_k: int = TOP_K,
) -> list[Generation]:
    """Greedy token ids with top-k logprobs of token-id prompts, through each framework's interface
    that names tokens by id: vLLM's completions (`return_tokens_as_token_ids`), SGLang's
    `/generate`."""
    if framework == "sglang":
        return sglang_generate(server, prompts, max_tokens, top_k)
    return generate(client_for(server), model, prompts, max_tokens=max_tokens, top_k=top_k)


def generate_each(client, model: str, prompts: list, **kwargs) -> list[Generation]:
    """Each prompt in a request of its own, one after another."""
    return [generate(client, model, [prompt], **kwargs)[0] for prompt in prompts]


def first_token_divergence(reference: list[Generation], measured: list[Generation]) -> str | None:
    """Where two runs' greedy tokens first differ, with both choices and their logprobs; None if
    identical."""
    if len(reference) != len(measured):
        return f"{len(measured)} sequences, the reference has {len(reference)}"
    for index, (ref, got) in enumerate(zip(reference, measured)):
        for position, (a, b) in enumerate(zip(ref.token_ids, got.token_ids)):
            if a != b:
                return (
                    f"sequence {index} diverges at position {position}: reference token {a} "
                    f"(logprob {ref.top_logprobs[position].get(a, float('nan')):.5f}, its top-{TOP_K} "
                    f"{_top(ref.top_logprobs[position])}), this run token {b} (logprob "
                    f"{got.top_logprobs[position].get(b, float('nan')):.5f}, its top-{TOP_K} "
                    f"{_top(got.top_logprobs[position])})"
                )
        if len(ref.token_ids) != len(got.token_ids):
            return f"sequence {index}: {len(got.token_ids)} tokens, the reference has {len(ref.token_ids)}"
    return None


@dataclass
class Streamed:
    """A streamed answer's text and finish reason, and when its first and last text arrived
    (time.monotonic())."""

    text: str
    finish_reason: str | None
    first_s: float
    last_s: float


def answer_alone(client, kind: str, request: dict) -> str:
    """The text of one request sent on its own (`kind`: "chat" or "completion")."""
    if kind == "chat":
        return client.chat.completions.create(**request).choices[0].message.content or ""
    return client.completions.create(**request).choices[0].text


def stream_together(server, requests: list[tuple[str, dict]]) -> list[Streamed]:
    """(kind, request) pairs sent at once, each streamed, in the order given: the engine batches
    them, and the arrival times show which ones it generated side by side."""

    async def one(client, kind: str, request: dict) -> Streamed:
        create = client.chat.completions.create if kind == "chat" else client.completions.create
        stream = await create(stream=True, **request)
        parts, finish, first, last = [], None, 0.0, 0.0
        async for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            text = (choice.delta.content if kind == "chat" else choice.text) or ""
            if text:
                last = time.monotonic()
                first = first or last
                parts.append(text)
            finish = choice.finish_reason or finish
        return Streamed("".join(parts), finish, first, last)

    async def run():
        async with async_client_for(server) as client:
            return await asyncio.gather(*(one(client, kind, request) for kind, request in requests))

    return list(asyncio.run(run()))


def generated_side_by_side(a: Streamed, b: Streamed) -> bool:
    """Whether two streamed answers were being generated at the same time (so in the same steps)."""
    return max(a.first_s, b.first_s) < min(a.last_s, b.last_s)


def transformers_greedy(
    model_path: str, prompts: list[list[int]], max_tokens: int, top_k: int = TOP_K
) -> list[Generation]:
    """The reference: transformers' own greedy `generate` on the same weights in float32 on the CPU,
    each prompt alone, never stopping at EOS, with the top-k logprobs of every step."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    generations = []
    for prompt in prompts:
        # A plain loop over the raw logits, not `generate`: its EOS handling would mask logits, and
        # the served side ignores EOS without masking it.
        ids, tops, past, step_input = [], [], None, torch.tensor([prompt])
        with torch.no_grad():
            for _ in range(max_tokens):
                out = model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logprobs = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
                values, indices = logprobs.topk(top_k)
                tops.append(dict(zip(indices.tolist(), values.tolist())))
                ids.append(int(indices[0]))
                step_input = torch.tensor([[ids[-1]]])
        generations.append(
            Generation(text="", token_ids=ids, top_logprobs=tops, finish_reason="length")
        )
    return generations


def golden_layout(generations: list[Generation]) -> dict:
    """Generations as the golden gates compare them (token ids, top-k logprobs best first)."""
    from pytest_rocm.gates.golden import as_golden

    return as_golden([g.token_ids for g in generations], [g.top_logprobs for g in generations])


def assert_close_by_vllm_rule(
    reference: list[Generation], measured: list[Generation], what: str
) -> None:
    """vLLM's check_logprobs_close: at the first differing token each side's choice must be in the
    other's top-k (near-ties between implementations are not regressions); the message names the
    divergence."""
    from pytest_rocm.gates.golden import first_divergence

    problem = first_divergence(golden_layout(reference), golden_layout(measured))
    assert problem is None, f"{what}: {problem}"


def gate_worst_error(
    accuracy_gate, errors: dict[str, float], metric: str = "max_abs_error"
) -> None:
    """Gate the worst of several cases' errors against the baseline (lower is better), naming the
    first case past it and every case's error. NaN compares false everywhere: a NaN error is the
    worst and fails."""
    worst = max(
        errors, key=lambda name: float("inf") if errors[name] != errors[name] else errors[name]
    )
    detail = ", ".join(f"{name} {error:.3g}" for name, error in errors.items())
    try:
        accuracy_gate.check(metric, errors[worst], direction="lower")
    except pytest.fail.Exception as exc:
        pytest.fail(
            f"{exc.msg}\nfirst case past it: {worst} (max abs error {errors[worst]:.3g}); all cases: {detail}",
            pytrace=False,
        )


def _top(top: dict[int, float]) -> str:
    return (
        "{" + ", ".join(f"{t}: {v:.4f}" for t, v in sorted(top.items(), key=lambda x: -x[1])) + "}"
    )


def assert_same_tokens(reference: list[Generation], measured: list[Generation], what: str) -> None:
    divergence = first_token_divergence(reference, measured)
    assert divergence is None, f"{what}: {divergence}"


def worst_logprob_difference(
    reference: list[Generation], measured: list[Generation]
) -> tuple[float, str]:
    """The largest difference between two runs' top-k logprobs of the same tokens (every position
    both runs reached with the same tokens before it, every token both list there), and where; a
    token one side lists at a position and the other does not counts only if it is either side's
    chosen token (its logprob is then missing: infinite)."""
    worst, where = 0.0, "no position compared"
    for index, (ref, got) in enumerate(zip(reference, measured)):
        for position, (a, b) in enumerate(zip(ref.token_ids, got.token_ids)):
            if a != b:
                break
            ref_top, got_top = ref.top_logprobs[position], got.top_logprobs[position]
            for token in set(ref_top) | set(got_top):
                if token in ref_top and token in got_top:
                    gap = abs(ref_top[token] - got_top[token])
                elif token == a:
                    gap = float("inf")
                else:
                    continue  # a near-tie at the edge of the top-k
                if gap > worst:
                    worst = gap
                    where = (
                        f"sequence {index} position {position} token {token}: reference "
                        f"{ref_top.get(token, float('nan')):.5f}, this run "
                        f"{got_top.get(token, float('nan')):.5f}"
                    )
    return worst, where


def assert_openai_error(error: openai.APIStatusError, what: str, status: int | None = None) -> None:
    """A refused request answered in OpenAI's error shape: a 4xx (or exactly `status`), a body of
    only {"error": {...}} with a non-empty message, a type, and the status as its code."""
    if status is None:
        assert 400 <= error.status_code < 500, f"{what}: status {error.status_code}"
    else:
        assert error.status_code == status, (
            f"{what}: status {error.status_code}, expected {status}: {error.message}"
        )
    body = error.response.json()
    assert set(body) == {"error"}, f"{what}: {body}"
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], f"{what}: {body}"
    assert isinstance(body["error"]["type"], str) and body["error"]["code"] == error.status_code, (
        f"{what}: {body}"
    )


def gpu_runner() -> bool:
    """Whether this process sees a GPU (ROCm's torch answers through `torch.cuda` too); False
    without torch."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def tokenize(server, model: str, prompt: str) -> list[int]:
    """The served model's token ids of a prompt (the /tokenize of vLLM and SGLang): the same input
    for the server and a reference."""
    request = urllib.request.Request(
        server.url + "/tokenize",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"model": model, "prompt": prompt}).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["tokens"]


def metrics(server) -> dict[str, float]:
    """The server's Prometheus samples, summed over labels except `finished_reason` (name{reason} ->
    value)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if "finished_reason" in sample.labels:
                name += "{" + sample.labels["finished_reason"] + "}"
            values[name] = values.get(name, 0.0) + sample.value
    return values


# Prompts with long shared prefixes and repetition: prefix caching hits, n-gram drafts get accepted.
SHARED_PREFIX = (
    "def wrap(text, width=70, **kwargs):\n    w = TextWrapper(width=width, **kwargs)\n"
    "    return w.wrap(text)\n\n"
) * 3
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fill(text, width=70):",
    "import re\n",
    "Hello, my name is",
    "class TextWrapper:\n    def __init__(self, width=70):",
    "a b c d e f g h",
    "text = text.expandtabs(self.tabsize)",
    "Once upon a time",
]


def check_all(checks) -> None:
    """Run every gate check (callables), so each metric is measured, recorded and compared even when
    an earlier one fails; then fail once with every failure's message."""
    failures = []
    for check in checks:
        try:
            check()
        except pytest.fail.Exception as exc:
            failures.append(str(exc))
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
