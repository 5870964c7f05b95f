"""Demo gates: small real computations, one per group, plus a hardware-pinned test.

They run anywhere (pure Python) so the main job shows the whole reporting path
on a machine without GPUs; on an MI300X runner the pinned test runs too.
"""

import math
import random

import pytest


def softmax(xs):
    top = max(xs)
    exps = [math.exp(x - top) for x in xs]
    total = sum(exps)
    return [e / total for e in exps]


def attention(q, ks, vs):
    scale = 1 / math.sqrt(len(q))
    weights = softmax([sum(a * b for a, b in zip(q, k)) * scale for k in ks])
    return [sum(w * v[i] for w, v in zip(weights, vs)) for i in range(len(vs[0]))]


@pytest.mark.rocm_gate(group="attention")
def test_attention_matches_online_softmax():
    """Single-pass (online) softmax attention, as flash kernels compute it, equals the two-pass reference."""
    rng = random.Random(0)
    q = [rng.uniform(-1, 1) for _ in range(64)]
    ks = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(32)]
    vs = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(32)]
    scale = 1 / math.sqrt(64)
    running_max, denom, acc = -math.inf, 0.0, [0.0] * 64
    for k, v in zip(ks, vs):
        s = sum(a * b for a, b in zip(q, k)) * scale
        new_max = max(running_max, s)
        correction = math.exp(running_max - new_max) if running_max > -math.inf else 0.0
        denom = denom * correction + math.exp(s - new_max)
        acc = [a * correction + math.exp(s - new_max) * x for a, x in zip(acc, v)]
        running_max = new_max
    online = [a / denom for a in acc]
    assert online == pytest.approx(attention(q, ks, vs), rel=1e-12, abs=1e-12)


@pytest.mark.rocm_gate(group="engine")
def test_greedy_sampling_is_deterministic():
    logits = [random.Random(1).gauss(0, 1) for _ in range(1000)]
    assert max(range(len(logits)), key=logits.__getitem__) == max(range(len(logits)), key=logits.__getitem__)


@pytest.mark.rocm_gate(group="api")
@pytest.mark.parametrize("text", ["hello", "naïve café", "emoji \U0001F600"])
def test_utf8_round_trip(text):
    assert text.encode("utf-8").decode("utf-8") == text


@pytest.mark.rocm_gate(group="spec_decode", blocking=False)
def test_ngram_draft_acceptance():
    """An n-gram drafter proposes the continuation seen earlier; on a repeating text every draft is accepted."""
    tokens = [1, 2, 3, 4] * 8
    accepted = sum(1 for i in range(4, len(tokens)) if tokens[i - 4] == tokens[i])
    assert accepted / (len(tokens) - 4) == 1.0


@pytest.mark.rocm_gate(group="distributed_moe")
@pytest.mark.hardware(sku=["MI300X", "MI325X", "MI355X"], gpus=8)
def test_expert_parallel_all_to_all():
    """Runs only on an 8-GPU Instinct node; elsewhere it is reported as not applicable, with both sides."""
    import torch  # noqa: F401 - only reached on real hardware

    assert torch.cuda.device_count() >= 8


@pytest.mark.rocm_gate(group="multimodal", blocking=False)
def test_image_resize_keeps_aspect_ratio():
    width, height = 640, 480
    scale = 224 / max(width, height)
    assert (round(width * scale), round(height * scale)) == (224, 168)
