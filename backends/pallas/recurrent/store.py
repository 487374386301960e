"""Row moves of the recurrent-state store as a Pallas TPU kernel (spec/recurrent.md RS-21 .. RS-27).

The metadata is planned on the host (`kvconform.backends.store_moves`); this kernel moves pool rows as
32-bit words, so a move is a bit copy whatever the pool dtype (a float64 value is two words; TPUs have
no float64 arithmetic, and none is needed to move bits).

Kernel shape: the write list (src, dst) is scalar-prefetched into SMEM; the target, the pool and the
given rows stay in HBM (memory_space=ANY), the target aliased input -> output; grid step m DMAs one row
of R words straight HBM -> HBM: from the pool's row src (src >= 0) or the given row -src-2 (src <= -2),
and for a fresh row (src == -1) from a zeroed VMEM row (RS-5: set, never multiplied). No destination is a
source, so the steps are independent.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def move_rows_kernel(target, pool, rows, src, dst, *, interpret):
    """target: i32[n, R] (returned with the writes applied); pool: i32[num_slots, R]; rows: i32[k, R]
    (k >= 1); src, dst: i32[m], m >= 1 (encoding above). Returns i32[n, R]."""
    R = target.shape[1]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(src.shape[0],),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 3,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((1, R), jnp.int32), pltpu.SemaphoreType.DMA((1,))])
    call = pl.pallas_call(_kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(target.shape, jnp.int32),
                          input_output_aliases={2: 0}, interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))
    return call(src, dst, target, pool, rows)


def _kernel(src_ref, dst_ref, target_in, pool, rows, target_out, zero, sem):
    del target_in  # aliased to target_out: rows no write addresses keep their bits
    m = pl.program_id(0)
    src, dst = src_ref[m], dst_ref[m]
    into = target_out.at[pl.ds(dst, 1)]

    def copy(source):
        dma = pltpu.make_async_copy(source, into, sem.at[0])
        dma.start()
        dma.wait()

    @pl.when(src >= 0)
    def _from_pool():
        copy(pool.at[pl.ds(src, 1)])

    @pl.when(src <= -2)
    def _from_given():
        copy(rows.at[pl.ds(-src - 2, 1)])

    @pl.when(src == -1)
    def _fresh():
        zero[...] = jnp.zeros(zero.shape, zero.dtype)
        copy(zero)
