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


def poison_value(name: str):
    """NaN in the dtype where it has one; for int8 (no NaN) the most negative value, which a kernel
    that reads it would turn into a visibly wrong result."""
    dt = dtypes.resolve_dtype(name)
    if dt == np.int8:
        return np.int8(-128)
    return np.array(np.nan, dtype=np.float32).astype(dt)


def max_abs(x: np.ndarray, scale=None) -> float:
    """max |x| of the finite entries, in float64 (times scale when given)."""
    v = dtypes.upcast(x, scale)
    v = v[np.isfinite(v)]
    return float(np.max(np.abs(v))) if v.size else 0.0


def pick(draw, options, what: str):
    """Draw one of `options` (a non-empty sequence)."""
    options = tuple(options)
    if not options:
        raise ValueError(f"no {what} to draw from")
    return draw(st.sampled_from(options))


_ = ml_dtypes  # ml_dtypes registers the bfloat16/float8 NumPy dtypes used above
