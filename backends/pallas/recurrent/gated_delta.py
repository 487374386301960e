"""Gated delta rule single-token update over a slot pool, as a Pallas TPU kernel (spec/recurrent.md
RS-28 … RS-31, with RS-2 … RS-6).

Grid (batch rows, state-head blocks); `state_indices` is scalar-prefetched into SMEM; the pool stays in
HBM (memory_space=ANY), aliased input -> output. Step (b, j) DMAs the rows `pool[slot, h0:h0+hb]`
([hb, K, V]) into VMEM, runs RS-30 in float32 — decay `S <- exp(g) S`, delta from the decayed state
`u = beta (v - S^T k)`, rank-1 write `S <- S + k u^T`, read of the new state `out = scale S^T q` — and
DMAs them back. The head block lies inside one q/k group (hb divides H // Hk), so its q and k rows are
one block, q/k head `(j * hb) // (H // Hk)` (RS-28's `h // (H // Hk)` mapping, done by the index map).
With `norm`, q and k are first divided by sqrt(sum x^2 + 1e-6) (RS-29; zero padding adds nothing). A
padding row (-1) issues no DMA and writes an exact-zero output (RS-3); duplicate slots are rejected by
the adapter (RS-4).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

#: RS-29: the epsilon under the square root of the L2 normalisation.
L2NORM_EPS = 1e-6


def gated_delta_update_kernel(q, k, v, g, beta, scale, pool, slots, *, heads_per_block: int, norm: bool,
                              interpret):
    """q, k: f32[B, Hk, K]; v: f32[B, H, V]; g, beta: f32[B, H, 1]; scale: f32[1, 1];
    pool: f32[num_slots, H, K, V]; slots: i32[B] (-1 = padding). `heads_per_block` divides H // Hk.
    Returns (out f32[B, H, V], pool)."""
    nb, H, V = v.shape
    Hk, K = q.shape[1], q.shape[2]
    hb = heads_per_block
    per_qk = H // Hk
    assert per_qk % hb == 0, (H, Hk, hb)

    def qk_block(b, j, *_):
        return (b, (j * hb) // per_qk, 0)

    def head_block(b, j, *_):
        return (b, j, 0)

    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(nb, H // hb),
        in_specs=[pl.BlockSpec((1, 1, K), qk_block),                           # q
                  pl.BlockSpec((1, 1, K), qk_block),                           # k
                  pl.BlockSpec((1, hb, V), head_block),                        # v
                  pl.BlockSpec((1, hb, 1), head_block),                        # g
                  pl.BlockSpec((1, hb, 1), head_block),                        # beta
                  pl.BlockSpec((1, 1), lambda b, j, *_: (0, 0)),               # scale
                  pl.BlockSpec(memory_space=pl.ANY)],                          # pool (HBM)
        out_specs=[pl.BlockSpec((1, hb, V), head_block), pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((hb, K, V), jnp.float32), pltpu.SemaphoreType.DMA((1,))])
    call = pl.pallas_call(functools.partial(_kernel, hb=hb, norm=norm), grid_spec=grid_spec,
                          out_shape=[jax.ShapeDtypeStruct(v.shape, jnp.float32),
                                     jax.ShapeDtypeStruct(pool.shape, pool.dtype)],
                          input_output_aliases={7: 1}, interpret=interpret,
                          # every step touches its own (row, head block): no ordering is needed
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")))
    return call(slots, q, k, v, g, beta, scale, pool)


def _unit(x):
    return x / jnp.sqrt(jnp.sum(x * x) + L2NORM_EPS)


def _kernel(slots_ref, q_ref, k_ref, v_ref, g_ref, beta_ref, scale_ref, pool_in, o_ref, pool_out, row, sem, *,
            hb, norm):
    del pool_in  # aliased to pool_out
    slot = slots_ref[pl.program_id(0)]
    rows = pool_out.at[slot, pl.ds(pl.program_id(1) * hb, hb)]   # [hb, K, V] in HBM

    @pl.when(slot < 0)
    def _padding():  # RS-3: no DMA, exact-zero output
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    @pl.when(slot >= 0)
    def _update():
        load = pltpu.make_async_copy(rows, row, sem.at[0])
        load.start()
        q, k = q_ref[0, 0], k_ref[0, 0]                    # [K]
        if norm:
            q, k = _unit(q), _unit(k)
        v = v_ref[0]                                       # [hb, V]
        decay = jnp.exp(g_ref[0])                          # [hb, 1]
        beta = beta_ref[0]                                 # [hb, 1]
        load.wait()
        S = row[...] * decay[:, :, None]                   # 1. decay            [hb, K, V]
        u = beta * (v - jnp.sum(S * k[None, :, None], axis=1))   # 2. delta from the decayed state
        S = S + k[None, :, None] * u[:, None, :]           # 3. write
        row[...] = S
        store = pltpu.make_async_copy(row, rows, sem.at[0])
        store.start()
        o_ref[0] = scale_ref[0, 0] * jnp.sum(S * q[None, :, None], axis=1)   # 4. read the new state
        store.wait()
