"""Canonical (NumPy) layout -> the layout the Pallas attention kernel reads.

- K/V pools [P, page_size, Hkv, D] become one combined pool [P, page_size, 2*Hkv, Dp], K of head h at
  combined index 2h and V at 2h+1 (spec/paged_attention.md, combined layout), so one DMA per page brings
  both;
- the head dim is zero-padded to Dp, a multiple of 128 lanes: zero lanes add nothing to q . k or to the
  output lanes that are kept;
- q rows are zero-padded to t_pad and pages to p_pad (inert: padding rows belong to no sequence, padding
  pages are in no page table).
Storage dtypes are kept (quantized pages are dequantized inside the kernel).
"""
from __future__ import annotations

import numpy as np

from .tiling import LANES, round_up


def combine_kv(k_pages: np.ndarray, v_pages: np.ndarray, *, d_pad: int, p_pad: int) -> np.ndarray:
    P, page_size, hkv, d = k_pages.shape
    out = np.zeros((p_pad, page_size, 2 * hkv, d_pad), k_pages.dtype)
    out[:P, :, 0::2, :d] = k_pages
    out[:P, :, 1::2, :d] = v_pages
    return out


def split_kv(kv_pages: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of combine_kv (without the padding pages)."""
    return kv_pages[:, :, 0::2, :d], kv_pages[:, :, 1::2, :d]


def _padded_q(q: np.ndarray, t_pad: int) -> np.ndarray:
    T, hq, d = q.shape
    q_out = np.zeros((t_pad, hq, round_up(d, LANES)), q.dtype if q.dtype != np.float64 else np.float32)
    q_out[:T, :, :d] = q
    return q_out


def attention_inputs(q: np.ndarray, k_pages: np.ndarray, v_pages: np.ndarray, *, t_pad: int, p_pad: int):
    d_pad = round_up(q.shape[2], LANES)
    if k_pages.dtype == np.float64:  # not claimed; run it in float32
        k_pages, v_pages = k_pages.astype(np.float32), v_pages.astype(np.float32)
    return _padded_q(q, t_pad), combine_kv(k_pages, v_pages, d_pad=d_pad, p_pad=p_pad)


def attention_inputs_combined(q: np.ndarray, kv_pages: np.ndarray, *, t_pad: int, p_pad: int):
    """The same for a cache handed in the combined layout (PA-36): its heads are already interleaved."""
    P, page_size, two_hkv, d = kv_pages.shape
    if kv_pages.dtype == np.float64:  # not claimed; run it in float32
        kv_pages = kv_pages.astype(np.float32)
    out = np.zeros((p_pad, page_size, two_hkv, round_up(d, LANES)), kv_pages.dtype)
    out[:P, :, :, :d] = kv_pages
    return _padded_q(q, t_pad), out
