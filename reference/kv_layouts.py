"""KV page layouts a backend may use internally, and exact conversions (spec/paged_attention.md, PA-35 .. PA-38).

    separate:  k_pages, v_pages   [P, page_size, Hkv, D]      (the canonical layout)
    combined:  kv_pages           [P, page_size, 2 * Hkv, D]  K head h at 2h, V head h at 2h + 1
    flat:      pages              [P, page_size, Hkv * D]     head h occupies columns h*D .. h*D + D - 1

Conversions move elements only: same dtype, bit for bit, inputs untouched.
"""
from __future__ import annotations

import numpy as np

from .kv_write import KVPages
from .validation import as_array, check_ndim, int_scalar, require

__all__ = ["KV_LAYOUTS", "combine_kv_heads", "split_kv_heads", "flatten_kv_heads", "unflatten_kv_heads",
           "canonical_kv", "to_layout"]

#: the layouts an op's cache may be handed in (PA-39)
KV_LAYOUTS = ("separate", "combined", "flat")


def combine_kv_heads(k_pages, v_pages) -> np.ndarray:
    """Separate -> combined (PA-36): kv[P, ps, 2*Hkv, D] with kv[..., 2h, :] = k[..., h, :],
    kv[..., 2h+1, :] = v[..., h, :]."""
    k_pages, v_pages = as_array("k_pages", k_pages), as_array("v_pages", v_pages)
    check_ndim("k_pages", k_pages, 4, "[P, page_size, Hkv, D]")
    require(v_pages.shape == k_pages.shape,
            f"v_pages must have the shape of k_pages {tuple(k_pages.shape)}, got {tuple(v_pages.shape)}")
    require(v_pages.dtype == k_pages.dtype,
            f"v_pages must have the dtype of k_pages ({k_pages.dtype}), got {v_pages.dtype}")
    P, ps, Hkv, D = k_pages.shape
    return np.stack([k_pages, v_pages], axis=3).reshape(P, ps, 2 * Hkv, D)


def split_kv_heads(kv_pages) -> KVPages:
    """Combined -> separate (PA-36): inverse of `combine_kv_heads`; kv_pages: [P, ps, 2*Hkv, D]."""
    kv_pages = as_array("kv_pages", kv_pages)
    check_ndim("kv_pages", kv_pages, 4, "[P, page_size, 2*Hkv, D]")
    require(kv_pages.shape[2] % 2 == 0,
            f"kv_pages must have an even number of combined heads (2*Hkv), got {kv_pages.shape[2]}")
    return KVPages(kv_pages[:, :, 0::2, :].copy(), kv_pages[:, :, 1::2, :].copy())


def flatten_kv_heads(pages) -> np.ndarray:
    """Separate -> flat (PA-37): [P, ps, Hkv, D] -> [P, ps, Hkv*D], head-major within a slot."""
    pages = as_array("pages", pages)
    check_ndim("pages", pages, 4, "[P, page_size, Hkv, D]")
    P, ps, Hkv, D = pages.shape
    return pages.reshape(P, ps, Hkv * D).copy()


def unflatten_kv_heads(pages, head_dim) -> np.ndarray:
    """Flat -> separate (PA-37): [P, ps, Hkv*D] -> [P, ps, Hkv, D] with D = head_dim."""
    pages = as_array("pages", pages)
    check_ndim("pages", pages, 3, "[P, page_size, Hkv*D]")
    D = int_scalar("head_dim", head_dim, minimum=1)
    hidden = pages.shape[2]
    require(hidden % D == 0, f"head_dim must divide the hidden size of pages ({hidden} % {D} != 0)")
    P, ps, _ = pages.shape
    return pages.reshape(P, ps, hidden // D, D).copy()


def canonical_kv(k_pages, v_pages, kv_layout, head_dim: int):
    """The (k_pages, v_pages) [P, ps, Hkv, D] of a cache handed in `kv_layout` (PA-39).

    separate: k_pages, v_pages [P, ps, Hkv, D] as given;
    combined: k_pages holds kv_pages [P, ps, 2*Hkv, D] (PA-36) and v_pages must be None;
    flat:     k_pages, v_pages [P, ps, Hkv*D] (PA-37), D = head_dim (the head dim of q).
    Errors name k_pages / v_pages / kv_layout, the arguments of the op."""
    if not isinstance(kv_layout, str) or kv_layout not in KV_LAYOUTS:
        raise ValueError(f"kv_layout must be one of {', '.join(map(repr, KV_LAYOUTS))} (PA-39), got {kv_layout!r}")
    if kv_layout == "separate":
        return k_pages, v_pages
    if kv_layout == "combined":
        require(v_pages is None, "v_pages must be None with kv_layout='combined': K and V share k_pages "
                                 "[P, page_size, 2*Hkv, D] (PA-36, PA-39)")
        kv = as_array("k_pages", k_pages)
        check_ndim("k_pages", kv, 4, "[P, page_size, 2*Hkv, D] (kv_layout='combined')")
        require(kv.shape[2] % 2 == 0, f"k_pages must have an even number of combined heads (2*Hkv) with "
                                      f"kv_layout='combined', got {kv.shape[2]}")
        return kv[:, :, 0::2, :].copy(), kv[:, :, 1::2, :].copy()
    pages = []
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages)):
        arr = as_array(name, arr)
        check_ndim(name, arr, 3, "[P, page_size, Hkv*D] (kv_layout='flat')")
        require(arr.shape[2] % head_dim == 0, f"{name} hidden size {arr.shape[2]} must be a multiple of the "
                                              f"head dim D={head_dim} of q with kv_layout='flat' (PA-37)")
        pages.append(arr.reshape(arr.shape[0], arr.shape[1], arr.shape[2] // head_dim, head_dim).copy())
    return pages[0], pages[1]


def to_layout(k_pages: np.ndarray, v_pages: np.ndarray, kv_layout: str):
    """(k_pages, v_pages) of the canonical cache in `kv_layout`, as an op takes them (PA-39)."""
    if kv_layout == "combined":
        return combine_kv_heads(k_pages, v_pages), None
    if kv_layout == "flat":
        return flatten_kv_heads(k_pages), flatten_kv_heads(v_pages)
    return k_pages, v_pages
