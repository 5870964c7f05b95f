"""Attention kernels against the definition: vLLM's paged attention on mixed prefill and decode
batches (MHA, GQA, MQA; head sizes 64, 80 and 128; sliding window, ALiBi, logit soft-cap,
non-causal) compared with a float32 reference computed from the unpaged tensors (`paged.py`).

Backends by platform: `CPU_ATTN` here (vLLM's CPU kernels); on AMD GPUs `TRITON_ATTN` (vLLM's Triton
unified attention). A backend that cannot run on this runner is `not_applicable` (hardware marker)
or skipped with its reason, never silently. Tolerances are baselines per dtype and platform
(`suites/baselines/`): the measured maximum absolute error must stay under them. TRITON_ATTN is a
shadow gate until a measured MI300X run gives its baselines.
"""

from __future__ import annotations

import pytest
import torch
from gate_support import gate_worst_error
from paged import CASES, make_batch, reference, run_cpu_attn, run_triton_attn

pytestmark = pytest.mark.rocm_gate(group="attention")

BACKENDS = [
    pytest.param("CPU_ATTN", id="CPU_ATTN"),
    pytest.param(
        "TRITON_ATTN",
        id="TRITON_ATTN",
        marks=[
            pytest.mark.hardware(vendor="amd"),
            pytest.mark.rocm_gate(group="attention", blocking=False),
        ],
    ),
]
DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.bfloat16, id="bfloat16")]


def _cpu_kernels_or_skip() -> None:
    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)

        present = hasattr(torch.ops._C, "cpu_attention_with_kv_cache")
    except ImportError as exc:
        pytest.skip(f"CPU_ATTN: vLLM is not importable here ({exc})")
    if not present:
        pytest.skip(
            "CPU_ATTN: this vLLM build has no CPU attention kernels (a GPU build); the GPU backends cover it"
        )


def _run(backend: str, batch):
    if backend == "CPU_ATTN":
        return run_cpu_attn(batch)
    return run_triton_attn(batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_paged_attention_matches_reference(backend, dtype, accuracy_gate):
    if backend == "CPU_ATTN":
        _cpu_kernels_or_skip()
    errors = {}
    for case in CASES:
        if backend == "TRITON_ATTN" and (not case.causal or case.alibi):
            continue  # unified attention serves decoders: causal, and ALiBi through another path
        batch = make_batch(case, dtype)
        errors[case.name] = (_run(backend, batch).float() - reference(batch)).abs().max().item()
    gate_worst_error(accuracy_gate, errors)


def test_the_reference_is_the_definition():
    """The reference against torch's own scaled_dot_product_attention (with enable_gqa), causal, one
    prefill: if this fails, the suite's comparisons mean nothing."""
    case = next(c for c in CASES if c.name == "gqa-128")
    batch = make_batch(case, torch.float32)
    ours = reference(batch)
    q_len, start = case.query_lens[1], case.query_lens[0]
    # a pure prefill: positions line up
    query = batch.query[start : start + q_len].transpose(0, 1)[None]
    keys, values = batch.keys[1].transpose(0, 1)[None], batch.values[1].transpose(0, 1)[None]
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        query, keys, values, is_causal=True, enable_gqa=True, scale=batch.scale
    )
    torch.testing.assert_close(
        ours[start : start + q_len], sdpa[0].transpose(0, 1), atol=1e-5, rtol=1e-5
    )


@pytest.mark.rocm_gate(group="attention", blocking=False)
def test_cpu_attn_needs_a_zero_filled_cache():
    """A contract, not a feature: the CPU kernel reads whole blocks, so slots no token wrote must be
    finite. vLLM allocates the KV cache with zeros; with NaN left in a partly filled block the
    output turns NaN. If this starts passing with NaN, the kernel began masking unused slots and the
    allocator may stop zeroing."""
    _cpu_kernels_or_skip()
    case = next(c for c in CASES if c.name == "mha-64")
    batch = make_batch(case, torch.float32)
    assert torch.isfinite(run_cpu_attn(batch, fill=0.0)).all()
    assert torch.isnan(run_cpu_attn(batch, fill=float("nan"))).any(), (
        "unused NaN slots no longer reach the output"
    )
