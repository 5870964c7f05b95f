"""Relative rules: faults that no per-SKU floor names, found by comparing a node's figures with each
other.

- `falls`: a bandwidth that falls from one message (or array) size to a larger one by more than
  `bandwidth_fall_max_pct`; sustained to the largest size it is a collapse (failed), recovered it is a dip.
- `below_peers`: a link or GPU more than `peer_degraded_pct` (degraded) or `peer_failed_pct` (failed)
  below the median of its peers in the same matrix or run.
- `most_common`: the value most GPUs of a node hold (a firmware version, a count of disabled links
  or of compute units), what one GPU's is held to.

They need no SKU figure, so they run on every SKU, a new one included; thresholds.toml gives each
number with where it comes from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

__all__ = ["Fall", "Straggler", "below_peers", "falls", "most_common"]


@dataclass(frozen=True)
class Fall:
    at: int  # index of the first point that fell
    peak: int  # index of the best smaller point it fell from
    ratio: float  # value at `at` / value at `peak`
    sustained: bool  # the largest point is still below the limit: a collapse, not a dip


@dataclass(frozen=True)
class Straggler:
    key: Any  # what the caller named each value by: a GPU, a pair of GPUs, a message size
    value: float
    peers_median: float
    below_pct: float
    status: str  # degraded | failed


def falls(values: list[float], max_fall_pct: float, compared_from: float = 0.0) -> Fall | None:
    """The fall that matters in `values` (in order of size), or None.

    A collapse first: the largest point more than `max_fall_pct` below the best point before it,
    reported from the first point after that peak that fell and stayed down. Else the first dip: a
    point that falls that far below the best before it and recovers. A point is compared only with a
    best of at least `compared_from` (small sizes measure latency, and print 0.00 and 0.01:
    rounding, not bandwidth)."""
    limit = 1 - max_fall_pct / 100
    if len(values) < 2:
        return None
    peak = max(range(len(values) - 1), key=lambda i: (values[i], -i))
    if values[peak] >= compared_from and values[peak] > 0 and values[-1] < values[peak] * limit:
        start = len(values) - 1
        while start - 1 > peak and values[start - 1] < values[peak] * limit:
            start -= 1
        return Fall(start, peak, values[start] / values[peak], sustained=True)
    best = None
    for index, value in enumerate(values):
        if (
            best is not None
            and values[best] >= compared_from
            and values[best] > 0
            and value < values[best] * limit
        ):
            return Fall(index, best, value / values[best], sustained=False)
        if best is None or value > values[best]:
            best = index
    return None


def below_peers(values: dict, degraded_pct: float, failed_pct: float) -> list[Straggler]:
    """Each entry more than `degraded_pct` below the median of the *other* entries (so one slow GPU
    of two is still found); at least two entries are needed, and peers whose median is 0 are not
    judged."""
    if len(values) < 2:
        return []
    found = []
    for key, value in values.items():
        peers = median(v for k, v in values.items() if k != key)
        if peers <= 0:
            continue
        below = (1 - value / peers) * 100
        if below > degraded_pct:
            found.append(
                Straggler(key, value, peers, below, "failed" if below > failed_pct else "degraded")
            )
    return found


def most_common(values: Iterable, tie: Callable | None = None):
    """The value most items hold (None for none). On a tie, `tie` picks among the tied values
    (`min`, `max`), so the GPU the rule names does not depend on order; without it, the first of
    them met."""
    ranked = Counter(values).most_common()
    if not ranked:
        return None
    tied = [value for value, count in ranked if count == ranked[0][1]]
    return tie(tied) if tie is not None else tied[0]
