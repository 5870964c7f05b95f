"""vLLM's rotary-embedding op (`_custom_ops.rotary_embedding`, in place on query and key) against
the definition, in the two layouts models hand it: flat `[tokens, heads * head_size]` (Llama and
most decoders) and per head `[tokens, heads, head_size]` (multi-head latent attention:
DeepSeek-V2/V3 pass the rotary slices of q and k_pe that way), in NeoX (halves) and GPT-J
(interleaved pairs) styles, float32.

Known gap on vLLM's CPU backend (0.32): the CPU kernel (csrc/cpu/pos_encoding.cpp) takes
`num_tokens` as `numel / size(-1)` and `num_heads` as `size(-1) / head_size`, so a per-head query of
T tokens and H heads is rotated as T*H one-head tokens at positions read past the end of
`positions`, and the key's rows are walked as often, past the key's end. The GPU kernel handles both
layouts (vLLM pull request 12777, which made only the CUDA op shape-flexible). This is what made the
tiny DeepSeek-V2 leave transformers' greedy path at the first token on the CPU: with the op replaced
by vLLM's own plain-torch `forward_native` it matched 4 of 4 prompts, 24 tokens each. The buffers
below have guard space behind every tensor, so the CPU kernel's stray reads and writes stay in this
test's memory, and the test also fails when an op writes outside its tensors.
"""

from __future__ import annotations

import pytest
import torch
from gate_support import gpu_runner

pytestmark = pytest.mark.rocm_gate(group="attention")

TOKENS, HEADS, HEAD_SIZE, BASE = 8, 4, 64, 10_000.0
MAX_POSITION = 4096
CPU_PER_HEAD_GAP = (
    "known gap on vLLM's CPU backend: rotary_embedding on a [tokens, heads, head_size] query rotates tokens*heads "
    "one-head rows at positions read past the input (csrc/cpu/pos_encoding.cpp derives num_tokens from numel); the "
    "GPU op handles this layout since vLLM pull request 12777. Not found tracked upstream for the CPU op."
)
LAYOUTS = [
    pytest.param("flat", id="flat"),
    pytest.param(
        "per_head",
        id="per_head",
        marks=pytest.mark.xfail(not gpu_runner(), reason=CPU_PER_HEAD_GAP, strict=False),
    ),
]


def cos_sin_cache(rotary_dim: int, device) -> torch.Tensor:
    """vLLM's layout of the cache: one row per position, the cosines then the sines of the rotation
    angles."""
    inv_freq = 1.0 / BASE ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float64), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float().to(device)


def rotate(
    x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor, neox: bool
) -> torch.Tensor:
    """The definition on `[tokens, heads, head_size]`: each pair (x1, x2) turns by its position's
    angle; NeoX pairs element i with i + head_size/2, GPT-J pairs neighbours 2i and 2i+1."""
    half = cache.shape[-1] // 2
    cos, sin = (
        cache[positions, :half][:, None, :].double(),
        cache[positions, half:][:, None, :].double(),
    )
    x = x.double()
    x1, x2 = (x[..., :half], x[..., half:]) if neox else (x[..., 0::2], x[..., 1::2])
    r1, r2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat([r1, r2], dim=-1) if neox else torch.stack([r1, r2], dim=-1).flatten(-2)
    return out.float()


def _ops():
    try:
        from vllm import _custom_ops
    except ImportError as exc:
        pytest.skip(f"vLLM is not importable here ({exc})")
    return _custom_ops


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotary_embedding_matches_the_definition(layout, neox):
    ops = _ops()
    device = "cuda" if gpu_runner() else "cpu"
    generator = torch.Generator().manual_seed(0)
    # Guard space: `positions` backed by TOKENS*HEADS entries, each tensor by HEADS times its rows,
    # so a kernel that walks tokens*heads rows reads and writes this test's memory, not the
    # process's.
    position_buffer = torch.randint(0, MAX_POSITION, (TOKENS * HEADS,), generator=generator).to(
        device
    )
    query_buffer = torch.randn(TOKENS * HEADS, HEADS, HEAD_SIZE, generator=generator).to(device)
    key_buffer = torch.randn(TOKENS * HEADS, 1, HEAD_SIZE, generator=generator).to(device)
    positions, query, key = position_buffer[:TOKENS], query_buffer[:TOKENS], key_buffer[:TOKENS]
    untouched_query, untouched_key = query_buffer[TOKENS:].clone(), key_buffer[TOKENS:].clone()
    cache = cos_sin_cache(HEAD_SIZE, device)
    expected_query, expected_key = (
        rotate(query, positions, cache, neox),
        rotate(key, positions, cache, neox),
    )

    if layout == "flat":  # views of the same storage: the op works in place on the buffers
        ops.rotary_embedding(
            positions, query.view(TOKENS, -1), key.view(TOKENS, -1), HEAD_SIZE, cache, neox
        )
    else:
        ops.rotary_embedding(positions, query, key, HEAD_SIZE, cache, neox)

    assert torch.equal(query_buffer[TOKENS:], untouched_query) and torch.equal(
        key_buffer[TOKENS:], untouched_key
    ), f"rotary_embedding ({layout}) wrote outside its query and key tensors"
    torch.testing.assert_close(
        query,
        expected_query,
        atol=1e-5,
        rtol=1e-5,
        msg=lambda m: f"query rotated wrongly ({layout}, {'neox' if neox else 'gptj'}): {m}",
    )
    torch.testing.assert_close(
        key,
        expected_key,
        atol=1e-5,
        rtol=1e-5,
        msg=lambda m: f"key rotated wrongly ({layout}, {'neox' if neox else 'gptj'}): {m}",
    )


def test_the_rotary_reference_is_the_definition():
    """The reference against the complex-number form (DeepSeek's own and transformers' DeepSeek-V2
    code): a GPT-J pair (x[2i], x[2i+1]) is x[2i] + i*x[2i+1] times e^(i*angle). If this fails, the
    comparisons mean nothing."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(TOKENS, HEADS, HEAD_SIZE, generator=generator)
    positions = torch.randint(0, MAX_POSITION, (TOKENS,), generator=generator)
    cache = cos_sin_cache(HEAD_SIZE, "cpu")
    half = HEAD_SIZE // 2
    turn = torch.polar(
        torch.ones(TOKENS, half, dtype=torch.float64),
        torch.atan2(cache[positions, half:].double(), cache[positions, :half].double()),
    )
    pairs = torch.view_as_complex(x.double().reshape(TOKENS, HEADS, half, 2).contiguous())
    complex_form = torch.view_as_real(pairs * turn[:, None, :]).flatten(-2).float()
    torch.testing.assert_close(
        rotate(x, positions, cache, neox=False), complex_form, atol=1e-5, rtol=1e-5
    )
    # NeoX is the same turn on the halves: permuting the head into interleaved order must give the
    # same numbers.
    interleave = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()
    torch.testing.assert_close(
        rotate(x, positions, cache, neox=True)[..., interleave],
        rotate(x[..., interleave], positions, cache, neox=False),
        atol=1e-5,
        rtol=1e-5,
    )
