"""Mutants the attention family's reach columns must catch: bugs past a size threshold (pages, page size, head dim,\nheads, batch) or in a value regime (range), each caught only by its column (`only_caught_by`)."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.conformance.mutants import Mutant, mutant
from kvconform.conformance.mutants.edits import filled, narrowed
from kvconform.reference import dtypes


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
    capabilities = narrowed("ragged_paged_attention", ("float32",), ("float32",))

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
    capabilities = narrowed("ragged_paged_attention_csr", ("float32",), ("float32",))

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
    capabilities = narrowed("ragged_paged_attention", ("float32",), ("float32",))

    def ragged_paged_attention(self, q, *args, **kw):
        result = reference.ragged_paged_attention(q, *args, **kw)   # validates first
        D = q.shape[2]
        cut = D - D % self.CHUNK
        if D <= self.CHUNK or cut == D:
            return result
        q = np.array(q, copy=True)
        q[..., cut:] = 0
        result = reference.ragged_paged_attention(q, *args, **kw)

        return filled(result, [(Ellipsis, slice(cut, None))], 0)


@mutant(op="ragged_paged_attention", clause="PA-12", only_caught_by="long_heads|reach_q_heads", max_size=140,
        description="one 16-row query tile per KV head: in a GQA group of more than 16 query heads (32: "
                    "GQA 32, DeepSeek's 128 over 4) the heads past the 16th get no output")
class GroupBeyondOneTile(Mutant):
    TILE = 16
    capabilities = narrowed("ragged_paged_attention", ("float32",), ("float32",), ("gqa",))

    def ragged_paged_attention(self, q, k_pages, *args, **kw):
        result = reference.ragged_paged_attention(q, k_pages, *args, **kw)
        group = q.shape[1] // k_pages.shape[2]
        if group <= self.TILE:
            return result
        lost = np.arange(q.shape[1]) % group >= self.TILE

        return filled(result, [(slice(None), lost)], 0)


@mutant(op="ragged_paged_attention", clause="PA-4", only_caught_by="long_batch|reach_sequences", max_size=600,
        description="a program finds its sequence by a binary search over cu_q_lens unrolled for 7 steps "
                    "(128 sequences): in a decode batch of 256 rows, sequences past the 128th are never "
                    "computed")
class SequenceSearch7Steps(Mutant):
    MAX_SEQS = 128
    capabilities = narrowed("ragged_paged_attention", ("float32",), ("float32",))

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        if int(num_seqs) <= self.MAX_SEQS:
            return result
        lost = slice(int(cu_q_lens[self.MAX_SEQS]), int(cu_q_lens[int(num_seqs)]))

        return filled(result, [lost], 0)


@mutant(op="ragged_paged_attention", clause="PA-14", only_caught_by="range|_crossed_", max_size=12,
        description="q . k accumulated in float16 before sm_scale (a tensor-core dot with a float16 "
                    "accumulator): a row whose raw |q . k| passes 65504 gets an infinite logit and NaN")
class LogitsFp16Accumulator(Mutant):
    capabilities = narrowed("ragged_paged_attention", ("float16",), ("float16",), ("gqa",))

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

        return filled(result, overflow, np.nan)
