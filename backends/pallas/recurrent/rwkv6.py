"""RWKV6 wkv over packed variable-length sequences and a slot pool, as a Pallas TPU kernel
(spec/recurrent.md RS-2 .. RS-6, RS-17 packing, RS-20).

Kernel shape: grid (sequences, head blocks, token windows), the window axis innermost and sequential.
`cu_seqlens`, `state_indices` and `has_initial_state` are scalar-prefetched into SMEM; r, k, v, w stay in
HBM in the packed token-major layout ([T, H, K] / [T, H, V], padded with Q zero rows) and step (s, j, c)
DMAs the Q-token window starting at `cu_seqlens[s] + c * Q`. The [hb, K, V] state lives in VMEM scratch
across the windows of one (sequence, head block): DMA'd from `pool[slot]` at window 0 (or *set* to zeros
for a fresh sequence, RS-5) and DMA'd back after the last window. Inside a window the recurrence runs
token by token over the sequence's valid tokens only (a dynamic trip count, so tokens of the next
sequence are never read into the state): per head, with S the state *before* the token (RS-20),
  y[v] = sum_k r[k] S[k, v] + (sum_k r[k] u[k] k[k]) v[v]      (= sum_k r[k] (S[k, v] + u[k] k[k] v[v]))
  S[k, v] <- w[k] S[k, v] + k[k] v[v]
The token-by-token form keeps the decay a product of per-token multipliers in (0, 1]: the chunked
closed form would divide by cumulative products of w, which underflow for strong decays.
Outputs are written window-major ([S * n_windows * Q, H, V]) and unpacked by the adapter. A padding
sequence (-1) issues no DMA and its outputs are exact zeros (RS-3).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def rwkv6_kernel(r, k, v, w, u, pool, cu, slots, init, *, window: int, num_windows: int, heads_per_block: int,
                 interpret):
    """r, k, w: f32[Tp, H, K]; v: f32[Tp, H, V]; u: f32[H, K]; pool: f32[num_slots, H, K, V];
    cu: i32[S+1]; slots: i32[S] (-1 = padding); init: i32[S] (0 = fresh). Tp >= T + window.
    Returns (out f32[S * num_windows * window, H, V] window-major, pool)."""
    Tp, H, K = r.shape
    V = v.shape[2]
    S = slots.shape[0]
    hb, Q, nc = heads_per_block, window, num_windows
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3, grid=(S, H // hb, nc),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 4                      # r, k, v, w (HBM)
        + [pl.BlockSpec((hb, K), lambda s, j, c, *_: (j, 0)),                 # u
           pl.BlockSpec(memory_space=pl.ANY)],                                # pool (HBM)
        out_specs=[pl.BlockSpec((Q, hb, V), lambda s, j, c, *_: (s * nc + c, j, 0)),
                   pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((hb, K, V), jnp.float32),                  # running state
                        pltpu.VMEM((Q, hb, K), jnp.float32),                  # r window
                        pltpu.VMEM((Q, hb, K), jnp.float32),                  # k window
                        pltpu.VMEM((Q, hb, V), jnp.float32),                  # v window
                        pltpu.VMEM((Q, hb, K), jnp.float32),                  # w window
                        pltpu.SemaphoreType.DMA((5,))])
    kernel = functools.partial(_kernel, hb=hb, Q=Q, nc=nc)
    call = pl.pallas_call(kernel, grid_spec=grid_spec,
                          out_shape=[jax.ShapeDtypeStruct((S * nc * Q, H, V), jnp.float32),
                                     jax.ShapeDtypeStruct(pool.shape, pool.dtype)],
                          input_output_aliases={8: 1}, interpret=interpret,
                          # the window axis carries the state in scratch: it must run in order
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "parallel", "arbitrary")))
    return call(cu, slots, init, r, k, v, w, u, pool)


def _kernel(cu_ref, slots_ref, init_ref, r_hbm, k_hbm, v_hbm, w_hbm, u_ref, pool_in, o_ref, pool_out,
            state, rbuf, kbuf, vbuf, wbuf, sems, *, hb, Q, nc):
    del pool_in  # aliased to pool_out
    s, j, c = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    slot = slots_ref[s]
    live = slot >= 0
    start = cu_ref[s] + c * Q
    nvalid = jnp.clip(cu_ref[s + 1] - start, 0, Q)
    h0 = j * hb
    rows = pool_out.at[slot, pl.ds(h0, hb)]                         # [hb, K, V] in HBM

    @pl.when(c == 0)
    def _start():
        from_row = live & (init_ref[s] != 0)

        @pl.when(from_row)
        def _load():
            cp = pltpu.make_async_copy(rows, state, sems.at[0])
            cp.start()
            cp.wait()

        @pl.when(jnp.logical_not(from_row))
        def _fresh():  # RS-5: zeros are selected, the row is never read
            state[...] = jnp.zeros(state.shape, state.dtype)

    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)  # padding sequences and rows past the end (RS-3)

    @pl.when(live & (nvalid > 0))
    def _window():
        copies = [pltpu.make_async_copy(src.at[pl.ds(start, Q), pl.ds(h0, hb)], dst, sems.at[i + 1])
                  for i, (src, dst) in enumerate(((r_hbm, rbuf), (k_hbm, kbuf), (v_hbm, vbuf), (w_hbm, wbuf)))]
        for cp in copies:
            cp.start()
        for cp in copies:
            cp.wait()
        u = u_ref[...]                                              # [hb, K]

        def token(t, S):
            rt, kt, vt, wt = rbuf[t], kbuf[t], vbuf[t], wbuf[t]     # [hb, K] / [hb, V]
            bonus = jnp.sum(rt * u * kt, axis=1, keepdims=True)     # [hb, 1]
            o_ref[t] = jnp.sum(rt[:, :, None] * S, axis=1) + bonus * vt
            return wt[:, :, None] * S + kt[:, :, None] * vt[:, None, :]

        state[...] = lax.fori_loop(0, nvalid, token, state[...])

    @pl.when(live & (c == nc - 1))
    def _finish():  # the final (or, for L = 0, the starting) state goes back to the slot
        cp = pltpu.make_async_copy(state, rows, sems.at[0])
        cp.start()
        cp.wait()
