"""Mutants of ragged_paged_attention: realistic kernel bugs, each wrapping the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.conformance.mutants import Mutant, mutant
from kvconform.conformance.mutants.edits import filled, replace_out
from kvconform.reference import dtypes


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

        return filled(result, leaking, np.nan)


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

        return filled(result, overflow, np.nan)


@mutant(op="ragged_paged_attention", clause="PA-18",
        description="quantized KV dequantized without k_scale / v_scale")
class Fp8ScaleIgnored(Mutant):
    def ragged_paged_attention(self, *args, k_scale=None, v_scale=None, **kw):
        return reference.ragged_paged_attention(*args, k_scale=None if k_scale is None else 1.0,
                                                v_scale=None if v_scale is None else 1.0, **kw)


@mutant(op="ragged_paged_attention", clause="PA-7",
        description="returns float8_e4m3fn outputs 3% too large: a narrow output dtype must not buy tolerance",
        diagnosis="narrower than the")
class Fp8BiasedOutput(Mutant):
    def ragged_paged_attention(self, *args, **kw):
        result = reference.ragged_paged_attention(*args, **kw)
        return replace_out(result, lambda out: (out * 1.03).astype(dtypes.DTYPES["float8_e4m3fn"]))


@mutant(op="ragged_paged_attention", clause="PA-16",
        description="two independent bugs: V slots past kv_len leak NaN (0 * NaN) and the soft cap is "
                    "applied with a cap 5% too large", diagnosis="v_tail")
class VTailLeakAndSoftCapError(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               soft_cap=None, **kw):
        capped = None if soft_cap is None else soft_cap * 1.05
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, soft_cap=capped, **kw)
        page_size = v_pages.shape[1]
        leaking = []
        for i in range(int(num_seqs)):
            kv_len = int(kv_lens[i])
            if kv_len % page_size and cu_q_lens[i + 1] > cu_q_lens[i]:
                page = page_indices[i, kv_len // page_size]
                if np.isnan(dtypes.upcast(v_pages[page, kv_len % page_size:])).any():
                    leaking.append(slice(int(cu_q_lens[i]), int(cu_q_lens[i + 1])))

        return filled(result, leaking, np.nan)


@mutant(op="ragged_paged_attention", clause="PA-14",
        description="split-KV partial outputs kept in float16 before the combine (sequences of >= 256 keys)",
        max_size=40, only_caught_by="long")
class SplitKvHalfPartials(Mutant):
    SPLIT_MIN_KEYS, CHUNK = 256, 128

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        if any(kw.get(k) is not None for k in ("sliding_window", "soft_cap", "sinks")) or kw.get("return_scores"):
            return result
        out = np.array(result, dtype=np.float64)
        D, page_size, group = q.shape[2], k_pages.shape[1], q.shape[1] // k_pages.shape[2]
        scale = kw.get("sm_scale") or D ** -0.5
        for i in range(int(num_seqs)):
            n, rows = int(kv_lens[i]), slice(int(cu_q_lens[i]), int(cu_q_lens[i + 1]))
            q_len = rows.stop - rows.start
            if n < self.SPLIT_MIN_KEYS or q_len == 0 or q_len > 16:
                continue
            tok = np.arange(n)
            where = (page_indices[i, tok // page_size], tok % page_size)
            k = np.repeat(dtypes.upcast(k_pages[where], kw.get("k_scale")), group, axis=1)   # [n, Hq, D]
            v = np.repeat(dtypes.upcast(v_pages[where], kw.get("v_scale")), group, axis=1)
            s = scale * np.einsum("thd,jhd->thj", dtypes.upcast(q[rows]), k)
            pos = n - q_len + np.arange(q_len)
            s = np.where(tok[None, None, :] <= pos[:, None, None], s, -np.inf)
            parts = []
            for c in range(0, n, self.CHUNK):
                sc = s[..., c:c + self.CHUNK]
                m = sc.max(axis=-1, keepdims=True)
                m_safe = np.where(np.isfinite(m), m, 0.0)
                p = np.exp(sc - m_safe)
                l = p.sum(axis=-1, keepdims=True)
                o = np.einsum("thj,jhd->thd", p, v[c:c + self.CHUNK]) / np.where(l > 0, l, 1.0)
                parts.append((m, l, o.astype(np.float16).astype(np.float64)))
            M = np.max([m for m, _, _ in parts], axis=0)
            w = [np.where(np.isfinite(m), np.exp(m - M), 0.0) * l for m, l, _ in parts]
            out[rows] = sum(wi * o for wi, (_, _, o) in zip(w, parts)) / sum(w)
        return out


#: max_size 16: a shape cache fails only on a shape an earlier call of the run left in it, so its smallest
#: counterexample is the smallest shape the tests before it drew (with the reach columns: 12 query heads in
#: the sinks column), not what shrinking can reach
@mutant(op="ragged_paged_attention", clause="PA-7", max_size=16,
        description="caches the result by input shapes: a second call with the same shapes returns the first "
                    "call's output", diagnosis="call", replay_from="call_history")
class CachesByShape(Mutant):
    def __init__(self):
        super().__init__()
        self._cache = {}

    def ragged_paged_attention(self, q, k_pages, *args, **kw):
        key = (q.shape, k_pages.shape, k_pages.dtype.str, tuple(sorted(kw)))
        if key not in self._cache:
            self._cache[key] = reference.ragged_paged_attention(q, k_pages, *args, **kw)
        return self._cache[key]


@mutant(op="ragged_paged_attention", clause="PA-39",
        description="reads a combined cache with K and V swapped (K at 2h + 1, V at 2h)")
class CombinedLayoutKvSwap(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, *args, kv_layout="separate", **kw):
        if kv_layout == "combined":
            kv = np.asarray(k_pages)
            swapped = np.empty_like(kv)
            swapped[:, :, 0::2], swapped[:, :, 1::2] = kv[:, :, 1::2], kv[:, :, 0::2]
            k_pages = swapped
        return reference.ragged_paged_attention(q, k_pages, v_pages, *args, kv_layout=kv_layout, **kw)


@mutant(op="ragged_paged_attention", clause="PA-47",
        description="query heads processed in blocks of 8 whose KV head is counted from the block start: a "
                    "block that starts inside a KV head's group (ratio 3 or 6) reads the wrong KV heads",
        max_size=40)
class HeadBlockStraddlesKvHeads(Mutant):
    BLOCK = 8

    def ragged_paged_attention(self, q, k_pages, v_pages, *args, **kw):
        hq, hkv = q.shape[1], k_pages.shape[2]
        group = hq // hkv
        h = np.arange(hq)
        start = h - h % self.BLOCK
        kv_head = start // group + (h - start) // group    # right only when blocks start on a group edge
        kv_head = np.minimum(kv_head, hkv - 1)
        if np.array_equal(kv_head, h // group):
            return reference.ragged_paged_attention(q, k_pages, v_pages, *args, **kw)
        # one KV head per query head, chosen the block's way (GQA expanded, then attended as MHA)
        return reference.ragged_paged_attention(q, k_pages[:, :, kv_head], v_pages[:, :, kv_head], *args, **kw)


def _scales_read_by_query_head(q, k_pages, v_pages, args, k_scale, v_scale, kw):
    """Attention whose query head h reads the scales of KV head h % Hkv instead of its own, h // group
    (PA-48): GQA expanded to one KV head per query head, the scales' last axis (the KV head) indexed the
    wrong way."""
    hq, hkv = q.shape[1], k_pages.shape[2]
    heads = np.arange(hq) // (hq // hkv)
    wrong = np.arange(hq) % hkv
    return reference.ragged_paged_attention(q, k_pages[:, :, heads], v_pages[:, :, heads], *args,
                                            k_scale=np.asarray(k_scale)[..., wrong],
                                            v_scale=np.asarray(v_scale)[..., wrong], **kw)


@mutant(op="ragged_paged_attention", clause="PA-48",
        description="per-head scales indexed by query head (h % Hkv) instead of KV head (h // group)")
class HeadScaleByQueryHead(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, *args, k_scale=None, v_scale=None, **kw):
        if np.ndim(k_scale) != 1:
            return reference.ragged_paged_attention(q, k_pages, v_pages, *args, k_scale=k_scale,
                                                    v_scale=v_scale, **kw)
        return _scales_read_by_query_head(q, k_pages, v_pages, args, k_scale, v_scale, kw)


@mutant(op="ragged_paged_attention", clause="PA-49", only_caught_by="head_sharding",
        diagnosis="unsharded (num_shards=1)",
        description="head sharding hands each shard the query heads of the next shard (off by one block)")
class ShardsWrongQueryHeads(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, *args, num_shards=1, **kw):
        # shard s pairs its KV heads with query heads of shard s+1: the query block index is off by one
        q = np.roll(q, -(q.shape[1] // num_shards), axis=1) if num_shards > 1 else q
        return reference.ragged_paged_attention(q, k_pages, v_pages, *args, num_shards=num_shards, **kw)


@mutant(op="ragged_paged_attention", clause="PA-48",
        description="per-token scales beside the pages read at the query head's index (h % Hkv) instead of "
                    "its KV head's (h // group)")
class TokenScaleByQueryHead(Mutant):
    def ragged_paged_attention(self, q, k_pages, v_pages, *args, k_scale=None, v_scale=None, **kw):
        if np.ndim(k_scale) != 3:
            return reference.ragged_paged_attention(q, k_pages, v_pages, *args, k_scale=k_scale,
                                                    v_scale=v_scale, **kw)
        return _scales_read_by_query_head(q, k_pages, v_pages, args, k_scale, v_scale, kw)


# Deprecated spec paths: the write_kv and reach mutants moved to kv_write.py and attention_reach.py; a spec
# written as `kvconform.conformance.mutants.paged_attention:<Class>` still loads them (use the new module).
from kvconform.conformance.mutants.attention_reach import (CsrPageWalkCapped64, GroupBeyondOneTile,  # noqa: E402,F401
                                                           HeadDimChunkFloor, LogitsFp16Accumulator, PageSizeByShift,
                                                           SequenceSearch7Steps)
from kvconform.conformance.mutants.kv_write import (WriteKvE5m2OverflowToInf,  # noqa: E402,F401
                                                    WriteKvFirstTokenScale, WriteKvGridFollowsKeys,
                                                    WriteKvInt8ThroughInt32, WriteKvNegativeSlotWraps,
                                                    WriteKvPageByShift, WriteKvReciprocalScale)
