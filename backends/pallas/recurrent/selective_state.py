"""Selective state update (Mamba1 / multi-head Mamba2) over a slot pool, as a Pallas TPU kernel
(spec/recurrent.md RS-2 .. RS-6, RS-9, RS-14 .. RS-16).

Kernel shape: both forms run as the general multi-head form, Mamba1 being one head of P = D channels
(RS-15 is RS-16 with per-channel A and dt). Grid (batch rows, head blocks); `state_indices` is
scalar-prefetched into SMEM; the pool stays in HBM (memory_space=ANY), aliased input -> output. Step
(b, j) DMAs the rows `pool[slot, h0:h0+hb]` ([hb, P, N]) into VMEM, advances them one token in float32,
reads y out of the *new* state, and DMAs them back. Head block j lies inside one group (hb divides H // G),
so its B and C rows are one block, group `(j * hb) // (H // G)` (RS-16's `repeat_interleave` mapping,
done by the index map rather than by materialising per-head copies). A padding row (-1) issues no DMA
and writes an exact-zero output (RS-3); duplicate slots are rejected by the adapter (RS-4).

Per-channel / per-head parameters come in "broadcastable" layouts so one kernel serves both forms:
  dt:      [B, H, Pd]   Pd = P (Mamba1, per channel) or 1 (Mamba2, per head)
  dt_bias: [H, Pd]      D (skip weight): [H, Pd]
  A:       [H, Pa, Na]  Mamba1 [1, P, N]; Mamba2 [H, 1, 1]
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

#: RS-9: softplus(x) = x above this threshold (strict), log1p(exp(x)) otherwise.
SOFTPLUS_THRESHOLD = 20.0


def softplus(x):
    """RS-9 with the pinned threshold; exp's argument is clamped so the unselected branch cannot overflow."""
    return jnp.where(x > SOFTPLUS_THRESHOLD, x, jnp.log1p(jnp.exp(jnp.minimum(x, SOFTPLUS_THRESHOLD))))


def silu(x):
    """RS-9's form x / (1 + exp(-x)) (exp overflow to inf gives the right limit, -0)."""
    return x / (1.0 + jnp.exp(-x))


def selective_state_update_kernel(x, dt, dt_bias, A, Bm, Cm, D, z, pool, slots, *, heads_per_block: int,
                                  softplus_dt: bool, gate: bool, interpret):
    """x, z: f32[B, H, P]; dt: f32[B, H, Pd]; dt_bias, D: f32[H, Pd]; A: f32[H, Pa, Na];
    Bm, Cm: f32[B, G, N]; pool: f32[num_slots, H, P, N]; slots: i32[B] (-1 = padding).
    `heads_per_block` must divide H // G. `gate`: z is applied (else z is ignored).
    Returns (out f32[B, H, P], pool)."""
    nb, H, P = x.shape
    G, N = Bm.shape[1], Bm.shape[2]
    hb = heads_per_block
    per_group = H // G
    assert per_group % hb == 0, (H, G, hb)
    Pd, Pa, Na = dt.shape[2], A.shape[1], A.shape[2]

    def group_block(b, j, *_):
        return (b, (j * hb) // per_group, 0)

    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(nb, H // hb),
        in_specs=[pl.BlockSpec((1, hb, P), lambda b, j, *_: (b, j, 0)),       # x
                  pl.BlockSpec((1, hb, Pd), lambda b, j, *_: (b, j, 0)),      # dt
                  pl.BlockSpec((hb, Pd), lambda b, j, *_: (j, 0)),            # dt_bias
                  pl.BlockSpec((hb, Pa, Na), lambda b, j, *_: (j, 0, 0)),     # A
                  pl.BlockSpec((1, 1, N), group_block),                       # B
                  pl.BlockSpec((1, 1, N), group_block),                       # C
                  pl.BlockSpec((hb, Pd), lambda b, j, *_: (j, 0)),            # D
                  pl.BlockSpec((1, hb, P), lambda b, j, *_: (b, j, 0)),       # z
                  pl.BlockSpec(memory_space=pl.ANY)],                         # pool (HBM)
        out_specs=[pl.BlockSpec((1, hb, P), lambda b, j, *_: (b, j, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((hb, P, N), jnp.float32), pltpu.SemaphoreType.DMA((1,))])
    kernel = functools.partial(_kernel, hb=hb, softplus_dt=softplus_dt, gate=gate)
    call = pl.pallas_call(kernel, grid_spec=grid_spec,
                          out_shape=[jax.ShapeDtypeStruct(x.shape, jnp.float32),
                                     jax.ShapeDtypeStruct(pool.shape, pool.dtype)],
                          input_output_aliases={9: 1}, interpret=interpret,
                          # every step touches its own (row, head block): no ordering is needed
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")))
    return call(slots, x, dt, dt_bias, A, Bm, Cm, D, z, pool)


def _kernel(slots_ref, x_ref, dt_ref, bias_ref, a_ref, b_ref, c_ref, d_ref, z_ref, pool_in, o_ref, pool_out,
            row, sem, *, hb, softplus_dt, gate):
    del pool_in  # aliased to pool_out
    slot = slots_ref[pl.program_id(0)]
    rows = pool_out.at[slot, pl.ds(pl.program_id(1) * hb, hb)]  # [hb, P, N] in HBM

    @pl.when(slot < 0)
    def _padding():  # RS-3: no DMA, exact-zero output
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    @pl.when(slot >= 0)
    def _update():
        load = pltpu.make_async_copy(rows, row, sem.at[0])
        load.start()
        x = x_ref[0]                                   # [hb, P]
        dtp = dt_ref[0] + bias_ref[...]                # [hb, Pd]   RS-14
        if softplus_dt:
            dtp = softplus(dtp)
        decay = jnp.exp(dtp[:, :, None] * a_ref[...])  # [hb, P or 1, N or 1]
        inject = (dtp * x)[:, :, None] * b_ref[0]      # [hb, P, N]: (dt' x) B^T
        load.wait()
        s_new = row[...] * decay + inject              # RS-15: S <- S exp(dt' A) + (dt' x) B^T
        row[...] = s_new
        store = pltpu.make_async_copy(row, rows, sem.at[0])
        store.start()
        y = jnp.sum(s_new * c_ref[0], axis=2)          # y = S_new C  [hb, P]
        y = y + d_ref[...] * x
        if gate:
            y = y * silu(z_ref[0])
        o_ref[0] = y
        store.wait()
