"""Array values from bit patterns, and NaN poison, shared by every family's strategies.

Shapes and options are drawn by Hypothesis (so they shrink); element values come from a NumPy generator
seeded by one drawn integer (fast for interpreters; the seed is saved in every reproducer). Floats are
built from bit patterns: a random sign, an exponent drawn from a bounded range and *all* mantissa bits
random, so every representable bf16/fp16 mantissa occurs, without the huge magnitudes that only test
overflow. float8 values are drawn uniformly from all finite values of the format (enumerated).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from kvconform.reference import dtypes

#: exponent fields and mantissa widths: dtype -> (exponent bits, mantissa bits, unsigned view)
_LAYOUT = {
    "float64": (11, 52, np.uint64),
    "float32": (8, 23, np.uint32),
    "float16": (5, 10, np.uint16),
    "bfloat16": (8, 7, np.uint16),
}

seeds = st.integers(min_value=0, max_value=2**32 - 1)
#: the longest list shuffled by Hypothesis itself (one draw per element, shrinking towards the given
#: order); a longer one is shuffled by NumPy from one drawn seed. Above every ordinary column's pools
#: (attention: 3 sequences of up to 13 keys in pages of 1, and 3 spare pages), so those draw and shrink
#: as before; only the reach columns' pools of hundreds of pages take the seed.
SHRINKABLE_SHUFFLE = 64


def shuffled(draw, items) -> list:
    """`items` (a sequence, or an int n for range(n)) in a drawn order.

    Up to SHRINKABLE_SHUFFLE items, Hypothesis's permutations (a counterexample shrinks to the given
    order); past it, a NumPy permutation from one drawn seed. Hypothesis draws one integer per element
    and its shrinker then tries each of them: in a pool of a few hundred pages that was most of a
    failing test's shrinking and a quarter of the hand mutants' runs (ragged_paged_attention: 37 s of
    163 s in Hypothesis's element draws)."""
    items = list(range(items)) if isinstance(items, int) else list(items)
    if len(items) <= SHRINKABLE_SHUFFLE:
        return list(draw(st.permutations(items)))
    order = np.random.default_rng(draw(seeds)).permutation(len(items))
    return [items[i] for i in order]


def finite_values(name: str) -> np.ndarray:
    """Every finite value of a float8 format (or int8), in the storage dtype."""
    dt = dtypes.resolve_dtype(name)
    if dt == np.int8:
        return np.arange(-128, 128, dtype=np.int8)
    allv = np.arange(256, dtype=np.uint8).view(dt)
    return allv[np.isfinite(allv.astype(np.float32))]


def floats(rng: np.random.Generator, shape, name: str, *, min_exp: int = -4, max_exp: int = 1) -> np.ndarray:
    """Values in dtype `name` with |x| in [2**min_exp, 2**(max_exp+1)), built from random bit patterns.

    float8 and int8 ignore the exponent range: they draw from every finite value of the format.
    """
    shape = tuple(shape)
    if name in ("float8_e4m3fn", "float8_e5m2", "int8"):
        pool = finite_values(name)
        return pool[rng.integers(0, pool.size, size=shape)]
    ebits, mbits, view = _LAYOUT[name]
    bias = (1 << (ebits - 1)) - 1
    sign = rng.integers(0, 2, size=shape, dtype=np.uint64)
    exp = rng.integers(bias + min_exp, bias + max_exp + 1, size=shape, dtype=np.uint64)
    mant = rng.integers(0, 1 << mbits, size=shape, dtype=np.uint64)
    bits = (sign << np.uint64(ebits + mbits)) | (exp << np.uint64(mbits)) | mant
    return bits.astype(view).view(dtypes.resolve_dtype(name))


def quantization_ties(rng: np.random.Generator, like: np.ndarray, storage: str, scale) -> np.ndarray:
    """Values of `like`'s dtype (scale: a scalar or an array broadcastable to it) whose quotient by
    `scale` lies within 1 float32 ulp of a rounding tie of `storage` (float8 or int8), 30% of them exactly
    on the tie where a float32 value gets there: midpoints between adjacent finite values (subnormals
    included), or (a quarter of them) the saturation edge past the largest value and values far beyond it;
    30% stay as in `like`.

    Random normals almost never land there, yet that is where `x / s` and `x * fl32(1/s)` or a
    round-half-away rule differ from the pinned rounding of PA-44 (reference/dtypes.py:quantize)."""
    grid = np.unique(finite_values(storage).astype(np.float64))
    top, step = grid[-1], grid[-1] - grid[-2]
    ties = (grid[:-1] + grid[1:]) / 2
    edges = np.array([top + step / 2, -(top + step / 2), 3 * top, -3 * top])
    # A quarter of the drawn values sit at or past the saturation edge: among the ~250 ties of float8_e5m2
    # the 4 edge targets would otherwise be drawn once in 60 values, and overflow-to-inf (PA-44) missed
    # (and at least one, so that even a one-token call of head_dim 2 reaches it).
    at_edge = rng.random(like.shape) < 0.25
    one = np.unravel_index(rng.integers(0, like.size), like.shape) if like.size else None
    if one is not None:
        at_edge[one] = True
    target = np.where(at_edge, edges[rng.integers(0, edges.size, size=like.shape)],
                      ties[rng.integers(0, ties.size, size=like.shape)])
    s32 = np.broadcast_to(np.asarray(scale, np.float32), like.shape)
    x = (target * s32.astype(np.float64)).astype(np.float32)
    # Nudges of -1 .. 1 float32 ulp (x * fl32(1/s) then differs from x / s in the stored value for ~5% of
    # the values, against ~3% with -2 .. 2); 30% take the nudge whose quotient fl32(x / s) lands exactly on
    # the target, where ties-to-even decides (a round-half-away rule differs only there).
    nudges = np.arange(-1, 2, dtype=np.int32)
    tried = (x.view(np.int32)[None] + nudges.reshape(-1, *([1] * x.ndim))).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = (tried / s32[None]).astype(np.float32) == target.astype(np.float32)[None]
    pick = rng.integers(0, nudges.size, size=like.shape)
    first_exact = np.argmax(exact, axis=0)
    pick = np.where(exact.any(axis=0) & (rng.random(like.shape) < 0.3), first_exact, pick)
    bits = np.take_along_axis(tried.view(np.int32), pick[None], axis=0)[0]
    nudged = np.where(x != 0, bits, x.view(np.int32)).view(np.float32)
    with np.errstate(over="ignore"):
        drawn = nudged.astype(like.dtype)
    # 30% keep their value from `like` (never the one edge value); so does a target past `like`'s range
    # (3 * 57344 overflows float16), since an infinite input tests no rounding tie
    keep = rng.random(like.shape) < 0.3
    if one is not None:
        keep[one] = False
    keep |= ~np.isfinite(drawn.astype(np.float64))
    return np.where(keep, like, drawn).astype(like.dtype)


def reseeded(case, names, seed: int):
    """The same case (shapes, metadata, options) with the float inputs `names` redrawn from `seed`: what
    the history property calls between two identical calls (a cache keyed by shape returns stale data)."""
    import dataclasses
    rng = np.random.default_rng((seed, 0x6B7663))   # never the stream a strategy drew the case from
    inputs = dict(case.inputs)
    for name in names:
        arr = inputs.get(name)
        if isinstance(arr, np.ndarray) and (dtypes.is_float_dtype(arr.dtype) or dtypes.is_quantized_dtype(arr.dtype)):
            inputs[name] = floats(rng, arr.shape, dtypes.dtype_name(arr.dtype))
    return dataclasses.replace(case, inputs=inputs, seed=seed, params=dict(case.params, reseeded=list(names)))


def max_abs(x: np.ndarray, scale=None) -> float:
    """max |x| of the finite entries, in float64 (times scale when given)."""
    v = dtypes.upcast(x, scale)
    v = v[np.isfinite(v)]
    return float(np.max(np.abs(v))) if v.size else 0.0


def dequantized_within(pages: np.ndarray, scale, limit: float) -> np.ndarray:
    """Quantized `pages` [P, page_size, Hkv, D] (float8 or int8) whose dequantized values
    `stored * fl32(scale)` all lie within [-limit, limit]: each stored value past it is replaced by the
    largest finite stored value of the same sign that stays within (spec/numerics.md NU-PA6). `scale`: a
    scalar, [Hkv] or [P, page_size, Hkv] (PA-48). Values already within are unchanged."""
    values = finite_values(dtypes.dtype_name(pages.dtype))
    exact = values.astype(np.float64)
    s = np.asarray(scale, np.float32).astype(np.float64)
    s = s[None, :, None] if s.ndim == 1 else (s[..., None] if s.ndim == 3 else s)
    s = np.broadcast_to(s, pages.shape)
    stored = pages.astype(np.float64)
    out = pages.copy()
    past = np.abs(stored * s) > limit
    for u in np.unique(s[past]):
        fits = np.abs(exact * u) <= limit
        for side in (exact > 0, exact < 0):
            allowed = fits & side
            top = np.flatnonzero(allowed)[np.argmax(np.abs(exact[allowed]))]
            out[past & (s == u) & (np.sign(stored) == np.sign(exact[top]))] = values[top]
    return out


def pick(draw, options, what: str):
    """Draw one of `options` (a non-empty sequence)."""
    options = tuple(options)
    if not options:
        raise ValueError(f"no {what} to draw from")
    return draw(sampled_from(options))


def sampled_from(options):
    """`st.sampled_from(options)`, one strategy object per list or tuple of the same options.

    Hypothesis reuses the strategy objects of integers() and lists() but builds a new sampled_from() on
    every call, and a new strategy works out its properties again on its first draw: ~0.1 ms each time a
    composite strategy draws from one, ~5% of a shrinking test's time (issue 16). Options are the same
    when they have the same types and values, floats told apart by their repr (0.0 and -0.0 compare
    equal) and tuples element by element (so (1, 2) is not (1.0, 2.0)); options of other types (arrays,
    dtypes, NumPy scalars) and other containers (ranges, sets) get a new strategy each time. The options
    and their order are kept, so draws and shrinking go as with a new strategy."""
    if type(options) not in (list, tuple):
        return st.sampled_from(options)
    try:
        key = tuple(_option_key(o) for o in options)
    except TypeError:
        return st.sampled_from(options)
    strategy = _SAMPLED.get(key)
    if strategy is None:
        if len(_SAMPLED) >= _MAX_SAMPLED:   # bounded: option tuples built from drawn values vary
            _SAMPLED.clear()
        strategy = _SAMPLED[key] = st.sampled_from(tuple(options))
    return strategy


_SAMPLED: dict[tuple, st.SearchStrategy] = {}
_MAX_SAMPLED = 4096


def _option_key(o):
    """A key equal for two options only when they are interchangeable draws; TypeError for other types."""
    kind = type(o)
    if kind in (str, int, bool, type(None)):
        return kind, o
    if kind is float:
        return kind, repr(o)
    if kind is tuple:
        return kind, tuple(_option_key(e) for e in o)
    raise TypeError(kind.__name__)


_ = ml_dtypes  # ml_dtypes registers the bfloat16/float8 NumPy dtypes used above
