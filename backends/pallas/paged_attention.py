"""Ragged paged attention as a Pallas TPU kernel (spec/paged_attention.md PA-1 .. PA-25).

Kernel shape (what a TPU needs, and what Pallas TPU interpret mode checks on CPU):
- grid (KV-head blocks, query blocks); both axes "arbitrary" because the per-token score output is
  accumulated across grid steps in one resident VMEM block;
- metadata (kv_lens and the flattened block table, or the CSR page table kv_indptr / kv_indices /
  kv_last_page_len of spec/metadata.md MD-23; then cu_q_lens, [num_seqs, sliding_window]) is
  scalar-prefetched into SMEM; a static flag selects which form the kernel reads page ids and kv_len
  from (one kernel body for both); float options (sm_scale, soft cap, k/v scales, sinks) sit in SMEM too,
  so a new value never forces a recompile;
- the KV pool stays in HBM (memory_space=ANY) in the combined-heads layout [P, page_size, 2*Hkv, Dp]
  (K of head h at 2h, V at 2h+1), and each page is DMA'd into a two-slot VMEM buffer: page p+1 is in
  flight while page p is being used;
- online softmax state (row max m, denominator l, accumulator acc) lives in VMEM scratch, one row per
  (query row, query head of the group), so one KV page is read once for the whole GQA group;
- pages outside [first visible key, last visible key] of the block's rows are never copied, which is
  how sliding windows and causality skip pages.

A query block may hold rows of several sequences: the kernel walks the sequences whose rows intersect
the block and masks rows of other sequences out of each update. Masking uses selection (never 0 * x), so
NaN/Inf in slots past kv_len, in unused pages or in padding rows of q cannot reach a valid row (PA-24).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .tiling import LANES, SUBLANES, packing

# fparams layout in SMEM: sm_scale, soft_cap, k_scale, v_scale, then sinks[Hq], then the k and v scale of
# each KV head [Hkv] + [Hkv] (a pool-wide scale repeated, or the per-head scales of PA-48).
_SM, _CAP, _KS, _VS, _SINKS = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class AttentionConfig:
    """Static (compile-time) parameters of one kernel instance."""
    block_q: int          # query rows per grid step (multiple of 8)
    kv_heads_per_block: int
    soft_cap: bool
    sinks: bool
    quantized: bool
    sliding_window: bool
    return_scores: bool


def check_tpu_shapes(q_shape, kv_shape, kv_dtype, cfg: AttentionConfig) -> None:
    """Reject what Mosaic would reject on a TPU: (8, 128) tiling of the blocks and KV packing."""
    T, Hq, Dp = q_shape
    P, page_size, two_hkv, Dk = kv_shape
    hkv = two_hkv // 2
    if Dp % LANES or Dk != Dp:
        raise ValueError(f"head dim must be padded to a multiple of {LANES} lanes, got q {Dp}, kv {Dk}")
    if cfg.block_q % SUBLANES or T % cfg.block_q:
        raise ValueError(f"block_q must be a multiple of {SUBLANES} dividing the padded T={T}, "
                         f"got {cfg.block_q}")
    hb = cfg.kv_heads_per_block
    if hkv % hb:
        raise ValueError(f"kv_heads_per_block={hb} must divide Hkv={hkv}")
    # A slice of the combined-head axis is the second-minor dim of the page DMA: on a TPU it must cover
    # whole packed sublane tiles unless it is the full axis.
    tile = SUBLANES * packing(kv_dtype)
    if hb != hkv and (2 * hb) % tile:
        raise ValueError(f"a KV head block of {hb} heads (2*{hb} combined rows) must be a multiple of "
                         f"{tile} rows for {jnp.dtype(kv_dtype).name} (8 sublanes x packing "
                         f"{packing(kv_dtype)}) or cover all Hkv={hkv} heads")


def ragged_paged_attention_kernel(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams, *,
                                  pages_per_seq: int, cfg: AttentionConfig, interpret):
    """Run the kernel on a block table (spec/paged_attention.md).

    q:          f32|bf16|f16 [T_pad, Hq, Dp]   (T_pad a multiple of block_q, Dp of 128)
    kv_pages:   [P, page_size, 2*Hkv, Dp] combined heads, storage dtype
    kv_lens:    i32[S]; page_table: i32[S * pages_per_seq]; cu_q_lens: i32[S+1]
    meta:       i32[2] = (num_seqs, sliding_window or 0)
    fparams:    f32[4 + Hq + 2 * Hkv] = (sm_scale, soft_cap, k_scale, v_scale, sinks..., k scale per KV head...,
                v scale per KV head...)
    Returns out f32[T_pad, Hq, Dp] and, with return_scores, scores f32[S, pages_per_seq, page_size].
    """
    return _attention_call(q, kv_pages, (kv_lens, page_table), cu_q_lens, meta, fparams, csr=False,
                           num_seqs_pad=kv_lens.shape[0], pages_per_seq=pages_per_seq, cfg=cfg, interpret=interpret)


def ragged_paged_attention_csr_kernel(q, kv_pages, kv_indptr, kv_indices, kv_last_page_len, cu_q_lens, meta,
                                      fparams, *, cfg: AttentionConfig, interpret):
    """Run the same kernel on a CSR page table (spec/metadata.md MD-2 .. MD-4, MD-23).

    kv_indptr: i32[S+1]; kv_indices: i32[nnz_pad] (entries past kv_indptr[S] are never read);
    kv_last_page_len: i32[S]; the other arguments as `ragged_paged_attention_kernel`. All three are
    scalar-prefetched: the kernel reads page j of sequence s as kv_indices[kv_indptr[s] + j] and
    kv_len_s = (n_s - 1) * page_size + kv_last_page_len[s] (n_s = kv_indptr[s+1] - kv_indptr[s] >= 1;
    0 for an empty sequence, whose last-page length is 0 by MD-4). Per-token scores are not part of
    MD-23. Returns out f32[T_pad, Hq, Dp].
    """
    if cfg.return_scores:
        raise ValueError("return_scores is not part of attention over a CSR page table (MD-23)")
    return _attention_call(q, kv_pages, (kv_indptr, kv_indices, kv_last_page_len), cu_q_lens, meta, fparams,
                           csr=True, num_seqs_pad=kv_last_page_len.shape[0], pages_per_seq=0, cfg=cfg,
                           interpret=interpret)


def _attention_call(q, kv_pages, page_meta, cu_q_lens, meta, fparams, *, csr: bool, num_seqs_pad: int,
                    pages_per_seq: int, cfg: AttentionConfig, interpret):
    """One pallas_call for both page-table forms: `page_meta` (kv_lens, page_table) or (kv_indptr,
    kv_indices, kv_last_page_len), scalar-prefetched ahead of cu_q_lens and meta; `csr` (static) selects
    how the kernel reads page ids and kv_len from them."""
    T, Hq, Dp = q.shape
    P, page_size, two_hkv, _ = kv_pages.shape
    hkv = two_hkv // 2
    check_tpu_shapes(q.shape, kv_pages.shape, kv_pages.dtype, cfg)
    S = num_seqs_pad
    hb = cfg.kv_heads_per_block
    group = Hq // hkv
    bq = cfg.block_q
    grid = (hkv // hb, T // bq)

    kernel = functools.partial(_kernel, cfg=cfg, csr=csr, page_size=page_size, pages_per_seq=pages_per_seq,
                               hkv_total=hkv, group=group, kv_dtype=kv_pages.dtype)
    in_specs = [
        pl.BlockSpec(memory_space=pltpu.SMEM),                                   # fparams
        pl.BlockSpec((bq, hb * group, Dp), lambda h, b, *_: (b, h, 0)),         # q
        pl.BlockSpec(memory_space=pl.ANY),                                       # kv pages (HBM)
    ]
    out_specs = [pl.BlockSpec((bq, hb * group, Dp), lambda h, b, *_: (b, h, 0))]
    out_shape = [jax.ShapeDtypeStruct((T, Hq, Dp), jnp.float32)]
    if cfg.return_scores:
        out_specs.append(pl.BlockSpec((S, pages_per_seq, page_size), lambda h, b, *_: (0, 0, 0)))
        out_shape.append(jax.ShapeDtypeStruct((S, pages_per_seq, page_size), jnp.float32))
    rows = bq * group
    scratch = [
        pltpu.VMEM((2, page_size, 2 * hb, Dp), kv_pages.dtype),  # double-buffered page
        pltpu.SemaphoreType.DMA((2,)),
        pltpu.VMEM((hb, rows, 1), jnp.float32),                   # m
        pltpu.VMEM((hb, rows, 1), jnp.float32),                   # l
        pltpu.VMEM((hb, rows, Dp), jnp.float32),                  # acc
    ]
    grid_spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=len(page_meta) + 2, grid=grid, in_specs=in_specs,
                                             out_specs=out_specs, scratch_shapes=scratch)
    call = pl.pallas_call(
        kernel, grid_spec=grid_spec, out_shape=out_shape, interpret=interpret,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")))
    return call(*page_meta, cu_q_lens, meta, fparams, q, kv_pages)


def _page_reader(csr: bool, page_refs, page_size: int, pages_per_seq: int):
    """(physical page of logical page j of sequence i, kv_len of sequence i), read from SMEM: a block
    table row, or the CSR arrays (MD-2, MD-3; max(n - 1, 0) covers the empty sequence, whose last-page
    length is 0, MD-4)."""
    if csr:
        indptr_ref, indices_ref, last_ref = page_refs

        def page_id(i, j):
            return indices_ref[indptr_ref[i] + j]

        def kv_len(i):
            return jnp.maximum(indptr_ref[i + 1] - indptr_ref[i] - 1, 0) * page_size + last_ref[i]
    else:
        kv_lens_ref, table_ref = page_refs

        def page_id(i, j):
            return table_ref[i * pages_per_seq + j]

        def kv_len(i):
            return kv_lens_ref[i]
    return page_id, kv_len


def _first_sequence_from(cu_ref, num_seqs, row):
    """The smallest i in [0, num_seqs] with cu_q_lens[i + 1] > row (num_seqs when none): the first sequence
    holding a row at or past `row`. A binary search over cu_q_lens in SMEM (non-decreasing, PA-4)."""
    def body(bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        past = cu_ref[mid + 1] > row
        return jnp.where(past, lo, mid + 1), jnp.where(past, mid, hi)

    lo, _ = lax.while_loop(lambda bounds: bounds[0] < bounds[1], body, (jnp.int32(0), num_seqs))
    return lo


def _kernel(*refs, cfg: AttentionConfig, csr: bool, page_size, pages_per_seq, group, kv_dtype, hkv_total):
    n_page_meta = 3 if csr else 2
    page_id, seq_kv_len = _page_reader(csr, refs[:n_page_meta], page_size, pages_per_seq)
    cu_ref, meta_ref, fp_ref, q_ref, kv_hbm, o_ref, *rest = refs[n_page_meta:]
    if cfg.return_scores:
        scores_ref, buf, sem, m_ref, l_ref, acc_ref = rest
    else:
        scores_ref = None
        buf, sem, m_ref, l_ref, acc_ref = rest
    hb = cfg.kv_heads_per_block
    bq = cfg.block_q
    rows = bq * group
    head_block = pl.program_id(0)
    q_block = pl.program_id(1)
    row0 = q_block * bq
    num_seqs = meta_ref[0]
    window = meta_ref[1]
    sm_scale = fp_ref[_SM]

    if cfg.return_scores:
        @pl.when((head_block == 0) & (q_block == 0))
        def _zero_scores():
            scores_ref[...] = jnp.zeros(scores_ref.shape, jnp.float32)

    # Row r of a head's [rows, Dp] view is query row r // group, query head (h * group + r % group).
    token = row0 + lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // group

    for h in range(hb):
        if cfg.sinks:
            # PA-17: start from the sink as if it were one extra key with value 0.
            sink = jnp.stack([fp_ref[_SINKS + (head_block * hb + h) * group + g] for g in range(group)])
            sink = jnp.tile(sink, bq).reshape(rows, 1)
            m_ref[h] = sink
            l_ref[h] = jnp.where(sink == -jnp.inf, 0.0, 1.0).astype(jnp.float32)
        else:
            m_ref[h] = jnp.full((rows, 1), -jnp.inf, jnp.float32)
            l_ref[h] = jnp.zeros((rows, 1), jnp.float32)
        acc_ref[h] = jnp.zeros(acc_ref.shape[1:], jnp.float32)

    def page_copy(i, page, slot):
        phys = page_id(i, page)
        src = kv_hbm.at[phys, :, pl.ds(head_block * 2 * hb, 2 * hb), :]
        return pltpu.make_async_copy(src, buf.at[slot], sem.at[slot])

    def seq_geometry(i):
        q_start, q_end = cu_ref[i], cu_ref[i + 1]
        kv_len = seq_kv_len(i)
        first_pos = kv_len - (q_end - q_start)
        lo_row = jnp.maximum(q_start, row0)
        hi_row = jnp.minimum(q_end, row0 + bq)
        active = lo_row < hi_row
        max_pos = first_pos + (hi_row - 1 - q_start)
        key_hi = max_pos + 1
        if cfg.sliding_window:
            min_pos = first_pos + (lo_row - q_start)
            key_lo = jnp.maximum(0, min_pos - window + 1)
        else:
            key_lo = jnp.int32(0)
        in_seq = (token >= q_start) & (token < q_end)
        pos = first_pos + (token - q_start)
        return active, key_lo // page_size, (key_hi + page_size - 1) // page_size, in_seq, pos, kv_len

    def logits_and_mask(page_value, h, page, in_seq, pos, kv_len):
        """Scaled (and capped) logits [rows, page_size], the visibility mask, and dequantized V."""
        k = page_value[:, 2 * h, :].astype(jnp.float32)
        v = page_value[:, 2 * h + 1, :].astype(jnp.float32)
        if cfg.quantized:   # the scale of this KV head (PA-18, PA-48)
            head_scales = _SINKS + hkv_total * group
            k = k * fp_ref[head_scales + head_block * hb + h]
            v = v * fp_ref[head_scales + hkv_total + head_block * hb + h]
        q = q_ref[:, h * group:(h + 1) * group, :].astype(jnp.float32).reshape(rows, -1)
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32,
                            precision=lax.Precision.HIGHEST) * sm_scale
        if cfg.soft_cap:
            cap = fp_ref[_CAP]
            s = cap * jnp.tanh(s / cap)
        key_pos = page * page_size + lax.broadcasted_iota(jnp.int32, (1, page_size), 1)
        visible = in_seq & (key_pos <= pos)
        if cfg.sliding_window:
            visible &= key_pos > pos - window
        # Keys no row of the block sees (slots past kv_len, keys left of every row's window) may hold
        # NaN (PA-24): select them away before the P @ V product, where 0 * NaN would leak.
        seen = jnp.max(visible.astype(jnp.float32), axis=0).reshape(page_size, 1) > 0.0
        v = jnp.where(seen, v, 0.0)
        return s, visible, v

    def walk_pages(i, page_lo, page_hi, use_page):
        """Visit pages [page_lo, page_hi) of sequence i, DMA of the next page overlapping use."""
        page_copy(i, page_lo, 0).start()

        def body(page, carry):
            slot = (page - page_lo) % 2

            @pl.when(page + 1 < page_hi)
            def _prefetch():
                page_copy(i, page + 1, 1 - slot).start()

            page_copy(i, page, slot).wait()
            use_page(page, buf[slot])
            return carry

        lax.fori_loop(page_lo, page_hi, body, 0)

    def attend(i, carry):
        active, page_lo, page_hi, in_seq, pos, kv_len = seq_geometry(i)

        @pl.when(active)
        def _():
            def use_page(page, page_value):
                for h in range(hb):
                    s, visible, v = logits_and_mask(page_value, h, page, in_seq, pos, kv_len)
                    m_old = m_ref[h]
                    m_new = jnp.maximum(m_old, jnp.max(jnp.where(visible, s, -jnp.inf), axis=1,
                                                       keepdims=True))
                    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
                    p = jnp.where(visible, jnp.exp(s - m_safe), 0.0)
                    alpha = jnp.exp(m_old - m_safe)
                    l_ref[h] = alpha * l_ref[h] + jnp.sum(p, axis=1, keepdims=True)
                    acc_ref[h] = alpha * acc_ref[h] + jnp.dot(p, v, preferred_element_type=jnp.float32,
                                                              precision=lax.Precision.HIGHEST)
                    m_ref[h] = m_new

            walk_pages(i, page_lo, page_hi, use_page)
        return carry

    # Only the sequences with rows in this block: a decode batch of hundreds of sequences would otherwise
    # visit every sequence in every block (PA-51's long_batch column: 256 sequences, 32 blocks)
    seq_lo = _first_sequence_from(cu_ref, num_seqs, row0)
    seq_hi = jnp.minimum(_first_sequence_from(cu_ref, num_seqs, row0 + bq - 1) + 1, num_seqs)
    lax.fori_loop(seq_lo, seq_hi, attend, 0)

    for h in range(hb):
        l = l_ref[h]
        inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)  # padding rows: 0, never NaN
        out = (acc_ref[h] * inv).reshape(bq, group, -1)
        o_ref[:, h * group:(h + 1) * group, :] = out.astype(o_ref.dtype)

    if cfg.return_scores:
        # PA-21: a second pass with the final (m, l) of every row turns logits into probabilities.
        def score(i, carry):
            active, page_lo, page_hi, in_seq, pos, kv_len = seq_geometry(i)

            @pl.when(active)
            def _():
                def use_page(page, page_value):
                    total = jnp.zeros((1, page_size), jnp.float32)
                    for h in range(hb):
                        s, visible, _ = logits_and_mask(page_value, h, page, in_seq, pos, kv_len)
                        m = m_ref[h]
                        l = l_ref[h]
                        m_safe = jnp.where(m == -jnp.inf, 0.0, m)
                        inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)
                        p = jnp.where(visible, jnp.exp(s - m_safe) * inv, 0.0)
                        total = total + jnp.sum(p, axis=0, keepdims=True)
                    scores_ref[i, page, :] = scores_ref[i, page, :] + total[0]

                walk_pages(i, page_lo, page_hi, use_page)
            return carry

        lax.fori_loop(seq_lo, seq_hi, score, 0)
