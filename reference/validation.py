"""Input checks shared by every reference op.

Every violated precondition raises `ValueError` (or `TypeError` for a wrong dtype) whose message names
the argument and the rule it broke, e.g. ``cu_q_lens must be non-decreasing (cu_q_lens[3]=7 <
cu_q_lens[2]=9)``. Ops check everything before touching data, so malformed input never reaches NumPy
indexing or broadcasting (no IndexError, no broadcast error, no silent result).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .dtypes import FLOAT_DTYPE_NAMES, dtype_name, is_float_dtype


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless `condition` holds."""
    if not condition:
        raise ValueError(message)


def as_array(name: str, x) -> np.ndarray:
    """`x` as an ndarray without copying; rejects objects NumPy cannot turn into a numeric array."""
    if isinstance(x, np.ndarray):
        return x
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged nested lists and the like
        raise TypeError(f"{name} must be an array, got {type(x).__name__} ({exc})") from None
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__} with object dtype")
    return arr


def check_ndim(name: str, x: np.ndarray, ndim: int, layout: str) -> None:
    """`layout` documents the expected shape, e.g. "[T, Hq, D]"."""
    require(x.ndim == ndim, f"{name} must have rank {ndim} {layout}, got shape {tuple(x.shape)}")


def check_shape(name: str, x: np.ndarray, expected: Sequence[int | None], layout: str) -> None:
    """Exact shape check; `None` entries match any extent. `layout` names the dims, e.g. "[S+1]"."""
    check_ndim(name, x, len(expected), layout)
    for axis, (got, want) in enumerate(zip(x.shape, expected)):
        require(want is None or got == want,
                f"{name} must have shape {layout} = {tuple('*' if e is None else e for e in expected)}, "
                f"got {tuple(x.shape)} (axis {axis} is {got}, expected {want})")


def float_input(name: str, x, ndim: int | None = None, layout: str = "") -> np.ndarray:
    """A floating input (float64/32/16, bfloat16, float8 e4m3fn/e5m2) upcast exactly to float64."""
    return float_array(name, x, ndim, layout).astype(np.float64)


def float_array(name: str, x, ndim: int | None = None, layout: str = "") -> np.ndarray:
    """A floating input checked as `float_input` checks it, in its own dtype (not copied): for an op that
    converts it to float64 piece by piece (exactly, as it reads it), so that a long call never holds a
    whole float64 copy of its largest inputs."""
    arr = as_array(name, x)
    if not is_float_dtype(arr.dtype):
        raise TypeError(f"{name} must have a floating dtype ({', '.join(FLOAT_DTYPE_NAMES)}), "
                        f"got {dtype_name(arr.dtype)}")
    if ndim is not None:
        check_ndim(name, arr, ndim, layout)
    return arr


def int_input(name: str, x, ndim: int | None = None, layout: str = "") -> np.ndarray:
    """An integer metadata input (any signed or unsigned integer dtype), returned as int64."""
    arr = as_array(name, x)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must have an integer dtype (int32 expected), got {dtype_name(arr.dtype)}")
    if ndim is not None:
        check_ndim(name, arr, ndim, layout)
    return arr.astype(np.int64)


def int_scalar(name: str, x, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A Python or NumPy integer (bools rejected), optionally range-checked (inclusive bounds)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(x).__name__}")
    value = int(x)
    if minimum is not None:
        require(value >= minimum, f"{name} must be >= {minimum}, got {value}")
    if maximum is not None:
        require(value <= maximum, f"{name} must be <= {maximum}, got {value}")
    return value


def positive_float(name: str, x) -> float:
    """A finite float > 0 (Python or NumPy scalar, or a 0-d array)."""
    if isinstance(x, (bool, np.bool_, str, bytes)):  # float("0.5") would silently accept text
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    try:
        value = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}") from None
    require(np.isfinite(value) and value > 0, f"{name} must be finite and > 0, got {value}")
    return value


def check_index_range(name: str, values: np.ndarray, low: int, high: int, what: str = "") -> None:
    """Every entry of `values` lies in [low, high); names the first offender."""
    bad = np.flatnonzero((values < low) | (values >= high))
    if bad.size:
        where = np.unravel_index(bad[0], values.shape)
        idx = ",".join(str(int(i)) for i in where)
        raise ValueError(f"{name}[{idx}]={int(values[where])} is out of range [{low}, {high}){what}")


def check_unique(name: str, values: np.ndarray, *, ignore_negative: bool = False) -> None:
    """No value occurs twice in `values` (negative entries skipped when `ignore_negative`)."""
    flat = values.reshape(-1)
    considered = np.flatnonzero(flat >= 0) if ignore_negative else np.arange(flat.size)
    vals = flat[considered]
    order = np.argsort(vals, kind="stable")
    dup = np.flatnonzero(vals[order][1:] == vals[order][:-1])
    if dup.size:
        first, second = sorted((int(considered[order[dup[0]]]), int(considered[order[dup[0] + 1]])))
        raise ValueError(f"{name} must not contain duplicates ({name}[{first}] = {name}[{second}] = "
                         f"{int(flat[first])})")
