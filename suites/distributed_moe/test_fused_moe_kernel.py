"""Fused mixture-of-experts kernels against a naive per-expert reference, in the shapes of the
models the group covers: Mixtral-style (8 experts, top-2), Qwen3-MoE-style (16 experts, top-4) and
DeepSeek-V2-style (routed experts of a smaller intermediate size, top-6), with batches where some
experts get no token.

Backends by platform: `CPU` here (vLLM's `cpu_fused_moe` on weights packed by
`cpu_prepack_moe_weight`, the path vLLM's CPU experts take); on AMD GPUs `TRITON` (vLLM's
`fused_experts`), a shadow gate until a measured MI300X run gives its baselines. The intermediate
size is a multiple of 32, as the CPU kernel requires. Tolerances are baselines per dtype and
platform (`suites/baselines/`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from gate_support import gate_worst_error

pytestmark = pytest.mark.rocm_gate(group="distributed_moe")


@dataclass
class MoECase:
    name: str
    experts: int
    top_k: int
    hidden: int
    intermediate: int
    tokens: int
    renormalise: bool = (
        True  # Mixtral and Qwen3 renormalise the top-k weights; DeepSeek-V2 does not
    )


CASES = [
    MoECase("mixtral-8x2", 8, 2, 128, 256, 24),
    MoECase("qwen3-moe-16x4", 16, 4, 128, 64, 40),
    # 7 tokens: some experts get none
    MoECase("deepseek-v2-16x6", 16, 6, 256, 96, 7, renormalise=False),
    MoECase("single-token", 8, 2, 128, 256, 1),
]


def make(case: MoECase, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(case.tokens, case.hidden, generator=g).to(dtype)
    w13 = (torch.randn(case.experts, 2 * case.intermediate, case.hidden, generator=g) * 0.1).to(
        dtype
    )
    w2 = (torch.randn(case.experts, case.hidden, case.intermediate, generator=g) * 0.1).to(dtype)
    weights, ids = torch.randn(case.tokens, case.experts, generator=g).softmax(-1).topk(case.top_k)
    if case.renormalise:
        weights = weights / weights.sum(-1, keepdim=True)
    return x, w13, w2, weights.float(), ids.to(torch.int32)


def reference(x, w13, w2, weights, ids) -> torch.Tensor:
    """Each token through each of its experts (SiLU-gated: the first half of w13 is the gate, the
    second the up projection), weighted and summed, in float32."""
    intermediate = w2.shape[2]
    out = torch.zeros(x.shape[0], x.shape[1])
    for t in range(x.shape[0]):
        for weight, expert in zip(weights[t].tolist(), ids[t].tolist()):
            h = x[t].float() @ w13[expert].float().T
            out[t] += weight * (
                (torch.nn.functional.silu(h[:intermediate]) * h[intermediate:])
                @ w2[expert].float().T
            )
    return out


def run_cpu(x, w13, w2, weights, ids) -> torch.Tensor:
    import vllm._custom_ops as ops

    out = torch.empty_like(x)
    ops.cpu_fused_moe(
        out,
        x,
        ops.cpu_prepack_moe_weight(w13, "vec"),
        ops.cpu_prepack_moe_weight(w2, "vec"),
        None,
        None,
        weights,
        ids,
        "silu",
        "vec",
    )
    return out


def run_triton(x, w13, w2, weights, ids) -> torch.Tensor:
    from vllm.model_executor.layers.fused_moe import fused_experts

    device = "cuda"  # ROCm's torch names its GPUs cuda too
    return fused_experts(
        x.to(device), w13.to(device), w2.to(device), weights.to(device), ids.to(device)
    ).cpu()


BACKENDS = [
    pytest.param("CPU", id="CPU"),
    pytest.param(
        "TRITON",
        id="TRITON",
        marks=[
            pytest.mark.hardware(vendor="amd"),
            pytest.mark.rocm_gate(group="distributed_moe", blocking=False),
        ],
    ),
]
DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.bfloat16, id="bfloat16")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_moe_matches_reference(backend, dtype, accuracy_gate):
    if backend == "CPU":
        try:
            import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
        except ImportError as exc:
            pytest.skip(f"CPU: vLLM is not importable here ({exc})")
        if not hasattr(torch.ops._C, "cpu_fused_moe"):
            pytest.skip(
                "CPU: this vLLM build has no CPU MoE kernel (a GPU build); the GPU backends cover it"
            )
    run = run_cpu if backend == "CPU" else run_triton
    errors = {}
    for case in CASES:
        tensors = make(case, dtype)
        errors[case.name] = (run(*tensors).float() - reference(*tensors)).abs().max().item()
    gate_worst_error(accuracy_gate, errors)
