"""kvconform.adapters.varlen: the canonical call in FlashAttention's varlen form computes what the spec says.

A small attention written to FlashAttention's documented semantics (flash_attn_varlen_func: rows of
sequence b are q[cu_seqlens_q[b]:cu_seqlens_q[b+1]], its keys the first seqused_k[b] slots of its
block_table row, causal aligned bottom-right, window_size=(left, right) keeps key j for row position i iff
i - left <= j <= i + right, softcap 0 = off, k/v descale [batch, Hkv]) is fed the adapters' conversions and
must equal the reference on batches with padding rows, ignored metadata rows, windows, soft caps and fp8
pages with per-tensor and per-head scales."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kvconform import reference
from kvconform.adapters import (flash_soft_cap, flash_window, per_sequence_scales, soft_cap_from_flash,
                                varlen_metadata, window_from_flash)


def _flash_varlen(q, k_cache, v_cache, md, *, softmax_scale, window_size, softcap, k_descale, v_descale):
    """FlashAttention's varlen paged attention, by its documented semantics, in float64."""
    out = np.zeros(q.shape, np.float64)
    left, right = window_size
    page_size, hkv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // hkv
    for b in range(len(md.cu_seqlens_q) - 1):
        rows = slice(int(md.cu_seqlens_q[b]), int(md.cu_seqlens_q[b + 1]))
        n_k = int(md.seqused_k[b])
        slots = np.arange(n_k)
        pages = md.block_table[b][slots // page_size]
        k = k_cache[pages, slots % page_size].astype(np.float64) * k_descale[b][None, :, None]
        v = v_cache[pages, slots % page_size].astype(np.float64) * v_descale[b][None, :, None]
        qb = q[rows].astype(np.float64)
        pos = n_k - qb.shape[0] + np.arange(qb.shape[0])              # bottom-right causal alignment
        j = np.arange(n_k)
        keep = j[None, :] <= pos[:, None] + (right if right >= 0 else 0)
        if left >= 0:
            keep &= j[None, :] >= pos[:, None] - left
        for h in range(q.shape[1]):
            s = softmax_scale * qb[:, h] @ k[:, h // group].T
            if softcap:
                s = softcap * np.tanh(s / softcap)
            s = np.where(keep, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[rows, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, h // group]
    return out


def _case(rng, kv_dtype):
    page_size, hkv, group, d = 4, 2, 2, 8
    kv_lens = np.array([9, 1, 6, 77], np.int32)                       # the last row is past num_seqs (PA-5)
    q_lens = np.array([3, 1, 6, 5])
    num_seqs = 3
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    table = rng.permutation(16)[:12].reshape(4, 3).astype(np.int32)
    table[3] = 999                                                      # ignored: may be out of range
    t = int(cu[num_seqs]) + 2                                           # two padding rows (PA-25)
    q = rng.standard_normal((t, hkv * group, d)).astype(np.float32)
    k_pages, v_pages = (rng.standard_normal((16, page_size, hkv, d)) * 3).astype(np.float32)[None].repeat(2, 0)
    v_pages = v_pages[::-1].copy()
    if kv_dtype != "float32":
        k_pages, v_pages = (p.astype(getattr(ml_dtypes, kv_dtype)) for p in (k_pages, v_pages))
    return q, k_pages, v_pages, kv_lens, table, cu, num_seqs


@pytest.mark.parametrize("kv_dtype,window,cap,scales", [
    ("float32", None, None, (None, None)),
    ("float32", 3, 2.5, (None, None)),
    ("float32", 1, None, (None, None)),
    ("float8_e4m3fn", 4, None, (0.5, 1.75)),
    ("float8_e4m3fn", None, 30.0, (np.array([0.25, 2.0], np.float32), np.array([1.5, 0.125], np.float32))),
])
def test_the_flash_form_of_a_call_computes_the_reference(kv_dtype, window, cap, scales):
    rng = np.random.default_rng(7)
    q, k_pages, v_pages, kv_lens, table, cu, num_seqs = _case(rng, kv_dtype)
    k_scale, v_scale = scales
    expected = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, table, cu, num_seqs,
                                                sliding_window=window, soft_cap=cap, k_scale=k_scale,
                                                v_scale=v_scale)
    md = varlen_metadata(cu, kv_lens, table, num_seqs)
    assert md.cu_seqlens_q.tolist() == cu[:4].tolist() and md.seqused_k.tolist() == [9, 1, 6]
    assert md.cu_seqlens_k.tolist() == [0, 9, 10, 16] and (md.max_seqlen_q, md.max_seqlen_k) == (6, 9)
    assert md.block_table.shape == (3, 3) and md.num_tokens == 10
    assert all(a.dtype == np.int32 for a in (md.cu_seqlens_q, md.seqused_k, md.cu_seqlens_k, md.block_table))
    ones = np.ones((num_seqs, k_pages.shape[2]), np.float32)
    k_descale = per_sequence_scales(k_scale, num_seqs, k_pages.shape[2], name="k_scale")
    v_descale = per_sequence_scales(v_scale, num_seqs, k_pages.shape[2], name="v_scale")
    got = _flash_varlen(q[:md.num_tokens], k_pages, v_pages, md, softmax_scale=q.shape[2] ** -0.5,
                        window_size=flash_window(window), softcap=flash_soft_cap(cap),
                        k_descale=ones if k_descale is None else k_descale,
                        v_descale=ones if v_descale is None else v_descale)
    np.testing.assert_allclose(got, expected[:md.num_tokens], rtol=1e-12, atol=1e-12)


def test_conversions_and_their_inverses():
    assert flash_window(None) == (-1, -1) and flash_window(1) == (0, 0) and flash_window(4096) == (4095, 0)
    assert window_from_flash((-1, -1)) is None and window_from_flash((4095, 0)) == 4096
    assert flash_soft_cap(None) == 0.0 and flash_soft_cap(50) == 50.0
    assert soft_cap_from_flash(0.0) is None and soft_cap_from_flash(30.0) == 30.0
    assert per_sequence_scales(None, 3, 2) is None
    scales = per_sequence_scales(np.array([0.5, 2.0], np.float32), 3, 2)
    assert scales.shape == (3, 2) and scales.dtype == np.float32 and scales.flags.c_contiguous
    assert per_sequence_scales(1.5, 2, 4).tolist() == [[1.5] * 4] * 2
    assert varlen_metadata(np.array([0], np.int32), np.zeros(1, np.int32), np.zeros((1, 1), np.int32),
                           np.array([0])).max_seqlen_k == 0        # no counted sequence: a valid call


@pytest.mark.parametrize("call,words", [
    (lambda: flash_window(0), "sliding_window must be >= 1"),
    (lambda: window_from_flash((3, 2)), "window_size[1] must be 0 or -1"),
    (lambda: flash_soft_cap(0.0), "soft_cap must be None or finite and > 0"),
    (lambda: soft_cap_from_flash(-1.0), "softcap must be finite and >= 0"),
    (lambda: per_sequence_scales(np.ones((4, 2, 2), np.float32), 2, 2, name="v_scale"), "v_scale must be a scalar"),
    (lambda: per_sequence_scales(0.0, 2, 2), "k_scale must be finite and > 0"),
    (lambda: varlen_metadata(np.array([0, 2], np.int32), np.array([1], np.int32), np.zeros((1, 1), np.int32), 2),
     "num_seqs must be <= len(kv_lens)"),
    (lambda: varlen_metadata(np.array([1, 2], np.int32), np.array([2], np.int32), np.zeros((1, 1), np.int32), 1),
     "cu_q_lens[0] must be 0"),
])
def test_bad_arguments_get_one_line_naming_them(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)
