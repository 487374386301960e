"""Scatter new keys and values into the paged KV cache (spec/paged_attention.md, PA-40 .. PA-46).

Token t of the call goes to page ``slot_mapping[t] // page_size``, offset ``slot_mapping[t] % page_size``;
a negative slot skips the token (a padding token). Stored values are rounded exactly as pinned in
`dtypes`: quantized pages use `dtypes.quantize` at the given scale, float pages a single
round-to-nearest-even conversion of the float32 value. Nothing else in the pool changes.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import dtypes
from .validation import (as_array, check_index_range, check_ndim, check_shape, check_unique,
                         float_input, int_input, positive_float, require)

__all__ = ["KVPages", "write_kv"]


class KVPages(NamedTuple):
    """A K and a V page pool, each [P, page_size, Hkv, D] in the storage dtype."""
    k_pages: np.ndarray
    v_pages: np.ndarray


def write_kv(k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None) -> KVPages:
    """Return copies of the pools with token t of k/v stored at slot slot_mapping[t] (PA-40 .. PA-46).

    k_pages, v_pages: [P, page_size, Hkv, D] float, float8_e4m3fn, float8_e5m2 or int8 (same shape, dtype)
    k, v:             [N, Hkv, D] float (any float dtype)
    slot_mapping:     int[N]; slot s >= 0 is page s // page_size, offset s % page_size; s < 0 skips
                      the token (PA-41); non-negative slots must be < P * page_size and distinct (PA-42)
    k_scale, v_scale: float32 > 0, required for quantized pages and only for them (PA-44)

    Returns KVPages(k_pages, v_pages) in the storage dtype: written slots hold the stored value of the
    new token (PA-43, PA-44), every other element is bitwise unchanged (PA-45). Inputs are not modified.
    """
    k_pages, v_pages = _pool("k_pages", k_pages), _pool("v_pages", v_pages)
    require(v_pages.shape == k_pages.shape,
            f"v_pages must have the shape of k_pages {tuple(k_pages.shape)}, got {tuple(v_pages.shape)}")
    require(v_pages.dtype == k_pages.dtype,
            f"v_pages must have the dtype of k_pages ({dtypes.dtype_name(k_pages.dtype)}), "
            f"got {dtypes.dtype_name(v_pages.dtype)}")
    P, page_size, Hkv, D = k_pages.shape
    require(page_size >= 1, f"k_pages must have page_size >= 1, got shape {tuple(k_pages.shape)}")
    slots = int_input("slot_mapping", slot_mapping, 1, "[N]")
    N = slots.shape[0]
    k = float_input("k", k, 3, "[N, Hkv, D]")
    check_shape("k", k, (N, Hkv, D), "[N, Hkv, D]")
    v = float_input("v", v, 3, "[N, Hkv, D]")
    check_shape("v", v, (N, Hkv, D), "[N, Hkv, D]")
    written = np.flatnonzero(slots >= 0)
    check_index_range("slot_mapping", slots[written], 0, P * page_size,
                      f" (slots are page * page_size + offset with P={P}, page_size={page_size})")
    check_unique("slot_mapping", slots, ignore_negative=True)
    k_scale = _scale("k_scale", k_scale, "k_pages", k_pages)
    v_scale = _scale("v_scale", v_scale, "v_pages", v_pages)

    return KVPages(_scatter(k_pages, k[written], slots[written], k_scale, "k", written),
                   _scatter(v_pages, v[written], slots[written], v_scale, "v", written))


def _scatter(pages, values, slots, scale, name, rows) -> np.ndarray:
    stored = _store(values, pages.dtype, scale, name, rows)
    result = pages.copy()
    flat = result.reshape(-1, *pages.shape[2:])  # a view: slot s is row s
    flat[slots] = stored
    return result


def _store(values: np.ndarray, dtype: np.dtype, scale, name: str, rows: np.ndarray) -> np.ndarray:
    """PA-43 / PA-44: the storage value of each written token."""
    if dtypes.is_quantized_dtype(dtype):
        if dtype == np.int8:
            nan = np.argwhere(np.isnan(values))
            if nan.size:
                raise ValueError(f"{name} must not hold NaN in a written token when the pages are int8 "
                                 f"({name}[{rows[nan[0][0]]}] has NaN)")
        return dtypes.quantize(values, scale, dtype)
    if dtype == np.float64:
        return values.copy()
    # Through float32 first, like the quantize rule: one pinned rounding for every backend.
    with np.errstate(over="ignore"):  # PA-43: overflow gives +-inf, as in an IEEE conversion
        return values.astype(np.float32).astype(dtype)


def _pool(name: str, x) -> np.ndarray:
    arr = as_array(name, x)
    if not (dtypes.is_float_dtype(arr.dtype) or arr.dtype == np.int8):
        raise TypeError(f"{name} must have a floating dtype or int8, got {dtypes.dtype_name(arr.dtype)}")
    check_ndim(name, arr, 4, "[P, page_size, Hkv, D]")
    return arr


def _scale(name: str, scale, pages_name: str, pages: np.ndarray):
    """PA-44: a scale is required for quantized pages and rejected for unquantized ones."""
    kind = dtypes.dtype_name(pages.dtype)
    if scale is None:
        require(not dtypes.is_quantized_dtype(pages.dtype),
                f"{name} is required when {pages_name} has the quantized dtype {kind}")
        return None
    require(dtypes.is_quantized_dtype(pages.dtype),
            f"{name} must be None when {pages_name} is not quantized (dtype {kind})")
    positive_float(name, scale)
    return dtypes.as_scale(name, scale)
