"""Value regimes crossed with size reach: the `crossed` tier of the recurrent `long` columns
(spec/recurrent.md RS-45).

The `range` column draws the values where kernels lose range (steep and exactly-zero decays, gates at 0
and 1, tiny decays, grown states, softplus far from its threshold) over ONE short chunk, and the `tokens`
tier draws long sequences with tame values. A bug that needs both, such as a chunk carry that breaks once
a decay of exactly 0 has passed in an earlier chunk, or a second chunk whose decays are rebased with an
`exp(-gam)` that overflows, is invisible to either. Here each value regime of an op's range column is drawn
over a sequence spanning several chunks and 16-token sub-chunks, with key / head / state dims that are not
powers of two (a kernel pads them to the next power of two and masks the tail):

    CROSSED_TOKENS  the long sequence: 150 tokens = two 64-token chunks and a 22-token tail, nine full
                    16-token sub-chunks and a partial tenth (97 and 200 in thorough)
    CROSSED_HINTS   chunk_size hints of 64 (fla's chunks), 16, 48 (not a power of two)
    CROSSED_DIMS    3, 5, 6: P, N, K, V past 2 and 4, short of the next power of two

A short leader sequence comes first (its tokens make the long one start mid-block of the packed tokens).
ci and quick run each (op, regime) once, its simplest draw; thorough ten. Regimes come from the op's range
column (ssu.py SSM_RANGE_REGIMES, rwkv6.py RWKV_RANGE_REGIMES; gated_delta.py
CHUNKED_RANGE_REGIMES) and `spread` puts each regime's defining value into every chunk past the first.
"""
from __future__ import annotations

import numpy as np
from kvconform.backends.base import OpClaims

from . import reach
from ..values import sampled_from

#: the ops whose long column has a crossed tier (the chunked ones: a carry exists only across chunks)
CROSSED_OPS = ("ssd_chunked_scan", "rwkv6_wkv", "gated_delta_rule_chunked")
CROSSED_TOKENS, CROSSED_LEADERS = reach.CROSSED_TOKENS, reach.CROSSED_LEADERS
CROSSED_HINTS = (64, 16, 48)
CROSSED_DIMS = (3, 5, 6)
#: tokens per chunk `spread` marks: the smallest chunk a kernel of ours or fla uses (16-token sub-chunks)
SPREAD_CHUNK = 16


def lengths(draw, claims: OpClaims) -> tuple[list[int], np.ndarray]:
    """(lengths, cu_seqlens) of a crossed case: a short leader, then one sequence of CROSSED_TOKENS."""
    lead = draw(reach.length_strategy(claims, sampled_from(CROSSED_LEADERS)))
    long_len = draw(reach.length_strategy(claims, sampled_from(CROSSED_TOKENS)))
    cu = np.zeros(3, dtype=np.int32)
    cu[1:] = np.cumsum([lead, long_len])
    return [lead, long_len], cu


def hint(draw, chunk_size: int | None) -> int:
    """The chunk_size hint: the caller's, else one of CROSSED_HINTS."""
    return chunk_size or draw(sampled_from(CROSSED_HINTS))


def odd_dim(draw, claims: OpClaims, name: str) -> int:
    """A dim that is not a power of two (CROSSED_DIMS) within the claimed limit `name` (the nearest size
    the claim admits otherwise: a claim narrows the reach, never skips it)."""
    return reach.reach_dim(draw, claims, name, CROSSED_DIMS)


def spread(rng, values: np.ndarray, cu: np.ndarray, define: float) -> np.ndarray:
    """`values` [T, ...] with the regime's defining value `define` at one random token of every
    SPREAD_CHUNK-token chunk of every sequence (in one random element of the trailing axes), so that it
    lies in every chunk past the first whatever the kernel's chunking; the dtype is kept."""
    out = np.array(values, copy=True)
    tail = out.shape[1:]
    for s in range(cu.shape[0] - 1):
        for c0 in range(int(cu[s]), int(cu[s + 1]), SPREAD_CHUNK):
            t = int(rng.integers(c0, min(c0 + SPREAD_CHUNK, int(cu[s + 1]))))
            where = tuple(int(rng.integers(0, n)) for n in tail)
            out[(t,) + where] = define
    return out


def runs(op: str, regimes: tuple[str, ...], budget: float) -> list[tuple[dict, float]]:
    """(strategy keywords, budget) of the crossed tier: one loop per value regime of the op."""
    if op not in CROSSED_OPS:
        return []
    return [(dict(tier="crossed", regime=r), budget) for r in regimes]
