"""The scale profile's sizes per profile, values that never repeat at an int32 wrap, pages spread over the pool, sampled indices."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.values import floats
from kvconform.reference import dtypes

#: 2**31: the first element offset an int32 cannot hold
INT32_LIMIT = 2 ** 31


@dataclass(frozen=True)
class Sizes:
    """The dimensions of one profile's scale cases."""
    pool_elements: int          # each KV / state pool holds more elements than this
    boundary: int               # element offset that sampled rows must cross (2**31 at full size)
    decode_rows: int            # decode batch (rows, and sequences)
    decode_keys: int            # keys of a decode row (at most)
    long_keys: int              # keys of the long decode rows and of the long prefill
    grid_rows: int              # sequences / rows past the grid's y-z limit
    heads: tuple[int, int, int]     # (Hq, Hkv, D) of the KV-pool attention cases
    prefill_heads: tuple[int, int, int]
    page_size: int
    write_tokens: int
    sampled_seqs: int
    sampled_rows: int
    ssu: tuple[int, int, int]   # (H, P, N) of the state pool
    mla: tuple[int, int, int, int]  # (H, d_c, d_r, page_size)
    mla_rows: int
    mla_keys: int


SIZES = {
    "scale": Sizes(pool_elements=INT32_LIMIT + 2 ** 24, boundary=INT32_LIMIT, decode_rows=256, decode_keys=4096,
                   long_keys=131072, grid_rows=70000, heads=(32, 8, 128), prefill_heads=(8, 2, 64), page_size=16,
                   write_tokens=70000, sampled_seqs=16, sampled_rows=24, ssu=(8, 64, 128),
                   mla=(128, 512, 64, 64), mla_rows=256, mla_keys=4096),
    "scale-smoke": Sizes(pool_elements=2 ** 15, boundary=2 ** 14, decode_rows=8, decode_keys=40, long_keys=600,
                         grid_rows=70, heads=(4, 2, 16), prefill_heads=(4, 2, 16), page_size=4, write_tokens=40,
                         sampled_seqs=3, sampled_rows=5, ssu=(2, 4, 16), mla=(4, 16, 8, 4), mla_rows=6, mla_keys=40),
}


def sizes_for(profile: str) -> Sizes:
    if profile not in SIZES:
        raise ValueError(f"profile {profile!r} has no scale sizes (scale profiles: {', '.join(SIZES)})")
    return SIZES[profile]


@dataclass(frozen=True)
class Sampled:
    """A small case the reference computes in full, and how to take its fields out of the backend's
    result of the large call (`select(actual)` -> a result shaped like the small case's)."""
    case: Case
    select: Callable[[Any], Any]
    what: str


PERIOD = 127    # odd: a periodic pool never repeats at an offset of 2**32 elements (an int32 wrap); query rows


def periodic(rng: np.random.Generator, shape, dtype: str, *, period: int = PERIOD, **bounds) -> np.ndarray:
    """An array of `shape` whose rows (first axis) repeat `period` random rows (`values.floats`): built at
    memory speed, yet no two rows an int32 wrap apart (2**32 elements, a multiple of no odd period's row
    count times a power of two) hold the same values by construction of the pattern."""
    shape = tuple(int(s) for s in shape)
    block = floats(rng, (min(period, shape[0]),) + shape[1:], dtype, **bounds)
    out = np.empty(shape, dtype=block.dtype)
    for start in range(0, shape[0], block.shape[0]):
        stop = min(shape[0], start + block.shape[0])
        out[start:stop] = block[:stop - start]
    return out


def pick_dtypes(claims, acts=("bfloat16", "float16", "float32"),
                kvs=("float8_e4m3fn", "float8_e5m2", "int8", "bfloat16", "float16", "float32")) -> tuple[str, str]:
    """(activation, storage) dtypes within the claims: 16-bit activations first, the narrowest storage
    first (a 2**31-element pool of 1-byte elements is 2 GB, of float32 8 GB). Quantized storage only with
    the `quantized_kv` feature."""
    from kvconform.conformance.strategies import constraints
    if "quantized_kv" not in (claims.features or ()):
        kvs = tuple(k for k in kvs if not dtypes.is_quantized_dtype(dtypes.resolve_dtype(k)))
    return constraints.dtype_pairs(claims, acts, kvs, "a scale case")[0]


def spread_pages(rng: np.random.Generator, num_pages: int, counts, boundary_page: int) -> list[np.ndarray]:
    """Distinct pages for sequences of `counts` pages each, drawn over the whole pool, every sequence with
    at least one page at or past `boundary_page` when the pool has enough of them (those pages hold
    elements past the boundary offset)."""
    total = int(sum(counts))
    high = np.arange(boundary_page, num_pages)
    enough = len(high) >= sum(1 for c in counts if c)
    takes_high = [1 if c and enough else 0 for c in counts]
    chosen_high = rng.choice(high, size=sum(takes_high), replace=False) if sum(takes_high) else np.zeros(0, int)
    rest = np.setdiff1d(np.arange(num_pages), chosen_high, assume_unique=True)
    chosen_rest = rng.choice(rest, size=total - len(chosen_high), replace=False)
    out, hi_at, rest_at = [], 0, 0
    for c, h in zip(counts, takes_high):
        pages = np.concatenate([chosen_high[hi_at:hi_at + h], chosen_rest[rest_at:rest_at + c - h]])
        hi_at, rest_at = hi_at + h, rest_at + c - h
        out.append(rng.permutation(pages).astype(np.int32))
    return out


def sample_indices(rng: np.random.Generator, population: int, must, k: int) -> np.ndarray:
    """Sorted distinct indices: every one of `must` (in range) and random others up to `k` in all."""
    must = sorted({int(m) for m in must if 0 <= int(m) < population})
    others = np.setdiff1d(np.arange(population), must)
    extra = rng.choice(others, size=min(len(others), max(0, k - len(must))), replace=False) if len(others) else []
    return np.array(sorted(set(must) | {int(e) for e in extra}), dtype=np.int64)
