"""Argument checks of the Pallas adapter for ops whose reference does not expose a separate validator.

The rules are those of the reference (spec/paged_attention.md PA-40 .. PA-46), written with the shared
helpers of kvconform.reference.validation so messages name the argument and the rule.
"""
from __future__ import annotations

import numpy as np

from ...reference import dtypes
from ...reference.validation import (as_array, check_index_range, check_ndim, check_shape, check_unique,
                                     float_input, int_input, positive_float, require)


def _pool(name, x):
    arr = as_array(name, x)
    if not (dtypes.is_float_dtype(arr.dtype) or arr.dtype == np.int8):
        raise TypeError(f"{name} must have a floating dtype or int8, got {dtypes.dtype_name(arr.dtype)}")
    check_ndim(name, arr, 4, "[P, page_size, Hkv, D]")
    if arr.dtype == np.float64:
        raise TypeError(f"{name} must not be float64: TPU kernels store 8-, 16- or 32-bit values")
    return arr


def _scale(name, scale, pages_name, pages):
    kind = dtypes.dtype_name(pages.dtype)
    if scale is None:
        require(not dtypes.is_quantized_dtype(pages.dtype),
                f"{name} is required when {pages_name} has the quantized dtype {kind}")
        return None
    require(dtypes.is_quantized_dtype(pages.dtype),
            f"{name} must be None when {pages_name} is not quantized (dtype {kind})")
    positive_float(name, scale)
    return float(dtypes.as_scale(name, scale))


def validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale, v_scale):
    """Returns (k_pages, v_pages, k f32[N,Hkv,D], v f32, slots i32[N], k_scale, v_scale)."""
    k_pages, v_pages = _pool("k_pages", k_pages), _pool("v_pages", v_pages)
    require(v_pages.shape == k_pages.shape,
            f"v_pages must have the shape of k_pages {tuple(k_pages.shape)}, got {tuple(v_pages.shape)}")
    require(v_pages.dtype == k_pages.dtype,
            f"v_pages must have the dtype of k_pages ({dtypes.dtype_name(k_pages.dtype)}), "
            f"got {dtypes.dtype_name(v_pages.dtype)}")
    P, page_size, hkv, d = k_pages.shape
    require(page_size >= 1, f"k_pages must have page_size >= 1, got shape {tuple(k_pages.shape)}")
    slots = int_input("slot_mapping", slot_mapping, 1, "[N]")
    n = slots.shape[0]
    k = float_input("k", k, 3, "[N, Hkv, D]")
    check_shape("k", k, (n, hkv, d), "[N, Hkv, D]")
    v = float_input("v", v, 3, "[N, Hkv, D]")
    check_shape("v", v, (n, hkv, d), "[N, Hkv, D]")
    written = slots >= 0
    check_index_range("slot_mapping", slots[written], 0, P * page_size,
                      f" (slots are page * page_size + offset with P={P}, page_size={page_size})")
    check_unique("slot_mapping", slots, ignore_negative=True)
    ks = _scale("k_scale", k_scale, "k_pages", k_pages)
    vs = _scale("v_scale", v_scale, "v_pages", v_pages)
    if k_pages.dtype == np.int8:
        for name, x in (("k", k), ("v", v)):
            bad = np.argwhere(np.isnan(x[written]))
            if bad.size:
                row = int(np.flatnonzero(written)[bad[0][0]])
                raise ValueError(f"{name} must not hold NaN in a written token when the pages are int8 "
                                 f"({name}[{row}] has NaN)")
    # Pinned rounding: through float32 first (exact for every claimed activation dtype).
    return (k_pages, v_pages, k.astype(np.float32), v.astype(np.float32),
            np.where(written, slots, -1).astype(np.int32), ks, vs)
