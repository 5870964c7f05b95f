"""Sampling parameters against a reference that cannot share the engine's bug: transformers' own
logits processors (`RepetitionPenaltyLogitsProcessor`, `MinNewTokensLengthLogitsProcessor`,
`SequenceBiasLogitsProcessor`, `TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`,
`MinPLogitsWarper`) on the same weights, in the order the engine applies them, at every step of
what the server generated.

Greedy requests compare tokens exactly (same platform, float32) and stop where the reference stops.
Sampled requests are checked as distributions: every sampled token must lie in the reference's
support (a token the processors remove is never sampled), and the tokens fall into buckets (the
reference's most likely token, the second, the rest, and the boundary: the least likely token the
processors keep) as often as the reference's probabilities say, within `MAX_DEVIATIONS` standard
deviations of the expected count. With fixed seeds the counts are reproducible on a platform; the
bound is far outside the measured spread. The logprobs the server returns for each sampled token and its
top-k are compared with the reference's at the same position, so a non-argmax sample's logprob is
checked too.

What each framework's numbers mean (measured, and read in their sources):
- vLLM returns raw logprobs (before penalties and temperature: `logprobs_mode` raw_logprobs, the
  default), and its repetition penalty counts prompt and output tokens, as transformers' does.
- SGLang returns the logprobs of the distribution it samples from: after penalties, logit bias and
  temperature, before top-k, top-p and min-p (`log_softmax(logits / T)`,
  sglang/srt/layers/sampler.py; a greedy request's temperature is 1 there), and its repetition
  penalty counts output tokens only (sglang/srt/sampling/penaltylib/repetition_penalty.py
  `_cumulate_output_tokens`); its `ignore_eos` also ignores `stop_token_ids`
  (schedule_batch.py `_check_token_based_finish`). The reference follows each framework's
  definition (`FRAMEWORK_SEMANTICS`).
"""

from __future__ import annotations

import json
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field

from gate_support import TOP_K, client_for, token_id

# A token whose removal or keeping depends on a difference in the last float32 digits between the
# engine's logits and the reference's is neither in nor out: the support is loosened by this much
# (top_p + SLACK, min_p - SLACK, top-k keeps logits within SLACK of the k-th). Measured: the tiny
# model's logprobs differ by at most 2e-5 between vLLM and transformers here.
SLACK = 1e-4
# A bucket is judged when its expected count is at least this: below it, a count says little.
MIN_EXPECTED = 20
# A judged bucket's count may differ from the expected count by at most this many standard
# deviations (its variance: the sum over steps of q(1 - q), q the bucket's probability at the
# step). With fixed seeds the counts are reproducible on a platform; at 5 standard deviations a
# correct engine fails a bucket with probability below 1e-6 whatever its random stream (other
# platforms, SGLang's unseeded draws). Measured on the CPU: every judged bucket of every case within
# 2.2; the injected faults put theirs 12 and more off (a dropped boundary token), a temperature
# applied twice or not at all 10 and more.
MAX_DEVIATIONS = 5.0

FRAMEWORK_SEMANTICS = {
    "vllm": {"logprobs": "raw", "repetition_scope": "prompt and output"},
    "sglang": {"logprobs": "processed", "repetition_scope": "output"},
}
# The names a request uses in SGLang's native /generate where they differ from vLLM's (OpenAI's).
SGLANG_NAMES = {"min_tokens": "min_new_tokens", "max_tokens": "max_new_tokens"}
# Fields of OpenAI's completions API the client takes as keywords; the rest go in extra_body.
OPENAI_NATIVE = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "stop",
)


@dataclass
class Sampled:
    """One served sequence: its prompt, tokens, each token's logprob and top-k, and why it ended."""

    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    finish_reason: str
    stop_reason: object = None


