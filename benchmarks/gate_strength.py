"""Gate strength: inject small regressions into the served vLLM engine and count how many the suites
catch.

Each regression is patched into the server's processes only (the API server and its engine core), at
import, by a `sitecustomize` module on PYTHONPATH that acts when PYTEST_ROCM_INJECT names it and the
process is not pytest itself; no installed package is edited. For each, the suite tests that should
catch it run against the patched server (`pytest -c suites/pytest.ini ...`), and the regression
counts as caught when at least one of them ends with the verdict `regression` (failed again on
rerun). A control run without any injection shows the same tests pass, so a failure is the
injection's doing.

Prints caught / injected, and each miss by name. Goal (issue 14): every injected regression caught.

    .venv/bin/python benchmarks/gate_strength.py [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> (what it breaks, the tests that should catch it, module to patch, patch code run after its
# import)
INJECTIONS = {
    "abort-not-forwarded": (
        "the API server acknowledges an abort but the engine never receives it (the request keeps generating)",
        [
            "engine/test_engine.py::test_aborted_request_does_not_disturb_others",
            "engine/test_engine.py::test_an_abort_stops_the_engine_promptly",
        ],
        "vllm.v1.engine.core_client",
        # every path to the engine: the client's abort, and the output handler's abort of outputs
        # for requests it no longer knows (vLLM's own safety net, which would otherwise stop the
        # request a step later)
        """
        async def abort_requests_async(self, request_ids):
            return None
        module.AsyncMPClient.abort_requests_async = abort_requests_async
        """,
    ),
    "logprobs-scaled": (
        "returned logprobs scaled by 0.9, tokens unchanged",
        ["engine/test_engine.py::test_golden_outputs"],
        "vllm.v1.engine.logprobs",
        """
        original = module.LogprobsProcessor._update_sample_logprobs
        def scaled(self, lists):
            return original(self, lists._replace(logprobs=[row * 0.9 for row in lists.logprobs]))
        module.LogprobsProcessor._update_sample_logprobs = scaled
        """,
    ),
    "greedy-second-best": (
        "greedy sampling takes the second-best token",
        [
            "engine/test_engine.py::test_golden_outputs",
            "api/test_openai_api.py::test_chat_logprobs_shape_and_greedy_top1[vllm]",
        ],
        "vllm.v1.sample.sampler",
        """
        def greedy_sample(logits):
            return logits.topk(2, dim=-1).indices[:, 1].contiguous().view(-1)
        module.Sampler.greedy_sample = staticmethod(greedy_sample)
        """,
    ),
    "greedy-wrong-mid-life": (
        "a fault that depends on the server's state: greedy sampling takes the second-best token on "
        "the server's sampler calls 30 to 40 only (as a prefix-cache block that goes stale on its "
        "third reuse: a warm server is past it, a fresh one reaches it again); caught only where the "
        "rerun starts a fresh server (issue 50)",
        # a second test of the module after it keeps the module's server warm for a rerun
        [
            "engine/test_engine.py::test_greedy_is_deterministic",
            "engine/test_engine.py::test_batch_invariance",
        ],
        "vllm.v1.sample.sampler",
        """
        original = module.Sampler.greedy_sample
        calls = [0]
        def greedy_sample(logits):
            calls[0] += 1
            if 30 <= calls[0] <= 40:
                return logits.topk(2, dim=-1).indices[:, 1].contiguous().view(-1)
            return original(logits)
        module.Sampler.greedy_sample = staticmethod(greedy_sample)
        """,
    ),
    "seeded-noise-reused": (
        "seeded sampling draws the same noise at every step (the seed is not advanced): a seeded "
        "sample is reproducible but far less varied (issue 50)",
        ["engine/test_sampling.py::test_seeded_sampling_spreads_like_unseeded"],
        "vllm.v1.sample.ops.topk_topp_sampler",
        """
        import torch
        def forward_cpu(self, logits, generators, k, p):
            logits = module.apply_top_k_top_p(logits, k, p)
            seeds = torch.randint(0, 2**31, (logits.shape[0],), dtype=torch.long)
            for i, gen in generators.items():
                seeds[i] = gen.initial_seed() % 2**31
            return torch.ops._C.fused_gumbel_argmax(logits.to(dtype=torch.float32), seeds), None
        module.TopKTopPSampler.forward_cpu = forward_cpu
        """,
    ),
    "top1-logprob-bf16": (
        "the sampled token's logprob rounded to bfloat16 (at most 0.016 off; tokens unchanged)",
        [
            "engine/test_engine.py::test_golden_outputs",
            "engine/test_sampling.py::test_a_generated_tokens_logprob_is_its_prompt_logprob",
        ],
        "vllm.v1.engine.logprobs",
        """
        import numpy as np
        original = module.LogprobsProcessor._update_sample_logprobs
        def bf16(values):
            bits = np.asarray(values, dtype=np.float32).copy().view(np.uint32)
            bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
            return (bits & np.uint32(0xFFFF0000)).view(np.float32)
        def rounded(self, lists):
            logprobs = np.array(lists.logprobs, dtype=np.float32)
            logprobs[..., 0] = bf16(logprobs[..., 0])
            return original(self, lists._replace(logprobs=logprobs))
        module.LogprobsProcessor._update_sample_logprobs = rounded
        """,
    ),
    "spec-rejects-1-in-10": (
        "speculative decoding rejects every 10th correct draft (tokens unchanged, fewer accepted)",
        ["spec_decode/test_ngram.py::test_forced_drafts_are_all_accepted"],
        "vllm.v1.sample.rejection_sampler",
        """
        original = module.rejection_sample
        accepted = [0]
        def rejection_sample(draft_token_ids, num_draft_tokens, *args, **kwargs):
            out = original(draft_token_ids, num_draft_tokens, *args, **kwargs)
            for row, drafts in enumerate(num_draft_tokens):
                for position in range(drafts):
                    if out[row, position + 1] == module.PLACEHOLDER_TOKEN_ID:
                        break  # this draft was rejected: the ones after it never count
                    accepted[0] += 1
                    if accepted[0] % 10 == 0:  # reject it: its token stands, nothing after it
                        out[row, position + 1 :] = module.PLACEHOLDER_TOKEN_ID
                        break
            return out
        module.rejection_sample = rejection_sample
        """,
    ),
    "usage-off-by-one": (
        "completion usage counts one token too many",
        ["api/test_openai_api.py::test_completion_usage_adds_up[vllm]"],
        "vllm.entrypoints.openai.completion.serving",
        """
        usage_info = module.UsageInfo
        def counted(**fields):
            if "completion_tokens" in fields:
                fields["completion_tokens"] += 1
                fields["total_tokens"] = fields.get("prompt_tokens", 0) + fields["completion_tokens"]
            return usage_info(**fields)
        module.UsageInfo = counted
        """,
    ),
    # Issue 62: six regressions modeled on bug classes upstream engines have shipped, each where the
    # suites used to exercise a feature on one path only.
    "topp-drops-boundary": (
        "top-p filtering with an exclusive cumulative sum: the token whose probability crosses the "
        "threshold is dropped with those below it (tokens sampled from a smaller nucleus)",
        [
            "engine/test_sampling_params.py::test_sampled_distribution_matches_transformers[vllm-top_p]"
        ],
        "vllm.v1.sample.ops.topk_topp_sampler",
        """
        import torch
        original = module.apply_top_k_top_p
        def apply_top_k_top_p(logits, k, p):
            if p is None:
                return original(logits, k, p)
            if k is not None:
                logits = original(logits, k, None)
            logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
            probs_sort = logits_sort.softmax(dim=-1)
            below = torch.cumsum(probs_sort, dim=-1) - probs_sort  # the mass below each token
            top_p_mask = below <= 1 - p.unsqueeze(dim=1)
            top_p_mask[:, -1] = False
            logits_sort.masked_fill_(top_p_mask, -float("inf"))
            return logits.scatter_(dim=-1, index=logits_idx, src=logits_sort)
        module.apply_top_k_top_p = apply_top_k_top_p
        """,
    ),
    "sampled-logprob-of-top1": (
        "the sampler reports the most likely token's logprob for whatever token it sampled "
        "(greedy requests unchanged: there the sampled token is the most likely)",
        [
            "engine/test_sampling.py::test_a_sampled_tokens_logprob_is_its_prompt_logprob",
            "engine/test_sampling_params.py::test_sampled_distribution_matches_transformers[vllm-temperature_0.6]",
        ],
        "vllm.v1.sample.sampler",
        """
        original = module.Sampler.forward
        def forward(self, logits, sampling_metadata, *args, **kwargs):
            wanted = sampling_metadata.max_num_logprobs not in (None, -1)
            top1 = logits.float().log_softmax(dim=-1).max(dim=-1).values if wanted else None
            output = original(self, logits, sampling_metadata, *args, **kwargs)
            if wanted and output.logprobs_tensors is not None:
                output.logprobs_tensors.logprobs[:, 0] = top1
            return output
        module.Sampler.forward = forward
        """,
    ),
    "grammar-mask-all-rows": (
        "a structured-output request's grammar bitmask applied to the plain requests batched with it "
        "(alone, every request is right)",
        ["api/test_mixed_batches.py::test_structured_requests_beside_plain_ones[vllm]"],
        "vllm.v1.worker.gpu_model_runner",
        """
        import numpy as np
        import torch
        import xgrammar as xgr
        original = module.apply_grammar_bitmask
        def apply_grammar_bitmask(scheduler_output, grammar_output, input_batch, logits):
            spec = scheduler_output.scheduled_spec_decode_tokens
            structured = set(grammar_output.structured_output_request_ids)
            rows, offset = [], 0
            for batch_index, req_id in enumerate(input_batch.req_ids):
                width = 1 + len(spec.get(req_id, ()))
                if req_id not in structured:
                    rows.extend(range(batch_index + offset, batch_index + offset + width))
                offset += width - 1
            original(scheduler_output, grammar_output, input_batch, logits)
            if rows:
                first = np.ascontiguousarray(grammar_output.grammar_bitmask[:1])
                mask = torch.from_numpy(first).expand(len(rows), -1).contiguous()
                plain = logits[rows].float().contiguous()
                xgr.apply_token_bitmask_inplace(plain, mask)
                logits[rows] = plain.to(logits.dtype)
        module.apply_grammar_bitmask = apply_grammar_bitmask
        """,
    ),
    "mm-cache-text-only": (
        "prefix-cache blocks hashed without the images they hold (a second image with the same text "
        "is answered from the first image's cached KV)",
        ["multimodal/test_images.py::test_a_cached_image_prefix_is_keyed_by_the_image"],
        "vllm.v1.core.kv_cache_utils",
        """
        def _gen_mm_extra_hash_keys(request, start_token_idx, end_token_idx, start_mm_idx):
            return [], start_mm_idx
        module._gen_mm_extra_hash_keys = _gen_mm_extra_hash_keys
        """,
    ),
    "spec-logprobs-shifted": (
        "speculative decoding reports each accepted draft token's logprobs from the position after it "
        "(tokens unchanged)",
        ["spec_decode/test_ngram.py::test_ngram_is_lossless"],
        "vllm.v1.sample.rejection_sampler",
        """
        import torch
        def _get_logprobs_tensors(self, max_num_logprobs, metadata, logits, target_logits, bonus_logits, sampled_token_ids):
            starts = torch.zeros_like(metadata.cu_num_sampled_tokens)
            starts[1:] = metadata.cu_num_sampled_tokens[:-1]
            final_logits = torch.zeros_like(logits, dtype=torch.float32)
            final_logits[metadata.target_logits_indices] = target_logits.to(torch.float32)
            final_logits[metadata.bonus_logits_indices] = bonus_logits.to(torch.float32)
            offsets = torch.arange(sampled_token_ids.shape[-1], dtype=starts.dtype)
            drafts = torch.tensor(metadata.num_draft_tokens, dtype=starts.dtype)
            shift = (offsets.unsqueeze(0) < drafts.unsqueeze(1)).to(starts.dtype)
            indices = (starts.unsqueeze(1) + offsets.unsqueeze(0) + shift).flatten()
            indices.clamp_(max=final_logits.shape[0] - 1)
            tokens = sampled_token_ids.clone().flatten()
            tokens[tokens == module.PLACEHOLDER_TOKEN_ID] = 0
            chosen = final_logits[indices]
            logprobs = chosen if self.is_logits_logprobs_mode else self.sampler.compute_logprobs(chosen)
            return self.sampler.gather_logprobs(logprobs, max_num_logprobs, tokens.to(torch.int64))
        module.RejectionSampler._get_logprobs_tensors = _get_logprobs_tensors
        """,
    ),
    "spec-stop-past-draft": (
        "stop conditions checked once per step, on its last token: a stop token (or max_tokens) inside "
        "an accepted draft is run past (without speculation a step has one token: unchanged)",
        ["spec_decode/test_ngram.py::test_stop_conditions_inside_drafts_match_the_plain_server"],
        "vllm.v1.core.sched.scheduler",
        """
        check_stop = module.check_stop
        def _update_request_with_output(self, request, new_token_ids, is_stale=False):
            for output_token_id in new_token_ids:
                request.append_output_token_ids(output_token_id)
            stopped = bool(new_token_ids) and check_stop(request, self.max_model_len)
            return new_token_ids, stopped
        module.Scheduler._update_request_with_output = _update_request_with_output
        """,
    ),
}

# injections run in one process (no xdist), as a maintainer's local run: there a rerun used to run in
# the same process after the pass, on the server the pool kept warm
SERIAL = {"greedy-wrong-mid-life"}

SITECUSTOMIZE = '''
"""Written by benchmarks/gate_strength.py: patches one regression into vLLM, in server processes only."""
import importlib.abc
import os
import sys

NAME = os.environ.get("PYTEST_ROCM_INJECT")
TARGETS = {targets!r}


def _patch(name, module):
{bodies}


class _After(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGETS.get(NAME):
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _patch(NAME, module)
            sys.stderr.write(f"gate_strength: injected {{NAME}} into {{fullname}} (pid {{os.getpid()}})\\n")

        loader.exec_module = exec_module
        return spec


_ARGV = list(getattr(sys, "orig_argv", sys.argv))
_PYTEST = _ARGV[1:3] == ["-m", "pytest"] or os.path.basename(_ARGV[0] if _ARGV else "") in ("pytest", "py.test")
if NAME in TARGETS and not _PYTEST:
    sys.meta_path.insert(0, _After())
'''


def write_sitecustomize(folder: Path) -> None:
    bodies = []
    for name, (_, _, _, code) in INJECTIONS.items():
        bodies.append(
            f"    if name == {name!r}:\n" + textwrap.indent(textwrap.dedent(code).strip(), " " * 8)
        )
    text = SITECUSTOMIZE.format(
        targets={n: v[2] for n, v in INJECTIONS.items()}, bodies="\n".join(bodies)
    )
    (folder / "sitecustomize.py").write_text(text)


def run_suites(
    tests: list[str], out: Path, inject: str | None, folder: Path, serial: bool = False
) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }
    env.pop("PYTEST_ROCM_INJECT", None)
    if inject:
        env["PYTEST_ROCM_INJECT"] = inject
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            "suites/pytest.ini",
            *[f"suites/{t}" for t in tests],
            *([] if serial else ["-n", "1"]),
            "-p",
            "no:cacheprovider",
            f"--rocm-report-dir={out}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    report = out / "gate-report.json"
    return (
        json.loads(report.read_text())
        if report.is_file()
        else {"tests": {}, "conclusion": "no report"}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(INJECTIONS), action="append")
    args = parser.parse_args()
    chosen = args.only or list(INJECTIONS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_sitecustomize(folder)
        every_test = sorted({t for name in chosen for t in INJECTIONS[name][1]})
        start = time.monotonic()
        control = run_suites(every_test, folder / "control", None, folder)
        control_ok = all(control["tests"].get(t, {}).get("verdict") == "pass" for t in every_test)
        summary = ", ".join(
            f"{t.split('::')[-1]} {control['tests'].get(t, {}).get('verdict')}" for t in every_test
        )
        print(
            f"control (no injection): {summary} -> {'all pass' if control_ok else 'NOT all pass: the figures below mean little'}"
        )
        caught, missed = [], []
        for name in chosen:
            what, tests, _, _ = INJECTIONS[name]
            report = run_suites(tests, folder / name, name, folder, serial=name in SERIAL)
            verdicts = {t: report["tests"].get(t, {}).get("verdict", "did not run") for t in tests}
            hit = [t for t, v in verdicts.items() if v == "regression"]
            (caught if hit else missed).append(name)
            print(
                f"  {'caught' if hit else 'MISSED'}  {name}: {what}; "
                + "; ".join(f"{t.split('::')[-1]} {v}" for t, v in verdicts.items())
                + f" (conclusion {report['conclusion']})"
            )
    print(
        f"gate strength: {len(caught)} of {len(chosen)} injected regressions caught as `regression`"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + f" ({time.monotonic() - start:.0f} s)"
    )
    print(
        "goal (issue 14): every injected regression caught: "
        + ("met" if not missed and control_ok else "NOT met")
    )


if __name__ == "__main__":
    main()
