"""Absorbed MLA as a Pallas TPU kernel (spec/mla.md ML-1 .. ML-7): decode rows and prefill chunks alike.

Kernel shape:
- grid (query blocks,): each step takes `block_q` consecutive rows of the flattened ragged batch with all
  H heads, one [block_q, H_pad, Dp] block (H padded to whole sublane tiles, Dp = d_c + d_r padded to 128
  lanes); the rows may belong to several sequences, decode rows and prefill rows alike (ML-5). MLA has one
  KV head (ML-2), so the block's softmax state has block_q * H_pad rows (row t * H_pad + h: query row t,
  head h) and every latent page is DMA'd once per block and serves all its rows and heads;
- the latent and RoPE key parts travel side by side in one HBM pool [P, page_size, Dp] (the adapter's
  layout: c_kv in lanes [0, d_c), k_pe in [d_c, d_c + d_r)), so the logits q . [c | r] are one matmul
  and the values are the same page's first d_c lanes (ML-3, ML-4);
- metadata (kv_lens, the flattened page table, cu_q_lens, [num_seqs, sliding_window]) is
  scalar-prefetched into SMEM; sm_scale, the soft cap and the sinks sit in SMEM as float parameters.
  Options are values, not compile-time flags (`ragged_rows`: NO_WINDOW, cap 0, sink -inf mean none), so
  one compiled kernel serves every option column;
- for each sequence meeting the block, only the pages holding keys its rows see are copied (causality and
  window, ML-5 / ML-6, `ragged_rows.sequence_in_block`), double-buffered;
- online softmax state (m, l, acc) in VMEM scratch. Keys no row sees are selected away (never multiplied
  by 0) before the P @ V product, so NaN in slots past kv_len cannot leak (ML-7).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import ragged_rows
from .tiling import LANES, SUBLANES

_SM, _CAP, _SINKS = 0, 1, 2     # fparams layout in SMEM: sm_scale, soft_cap (0: none), then sinks[H_pad]
#: query rows per grid step: one sublane tile of rows, each with all H_pad heads
MLA_BLOCK_Q = 8


def mla_kernel(q, pages, kv_lens, page_table, cu_q_lens, meta, fparams, *, pages_per_seq: int, block_q: int,
               interpret):
    """Run the kernel.

    q:          f32|bf16|f16 [T_pad, H_pad, Dp]  every query row, [q_nope | q_pe | 0] (T_pad a multiple of
                block_q, H_pad of 8, Dp of 128)
    pages:      [P, page_size, Dp]  [c_kv | k_pe | 0] per token, storage dtype (HBM)
    kv_lens:    i32[S_pad]; page_table: i32[S_pad * pages_per_seq]; cu_q_lens: i32[S_pad + 1]
    meta:       i32[2] = (num_seqs, sliding_window or ragged_rows.NO_WINDOW)
    fparams:    f32[2 + H_pad] = (sm_scale, soft_cap or 0, sinks... (-inf where there is none))
    Returns out f32[T_pad, H_pad, Dp]: row t is query row t's output (lanes >= d_c are not the output; rows
    of no sequence are 0).
    """
    T, H, Dp = q.shape
    P, page_size, Dk = pages.shape
    if Dp % LANES or Dk != Dp or H % SUBLANES or block_q % SUBLANES or T % block_q:
        raise ValueError(f"q [T, H, D] and pages [P, page_size, D] need H and block_q multiples of {SUBLANES}, "
                         f"T a multiple of block_q and one D padded to {LANES} lanes, got q {q.shape}, "
                         f"pages {pages.shape}, block_q {block_q}")
    kernel = functools.partial(_kernel, page_size=page_size, pages_per_seq=pages_per_seq, block_q=block_q)
    in_specs = [
        pl.BlockSpec(memory_space=pltpu.SMEM),                       # fparams
        pl.BlockSpec((block_q, H, Dp), lambda b, *_: (b, 0, 0)),    # query rows of block b
        pl.BlockSpec(memory_space=pl.ANY),                           # pages (HBM)
    ]
    rows = block_q * H
    scratch = [
        pltpu.VMEM((2, page_size, Dp), pages.dtype),                 # double-buffered page
        pltpu.SemaphoreType.DMA((2,)),
        pltpu.VMEM((rows, 1), jnp.float32),                          # m
        pltpu.VMEM((rows, 1), jnp.float32),                          # l
        pltpu.VMEM((rows, Dp), jnp.float32),                         # acc
    ]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4, grid=(T // block_q,), in_specs=in_specs,
        out_specs=[pl.BlockSpec((block_q, H, Dp), lambda b, *_: (b, 0, 0))], scratch_shapes=scratch)
    call = pl.pallas_call(kernel, grid_spec=grid_spec, out_shape=[jax.ShapeDtypeStruct((T, H, Dp), jnp.float32)],
                          interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))
    return call(kv_lens, page_table, cu_q_lens, meta, fparams, q, pages)[0]


def _kernel(kv_lens_ref, table_ref, cu_ref, meta_ref, fp_ref, q_ref, pages_hbm, o_ref, buf, sem, m_ref, l_ref,
            acc_ref, *, page_size, pages_per_seq, block_q):
    H = q_ref.shape[1]
    rows = block_q * H
    row0 = pl.program_id(0) * block_q
    window = meta_ref[1]
    sm_scale = fp_ref[_SM]
    cap = fp_ref[_CAP]
    token = row0 + lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // H     # state row t * H + h: query row t

    sink = jnp.tile(jnp.stack([fp_ref[_SINKS + h] for h in range(H)]), block_q).reshape(rows, 1)
    m_ref[...], l_ref[...] = ragged_rows.softmax_start(sink, rows)      # PA-17 (-inf: no sink)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
    q = q_ref[...].astype(jnp.float32).reshape(rows, -1)                  # [q_nope | q_pe] of every state row

    def attend(i, carry):
        active, page_lo, page_hi, in_seq, pos = ragged_rows.sequence_in_block(
            cu_ref[i], cu_ref[i + 1], kv_lens_ref[i], row0, block_q, token, page_size, window)

        def copies(page, slot):
            phys = table_ref[i * pages_per_seq + page]
            return [pltpu.make_async_copy(pages_hbm.at[phys], buf.at[slot], sem.at[slot])]

        def use_page(page, slot):
            """Fold one page [page_size, Dp] into the online softmax of every row and head."""
            kv = buf[slot].astype(jnp.float32)
            s = lax.dot_general(q, kv, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32,
                                precision=lax.Precision.HIGHEST) * sm_scale     # ML-3: q_nope.c + q_pe.r
            s = ragged_rows.soft_cap(s, cap)                                # PA-16 after scaling, before masking
            visible = ragged_rows.visible_keys(in_seq, pos, page, page_size, window)
            v = jnp.where(ragged_rows.seen_keys(visible, page_size), kv, 0.0)   # ML-4: values = c_kv; ML-7
            m_ref[...], l_ref[...], acc_ref[...] = ragged_rows.online_softmax_step(
                m_ref[...], l_ref[...], acc_ref[...], s, visible, v)

        @pl.when(active)
        def _walk():
            ragged_rows.walk_pages(page_lo, page_hi, copies, use_page)
        return carry

    seq_lo, seq_hi = ragged_rows.sequences_in_block(cu_ref, meta_ref[0], row0, block_q)
    lax.fori_loop(seq_lo, seq_hi, attend, 0)
    o_ref[...] = ragged_rows.softmax_finish(acc_ref[...], l_ref[...]).reshape(o_ref.shape)