@dataclass
class Judgement:
    """What a distribution check found: samples outside the support, bucket counts, logprob errors."""

    steps: int = 0
    outside: list[str] = field(default_factory=list)
    observed: dict[str, int] = field(default_factory=dict)
    expected: dict[str, float] = field(default_factory=dict)
    variance: dict[str, float] = field(default_factory=dict)
    not_argmax: int = 0
    worst_logprob_error: float = 0.0
    worst_logprob_at: str = ""

    def deviations(self) -> dict[str, float]:
        """(observed - expected) / standard deviation of each judged bucket."""
        return {
            name: (self.observed.get(name, 0) - expected) / max(self.variance[name], 1e-9) ** 0.5
            for name, expected in self.expected.items()
            if expected >= MIN_EXPECTED
        }

    def summary(self) -> str:
        deviations = self.deviations()
        buckets = ", ".join(
            f"{name} {self.observed.get(name, 0)}/{self.expected[name]:.1f}"
            + (f" ({deviations[name]:+.1f} sd)" if name in deviations else "")
            for name in self.expected
        )
        return (
            f"{self.steps} sampled tokens, {self.not_argmax} not the most likely; observed/expected: "
            f"{buckets}; worst logprob error {self.worst_logprob_error:.2e} ({self.worst_logprob_at})"
        )

    def problems(self, logprob_atol: float) -> list[str]:
        found = []
        if self.outside:
            found.append(
                f"{len(self.outside)} sampled tokens lie outside the reference's support, first: "
                f"{self.outside[0]}"
            )
        for name, deviation in self.deviations().items():
            if abs(deviation) > MAX_DEVIATIONS:
                found.append(
                    f"bucket {name!r}: {self.observed.get(name, 0)} samples, the reference expects "
                    f"{self.expected[name]:.1f} ({deviation:+.1f} standard deviations, at most "
                    f"{MAX_DEVIATIONS:g})"
                )
        if self.worst_logprob_error > logprob_atol:
            found.append(
                f"a sampled token's logprob differs from the reference's by {self.worst_logprob_error:.4f} "
                f"(> {logprob_atol}): {self.worst_logprob_at}"
            )
        return found


