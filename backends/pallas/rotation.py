"""In-place key re-rotation from a trig LUT as a Pallas TPU kernel (spec/rotation.md RO-1 .. RO-10).

Kernel shape: the rotated block ids and the LUT-row deltas are scalar-prefetched into SMEM; the key
pool stays in HBM (memory_space=ANY), aliased input -> output, so only listed pages move: each grid
step DMAs one page into VMEM, gathers the LUT row of every token (per-block deltas [n, 1] read element
0 for every token, per-token deltas [n, page_size] element t: RO-7 broadcast, the same value either
way), rotates every pair of every KV head in float32 and DMAs the page back. Dims past rotary_dim are
written back unchanged (RO-8); V pages and unlisted blocks are never touched.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def rotate_keys_kernel(k_pages, block_ids, deltas, lut, *, per_block: bool, layout: str, rotary_dim: int,
                       interpret):
    """k_pages: [P, page_size, Hkv, D] f32|bf16|f16; block_ids: i32[n]; deltas: i32[n * w] (w = 1 if
    per_block else page_size), rows of lut; lut: f32[rows, rotary_dim] = [cos | sin]. Returns the pool."""
    n = block_ids.shape[0]
    page_size = k_pages.shape[1]
    kernel = functools.partial(_kernel, page_size=page_size, per_block=per_block, layout=layout,
                               rotary_dim=rotary_dim)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(n,),
        in_specs=[pl.BlockSpec(lut.shape, lambda i, *_: (0, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM(k_pages.shape[1:], k_pages.dtype),
                        pltpu.VMEM((page_size, rotary_dim), jnp.float32),
                        pltpu.SemaphoreType.DMA((1,))])
    call = pl.pallas_call(kernel, grid_spec=grid_spec,
                          out_shape=jax.ShapeDtypeStruct(k_pages.shape, k_pages.dtype),
                          input_output_aliases={3: 0}, interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))
    return call(block_ids, deltas, lut, k_pages)


def _kernel(ids_ref, deltas_ref, lut_ref, k_in, k_out, page, coef, sem, *, page_size, per_block, layout,
            rotary_dim):
    del k_in  # aliased to k_out
    i = pl.program_id(0)
    block = ids_ref[i]
    load = pltpu.make_async_copy(k_out.at[block], page, sem.at[0])
    load.start()

    def gather(t, carry):
        row = deltas_ref[i] if per_block else deltas_ref[i * page_size + t]
        coef[pl.ds(t, 1), :] = lut_ref[pl.ds(row, 1), :]
        return carry

    lax.fori_loop(0, page_size, gather, 0)
    load.wait()

    half = rotary_dim // 2
    x = page[...].astype(jnp.float32)                     # [page_size, Hkv, D]
    c = coef[:, :half][:, None, :]                         # [page_size, 1, half]: same for every head
    s = coef[:, half:][:, None, :]
    rot = x[..., :rotary_dim]
    if layout == "half":
        a, b = rot[..., :half], rot[..., half:]
        new = jnp.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    else:
        pairs = rot.reshape(rot.shape[:-1] + (half, 2))    # value reshape (refs are never reshaped)
        a, b = pairs[..., 0], pairs[..., 1]
        new = jnp.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(rot.shape)
    if rotary_dim < x.shape[-1]:
        new = jnp.concatenate([new, x[..., rotary_dim:]], axis=-1)
    page[...] = new.astype(page.dtype)
    store = pltpu.make_async_copy(page, k_out.at[block], sem.at[0])
    store.start()
    store.wait()
