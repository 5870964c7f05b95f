"""Paged attention for the attention suite: batches of sequences, a plain-torch reference, and the
backends.

A batch mixes decode (one new token on a long history), prefill and chunked prefill (a few new
tokens on a history). Keys and values of every token are written into a paged KV cache whose blocks
are scattered by a random block table; each backend then computes attention of the new tokens from
the cache. The reference computes the same in float32 from the unpaged tensors, with every option
spelled out (causal offset, sliding window of `w` tokens including the token itself, ALiBi, logit
soft-cap), so a backend is compared with the definition, not with another kernel.

Backends: `CPU_ATTN` (vLLM's CPU kernels: `cpu_attn_reshape_and_cache`, `cpu_attn_get_scheduler_metadata`,
`cpu_attention_with_kv_cache`; cache `[blocks, kv_heads, block_size, 2 * head]`) and `TRITON_ATTN`
(vLLM's Triton unified attention, the backend vLLM selects for gfx942/gfx950 without AITER; cache
`[blocks, block_size, kv_heads, head]`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Case:
    name: str
    heads: int
    kv_heads: int
    head_size: int
    # the whole history of each sequence, new tokens included
    seq_lens: tuple[int, ...] = (41, 70, 5, 33)
    query_lens: tuple[int, ...] = (1, 70, 5, 3)  # decode, prefill, short prefill, chunked prefill
    causal: bool = True
    window: int | None = None
    alibi: bool = False
    softcap: float = 0.0
    extra: dict = field(default_factory=dict)


CASES = [
    Case("mha-64", 4, 4, 64),
    Case("gqa-128", 8, 2, 128),
    Case("mqa-80", 4, 1, 80),
    Case("sliding-window", 8, 2, 128, window=7),
    Case("alibi", 4, 4, 64, alibi=True),
    Case("softcap", 8, 2, 128, softcap=5.0),
    Case("non-causal", 4, 2, 64, query_lens=(41, 70, 5, 33), causal=False),
    Case("long-decode", 8, 2, 128, seq_lens=(300, 129, 1), query_lens=(1, 1, 1)),
]


@dataclass
class Batch:
    case: Case
    query: torch.Tensor  # [new tokens, heads, head]
    keys: list[torch.Tensor]  # per sequence [seq_len, kv_heads, head]
    values: list[torch.Tensor]
    alibi_slopes: torch.Tensor | None
    scale: float


def make_batch(case: Case, dtype: torch.dtype, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    keys = [
        torch.randn(n, case.kv_heads, case.head_size, generator=g).to(dtype) for n in case.seq_lens
    ]
    values = [
        torch.randn(n, case.kv_heads, case.head_size, generator=g).to(dtype) for n in case.seq_lens
    ]
    query = torch.randn(sum(case.query_lens), case.heads, case.head_size, generator=g).to(dtype)
    slopes = (
        torch.tensor([2.0 ** (-8 * (h + 1) / case.heads) for h in range(case.heads)])
        if case.alibi
        else None
    )
    return Batch(case, query, keys, values, slopes, case.head_size**-0.5)


def reference(batch: Batch) -> torch.Tensor:
    """Attention of the new tokens, in float32, from the definition."""
    case, outs, start = batch.case, [], 0
    for k, v, q_len in zip(batch.keys, batch.values, case.query_lens):
        q = batch.query[start : start + q_len].float()
        start += q_len
        seq_len = k.shape[0]
        group = case.heads // case.kv_heads
        kk, vv = (
            k.float().repeat_interleave(group, dim=1),
            v.float().repeat_interleave(group, dim=1),
        )
        scores = torch.einsum("qhd,khd->hqk", q, kk) * batch.scale
        if case.softcap:
            scores = case.softcap * torch.tanh(scores / case.softcap)
        # absolute positions of the new tokens
        pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        key = torch.arange(seq_len)[None, :]
        if batch.alibi_slopes is not None:
            scores = scores + batch.alibi_slopes[:, None, None] * (key - pos)[None]
        mask = torch.ones(q_len, seq_len, dtype=torch.bool)
        if case.causal:
            mask &= key <= pos
        if case.window:
            mask &= (pos - key) < case.window
        scores = scores.masked_fill(~mask[None], float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv))
    return torch.cat(outs)


def _block_table(batch: Batch, block_size: int, spare: int, seed: int) -> tuple[torch.Tensor, int]:
    """Blocks of every sequence scattered over the cache (plus `spare` blocks no sequence uses)."""
    per_seq = [math.ceil(n / block_size) for n in batch.case.seq_lens]
    total = sum(per_seq) + spare
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed + 1))
    table = torch.zeros(len(per_seq), max(per_seq), dtype=torch.int32)
    used = 0
    for s, n in enumerate(per_seq):
        table[s, :n] = order[used : used + n]
        used += n
    return table, total


def _slots(table: torch.Tensor, seq_lens, block_size: int) -> torch.Tensor:
    return torch.cat(
        [
            table[s, torch.arange(n) // block_size].long() * block_size
            + torch.arange(n) % block_size
            for s, n in enumerate(seq_lens)
        ]
    )


def run_cpu_attn(
    batch: Batch, block_size: int = 32, fill: float = 0.0, seed: int = 0
) -> torch.Tensor:
    """vLLM's CPU paged attention. `fill`: the value of cache slots no token writes (vLLM allocates
    zeros)."""
    import vllm._custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    case, dtype = batch.case, batch.query.dtype
    table, blocks = _block_table(batch, block_size, spare=3, seed=seed)
    isa = _get_attn_isa(dtype, block_size, case.head_size)
    cache = torch.full((blocks, case.kv_heads, block_size, 2 * case.head_size), fill, dtype=dtype)
    key_cache, value_cache = cache.view(
        blocks, case.kv_heads, block_size * 2, case.head_size
    ).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(
        torch.cat(batch.keys),
        torch.cat(batch.values),
        key_cache,
        value_cache,
        _slots(table, case.seq_lens, block_size),
        isa,
    )
    query_start = torch.tensor(
        [0, *torch.tensor(case.query_lens).cumsum(0).tolist()], dtype=torch.int32
    )
    seq_lens = torch.tensor(case.seq_lens, dtype=torch.int32)
    window = case.window or -1
    metadata = ops.cpu_attn_get_scheduler_metadata(
        len(case.seq_lens),
        case.heads,
        case.kv_heads,
        case.head_size,
        seq_lens,
        dtype,
        query_start,
        case.causal,
        window,
        isa,
        False,
    )
    out = torch.empty_like(batch.query)
    ops.cpu_attention_with_kv_cache(
        batch.query,
        key_cache,
        value_cache,
        out,
        query_start,
        seq_lens,
        batch.scale,
        case.causal,
        batch.alibi_slopes,
        window,
        table,
        case.softcap,
        metadata,
        None,
    )
    return out


def run_triton_attn(batch: Batch, block_size: int = 16, seed: int = 0) -> torch.Tensor:
    """vLLM's Triton unified attention on the GPU (ROCm or CUDA). Causal only: non-causal is not
    applicable."""
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    # ROCm's torch names its GPUs cuda too
    case, dtype, device = (batch.case, batch.query.dtype, "cuda")
    table, blocks = _block_table(batch, block_size, spare=3, seed=seed)
    key_cache = torch.zeros(blocks, block_size, case.kv_heads, case.head_size, dtype=dtype)
    value_cache = torch.zeros_like(key_cache)
    slots = _slots(table, case.seq_lens, block_size)
    key_cache.view(-1, case.kv_heads, case.head_size)[slots] = torch.cat(batch.keys)
    value_cache.view(-1, case.kv_heads, case.head_size)[slots] = torch.cat(batch.values)
    query_start = torch.tensor(
        [0, *torch.tensor(case.query_lens).cumsum(0).tolist()], dtype=torch.int32
    )
    out = torch.empty_like(batch.query, device=device)
    window = (case.window - 1, 0) if case.window else (-1, -1)
    descale = torch.ones(len(case.seq_lens), case.kv_heads, device=device)
    unified_attention(
        q=batch.query.to(device),
        k=key_cache.to(device),
        v=value_cache.to(device),
        out=out,
        cu_seqlens_q=query_start.to(device),
        max_seqlen_q=max(case.query_lens),
        seqused_k=torch.tensor(case.seq_lens, dtype=torch.int32, device=device),
        max_seqlen_k=max(case.seq_lens),
        softmax_scale=batch.scale,
        causal=True,
        window_size=window,
        block_table=table.to(device),
        softcap=case.softcap,
        q_descale=None,
        k_descale=descale,
        v_descale=descale,
        alibi_slopes=None if batch.alibi_slopes is None else batch.alibi_slopes.to(device),
    )
    return out.cpu()
