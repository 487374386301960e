"""Scatter new keys and values into the paged KV cache (spec/paged_attention.md, PA-40 .. PA-46).

Token t of the call goes to page ``slot_mapping[t] // page_size``, offset ``slot_mapping[t] % page_size``;
a negative slot skips the token (a padding token). ``k`` and ``v`` may hold more rows than ``slot_mapping``
(serving stacks pad them for captured graphs): the slot mapping's length is the number of tokens, the rows
past it are never read (PA-50). Stored values are rounded exactly as pinned in
`dtypes`: quantized pages use `dtypes.quantize` at the given scale, float pages a single
round-to-nearest-even conversion of the float32 value. Nothing else in the pool changes.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import dtypes
from .page_pools import kv_pools, kv_scale
from .validation import check_index_range, check_unique, float_array, float_input, int_input, require

__all__ = ["KVPages", "WriteKVCall", "validate_write_kv", "write_kv"]


class KVPages(NamedTuple):
    """A K and a V page pool, each [P, page_size, Hkv, D] in the storage dtype."""
    k_pages: np.ndarray
    v_pages: np.ndarray


class WriteKVCall(NamedTuple):
    """The arguments of one ``write_kv`` call after validation (PA-46).

    k_pages, v_pages: [P, page_size, Hkv, D] in the storage dtype, the caller's arrays (not copied)
    k, v:             float64[N, Hkv, D]  exact upcasts of the new tokens (the first N rows, PA-50)
    slot_mapping:     int64[N]; s >= 0 is page s // page_size, offset s % page_size; s < 0 skips (PA-41)
    written:          int64[W]  the tokens t with slot_mapping[t] >= 0, ascending (PA-41)
    k_scale, v_scale: np.float32 > 0 for quantized pages, else None (PA-44)
    """
    k_pages: np.ndarray
    v_pages: np.ndarray
    k: np.ndarray
    v: np.ndarray
    slot_mapping: np.ndarray
    written: np.ndarray
    k_scale: np.float32 | np.ndarray | None
    v_scale: np.float32 | np.ndarray | None


def write_kv(k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None) -> KVPages:
    """Return copies of the pools with token t of k/v stored at slot slot_mapping[t] (PA-40 .. PA-46).

    k_pages, v_pages: [P, page_size, Hkv, D] float, float8_e4m3fn, float8_e5m2 or int8 (same shape, dtype)
    k, v:             [N_k, Hkv, D] float (any float dtype), the same N_k >= N: rows t >= N are padding,
                      never read (PA-50)
    slot_mapping:     int[N]; slot s >= 0 is page s // page_size, offset s % page_size; s < 0 skips
                      the token (PA-41); non-negative slots must be < P * page_size and distinct (PA-42)
    k_scale, v_scale: float32 > 0, required for quantized pages and only for them (PA-44); a scalar,
                      float32[Hkv] per KV head, or the float32[P, page_size, Hkv] scales stored beside the
                      pages, each token quantized with the scale of its destination slot (PA-48)

    Returns KVPages(k_pages, v_pages) in the storage dtype: written slots hold the stored value of the
    new token (PA-43, PA-44), every other element is bitwise unchanged (PA-45). Inputs are not modified.
    """
    call = validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
    slots = call.slot_mapping[call.written]
    return KVPages(_scatter(call.k_pages, call.k[call.written], slots, call.k_scale),
                   _scatter(call.v_pages, call.v[call.written], slots, call.v_scale))


def validate_write_kv(k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None) -> WriteKVCall:
    """Check every argument of `write_kv` (PA-46: shapes, PA-42, PA-44) and return them normalised.

    Takes the op's arguments (see `write_kv` for their shapes). Raises ValueError, or TypeError for a
    wrong dtype, naming the argument and the broken rule. Backends call this first, so a malformed call
    fails with the oracle's own message before any launch.
    """
    k_pages, v_pages = kv_pools(k_pages, v_pages)
    P, page_size, Hkv, D = k_pages.shape
    require(page_size >= 1, f"k_pages must have page_size >= 1, got shape {tuple(k_pages.shape)}")
    slots = int_input("slot_mapping", slot_mapping, 1, "[N]")
    N = slots.shape[0]
    # PA-50: k and v may carry padding rows past the slot mapping's N tokens; only the first N are read
    k = _token_rows("k", k, N, Hkv, D)
    v = _token_rows("v", v, N, Hkv, D)
    require(np.shape(v)[0] == np.shape(k)[0],
            f"v must have the rows of k (k and v are padded together, PA-50): k has {np.shape(k)[0]}, "
            f"v has {np.shape(v)[0]}")
    k, v = float_input("k", k[:N]), float_input("v", v[:N])
    written = np.flatnonzero(slots >= 0)
    check_index_range("slot_mapping", slots[written], 0, P * page_size,
                      f" (slots are page * page_size + offset with P={P}, page_size={page_size})")
    check_unique("slot_mapping", slots, ignore_negative=True)
    k_scale = kv_scale("k_scale", k_scale, "k_pages", k_pages)
    v_scale = kv_scale("v_scale", v_scale, "v_pages", v_pages)
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):   # PA-48: the slots written use theirs
        if isinstance(scale, np.ndarray) and scale.ndim == 3:
            dest = slots[written]
            used = scale[dest // page_size, dest % page_size]
            bad = np.argwhere(~(np.isfinite(used) & (used > 0)))
            if bad.size:
                raise ValueError(f"{name} must be finite and > 0 beside every written slot (slot "
                                 f"{int(dest[bad[0][0]])}, KV head {int(bad[0][1])}, PA-48)")
    if k_pages.dtype == np.int8:  # PA-44: int8 has no NaN; skipped tokens are not read (PA-41)
        for name, values in (("k", k), ("v", v)):
            nan = np.argwhere(np.isnan(values[written]))
            if nan.size:
                raise ValueError(f"{name} must not hold NaN in a written token when the pages are int8 "
                                 f"({name}[{written[nan[0][0]]}] has NaN)")
    return WriteKVCall(k_pages, v_pages, k, v, slots, written, k_scale, v_scale)


def _token_rows(name: str, x, N: int, Hkv: int, D: int) -> np.ndarray:
    """`x` [N_k, Hkv, D] with N_k >= N, checked without upcasting its padding rows (PA-46, PA-50)."""
    arr = float_array(name, x, 3, "[N_k, Hkv, D]")   # dtype and rank rules, naming the argument (no copy)
    require(arr.shape[1:] == (Hkv, D) and arr.shape[0] >= N,
            f"{name} must have shape [N_k, Hkv, D] = [>= {N}, {Hkv}, {D}] (at least one row per slot_mapping "
            f"entry, heads and dims of the pools), got {tuple(arr.shape)}")
    return arr


def _scatter(pages, values, slots, scale) -> np.ndarray:
    if isinstance(scale, np.ndarray) and scale.ndim == 1:     # per KV head (PA-48)
        scale = scale[None, :, None]
    elif isinstance(scale, np.ndarray):                        # per token: the scale beside the slot (PA-48)
        page_size = pages.shape[1]
        scale = scale[slots // page_size, slots % page_size][:, :, None]
    stored = _store(values, pages.dtype, scale)
    result = pages.copy()
    flat = result.reshape(-1, *pages.shape[2:])  # a view: slot s is row s
    flat[slots] = stored
    return result


def _store(values: np.ndarray, dtype: np.dtype, scale) -> np.ndarray:
    """PA-43 / PA-44: the storage value of each written token."""
    if dtypes.is_quantized_dtype(dtype):
        return dtypes.quantize(values, scale, dtype)
    if dtype == np.float64:
        return values.copy()
    # Through float32 first, like the quantize rule: one pinned rounding for every backend.
    with np.errstate(over="ignore"):  # PA-43: overflow gives +-inf, as in an IEEE conversion
        return values.astype(np.float32).astype(dtype)
