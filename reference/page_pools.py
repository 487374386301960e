"""Argument rules of a paged K/V pool pair, shared by paged attention and KV writes.

    k_pages, v_pages: [P, page_size, Hkv, D], one storage dtype: any float dtype, or int8 (PA-2, PA-26)
    k_scale, v_scale: float32 > 0, required for quantized pages and only for them (PA-18, PA-44): one
                      scale for the pool, float32[Hkv] per KV head, or float32[P, page_size, Hkv] per
                      token and head stored beside the pages (PA-48)

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
    if np.ndim(scale) == 0:
        positive_float(name, scale)
        return dtypes.as_scale(name, scale)
    return fine_grained_scale(name, scale, pages)


def fine_grained_scale(name: str, scale, pages: np.ndarray) -> np.ndarray:
    """A per-head float32[Hkv] or per-token float32[P, page_size, Hkv] scale array (PA-48).

    Per-head scales must all be finite and > 0 as float32. A per-token pool is checked only where a
    counted key reads it (`check_token_scales`): its other entries are don't-care, like the slots they
    belong to (PA-24)."""
    arr = as_array(name, scale)
    if not dtypes.is_float_dtype(arr.dtype):
        raise TypeError(f"{name} must be a float scale, float32[Hkv] or float32[P, page_size, Hkv], got dtype "
                        f"{dtypes.dtype_name(arr.dtype)}")
    P, page_size, Hkv = pages.shape[:3]
    arr = arr.astype(np.float32)
    if arr.shape == (Hkv,):
        bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
        require(not bad.size, f"{name} must be finite and > 0 as float32 for every KV head "
                              f"({name}[{bad[0] if bad.size else 0}] is not, PA-48)")
        return arr
    require(arr.shape == (P, page_size, Hkv),
            f"{name} must be a scalar, [Hkv] = [{Hkv}] or [P, page_size, Hkv] = [{P}, {page_size}, {Hkv}] "
            f"(PA-48), got shape {tuple(arr.shape)}")
    return arr


def check_token_scales(name: str, scale, table_row: np.ndarray, lo: int, hi: int) -> None:
    """Per-token scales of the keys lo .. hi-1 a sequence reads must be finite and > 0 (PA-48)."""
    if not (isinstance(scale, np.ndarray) and scale.ndim == 3) or hi <= lo:
        return
    page_size = scale.shape[1]
    tokens = np.arange(lo, hi)
    used = scale[table_row[tokens // page_size], tokens % page_size]        # [n, Hkv]
    bad = np.argwhere(~(np.isfinite(used) & (used > 0)))
    if bad.size:
        j, h = int(tokens[bad[0][0]]), int(bad[0][1])
        raise ValueError(f"{name} must be finite and > 0 where a counted key reads it (token {j}, KV head {h}: "
                         f"{float(used[tuple(bad[0])])!r}, PA-48)")


def scales_of(scale, table_row: np.ndarray, lo: int, hi: int, heads: int):
    """The scale of tokens lo .. hi-1 of one sequence, broadcastable to their [n, Hkv, D] values: a
    scalar, [1, Hkv, 1] per head, or [n, Hkv, 1] per token (PA-48)."""
    if not isinstance(scale, np.ndarray) or scale.ndim == 0:
        return scale
    if scale.ndim == 1:
        return scale.astype(np.float64)[None, :, None]
    page_size = scale.shape[1]
    tokens = np.arange(lo, hi)
    return scale[table_row[tokens // page_size], tokens % page_size].astype(np.float64)[:, :, None]
