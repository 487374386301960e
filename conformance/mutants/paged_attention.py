"""Mutants of the paged-attention family: realistic kernel bugs, each wrapping the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference import dtypes

from . import Mutant, mutant


def _replace_out(result, fn):
    if isinstance(result, tuple):
        return type(result)(fn(result[0]), *result[1:])
    return fn(result)


@mutant(op="ragged_paged_attention", clause="PA-15",
        description="sliding window off by one: keys in [pos-W, pos] (W+1 keys) instead of (pos-W, pos]")
class SlidingWindowOffByOne(Mutant):
    def ragged_paged_attention(self, *args, sliding_window=None, **kw):
        window = None if sliding_window is None else sliding_window + 1
        return reference.ragged_paged_attention(*args, sliding_window=window, **kw)


@mutant(op="ragged_paged_attention", clause="PA-12",
        description="GQA maps query head h to KV head h % Hkv instead of h // (Hq // Hkv)")
class GqaModulo(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, *args, **kw):
        hq, hkv = q.shape[1], k_pages.shape[2]
        heads = np.arange(hq) % hkv      # one KV head per query head, chosen the wrong way
        return reference.ragged_paged_attention(q, k_pages[:, :, heads], v_pages[:, :, heads], *args, **kw)


@mutant(op="ragged_paged_attention", clause="PA-24",
        description="reads the whole last page: 0 * NaN from slots past kv_len leaks into the output")
class NanPastKvLenLeaks(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        page_size = k_pages.shape[1]
        leaking = []
        for i in range(int(num_seqs)):
            kv_len = int(kv_lens[i])
            tail = kv_len % page_size
            if tail:
                page = page_indices[i, kv_len // page_size]
                junk = np.concatenate([dtypes.upcast(k_pages[page, tail:]).ravel(),
                                       dtypes.upcast(v_pages[page, tail:]).ravel()])
                if np.isnan(junk).any():
                    leaking.append(slice(int(cu_q_lens[i]), int(cu_q_lens[i + 1])))

        def poison(out):
            out = out.copy()
            for rows in leaking:
                out[rows] = np.nan
            return out
        return _replace_out(result, poison)


@mutant(op="ragged_paged_attention", clause="PA-16",
        description="soft cap computes tanh as (e^2x - 1)/(e^2x + 1) in float32: NaN once |s/cap| > 44")
class SoftCapOverflow(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, soft_cap=None, k_scale=None, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, sm_scale=sm_scale, soft_cap=soft_cap,
                                                  k_scale=k_scale, **kw)
        if soft_cap is None:
            return result
        D, page_size = q.shape[2], k_pages.shape[1]
        group = q.shape[1] // k_pages.shape[2]
        scale = D ** -0.5 if sm_scale is None else sm_scale
        overflow = []
        for i in range(int(num_seqs)):
            n = int(kv_lens[i])
            if n == 0 or cu_q_lens[i + 1] == cu_q_lens[i]:
                continue
            tokens = np.arange(n)
            keys = dtypes.upcast(k_pages[page_indices[i, tokens // page_size], tokens % page_size], k_scale)
            rows = dtypes.upcast(q[cu_q_lens[i]:cu_q_lens[i + 1]])
            s = scale * np.einsum("thd,jhd->thj", rows, np.repeat(keys, group, axis=1))
            if np.nanmax(np.abs(s)) / soft_cap > 44.0:
                overflow.append(slice(int(cu_q_lens[i]), int(cu_q_lens[i + 1])))

        def poison(out):
            out = out.copy()
            for rows in overflow:
                out[rows] = np.nan
            return out
        return _replace_out(result, poison)


@mutant(op="ragged_paged_attention", clause="PA-18",
        description="quantized KV dequantized without k_scale / v_scale")
class Fp8ScaleIgnored(Mutant):
    def ragged_paged_attention(self, *args, k_scale=None, v_scale=None, **kw):
        return reference.ragged_paged_attention(*args, k_scale=None if k_scale is None else 1.0,
                                                v_scale=None if v_scale is None else 1.0, **kw)


@mutant(op="write_kv", clause="PA-41",
        description="a negative (padding) slot is not skipped: Python-style indexing writes the pool's end")
class WriteKvNegativeSlotWraps(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        total = k_pages.shape[0] * k_pages.shape[1]
        slots = np.where(slot_mapping < 0, slot_mapping % total, slot_mapping).astype(slot_mapping.dtype)
        return reference.write_kv(k_pages, v_pages, k, v, slots, **kw)
