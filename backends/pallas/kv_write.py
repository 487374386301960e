"""KV write through a slot mapping as a Pallas TPU kernel (spec/paged_attention.md PA-40 .. PA-46).

Kernel shape: the slot mapping is scalar-prefetched into SMEM; the pools stay in HBM (memory_space=ANY)
and are aliased input -> output, so only the written rows move; each grid step takes a block of new
tokens into VMEM, converts it to the storage dtype there (the pinned quantize rule: float32 division by
the float32 scale, round to nearest even, saturate), and DMAs each token's [Hkv, D] row to its slot.
A negative slot issues no DMA (PA-41). Duplicate slots are rejected by the adapter before the call,
because the order of two DMAs to one slot is not defined on a TPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .tiling import SUBLANES


def _split(a):
    """Veltkamp's split of a float32: a = hi + lo exactly, each with at most 12 significant bits."""
    t = a * jnp.float32(4097.0)
    hi = t - (t - a)
    return hi, a - hi


def _residual(x, c, s):
    """|x - c*s| computed exactly (Dekker's product; x - c*s itself is exact for c close to x / s)."""
    p = c * s
    ch, cl = _split(c)
    sh, sl = _split(s)
    err = ((ch * sh - p) + ch * sl + cl * sh) + cl * sl
    return jnp.abs((x - p) - err)


def div_rn(x, s):
    """The correctly rounded float32 quotient x / s (PA-44), whatever the compiler does with `/`.

    XLA rewrites a division by a broadcast scalar into a multiply by its reciprocal (seen with jax 0.10.2
    on CPU: the compiled HLO of `lambda a, b: a / b` for f32[N] / f32[] is multiply(a, broadcast(1 / b)),
    15% of random quotients at b = 0.1 differ from IEEE division), and TPUs divide through a reciprocal
    too. Near a rounding tie of the storage format the two quotients store different values, which the
    suite's quantization-tie values found (got -73 for -72 at scale 0.1). So: take the quotient as
    computed, and of it and its two float32 neighbours keep the one with the smallest exact residual
    |x - c*s| (ties to the even bit pattern).

    The residuals are about an ulp of x: with a scale near the smallest normal (PA-52's range column:
    2^-126) they are subnormal, which XLA on CPU (and a TPU) flushes to zero, so every candidate looked
    exact and the even one won (stored 120 for 119 at scale 2^-126). x and s are first multiplied by the
    power of two that brings s into [0.5, 1): the quotient is the same, exactly, and the residuals are
    normal. (If x * 2^k overflows, so does the quotient, which is at least as large.)"""
    exponent = (lax.bitcast_convert_type(s, jnp.int32) >> 23) & 0xFF
    k = jnp.clip(126 - exponent, -126, 127)
    power = lax.bitcast_convert_type((k + 127) << 23, jnp.float32)
    x, s = x * power, s * power
    q = x / s
    bits = lax.bitcast_convert_type(q, jnp.int32)
    best, best_r = q, _residual(x, q, s)
    for step in (-1, 1):
        c = lax.bitcast_convert_type(bits + step, jnp.float32)
        r = _residual(x, c, s)
        even = (lax.bitcast_convert_type(c, jnp.int32) & 1) == 0
        better = (r < best_r) | ((r == best_r) & even)
        best = jnp.where(better, c, best)
        best_r = jnp.where(better, r, best_r)
    return best


def store_value(x, dtype, scale):
    """float32 values -> storage dtype, the rule of reference.dtypes.quantize / PA-43, PA-44."""
    dtype = np.dtype(dtype)
    if scale is None:
        return x.astype(dtype)
    q = div_rn(x, scale)  # the correctly rounded quotient, never a reciprocal multiply
    if dtype == np.int8:
        return jnp.clip(jnp.round(q), -128, 127).astype(jnp.int8)  # jnp.round: ties to even
    top = float(ml_dtypes.finfo(dtype).max)
    return jnp.clip(q, -top, top).astype(dtype)


def write_kv_kernel(k_pages, v_pages, k, v, slots, k_scales, v_scales, *, quantized: bool, interpret,
                    block_tokens: int = SUBLANES):
    """k_pages, v_pages: [P, page_size, Hkv, D] storage dtype; k, v: f32[N_pad, Hkv, D] (N_pad a
    multiple of block_tokens); slots: i32[N_pad] (-1 = skip); k_scales, v_scales: f32[N_pad, Hkv, 1], the
    scale each token head is stored with (one pool scale, per KV head or beside the slot: PA-44, PA-48;
    ones when not quantized). Returns the two updated pools."""
    n_pad, hkv, d = k.shape
    page_size = k_pages.shape[1]
    if n_pad % block_tokens:
        raise ValueError(f"the token count must be padded to a multiple of block_tokens={block_tokens}, "
                         f"got {n_pad}")
    kernel = functools.partial(_kernel, page_size=page_size, block_tokens=block_tokens,
                               quantized=quantized)
    token_block = pl.BlockSpec((block_tokens, hkv, d), lambda b, *_: (b, 0, 0))
    scale_block = pl.BlockSpec((block_tokens, hkv, 1), lambda b, *_: (b, 0, 0))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(n_pad // block_tokens,),
        in_specs=[scale_block, scale_block, token_block, token_block,
                  pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((block_tokens, hkv, d), k_pages.dtype),
                        pltpu.VMEM((block_tokens, hkv, d), v_pages.dtype),
                        pltpu.SemaphoreType.DMA((2,))])
    call = pl.pallas_call(
        kernel, grid_spec=grid_spec,
        out_shape=[jax.ShapeDtypeStruct(k_pages.shape, k_pages.dtype),
                   jax.ShapeDtypeStruct(v_pages.shape, v_pages.dtype)],
        # operand indices count the scalar-prefetch operand: slots=0, scales 1, 2, k=3, v=4, pools 5, 6
        input_output_aliases={5: 0, 6: 1}, interpret=interpret,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))
    return call(slots, k_scales, v_scales, k, v, k_pages, v_pages)


def _kernel(slots_ref, ks_ref, vs_ref, k_ref, v_ref, k_in, v_in, k_out, v_out, k_buf, v_buf, sem, *,
            page_size, block_tokens, quantized):
    del k_in, v_in  # aliased to k_out / v_out
    k_scale = ks_ref[...] if quantized else None    # [block_tokens, Hkv, 1], broadcast over D
    v_scale = vs_ref[...] if quantized else None
    k_buf[...] = store_value(k_ref[...], k_buf.dtype, k_scale)
    v_buf[...] = store_value(v_ref[...], v_buf.dtype, v_scale)
    base = pl.program_id(0) * block_tokens

    def body(t, carry):
        slot = slots_ref[base + t]

        @pl.when(slot >= 0)
        def _():
            page, offset = slot // page_size, slot % page_size
            ck = pltpu.make_async_copy(k_buf.at[t], k_out.at[page, offset], sem.at[0])
            cv = pltpu.make_async_copy(v_buf.at[t], v_out.at[page, offset], sem.at[1])
            ck.start()
            cv.start()
            ck.wait()
            cv.wait()
        return carry

    lax.fori_loop(0, block_tokens, body, 0)
