"""Slot-pool rules shared by every recurrent kernel (spec/recurrent.md RS-2 … RS-6).

A pool is one array `[num_slots, ...]` per kind of state. A kernel call addresses rows through
`state_indices` (-1 = padding row), may start some rows from exact zeros (`has_initial_state`), and
returns a new pool in which only the addressed rows differ.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import dtype_name
from ..validation import (as_array, check_index_range, check_ndim, check_shape, check_unique,
                          int_input, require)

#: The padding slot index (RS-3).
PAD_SLOT = -1

#: Pool dtypes the spec allows (RS-6): float32 or wider.
POOL_DTYPE_NAMES = ("float32", "float64")


def pool_input(name: str, pool, ndim: int, layout: str) -> np.ndarray:
    """A state pool, kept in its own dtype (the result is a copy of it with some rows replaced)."""
    arr = as_array(name, pool)
    if dtype_name(arr.dtype) not in POOL_DTYPE_NAMES:
        raise TypeError(f"{name} must have dtype float32 or float64 (RS-6: state kept in float32 or "
                        f"better), got {dtype_name(arr.dtype)}")
    check_ndim(name, arr, ndim, layout)
    return arr


def slot_indices(name: str, state_indices, batch: int, num_slots: int) -> np.ndarray:
    """Validated slots i64[batch] (RS-2, RS-3, RS-4); None means row b uses slot b."""
    if state_indices is None:
        require(batch <= num_slots,
                f"{name} is None, so row b uses slot b; that needs batch ({batch}) <= num_slots "
                f"({num_slots})")
        return np.arange(batch, dtype=np.int64)
    idx = int_input(name, state_indices)
    check_shape(name, idx, (batch,), "[B]")
    check_index_range(name, idx, PAD_SLOT, num_slots, " (slots are 0..num_slots-1; -1 marks padding)")
    check_unique(name, idx, ignore_negative=True)
    return idx


def initial_flags(name: str, has_initial_state, batch: int) -> np.ndarray:
    """bool[batch]; None means every row starts from its slot's state (RS-5)."""
    if has_initial_state is None:
        return np.ones(batch, dtype=bool)
    arr = as_array(name, has_initial_state)
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must have dtype bool, got {dtype_name(arr.dtype)}")
    check_shape(name, arr, (batch,), "[S]")
    return arr.copy()


def gather_rows(pool: np.ndarray, idx: np.ndarray, from_state: np.ndarray) -> np.ndarray:
    """Starting states float64[batch, ...]: the slot's row, or exact zeros (RS-5).

    Zeros are *selected*, never computed as row * 0, so a row holding NaN or inf still yields 0.
    """
    rows = np.zeros((idx.shape[0],) + pool.shape[1:], dtype=np.float64)
    take = (idx >= 0) & from_state
    rows[take] = pool[idx[take]].astype(np.float64)
    return rows


def scatter_rows(pool: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A copy of `pool` with rows `idx >= 0` replaced by `rows` rounded to the pool dtype (RS-4, RS-6)."""
    out = pool.copy()
    live = idx >= 0
    out[idx[live]] = rows[live].astype(pool.dtype)
    return out