def served(
    server,
    framework: str,
    model: str,
    prompts: list[list[int]],
    params: dict,
    n: int,
    max_tokens: int,
) -> list[Sampled]:
    """`n` sequences per prompt with these sampling parameters (vLLM's names), with the top-k
    logprobs of every token; prompt after prompt, each prompt's `n` together. A `seed` seeds the
    sequences seed, seed + 1, ... (vLLM's `n`; SGLang's `sampling_seed`, applied only in its
    deterministic mode)."""
    if framework == "sglang":
        return _sglang(server, prompts, params, n, max_tokens)
    body = dict(params)
    native = {name: body.pop(name) for name in OPENAI_NATIVE if name in body}
    if "logit_bias" in native:
        native["logit_bias"] = {str(t): b for t, b in native["logit_bias"].items()}
    response = client_for(server).completions.create(
        model=model,
        prompt=prompts,
        n=n,
        max_tokens=max_tokens,
        logprobs=TOP_K,
        seed=body.pop("seed", None),
        extra_body={"return_tokens_as_token_ids": True, **body},
        **native,
    )
    results = []
    for choice in sorted(response.choices, key=lambda c: c.index):
        lp = choice.logprobs
        results.append(
            Sampled(
                prompt=prompts[choice.index // n],
                tokens=[token_id(t) for t in lp.tokens],
                logprobs=list(lp.token_logprobs),
                top=[{token_id(t): v for t, v in top.items()} for top in lp.top_logprobs],
                finish_reason=choice.finish_reason,
                stop_reason=getattr(choice, "stop_reason", None),
            )
        )
    return results


def _sglang(server, prompts, params, n, max_tokens) -> list[Sampled]:
    base = {SGLANG_NAMES.get(k, k): v for k, v in params.items() if k != "seed"}
    if "logit_bias" in base:
        base["logit_bias"] = {str(t): b for t, b in base["logit_bias"].items()}
    base["max_new_tokens"] = max_tokens
    seed = params.get("seed")
    sampling = [
        {**base, **({"sampling_seed": seed + i} if seed is not None else {})}
        for _ in prompts
        for i in range(n)
    ]
    body = {
        "input_ids": [p for p in prompts for _ in range(n)],
        "return_logprob": True,
        "top_logprobs_num": TOP_K,
        "sampling_params": sampling,
    }
    request = urllib.request.Request(
        server.url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        answers = json.loads(response.read())
    results = []
    for index, answer in enumerate(answers):
        meta = answer["meta_info"]
        finish = meta.get("finish_reason") or {}
        results.append(
            Sampled(
                prompt=prompts[index // n],
                tokens=[int(e[1]) for e in meta["output_token_logprobs"]],
                logprobs=[float(e[0]) for e in meta["output_token_logprobs"]],
                top=[{int(e[1]): float(e[0]) for e in top} for top in meta["output_top_logprobs"]],
                finish_reason=finish.get("type", ""),
                stop_reason=finish.get("matched"),
            )
        )
    return results


class _OpenAIPenalties:
    """OpenAI's presence and frequency penalties (transformers has no processor for them), from
    their definition: logit - presence * [count > 0] - frequency * count, over the output tokens."""

    def __init__(self, prompt_length: int, presence: float, frequency: float):
        self.prompt_length, self.presence, self.frequency = prompt_length, presence, frequency

    def __call__(self, input_ids, scores):
        import torch

        output = input_ids[:, self.prompt_length :]
        counts = torch.zeros_like(scores)
        if output.numel():
            counts.scatter_add_(1, output, torch.ones_like(output, dtype=scores.dtype))
        return scores - self.presence * (counts > 0).to(scores.dtype) - self.frequency * counts


class _OutputOnly:
    """A processor that sees the output tokens only (SGLang's repetition penalty)."""

    def __init__(self, processor, prompt_length: int):
        self.processor, self.prompt_length = processor, prompt_length

    def __call__(self, input_ids, scores):
        output = input_ids[:, self.prompt_length :]
        return self.processor(output, scores) if output.numel() else scores


class _TopKWithSlack:
    """Top-k that also keeps the tokens within `slack` of the k-th logit (near-ties)."""

    def __init__(self, k: int, slack: float):
        self.k, self.slack = k, slack

    def __call__(self, input_ids, scores):
        kth = scores.topk(min(self.k, scores.shape[-1]), dim=-1).values[..., -1:]
        return scores.masked_fill(scores < kth - self.slack, float("-inf"))


def processors(params: dict, framework: str, prompt_length: int, eos: int, slack: float = 0.0):
    """transformers' processors for `params` in the engine's order: (before temperature: what
    greedy decoding takes the argmax of; after: temperature and the filters sampling uses)."""
    from transformers.generation import logits_process as lp

    before, after = [], []
    if params.get("allowed_token_ids"):
        allowed = [int(t) for t in params["allowed_token_ids"]]
        before.append(lp.PrefixConstrainedLogitsProcessor(lambda batch, ids: allowed, num_beams=1))
    if params.get("min_tokens"):
        stops = [eos, *params.get("stop_token_ids", [])]
        before.append(
            lp.MinNewTokensLengthLogitsProcessor(prompt_length, params["min_tokens"], stops)
        )
    if params.get("logit_bias"):
        bias = {(int(t),): float(b) for t, b in params["logit_bias"].items()}
        before.append(lp.SequenceBiasLogitsProcessor(bias))
    if params.get("repetition_penalty", 1.0) != 1.0:
        penalty = lp.RepetitionPenaltyLogitsProcessor(params["repetition_penalty"])
        if FRAMEWORK_SEMANTICS[framework]["repetition_scope"] == "output":
            penalty = _OutputOnly(penalty, prompt_length)
        before.append(penalty)
    if params.get("presence_penalty") or params.get("frequency_penalty"):
        before.append(
            _OpenAIPenalties(
                prompt_length,
                params.get("presence_penalty", 0.0),
                params.get("frequency_penalty", 0.0),
            )
        )
    temperature = params.get("temperature", 1.0)
    if temperature not in (0.0, 1.0):
        after.append(lp.TemperatureLogitsWarper(temperature))
    if params.get("min_p"):
        after.append(lp.MinPLogitsWarper(params["min_p"] - slack))
    if params.get("top_k", -1) > 0:
        after.append(_TopKWithSlack(params["top_k"], slack))
    if params.get("top_p", 1.0) < 1.0:
        after.append(lp.TopPLogitsWarper(min(1.0, params["top_p"] + slack)))
    return before, after


@contextmanager
def one_thread():
    """torch on one thread while the reference computes: its ops are small, and beside the servers on
    a loaded machine several threads wait on each other (measured: a distribution check took 8.3 s
    with torch's default threads, 0.19 s with one)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Reference:
    """transformers' model on the same folder, float32 on the CPU."""

    def __init__(self, model_path: str):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.eos = int(self.model.config.eos_token_id)

    def step_logits(self, prompt: list[int], tokens: list[int]):
        """The raw logits the model gives at each generated position of prompt + tokens:
        [len(tokens), vocab]."""
        torch = self.torch
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([prompt + tokens[:-1]]))
        return out.logits[0, len(prompt) - 1 :].float()

    def _all_step_logits(self, samples: list[Sampled]) -> list:
        """`step_logits` of every sample, one forward pass per group of equal inputs' length."""
        torch = self.torch
        groups: dict[int, list[int]] = {}
        for index, sample in enumerate(samples):
            if sample.tokens:
                groups.setdefault(len(sample.prompt) + len(sample.tokens), []).append(index)
        logits: list = [None] * len(samples)
        for members in groups.values():
            inputs = torch.tensor([samples[i].prompt + samples[i].tokens[:-1] for i in members])
            with torch.no_grad():
                out = self.model(input_ids=inputs).logits.float()
            for row, i in enumerate(members):
                logits[i] = out[row, len(samples[i].prompt) - 1 :]
        return logits

    def greedy(self, prompt: list[int], params: dict, framework: str, max_tokens: int) -> Sampled:
        """Greedy decoding with the processors of `params`, stopping as the engine does: at a stop
        token (EOS unless `ignore_eos`, `stop_token_ids`), or at `max_tokens`."""
        torch = self.torch
        before, _ = processors(params, framework, len(prompt), self.eos)
        stops = set(params.get("stop_token_ids", [])) | (
            set() if params.get("ignore_eos") else {self.eos}
        )
        ids, tokens, logprobs, tops, past = list(prompt), [], [], [], None
        step_input = torch.tensor([prompt])
        finish, stop_reason = "length", None
        with torch.no_grad(), one_thread():
            for _ in range(max_tokens):
                out = self.model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                raw = out.logits[0, -1].float()
                scores = raw.unsqueeze(0)
                for processor in before:
                    scores = processor(torch.tensor([ids]), scores)
                token = int(scores[0].argmax())
                processed = FRAMEWORK_SEMANTICS[framework]["logprobs"] == "processed"
                logprob = torch.log_softmax(scores[0] if processed else raw, dim=-1)
                values, indices = logprob.topk(TOP_K)
                tokens.append(token)
                logprobs.append(float(logprob[token]))
                tops.append(dict(zip(indices.tolist(), values.tolist())))
                ids.append(token)
                step_input = torch.tensor([[token]])
                if token in stops:
                    finish = "stop"
                    stop_reason = token if token != self.eos else None
                    break
        return Sampled(prompt, tokens, logprobs, tops, finish, stop_reason)

    def judge(self, samples: list[Sampled], params: dict, framework: str) -> Judgement:
        """Every sampled token against the reference's distribution at its step (see the module's
        docstring)."""
        with one_thread():
            return self._judge(samples, params, framework)

    def _judge(self, samples: list[Sampled], params: dict, framework: str) -> Judgement:
        torch = self.torch
        judgement = Judgement()
        temperature = params.get("temperature", 1.0) or 1.0
        processed = FRAMEWORK_SEMANTICS[framework]["logprobs"] == "processed"
        logits = self._all_step_logits(samples)
        for index, sample in enumerate(samples):
            if not sample.tokens:
                continue
            raw = logits[index]
            tokens = torch.tensor(sample.tokens)
            penalized, q = self._distributions(sample, raw, params, framework, 0.0)
            chosen = q.gather(1, tokens.unsqueeze(1)).squeeze(1)
            if bool((chosen <= 0).any()):
                _, loose = self._distributions(sample, raw, params, framework, SLACK)
                for position in (chosen <= 0).nonzero().flatten().tolist():
                    if loose[position, sample.tokens[position]] <= 0:
                        kept = sorted((q[position] > 0).nonzero().flatten().tolist())
                        judgement.outside.append(
                            f"sequence {index} position {position} token {sample.tokens[position]} "
                            f"(kept: {kept[:12]}{' ...' if len(kept) > 12 else ''})"
                        )
            judgement.steps += len(sample.tokens)
            _count(judgement, q, tokens)
            judgement.not_argmax += int((tokens != raw.argmax(dim=-1)).sum())
            reference = torch.log_softmax(penalized / temperature if processed else raw, dim=-1)
            _compare_logprobs(judgement, index, sample, reference)
        return judgement

    def _distributions(self, sample: Sampled, raw, params, framework, slack):
        """(the logits after the processors before temperature, the reference's sampling
        distribution) at every step of `sample`: [steps, vocab] each."""
        torch = self.torch
        before, after = processors(params, framework, len(sample.prompt), self.eos, slack)
        scores = raw.clone()
        if before:  # they read the tokens so far: one step at a time
            ids = sample.prompt + sample.tokens
            rows = []
            for position in range(len(sample.tokens)):
                row = scores[position : position + 1]
                prefix = torch.tensor([ids[: len(sample.prompt) + position]])
                for processor in before:
                    row = processor(prefix, row)
                rows.append(row)
            scores = torch.cat(rows)
        penalized = scores
        dummy = torch.zeros((scores.shape[0], 1), dtype=torch.long)
        for processor in after:  # temperature and filters: the same on every row
            scores = processor(dummy, scores)
        return penalized, torch.softmax(scores, dim=-1)


def _count(judgement: Judgement, q, tokens) -> None:
    """Each step's sampled token into the buckets of the reference's distribution at that step."""
    import torch

    ordered, order = q.sort(dim=-1, descending=True)
    kept = (q > 0).sum(dim=-1)
    rank = (order == tokens.unsqueeze(1)).float().argmax(dim=-1)
    rows = torch.arange(q.shape[0])
    boundary_rows = kept >= 2
    last = ordered[rows, (kept - 1).clamp(min=0)]
    buckets = {
        "most likely": (ordered[:, 0], rank == 0),
        "second": (ordered[:, 1], rank == 1),
        "third and after": ((1 - ordered[:, 0] - ordered[:, 1]).clamp(min=0), rank >= 2),
        "boundary (least likely kept)": (
            torch.where(boundary_rows, last, torch.zeros_like(last)),
            boundary_rows & (rank == kept - 1),
        ),
    }
    for name, (mass, hit) in buckets.items():
        judgement.expected[name] = judgement.expected.get(name, 0.0) + float(mass.sum())
        judgement.variance[name] = judgement.variance.get(name, 0.0) + float(
            (mass * (1 - mass)).sum()
        )
        judgement.observed[name] = judgement.observed.get(name, 0) + int(hit.sum())


def _compare_logprobs(judgement: Judgement, index: int, sample: Sampled, reference) -> None:
    """The served logprob of each sampled token and of its top-k against the reference's."""
    for position, token in enumerate(sample.tokens):
        served_here = {token: sample.logprobs[position], **sample.top[position]}
        for listed, value in served_here.items():
            want = float(reference[position, listed])
            error = abs(value - want)
            if error > judgement.worst_logprob_error:
                judgement.worst_logprob_error = error
                judgement.worst_logprob_at = (
                    f"sequence {index} position {position} (sampled token {token}): served logprob "
                    f"of token {listed} {value:.5f}, reference {want:.5f}"
                )
