"""SGLang's n-gram speculative decoding is lossless under greedy decoding: on GPU runners only.

Not on the CPU (measured with sglang 0.5.23): SGLang's n-gram worker imports
`sgl_kernel.speculative`, and its draft-model paths warm up a KV-cache copy kernel
(`copy_all_layer_kv_cache_cpu`); the CPU environment's import-only sgl_kernel stand-in has neither,
so such a server stops at start-up naming what it lacks. A shadow gate (non-blocking) until a GPU
runner's first measured run: a test that never ran must not block merges.
"""

from __future__ import annotations

import pytest
from gate_support import assert_same_tokens, sglang_generate, tokenize
from test_ngram import REPETITIVE

pytestmark = [
    pytest.mark.rocm_gate(group="spec_decode", blocking=False),
    pytest.mark.hardware(gpus=1),
]
NGRAM = ["--speculative-algorithm", "NGRAM"]


@pytest.mark.sglang_server_variant()
@pytest.mark.sglang_server_variant(args=NGRAM)
def test_sglang_ngram_is_lossless(sglang_server_factory, served_model):
    plain = sglang_server_factory()
    # SGLang's /tokenize, as vLLM's
    prompts = [tokenize(plain, served_model.name, prompt) for prompt in REPETITIVE]
    speculated = sglang_generate(sglang_server_factory(args=NGRAM), prompts, 48)
    reference = sglang_generate(plain, prompts, 48)
    assert_same_tokens(reference, speculated, "SGLang n-gram speculation against no speculation")
