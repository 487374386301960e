"""Accuracy classes of spec/numerics.md turned into acceptance bounds.

A `Tolerance` says how one output field is compared with the float64 reference:

- ``exact``:     bitwise equal in the storage dtype (NaN equals NaN whatever its payload), for integer
                 outputs, copies, stored KV data and quantize-on-write at a given scale (class E);
- ``ulp``:       ``|a - r| <= n_ulp * ulp_out(r) + atol`` (class U, elementwise);
- ``reduction``: ``|a - r| <= atol + rtol * |r|`` elementwise and, over the compared region,
                 ``||a - r|| <= f(n) * ||tol||`` (class R, NU-6: f(n) = min(1, 0.25 + 1/sqrt(n))).

`out_dtype` is the precision the *case* requires (NU-3, from its input dtypes), never the dtype a backend
returns: a narrower float output fails outright (compare.py).

The family suites build tolerances only through the functions below, so every bound has the written
reason of spec/numerics.md, never an ad-hoc constant in a test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import ml_dtypes
import numpy as np

from kvconform.reference import dtypes

#: unit roundoff of the accumulation every backend is assumed to use (float32; numerics.md NU-R)
U_ACC = 2.0 ** -24


@dataclass(frozen=True)
class Tolerance:
    kind: str                 # "exact" | "ulp" | "reduction"
    atol: Any = 0.0           # float, or an array broadcastable to the output (per-sequence bounds)
    rtol: Any = 0.0
    n_ulp: float = 0.0
    aggregate: float = math.inf
    out_dtype: str = "float64"
    reason: str = ""

    def to_json(self) -> dict:
        out = {}
        # fields read directly: asdict() deep-copies the per-sequence atol arrays, and this runs on every
        # compared field (a tenth of a metadata op's run)
        for k in (f.name for f in fields(self)):
            v = getattr(self, k)
            if isinstance(v, np.ndarray):
                v = {"max": float(np.max(v)) if v.size else 0.0, "min": float(np.min(v)) if v.size else 0.0}
            out[k] = None if isinstance(v, float) and math.isinf(v) else v
        return out


def eps(dtype_name: str) -> float:
    """Machine epsilon (1-ULP relative spacing at 1.0) of a float dtype; 0 for integers and float64."""
    dt = dtypes.resolve_dtype(dtype_name)
    if np.issubdtype(dt, np.integer) or dt == np.float64:
        return 0.0
    return float(ml_dtypes.finfo(dt).eps)


def ulp(values: np.ndarray, dtype_name: str) -> np.ndarray:
    """Spacing of `dtype_name` at |values| (float64 array; the smallest normal's spacing near 0)."""
    dt = dtypes.resolve_dtype(dtype_name)
    info = ml_dtypes.finfo(dt) if dt != np.float64 else np.finfo(np.float64)
    mag = np.maximum(np.abs(np.asarray(values, dtype=np.float64)), float(info.tiny))
    exponent = np.floor(np.log2(mag))
    return np.exp2(exponent) * float(info.eps)


def exact(reason: str = "class E: bitwise in the storage dtype") -> Tolerance:
    return Tolerance("exact", reason=reason)


def ulp_bounded(out_dtype: str, n_ulp: float, atol: float = 0.0, reason: str = "") -> Tolerance:
    return Tolerance("ulp", atol=atol, n_ulp=n_ulp, out_dtype=out_dtype,
                     reason=reason or f"class U: {n_ulp} ulp of {out_dtype} + atol {atol:g}")


def u(dtype_name: str) -> float:
    """Unit roundoff (NU-3): half the machine epsilon; 2**-53 for float64."""
    return eps(dtype_name) / 2 if dtype_name != "float64" else 2.0 ** -53


def u_compute(out_dtype: str) -> float:
    """Unit roundoff of the arithmetic behind an output of `out_dtype` (NU-3): that dtype's or float32's
    (`U_ACC`), whichever is finer. Every backend computes in float32 or wider, so a bfloat16 or float16
    output is rounded to its dtype once, at the end; the arithmetic before it is judged at float32."""
    return min(u(out_dtype), U_ACC)


def reduction(out_dtype: str, atol, rtol, reason: str) -> Tolerance:
    """Class R with bounds computed by a family section of numerics.md; aggregate per NU-6."""
    return Tolerance("reduction", atol=atol, rtol=rtol, aggregate=0.25, out_dtype=out_dtype, reason=reason)
