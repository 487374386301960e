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


def _filled(result, indices, value):
    """`result` with its output (a tuple result's first field) set to `value` at each index of `indices`:
    the rows, heads or dims a mutant poisons (NaN) or never writes (0)."""
    def fill(out):
        out = out.copy()
        for index in indices:
            out[index] = value
        return out
    return _replace_out(result, fill)


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

        return _filled(result, leaking, np.nan)


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

        return _filled(result, overflow, np.nan)


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


@mutant(op="ragged_paged_attention", clause="PA-7",
        description="returns float8_e4m3fn outputs 3% too large: a narrow output dtype must not buy tolerance",
        diagnosis="narrower than the")
class Fp8BiasedOutput(Mutant):
    def ragged_paged_attention(self, *args, **kw):
        result = reference.ragged_paged_attention(*args, **kw)
        return _replace_out(result, lambda out: (out * 1.03).astype(dtypes.DTYPES["float8_e4m3fn"]))


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

        return _filled(result, leaking, np.nan)


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


@mutant(op="write_kv", clause="PA-44",
        description="quantize-on-write as x * fl32(1/s) instead of the correctly rounded x / s")
class WriteKvReciprocalScale(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        from kvconform.reference.kv_write import validate_write_kv
        call = validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if call.k_scale is None:
            return reference.write_kv(k_pages, v_pages, k, v, slot_mapping)
        page_size, hkv = np.shape(k_pages)[1], np.shape(k_pages)[2]
        slots = np.where(np.asarray(slot_mapping) >= 0, slot_mapping, 0)

        def prescaled(x, s):   # fl32(x) * fl32(1/s): store at scale 1 what the kernel computed
            s = np.asarray(s, np.float32)
            if s.ndim == 1:      # per KV head (PA-48)
                s = s[None, :, None]
            elif s.ndim == 3:    # per slot and KV head, beside the pages (PA-48)
                s = s.reshape(-1, hkv)[slots][:, :, None]
            inv = np.float32(1.0) / s
            return (np.asarray(x).astype(np.float32) * inv).astype(np.float32)
        return reference.write_kv(k_pages, v_pages, prescaled(k, call.k_scale), prescaled(v, call.v_scale),
                                  slot_mapping, k_scale=1.0, v_scale=1.0)


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


@mutant(op="write_kv", clause="PA-48",
        description="quantizes every written token with the scales beside the first written slot")
class WriteKvFirstTokenScale(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        if np.ndim(k_scale) == 3 and (slot_mapping >= 0).any():
            page_size = k_pages.shape[1]
            first = int(slot_mapping[slot_mapping >= 0][0])
            k_scale = np.broadcast_to(k_scale[first // page_size, first % page_size], k_scale.shape).copy()
            v_scale = np.broadcast_to(v_scale[first // page_size, first % page_size], v_scale.shape).copy()
        return reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)


@mutant(op="write_kv", clause="PA-44",
        description="float8_e5m2 stores overflow as +-inf instead of saturating to the largest finite value "
                    "(a non-finite stored value where the reference is finite)")
class WriteKvE5m2OverflowToInf(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if dtypes.dtype_name(k_pages.dtype) != "float8_e5m2" or np.ndim(k_scale) != 0:
            return result
        page_size = k_pages.shape[1]
        live = slot_mapping >= 0
        pools = []
        for pool, x, scale in ((result.k_pages, k, k_scale), (result.v_pages, v, v_scale)):
            pool = pool.copy()
            slots = slot_mapping[live]
            q = np.asarray(x[live], np.float32) / np.asarray(scale, np.float32)
            over = np.abs(q) > 57344.0
            flat = pool.reshape(-1, *pool.shape[2:])
            flat[slots] = np.where(over, np.sign(q) * np.inf, flat[slots].astype(np.float32)).astype(pool.dtype)
            pools.append(pool)
        return type(result)(*pools)


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


# --- reach (issue 27): bugs behind the sizes and values only the long_* and range columns draw ----------
# Each mutant claims only what its column needs (one dtype pair, no optional feature), so its meta-test
# (tests/engine/test_mutants.py runs the whole op) skips the feature columns instead of paying for them.

def _narrowed(op: str, dtypes_: tuple, kv_dtypes: tuple, features: tuple = ()):
    """A capabilities() claiming only `dtypes_` x `kv_dtypes` and `features` for `op` (the rest as the
    numpy backend): the columns the mutant cannot be caught by are skipped as unsupported."""
    import dataclasses

    def capabilities(self):
        claims = super(type(self), self).capabilities()
        claims[op] = dataclasses.replace(claims[op], dtypes=dtypes_, kv_dtypes=kv_dtypes, features=features,
                                         layouts=())
        return claims
    return capabilities


def _plain_rows(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale, gather):
    """float64[T, Hq, D]: option-free attention (PA-6, PA-7, PA-12, PA-14) where sequence i's keys are what
    `gather(i, kv_len, page_size)` returns, (tokens int[n], k float64[n, Hkv, D], v): the gather a buggy
    kernel performs. A row sees the gathered tokens j <= its position; `None` from gather makes the
    sequence's rows NaN (an out-of-bounds read)."""
    T, hq, D = q.shape
    group = hq // k_pages.shape[2]
    scale = D ** -0.5 if sm_scale is None else sm_scale
    out = np.zeros((T, hq, D))
    for i in range(int(num_seqs)):
        lo, hi, n = int(cu_q_lens[i]), int(cu_q_lens[i + 1]), int(kv_lens[i])
        if hi == lo:
            continue
        got = gather(i, n, k_pages.shape[1])
        if got is None:
            out[lo:hi] = np.nan
            continue
        tokens, k, v = got
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)        # [n, Hq, D]
        s = scale * np.einsum("thd,jhd->thj", dtypes.upcast(q[lo:hi]), k)
        pos = n - (hi - lo) + np.arange(hi - lo)
        s = np.where(tokens[None, None, :] <= pos[:, None, None], s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        out[lo:hi] = np.einsum("thj,jhd->thd", p, v) / p.sum(axis=-1, keepdims=True)
    return out


def _has_options(kw) -> bool:
    return any(kw.get(k) is not None for k in ("sliding_window", "soft_cap", "sinks", "k_scale")) \
        or bool(kw.get("return_scores")) or kw.get("kv_layout", "separate") != "separate" \
        or kw.get("num_shards", 1) != 1


@mutant(op="ragged_paged_attention", clause="PA-10", only_caught_by="long_page|reach_page_size", max_size=12,
        description="token j's page and slot taken as j >> log2(page_size) and j & (page_size - 1): right only "
                    "for power-of-two page sizes (a page size of 544, 528 or 12 reads the wrong slots)")
class PageSizeByShift(Mutant):
    capabilities = _narrowed("ragged_paged_attention", ("float32",), ("float32",))

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)   # validates first, as a kernel's adapter
        page_size = k_pages.shape[1]
        shift = page_size.bit_length() - 1
        if page_size == 1 << shift or _has_options(kw):
            return result

        def gather(i, n, _):
            tokens = np.arange(n)
            entry, slot = tokens >> shift, tokens & ((1 << shift) - 1)
            if entry.size and entry.max() >= page_indices.shape[1]:
                return None
            pages = page_indices[i, entry]
            if pages.size and (pages.min() < 0 or pages.max() >= k_pages.shape[0]):
                return None
            return tokens, dtypes.upcast(k_pages[pages, slot]), dtypes.upcast(v_pages[pages, slot])
        return _plain_rows(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, kw.get("sm_scale"),
                           gather)


@mutant(op="ragged_paged_attention_csr", clause="MD-23", max_size=12,
        only_caught_by="long_pages|reach_pages_per_seq|reach_keys",
        description="walks at most 64 entries of a sequence's CSR page list (one tile of page ids): keys on "
                    "pages past the 64th are never seen")
class CsrPageWalkCapped64(Mutant):
    MAX_PAGES = 64
    capabilities = _narrowed("ragged_paged_attention_csr", ("float32",), ("float32",))

    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   **kw):
        result = reference.ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices,
                                                      kv_last_page_len, **kw)   # validates first
        page_size = k_pages.shape[1]
        pages = np.diff(np.asarray(kv_indptr, np.int64))
        if _has_options(kw) or not (pages > self.MAX_PAGES).any():
            return result
        table = reference.csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, int(pages.max()))

        def gather(i, n, _):
            tokens = np.arange(min(n, self.MAX_PAGES * page_size))
            where = (table.page_indices[i, tokens // page_size], tokens % page_size)
            return tokens, dtypes.upcast(k_pages[where]), dtypes.upcast(v_pages[where])
        return _plain_rows(q, k_pages, v_pages, table.kv_lens, table.page_indices, qo_indptr, len(pages),
                           kw.get("sm_scale"), gather)


@mutant(op="ragged_paged_attention", clause="PA-14", only_caught_by="long_head_dim|reach_head_dim", max_size=12,
        description="head dim walked in chunks of 64 with floor(D / 64) chunks: the partial last chunk of "
                    "D = 80, 96, 112 is dropped from the logits and never written to the output")
class HeadDimChunkFloor(Mutant):
    CHUNK = 64
    capabilities = _narrowed("ragged_paged_attention", ("float32",), ("float32",))

    def ragged_paged_attention(self, q, *args, **kw):
        result = reference.ragged_paged_attention(q, *args, **kw)   # validates first
        D = q.shape[2]
        cut = D - D % self.CHUNK
        if D <= self.CHUNK or cut == D:
            return result
        q = np.array(q, copy=True)
        q[..., cut:] = 0
        result = reference.ragged_paged_attention(q, *args, **kw)

        return _filled(result, [(Ellipsis, slice(cut, None))], 0)


@mutant(op="ragged_paged_attention", clause="PA-12", only_caught_by="long_heads|reach_q_heads", max_size=140,
        description="one 16-row query tile per KV head: in a GQA group of more than 16 query heads (32: "
                    "GQA 32, DeepSeek's 128 over 4) the heads past the 16th get no output")
class GroupBeyondOneTile(Mutant):
    TILE = 16
    capabilities = _narrowed("ragged_paged_attention", ("float32",), ("float32",), ("gqa",))

    def ragged_paged_attention(self, q, k_pages, *args, **kw):
        result = reference.ragged_paged_attention(q, k_pages, *args, **kw)
        group = q.shape[1] // k_pages.shape[2]
        if group <= self.TILE:
            return result
        lost = np.arange(q.shape[1]) % group >= self.TILE

        return _filled(result, [(slice(None), lost)], 0)


@mutant(op="ragged_paged_attention", clause="PA-4", only_caught_by="long_batch|reach_sequences", max_size=600,
        description="a program finds its sequence by a binary search over cu_q_lens unrolled for 7 steps "
                    "(128 sequences): in a decode batch of 256 rows, sequences past the 128th are never "
                    "computed")
class SequenceSearch7Steps(Mutant):
    MAX_SEQS = 128
    capabilities = _narrowed("ragged_paged_attention", ("float32",), ("float32",))

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        if int(num_seqs) <= self.MAX_SEQS:
            return result
        lost = slice(int(cu_q_lens[self.MAX_SEQS]), int(cu_q_lens[int(num_seqs)]))

        return _filled(result, [lost], 0)


@mutant(op="ragged_paged_attention", clause="PA-14", only_caught_by="range", max_size=12,
        description="q . k accumulated in float16 before sm_scale (a tensor-core dot with a float16 "
                    "accumulator): a row whose raw |q . k| passes 65504 gets an infinite logit and NaN")
class LogitsFp16Accumulator(Mutant):
    capabilities = _narrowed("ragged_paged_attention", ("float16",), ("float16",), ("gqa",))

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        if q.dtype != np.float16:
            return result
        page_size, group = k_pages.shape[1], q.shape[1] // k_pages.shape[2]
        window = kw.get("sliding_window")
        overflow = []
        for i in range(int(num_seqs)):
            lo, hi, n = int(cu_q_lens[i]), int(cu_q_lens[i + 1]), int(kv_lens[i])
            if hi == lo:
                continue
            tokens = np.arange(n)
            keys = dtypes.upcast(k_pages[page_indices[i, tokens // page_size], tokens % page_size],
                                 kw.get("k_scale") if np.ndim(kw.get("k_scale")) == 0 else None)
            dots = np.einsum("thd,jhd->thj", dtypes.upcast(q[lo:hi]), np.repeat(keys, group, axis=1))
            pos = (n - (hi - lo) + np.arange(hi - lo))[:, None, None]
            seen = (tokens <= pos) & (True if window is None else tokens > pos - window)
            if np.abs(np.where(seen, dots, 0.0)).max() > 65504.0:
                overflow.append(slice(lo, hi))

        return _filled(result, overflow, np.nan)


@mutant(op="write_kv", clause="PA-50", only_caught_by="padded", max_size=12,
        description="the grid follows k's rows instead of the slot mapping's length: each padding row past "
                    "the slot mapping reads the stale (zero) slot-buffer entry and overwrites slot 0")
class WriteKvGridFollowsKeys(Mutant):
    capabilities = _narrowed("write_kv", ("float32",), ("float32",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **kw)   # validates first
        n = np.shape(slot_mapping)[0]
        for t in range(n, np.shape(k)[0]):
            result = reference.write_kv(result.k_pages, result.v_pages, k[t:t + 1], v[t:t + 1],
                                        np.zeros(1, np.asarray(slot_mapping).dtype), **kw)
        return result


@mutant(op="write_kv", clause="PA-44", only_caught_by="range", max_size=12,
        description="int8 quantization converts the float32 quotient to int32 before saturating: a quotient "
                    "of 2^31 or more (large values over a scale near the smallest normal) wraps to -2^31 and "
                    "stores -128")
class WriteKvInt8ThroughInt32(Mutant):
    capabilities = _narrowed("write_kv", ("float32",), ("int8",), ("quantized_kv",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if np.asarray(k_pages).dtype != np.int8 or np.ndim(k_scale) != 0:
            return result
        live = np.flatnonzero(np.asarray(slot_mapping) >= 0)
        pools = []
        for pool, x, scale in ((result.k_pages, k, k_scale), (result.v_pages, v, v_scale)):
            pool = pool.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                quotient = np.asarray(x[live], np.float32) / np.float32(scale)
            wrapped = ~(np.abs(quotient) < 2.0 ** 31)
            flat = pool.reshape(-1, *pool.shape[2:])
            slots = np.asarray(slot_mapping)[live]
            flat[slots] = np.where(wrapped, np.int8(-128), flat[slots])
            pools.append(pool)
        return type(result)(*pools)


@mutant(op="write_kv", clause="PA-40", only_caught_by="long|reach_page_size", max_size=600,
        description="slot s stored at page s >> log2(page_size), offset s & (page_size - 1): right only for "
                    "power-of-two page sizes")
class WriteKvPageByShift(Mutant):
    capabilities = _narrowed("write_kv", ("float32",), ("float32",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **kw)   # validates first
        P, page_size = np.shape(k_pages)[:2]
        shift = page_size.bit_length() - 1
        slots = np.asarray(slot_mapping).astype(np.int64)
        if page_size != 1 << shift:
            moved = (slots >> shift) * page_size + (slots & ((1 << shift) - 1))
            slots = np.where((slots >= 0) & (moved < P * page_size), moved, -1)   # out of the pool: lost
        return reference.write_kv(k_pages, v_pages, k, v, slots.astype(np.asarray(slot_mapping).dtype), **kw)
