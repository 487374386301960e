"""Argument rules of a paged K/V pool pair, shared by paged attention and KV writes.

    k_pages, v_pages: [P, page_size, Hkv, D], one storage dtype: any float dtype, or int8 (PA-2, PA-26)
    k_scale, v_scale: float32 > 0, required for quantized pages and only for them (PA-18, PA-44)

Both ops take the same pool pair, so the rules (and their messages) live here once.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .validation import as_array, check_ndim, positive_float, require


def kv_pool(name: str, x) -> np.ndarray:
    """One page pool, kept in its storage dtype (not copied): a float dtype or int8, rank 4 (PA-26)."""
    arr = as_array(name, x)
    if not (dtypes.is_float_dtype(arr.dtype) or arr.dtype == np.int8):
        raise TypeError(f"{name} must have a floating dtype or int8, got {dtypes.dtype_name(arr.dtype)}")
    check_ndim(name, arr, 4, "[P, page_size, Hkv, D]")
    return arr


def kv_pools(k_pages, v_pages) -> tuple[np.ndarray, np.ndarray]:
    """The K and V pools: each a `kv_pool`, with equal shapes and dtypes (PA-2, PA-27)."""
    k_pages, v_pages = kv_pool("k_pages", k_pages), kv_pool("v_pages", v_pages)
    require(v_pages.shape == k_pages.shape,
            f"v_pages must have the shape of k_pages {tuple(k_pages.shape)}, got {tuple(v_pages.shape)}")
    require(v_pages.dtype == k_pages.dtype,
            f"v_pages must have the dtype of k_pages ({dtypes.dtype_name(k_pages.dtype)}), "
            f"got {dtypes.dtype_name(v_pages.dtype)}")
    return k_pages, v_pages


def kv_scale(name: str, scale, pages_name: str, pages: np.ndarray, *, hint: str = ""):
    """np.float32 > 0 for quantized pages, None for float pages (PA-18, PA-44).

    A scale is required for quantized pages and rejected for unquantized ones; `hint` is appended to the
    rejection message (paged attention names the quantized dtypes there).
    """
    quantized = dtypes.is_quantized_dtype(pages.dtype)
    kind = dtypes.dtype_name(pages.dtype)
    if scale is None:
        require(not quantized, f"{name} is required when {pages_name} has the quantized dtype {kind}")
        return None
    require(quantized, f"{name} must be None when {pages_name} is not quantized (dtype {kind}){hint}")
    positive_float(name, scale)
    return dtypes.as_scale(name, scale)
