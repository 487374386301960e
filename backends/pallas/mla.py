"""Absorbed MLA decode as a Pallas TPU kernel (spec/mla.md ML-1 .. ML-7; decode rows only).

Kernel shape:
- grid (sequences,): one step per sequence, with its one query row for all H heads in one
  [H_pad, Dp] block (H padded to whole sublane tiles, Dp = d_c + d_r padded to 128 lanes): MLA has one
  KV head (ML-2), so every latent page is DMA'd once and serves all heads;
- the latent and RoPE key parts travel side by side in one HBM pool [P, page_size, Dp] (the adapter's
  layout: c_kv in lanes [0, d_c), k_pe in [d_c, d_c + d_r)), so the logits q . [c | r] are one matmul
  and the values are the same page's first d_c lanes (ML-3, ML-4);
- metadata (kv_lens, the flattened page table, q_len per sequence, [num_seqs, sliding_window]) is
  scalar-prefetched into SMEM; sm_scale, the soft cap and the sinks sit in SMEM as float parameters.
  Options are values, not compile-time flags (window 0 = none, cap 0 = none, sink -inf = none: a -inf
  sink is exactly no sink, PA-17), so one compiled kernel serves every option column;
- pages are DMA'd from HBM into a two-slot VMEM buffer, page p+1 in flight while page p is used, and only
  pages holding keys the row sees ([pos - W + 1, pos], ML-5 / ML-6) are copied;
- online softmax state (m, l, acc) in VMEM scratch. Keys outside the visible range are selected away
  (never multiplied by 0) before the P @ V product, so NaN in slots past kv_len cannot leak (ML-7).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .tiling import LANES, SUBLANES

_SM, _CAP, _SINKS = 0, 1, 2     # fparams layout in SMEM: sm_scale, soft_cap (0: none), then sinks[H_pad]


def mla_decode_kernel(q, pages, kv_lens, page_table, q_lens, meta, fparams, *, pages_per_seq: int, interpret):
    """Run the kernel.

    q:          f32|bf16|f16 [S_pad, H_pad, Dp]  the decode row of each sequence, [q_nope | q_pe | 0]
    pages:      [P, page_size, Dp]  [c_kv | k_pe | 0] per token, storage dtype (HBM)
    kv_lens:    i32[S_pad]; page_table: i32[S_pad * pages_per_seq]; q_lens: i32[S_pad] (0 or 1)
    meta:       i32[2] = (num_seqs, sliding_window or 0)
    fparams:    f32[2 + H_pad] = (sm_scale, soft_cap or 0, sinks... (-inf where there is none))
    Returns out f32[S_pad, H_pad, Dp]: row i is sequence i's output (lanes >= d_c are not the output).
    """
    S, H, Dp = q.shape
    P, page_size, Dk = pages.shape
    if Dp % LANES or Dk != Dp or H % SUBLANES:
        raise ValueError(f"q [S, H, D] and pages [P, page_size, D] need H a multiple of {SUBLANES} and one D "
                         f"padded to {LANES} lanes, got q {q.shape}, pages {pages.shape}")
    kernel = functools.partial(_kernel, page_size=page_size, pages_per_seq=pages_per_seq)
    in_specs = [
        pl.BlockSpec(memory_space=pltpu.SMEM),                       # fparams
        pl.BlockSpec((1, H, Dp), lambda i, *_: (i, 0, 0)),          # q row of sequence i
        pl.BlockSpec(memory_space=pl.ANY),                           # pages (HBM)
    ]
    scratch = [
        pltpu.VMEM((2, page_size, Dp), pages.dtype),                 # double-buffered page
        pltpu.SemaphoreType.DMA((2,)),
        pltpu.VMEM((H, 1), jnp.float32),                             # m
        pltpu.VMEM((H, 1), jnp.float32),                             # l
        pltpu.VMEM((H, Dp), jnp.float32),                            # acc
    ]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4, grid=(S,), in_specs=in_specs,
        out_specs=[pl.BlockSpec((1, H, Dp), lambda i, *_: (i, 0, 0))], scratch_shapes=scratch)
    call = pl.pallas_call(kernel, grid_spec=grid_spec, out_shape=[jax.ShapeDtypeStruct((S, H, Dp), jnp.float32)],
                          interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))
    return call(kv_lens, page_table, q_lens, meta, fparams, q, pages)[0]


def _kernel(kv_lens_ref, table_ref, q_lens_ref, meta_ref, fp_ref, q_ref, pages_hbm, o_ref, buf, sem, m_ref, l_ref,
            acc_ref, *, page_size, pages_per_seq):
    i = pl.program_id(0)
    H = q_ref.shape[1]
    kv_len = kv_lens_ref[i]
    active = (i < meta_ref[0]) & (q_lens_ref[i] == 1)
    pos = kv_len - 1                                                  # ML-5: the decode row's position
    window = meta_ref[1]
    lo = jnp.where(window > 0, jnp.maximum(0, pos - window + 1), 0)   # PA-15 when a window is given
    sm_scale = fp_ref[_SM]
    cap = fp_ref[_CAP]

    # PA-17: start from the sink as one extra logit with value 0; a -inf sink (or none) starts empty
    sink = jnp.stack([fp_ref[_SINKS + h] for h in range(H)]).reshape(H, 1)
    m_ref[...] = sink
    l_ref[...] = jnp.where(sink == -jnp.inf, 0.0, 1.0).astype(jnp.float32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def page_copy(page, slot):
        phys = table_ref[i * pages_per_seq + page]
        return pltpu.make_async_copy(pages_hbm.at[phys], buf.at[slot], sem.at[slot])

    def use_page(page, tokens):
        """Fold one page [page_size, Dp] into the online softmax of all heads."""
        kv = tokens.astype(jnp.float32)
        q = q_ref[0].astype(jnp.float32)                              # [H, Dp]
        s = lax.dot_general(q, kv, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32,
                            precision=lax.Precision.HIGHEST) * sm_scale     # ML-3: q_nope.c + q_pe.r
        safe_cap = jnp.where(cap > 0, cap, 1.0)
        s = jnp.where(cap > 0, safe_cap * jnp.tanh(s / safe_cap), s)   # PA-16 after scaling, before masking
        key_pos = page * page_size + lax.broadcasted_iota(jnp.int32, (1, page_size), 1)
        visible = (key_pos >= lo) & (key_pos <= pos)                  # [1, page_size]
        v = jnp.where(visible.reshape(page_size, 1), kv, 0.0)         # ML-7: select, never 0 * NaN
        m_old = m_ref[...]
        m_new = jnp.maximum(m_old, jnp.max(jnp.where(visible, s, -jnp.inf), axis=1, keepdims=True))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        p = jnp.where(visible, jnp.exp(s - m_safe), 0.0)
        alpha = jnp.exp(m_old - m_safe)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p, v, preferred_element_type=jnp.float32,
                                                      precision=lax.Precision.HIGHEST)   # ML-4: values = c_kv
        m_ref[...] = m_new

    @pl.when(active)
    def _walk():
        page_lo, page_hi = lo // page_size, (kv_len + page_size - 1) // page_size
        page_copy(page_lo, 0).start()

        def body(page, carry):
            slot = (page - page_lo) % 2

            @pl.when(page + 1 < page_hi)
            def _prefetch():
                page_copy(page + 1, 1 - slot).start()

            page_copy(page, slot).wait()
            use_page(page, buf[slot])
            return carry

        lax.fori_loop(page_lo, page_hi, body, 0)

    l = l_ref[...]
    inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)      # inactive rows: 0, never NaN
    o_ref[0] = acc_ref[...] * inv
