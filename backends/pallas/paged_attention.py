"""Ragged paged attention as a Pallas TPU kernel (spec/paged_attention.md PA-1 .. PA-25).

Kernel shape (what a TPU needs, and what Pallas TPU interpret mode checks on CPU):
- grid (KV-head blocks, query blocks); both axes "arbitrary" because the per-token score output is
  accumulated across grid steps in one resident VMEM block;
- metadata (kv_lens and the flattened block table, or the CSR page table kv_indptr / kv_indices /
  kv_last_page_len of spec/metadata.md MD-23; then cu_q_lens, [num_seqs, sliding_window]) is
  scalar-prefetched into SMEM; a static flag selects which form the kernel reads page ids and kv_len
  from (one kernel body for both); float options (sm_scale, soft cap, sinks) sit in SMEM too. Window,
  cap and sinks are values, not compile-time flags (`ragged_rows`: NO_WINDOW, cap 0 and sink -inf mean
  none, exactly), so one compiled kernel serves every option column;
- the KV pool stays in HBM (memory_space=ANY) in the combined-heads layout [P, page_size, 2*Hkv, Dp]
  (K of head h at 2h, V at 2h+1), and each page is DMA'd into a two-slot VMEM buffer: page p+1 is in
  flight while page p is being used;
- quantized pages (PA-18, PA-48) come with their scales beside the pool in HBM, [P, 2*Hkv, page_size]
  float32 (the K scales of head h in row 2h, the V scales in row 2h+1, slots along the lanes; a per-tensor
  or per-KV-head scale is repeated there by the adapter, so one compiled kernel serves all three forms),
  and each page's scales ride a second DMA into their own two-slot buffer with the page; they multiply the
  logits of their keys (K) and the probabilities of their values (V), one scale per (slot, KV head), so
  every query head of the group reads the scales of its own KV head;
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

from . import ragged_rows
from .tiling import LANES, SUBLANES, packing

# fparams layout in SMEM: sm_scale, soft_cap (0: none), two unused words, then sinks[Hq] (-inf: none).
_SM, _CAP, _SINKS = 0, 1, 4


@dataclass(frozen=True)
class AttentionConfig:
    """Static (compile-time) parameters of one kernel instance."""
    block_q: int          # query rows per grid step (multiple of 8)
    kv_heads_per_block: int
    return_scores: bool   # per-token scores: a second pass and an output (PA-21)
    token_scales: bool = False    # quantized pages: K/V scales per slot and KV head beside them (PA-48)


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


def ragged_paged_attention_kernel(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams, token_scales=None,
                                  *, pages_per_seq: int, cfg: AttentionConfig, interpret):
    """Run the kernel on a block table (spec/paged_attention.md).

    q:          f32|bf16|f16 [T_pad, Hq, Dp]   (T_pad a multiple of block_q, Dp of 128)
    kv_pages:   [P, page_size, 2*Hkv, Dp] combined heads, storage dtype
    kv_lens:    i32[S]; page_table: i32[S * pages_per_seq]; cu_q_lens: i32[S+1]
    meta:       i32[2] = (num_seqs, sliding_window or ragged_rows.NO_WINDOW)
    fparams:    f32[4 + Hq] = (sm_scale, soft_cap or 0, unused, unused, sinks (-inf: none)...)
    token_scales: f32[P, 2*Hkv, page_size] with cfg.token_scales (quantized pages, PA-18, PA-48): the K
                scale of slot j of head h at [page, 2h, j], its V scale at [page, 2h+1, j]; None otherwise
    Returns out f32[T_pad, Hq, Dp] and, with return_scores, scores f32[S, pages_per_seq, page_size].
    """
    return _attention_call(q, kv_pages, token_scales, (kv_lens, page_table), cu_q_lens, meta, fparams, csr=False,
                           num_seqs_pad=kv_lens.shape[0], pages_per_seq=pages_per_seq, cfg=cfg, interpret=interpret)


def ragged_paged_attention_csr_kernel(q, kv_pages, kv_indptr, kv_indices, kv_last_page_len, cu_q_lens, meta,
                                      fparams, token_scales=None, *, cfg: AttentionConfig, interpret):
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
    return _attention_call(q, kv_pages, token_scales, (kv_indptr, kv_indices, kv_last_page_len), cu_q_lens, meta,
                           fparams, csr=True, num_seqs_pad=kv_last_page_len.shape[0], pages_per_seq=0, cfg=cfg,
                           interpret=interpret)


def _attention_call(q, kv_pages, token_scales, page_meta, cu_q_lens, meta, fparams, *, csr: bool, num_seqs_pad: int,
                    pages_per_seq: int, cfg: AttentionConfig, interpret):
    """One pallas_call for both page-table forms: `page_meta` (kv_lens, page_table) or (kv_indptr,
    kv_indices, kv_last_page_len), scalar-prefetched ahead of cu_q_lens and meta; `csr` (static) selects
    how the kernel reads page ids and kv_len from them."""
    T, Hq, Dp = q.shape
    P, page_size, two_hkv, _ = kv_pages.shape
    hkv = two_hkv // 2
    check_tpu_shapes(q.shape, kv_pages.shape, kv_pages.dtype, cfg)
    if cfg.token_scales != (token_scales is not None) or (
            token_scales is not None and token_scales.shape != (P, two_hkv, page_size)):
        raise ValueError(f"token_scales must be f32[P, 2*Hkv, page_size] = {(P, two_hkv, page_size)} exactly "
                         f"when cfg.token_scales, got {None if token_scales is None else token_scales.shape}")
    S = num_seqs_pad
    hb = cfg.kv_heads_per_block
    group = Hq // hkv
    bq = cfg.block_q
    grid = (hkv // hb, T // bq)

    kernel = functools.partial(_kernel, cfg=cfg, csr=csr, page_size=page_size, pages_per_seq=pages_per_seq,
                               group=group)
    in_specs = [
        pl.BlockSpec(memory_space=pltpu.SMEM),                                   # fparams
        pl.BlockSpec((bq, hb * group, Dp), lambda h, b, *_: (b, h, 0)),         # q
        pl.BlockSpec(memory_space=pl.ANY),                                       # kv pages (HBM)
    ]
    operands = [fparams, q, kv_pages]
    if cfg.token_scales:
        in_specs.append(pl.BlockSpec(memory_space=pl.ANY))                      # their scales (HBM)
        operands.append(token_scales)
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
    if cfg.token_scales:   # double-buffered scales of the page: the 2*hb K/V rows of the block's heads
        scratch += [pltpu.VMEM((2, 2 * hb, page_size), jnp.float32), pltpu.SemaphoreType.DMA((2,))]
    grid_spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=len(page_meta) + 2, grid=grid, in_specs=in_specs,
                                             out_specs=out_specs, scratch_shapes=scratch)
    call = pl.pallas_call(
        kernel, grid_spec=grid_spec, out_shape=out_shape, interpret=interpret,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")))
    return call(*page_meta, cu_q_lens, meta, *operands)


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


def _kernel(*refs, cfg: AttentionConfig, csr: bool, page_size, pages_per_seq, group):
    n_page_meta = 3 if csr else 2
    page_id, seq_kv_len = _page_reader(csr, refs[:n_page_meta], page_size, pages_per_seq)
    cu_ref, meta_ref, fp_ref, q_ref, kv_hbm, *rest = refs[n_page_meta:]
    scales_hbm = rest.pop(0) if cfg.token_scales else None
    o_ref = rest.pop(0)
    scores_ref = rest.pop(0) if cfg.return_scores else None
    buf, sem, m_ref, l_ref, acc_ref, *scale_scratch = rest
    scale_buf, scale_sem = scale_scratch if cfg.token_scales else (None, None)
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
        # PA-17: the sink of each row's query head (-inf: none)
        sink = jnp.stack([fp_ref[_SINKS + (head_block * hb + h) * group + g] for g in range(group)])
        m_ref[h], l_ref[h] = ragged_rows.softmax_start(jnp.tile(sink, bq).reshape(rows, 1), rows)
        acc_ref[h] = jnp.zeros(acc_ref.shape[1:], jnp.float32)

    def page_copies(i, page, slot):
        """The DMAs of one page into `slot`: its K/V rows of the block's heads, and their scales beside."""
        phys = page_id(i, page)
        heads = pl.ds(head_block * 2 * hb, 2 * hb)
        copies = [pltpu.make_async_copy(kv_hbm.at[phys, :, heads, :], buf.at[slot], sem.at[slot])]
        if cfg.token_scales:
            copies.append(pltpu.make_async_copy(scales_hbm.at[phys, heads, :], scale_buf.at[slot],
                                                scale_sem.at[slot]))
        return copies

    def seq_geometry(i):
        return ragged_rows.sequence_in_block(cu_ref[i], cu_ref[i + 1], seq_kv_len(i), row0, bq, token, page_size,
                                             window)

    def logits_and_mask(slot, h, page, in_seq, pos):
        """Scaled (and capped) logits [rows, page_size], the visibility mask, V and the V scale of each key
        ([1, page_size] for quantized pages, else None)."""
        k = buf[slot, :, 2 * h, :].astype(jnp.float32)
        v = buf[slot, :, 2 * h + 1, :].astype(jnp.float32)
        k_row = v_row = None
        if cfg.token_scales:   # the scales beside each slot of this KV head (PA-48), slots along the lanes
            k_row = scale_buf[slot, pl.ds(2 * h, 1), :]
            v_row = scale_buf[slot, pl.ds(2 * h + 1, 1), :]
        q = q_ref[:, h * group:(h + 1) * group, :].astype(jnp.float32).reshape(rows, -1)
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32,
                            precision=lax.Precision.HIGHEST)
        if k_row is not None:   # q . (k_j * scale_j) = (q . k_j) * scale_j: one scale per key column
            s = s * k_row
        s = ragged_rows.soft_cap(s * sm_scale, fp_ref[_CAP])
        visible = ragged_rows.visible_keys(in_seq, pos, page, page_size, window)
        v = jnp.where(ragged_rows.seen_keys(visible, page_size), v, 0.0)
        return s, visible, v, v_row

    def attend(i, carry):
        active, page_lo, page_hi, in_seq, pos = seq_geometry(i)

        @pl.when(active)
        def _():
            def use_page(page, slot):
                for h in range(hb):
                    s, visible, v, v_row = logits_and_mask(slot, h, page, in_seq, pos)
                    m_ref[h], l_ref[h], acc_ref[h] = ragged_rows.online_softmax_step(
                        m_ref[h], l_ref[h], acc_ref[h], s, visible, v, v_row)

            ragged_rows.walk_pages(page_lo, page_hi, lambda page, slot: page_copies(i, page, slot), use_page)
        return carry

    seq_lo, seq_hi = ragged_rows.sequences_in_block(cu_ref, num_seqs, row0, bq)
    lax.fori_loop(seq_lo, seq_hi, attend, 0)

    for h in range(hb):
        out = ragged_rows.softmax_finish(acc_ref[h], l_ref[h]).reshape(bq, group, -1)
        o_ref[:, h * group:(h + 1) * group, :] = out.astype(o_ref.dtype)

    if cfg.return_scores:
        # PA-21: a second pass with the final (m, l) of every row turns logits into probabilities.
        def score(i, carry):
            active, page_lo, page_hi, in_seq, pos = seq_geometry(i)

            @pl.when(active)
            def _():
                def use_page(page, slot):
                    total = jnp.zeros((1, page_size), jnp.float32)
                    for h in range(hb):
                        s, visible, _, _ = logits_and_mask(slot, h, page, in_seq, pos)
                        m = m_ref[h]
                        l = l_ref[h]
                        m_safe = jnp.where(m == -jnp.inf, 0.0, m)
                        inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)
                        p = jnp.where(visible, jnp.exp(s - m_safe) * inv, 0.0)
                        total = total + jnp.sum(p, axis=0, keepdims=True)
                    scores_ref[i, page, :] = scores_ref[i, page, :] + total[0]

                ragged_rows.walk_pages(page_lo, page_hi, lambda page, slot: page_copies(i, page, slot), use_page)
            return carry

        lax.fori_loop(seq_lo, seq_hi, score, 0)
