"""Storage dtypes, exact upcasts and the pinned quantize-on-write rule.

Float inputs of any supported dtype are upcast exactly to float64 (every float16, bfloat16 and float8
value is a float64 value). Quantization (`quantize`) is the only rounding the reference performs on
stored data, and it is pinned so that backends can match it bit for bit (spec/numerics.md, class E):

    stored = saturate(round_to_nearest_even(fl32(fl32(x) / fl32(scale))))

Scales are float32 values (a wider scale is rounded to float32 first); the division is the IEEE-754
correctly rounded float32 division (in Triton `tl.math.div_rn`, not the approximate `/` of fast math,
and not a multiply by a precomputed reciprocal); the quotient is rounded to the storage dtype with ties
to even; values beyond the largest finite value saturate to it (float8 e4m3fn has no infinity, and a
saturating store is what serving engines expect of a KV cache). The dequantized value of a stored
element is `stored * scale`, computed exactly in float64 by the reference.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
FLOAT8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)

#: Canonical names used in capability claims, reports and `.npz` reproducers.
DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": BFLOAT16,
    "float8_e4m3fn": FLOAT8_E4M3,
    "float8_e5m2": FLOAT8_E5M2,
    "int8": np.dtype(np.int8),
}
FLOAT_DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
QUANTIZED_DTYPE_NAMES = ("float8_e4m3fn", "float8_e5m2", "int8")


def dtype_name(dtype) -> str:
    """Canonical name of a NumPy / ml_dtypes dtype (e.g. 'bfloat16')."""
    dt = np.dtype(dtype)
    for name, known in DTYPES.items():
        if dt == known:
            return name
    return dt.name


def resolve_dtype(name_or_dtype) -> np.dtype:
    """A dtype from its canonical name (or a dtype), with a clear error for unknown names."""
    if isinstance(name_or_dtype, str):
        if name_or_dtype not in DTYPES:
            raise ValueError(f"unknown dtype {name_or_dtype!r}; known: {', '.join(DTYPES)}")
        return DTYPES[name_or_dtype]
    return np.dtype(name_or_dtype)


def is_float_dtype(dtype) -> bool:
    return dtype_name(dtype) in FLOAT_DTYPE_NAMES


def is_quantized_dtype(dtype) -> bool:
    """Storage dtypes that need a scale: float8 e4m3fn / e5m2 and int8."""
    return dtype_name(dtype) in QUANTIZED_DTYPE_NAMES


def max_finite(dtype) -> float:
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.integer):
        return float(np.iinfo(dt).max)
    return float(ml_dtypes.finfo(dt).max)


def as_scale(name: str, scale) -> np.float32:
    """A quantization scale as the float32 value every backend uses (finite, > 0 after rounding)."""
    value = np.float32(scale)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0 as a float32, got {scale!r}")
    return value


def quantize(x: np.ndarray, scale, dtype) -> np.ndarray:
    """Store `x` at `scale` in a quantized dtype: saturate(rne(fl32(fl32(x) / fl32(scale)))).

    x: float[...] (rounded to float32 first); scale: float32-representable, > 0, a scalar or a float32
    array broadcastable to x (per-head scales [Hkv, 1] against [N, Hkv, D], PA-48);
    dtype: float8_e4m3fn | float8_e5m2 | int8. NaN stays NaN for float8; for int8 it is an error.
    """
    dt = np.dtype(dtype)
    divisor = as_scale("scale", scale) if np.ndim(scale) == 0 else np.asarray(scale, dtype=np.float32)
    with np.errstate(over="ignore"):   # a quotient past the float32 range is +-inf, then saturated below
        q = np.asarray(x).astype(np.float32) / divisor
    if np.issubdtype(dt, np.integer):
        if np.isnan(q).any():
            raise ValueError("cannot quantize NaN to int8")
        info = np.iinfo(dt)
        return np.clip(np.rint(q), info.min, info.max).astype(dt)
    top = np.float32(max_finite(dt))
    return np.clip(q, -top, top).astype(dt)  # float32 -> float8 in ml_dtypes rounds to nearest even


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """Round float64 values to a float storage dtype, nearest even (no saturation: overflow -> inf)."""
    return np.asarray(x, dtype=np.float64).astype(np.dtype(dtype))


def upcast(x: np.ndarray, scale: float | None = None, *, out: np.ndarray | None = None) -> np.ndarray:
    """Exact float64 value of stored data, times `scale` when given (value = stored * scale); written into
    `out` (float64, x's shape) when given."""
    if out is None:
        out = np.asarray(x).astype(np.float64)
    else:
        np.copyto(out, x, casting="safe")
    if scale is not None:
        out *= np.float64(np.float32(scale))
    return out
