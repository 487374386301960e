"""Causal depthwise conv1d update over a slot pool, as a Pallas TPU kernel (spec/recurrent.md RS-10 .. RS-12).

Kernel shape: state_indices are scalar-prefetched into SMEM; the pool stays in HBM (memory_space=ANY),
aliased input -> output; grid step b DMAs row state_indices[b] ([C, W-1]) into VMEM, forms the window
[state | x_0 .. x_{T-1}], applies the W taps in order (tap 0 first, like the reference's ordered sum),
bias and SiLU in float32, and DMAs the last W-1 window columns back. A padding row (-1) issues no DMA and
writes an exact-zero output (RS-2, RS-3). Duplicate indices are rejected by the adapter.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def conv1d_update_kernel(x, pool, weight, bias, slots, *, silu: bool, interpret):
    """x: f32[B, T, C]; pool: f32[num_slots, C, W-1] (W >= 2); weight: f32[C, W]; bias: f32[1, C];
    slots: i32[B] (-1 = padding). Returns (out f32[B, T, C], pool)."""
    B, T, C = x.shape
    kernel = functools.partial(_kernel, silu=silu)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(B,),
        in_specs=[pl.BlockSpec((1, T, C), lambda b, *_: (b, 0, 0)),
                  pl.BlockSpec(weight.shape, lambda b, *_: (0, 0)),
                  pl.BlockSpec(bias.shape, lambda b, *_: (0, 0)),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=[pl.BlockSpec((1, T, C), lambda b, *_: (b, 0, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(pool.shape[1:], pool.dtype), pltpu.SemaphoreType.DMA((1,))])
    call = pl.pallas_call(kernel, grid_spec=grid_spec,
                          out_shape=[jax.ShapeDtypeStruct(x.shape, jnp.float32),
                                     jax.ShapeDtypeStruct(pool.shape, pool.dtype)],
                          input_output_aliases={4: 1}, interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))
    return call(slots, x, weight, bias, pool)


def _kernel(slots_ref, x_ref, w_ref, b_ref, pool_in, o_ref, pool_out, row, sem, *, silu):
    del pool_in  # aliased to pool_out
    slot = slots_ref[pl.program_id(0)]
    T = x_ref.shape[1]
    width = w_ref.shape[1]

    @pl.when(slot < 0)
    def _padding():
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    @pl.when(slot >= 0)
    def _update():
        load = pltpu.make_async_copy(pool_out.at[slot], row, sem.at[0])
        load.start()
        load.wait()
        win = jnp.concatenate([row[...].astype(jnp.float32), x_ref[0].T], axis=1)  # [C, W-1+T]
        w = w_ref[...]
        acc = w[:, 0:1] * win[:, 0:T]
        for j in range(1, width):
            acc = acc + w[:, j:j + 1] * win[:, j:j + T]
        acc = acc + b_ref[...].T
        if silu:
            acc = acc / (1.0 + jnp.exp(-acc))  # the reference form x / (1 + exp(-x))
        o_ref[0] = acc.T
        row[...] = win[:, T:].astype(row.dtype)
        store = pltpu.make_async_copy(row, pool_out.at[slot], sem.at[0])
        store.start()
        store.wait()
