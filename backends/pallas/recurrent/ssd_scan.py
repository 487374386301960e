"""Chunked variable-length Mamba2 (SSD) prefill over a slot pool, as a Pallas TPU kernel
(spec/recurrent.md RS-2 .. RS-6, RS-16 .. RS-19).

Kernel shape: grid (sequences, head blocks, chunks), the chunk axis innermost and sequential. `cu_seqlens`,
`state_indices`, `has_initial_state` and the two option flags (gate z present, softplus on dt) are
scalar-prefetched into SMEM: the options are runtime values, not compile-time ones, so one compiled kernel
serves all four combinations (in interpret mode every distinct kernel is a compile of ~0.5 s; on a TPU the
flags cost a scalar branch around the z DMA and a select per chunk). Token data stays in HBM
(memory_space=ANY) in head-major packed layouts (x, z: [H, T, P]; dt: [H, T]; B, C: [G, T, N]); step
(s, j, c) DMAs the Q-token window that starts at `cu_seqlens[s] + c * Q` (chunks start at each sequence's
first token and never cross into the next one: tokens past the sequence end are masked out by selection).
The running state [hb, P, N] lives in VMEM scratch across the chunk steps of one (sequence, head block):
it is DMA'd from `pool[slot]` at chunk 0 (or *set* to zeros for a fresh sequence, RS-5), advanced per chunk
with the closed form of RS-18, and DMA'd back after the last chunk (a length-0 sequence writes its starting
state, RS-18). A padding sequence (-1) issues no DMA; its outputs and snapshots are exact zeros (RS-3).

Outputs are written chunk-major (`[S * n_chunks, H, Q, P]`, one block per step) and unpacked to the packed
token layout by the adapter, so no step writes another sequence's tokens. Snapshots (RS-19) use one
[K, hb, P, N] output block per (sequence, head block), resident across its chunk steps: snapshot r is the
state after token L - r, picked from the chunk that holds that token (r = L: the starting state).

Within a chunk (per head, a = dt' A, masked tokens have dt' = 0 so they neither decay nor inject):
  cs = L a (inclusive prefix sum as a lower-triangular matmul, the MXU-friendly form)
  y_i = sum_{j<=i} (C_i . B_j) exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) S_prev C_i + D x_i, then * silu(z_i)
  S_end = exp(cs_last) S_prev + sum_j exp(cs_last - cs_j) dt'_j x_j B_j^T
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .selective_state import silu, softplus

# On a TPU the default f32 matmul precision uses bfloat16 passes; the scan needs f32 products.
_HI = lax.Precision.HIGHEST


def ssd_scan_kernel(x, dt, B, C, z, A, dt_bias, D, pool, cu, slots, init, flags, *, chunk: int, num_chunks: int,
                    heads_per_block: int, num_snapshots: int, interpret):
    """x, z: f32[H, Tp, P]; dt: f32[H, Tp]; B, C: f32[G, Tp, N]; A, dt_bias, D: f32[H, 1];
    pool: f32[num_slots, H, P, N]; cu: i32[S+1]; slots: i32[S] (-1 = padding); init: i32[S] (0 = fresh);
    flags: i32[2] = (gate: multiply by silu(z), softplus: dt' = softplus(dt + dt_bias)), 0 or 1 each
    (z is never read when the gate is off).
    Tp >= T + chunk (zero padding, so every chunk window is in bounds). heads_per_block divides H // G.
    Returns (out f32[S * num_chunks, H, chunk, P] chunk-major, pool[, snapshots f32[S, K, H, P, N]])."""
    H, Tp, P = x.shape
    G, N = B.shape[0], B.shape[2]
    S = slots.shape[0]
    hb, Q, nc, K = heads_per_block, chunk, num_chunks, num_snapshots
    assert (H // G) % hb == 0

    def head_block(s, j, c, *_):
        return (j, 0)

    out_specs = [pl.BlockSpec((1, hb, Q, P), lambda s, j, c, *_: (s * nc + c, j, 0, 0)),
                 pl.BlockSpec(memory_space=pl.ANY)]
    out_shape = [jax.ShapeDtypeStruct((S * nc, H, Q, P), jnp.float32),
                 jax.ShapeDtypeStruct(pool.shape, pool.dtype)]
    if K:
        out_specs.append(pl.BlockSpec((1, K, hb, P, N), lambda s, j, c, *_: (s, 0, j, 0, 0)))
        out_shape.append(jax.ShapeDtypeStruct((S, K, H, P, N), pool.dtype))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4, grid=(S, H // hb, nc),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 5                      # x, dt, B, C, z (HBM)
        + [pl.BlockSpec((hb, 1), head_block)] * 3                             # A, dt_bias, D
        + [pl.BlockSpec(memory_space=pl.ANY)],                                # pool (HBM)
        out_specs=out_specs,
        scratch_shapes=[pltpu.VMEM((hb, P, N), jnp.float32),                  # running state
                        pltpu.VMEM((hb, Q, P), jnp.float32),                  # x window
                        pltpu.VMEM((hb, Q), jnp.float32),                     # dt window
                        pltpu.VMEM((Q, N), jnp.float32),                      # B window
                        pltpu.VMEM((Q, N), jnp.float32),                      # C window
                        pltpu.VMEM((hb, Q, P), jnp.float32),                  # z window
                        pltpu.VMEM((max(Q if K else 1, 1), hb, P, N), jnp.float32),  # per-token states
                        pltpu.SemaphoreType.DMA((6,))])
    kernel = functools.partial(_kernel, hb=hb, Q=Q, nc=nc, K=K, per_group=H // G)
    call = pl.pallas_call(kernel, grid_spec=grid_spec, out_shape=out_shape,
                          input_output_aliases={12: 1}, interpret=interpret,
                          # the chunk axis carries the state in scratch: it must run in order
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "parallel", "arbitrary")))
    return call(cu, slots, init, flags, x, dt, B, C, z, A, dt_bias, D, pool)


def _kernel(cu_ref, slots_ref, init_ref, flags_ref, x_hbm, dt_hbm, b_hbm, c_hbm, z_hbm, a_ref, bias_ref, d_ref,
            pool_in, o_ref, pool_out, *rest, hb, Q, nc, K, per_group):
    del pool_in  # aliased to pool_out
    if K:
        snap_ref, state, xbuf, dtbuf, bbuf, cbuf, zbuf, stbuf, sems = rest
    else:
        state, xbuf, dtbuf, bbuf, cbuf, zbuf, stbuf, sems = rest
    s, j, c = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    slot = slots_ref[s]
    live = slot >= 0
    length = cu_ref[s + 1] - cu_ref[s]
    start = cu_ref[s] + c * Q
    nvalid = jnp.clip(length - c * Q, 0, Q)
    h0 = j * hb
    g = h0 // per_group
    rows = pool_out.at[slot, pl.ds(h0, hb)]                         # [hb, P, N] in HBM
    gated, softplus_dt = flags_ref[0] != 0, flags_ref[1] != 0

    @pl.when(c == 0)
    def _start():
        @pl.when(live & (init_ref[s] != 0))
        def _load():
            cp = pltpu.make_async_copy(rows, state, sems.at[0])
            cp.start()
            cp.wait()

        @pl.when(jnp.logical_not(live & (init_ref[s] != 0)))
        def _fresh():  # RS-5: zeros are selected, the row is never read
            state[...] = jnp.zeros(state.shape, state.dtype)

        if K:
            snap_ref[...] = jnp.zeros(snap_ref.shape, snap_ref.dtype)

            @pl.when(live & (length < K))
            def _snap_start():  # snapshot r = L is the starting state (RS-19)
                snap_ref[0, length] = state[...].astype(snap_ref.dtype)

    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)  # padding sequences and masked rows (RS-3)

    @pl.when(live & (nvalid > 0))
    def _chunk():
        copies = [pltpu.make_async_copy(x_hbm.at[pl.ds(h0, hb), pl.ds(start, Q)], xbuf, sems.at[1]),
                  pltpu.make_async_copy(dt_hbm.at[pl.ds(h0, hb), pl.ds(start, Q)], dtbuf, sems.at[2]),
                  pltpu.make_async_copy(b_hbm.at[g, pl.ds(start, Q)], bbuf, sems.at[3]),
                  pltpu.make_async_copy(c_hbm.at[g, pl.ds(start, Q)], cbuf, sems.at[4])]
        z_copy = pltpu.make_async_copy(z_hbm.at[pl.ds(h0, hb), pl.ds(start, Q)], zbuf, sems.at[5])
        for cp in copies:
            cp.start()

        @pl.when(gated)
        def _start_z():
            z_copy.start()

        for cp in copies:
            cp.wait()

        @pl.when(gated)
        def _wait_z():
            z_copy.wait()

        tok = lax.broadcasted_iota(jnp.int32, (1, Q), 1)
        valid = tok < nvalid                                        # [1, Q]: tokens of this sequence
        dtp = dtbuf[...] + bias_ref[...]                            # [hb, Q]  RS-14
        dtp = jnp.where(softplus_dt, softplus(dtp), dtp)
        dtp = jnp.where(valid, dtp, 0.0)                            # selected, so a masked NaN cannot leak
        x = jnp.where(valid[:, :, None], xbuf[...], 0.0)           # [hb, Q, P]
        Bq = jnp.where(valid[0][:, None], bbuf[...], 0.0)          # [Q, N]
        Cq = jnp.where(valid[0][:, None], cbuf[...], 0.0)
        a = dtp * a_ref[...]                                        # [hb, Q]
        ii = lax.broadcasted_iota(jnp.int32, (Q, Q), 0)
        jj = lax.broadcasted_iota(jnp.int32, (Q, Q), 1)
        causal = jj <= ii
        cs = jnp.dot(a, causal.astype(jnp.float32).T, precision=_HI)  # inclusive prefix sums [hb, Q]
        seg = jnp.where(causal[None], cs[:, :, None] - cs[:, None, :], 0.0)
        decay = jnp.where(causal[None], jnp.exp(seg), 0.0)         # [hb, i, j]
        cb = jnp.dot(Cq, Bq.T, precision=_HI)                       # [i, j] = C_i . B_j (one group)
        w = decay * dtp[:, None, :]                                 # exp(cs_i - cs_j) dt'_j
        y = jnp.einsum("hij,hjp->hip", cb[None] * w, x, precision=_HI)
        S_prev = state[...]
        y = y + jnp.exp(cs)[:, :, None] * jnp.einsum("in,hpn->hip", Cq, S_prev, precision=_HI)
        y = y + d_ref[...][:, :, None] * x
        # without the gate zbuf was never filled: its value is selected away, never multiplied in
        y = jnp.where(gated, y * silu(zbuf[...]), y)
        o_ref[0] = y
        last = cs[:, Q - 1]                                         # masked tokens add 0 to cs
        w_last = jnp.exp(last[:, None] - cs) * dtp                  # [hb, Q]
        state[...] = (jnp.exp(last)[:, None, None] * S_prev
                      + jnp.einsum("hjp,jn->hpn", w_last[:, :, None] * x, Bq, precision=_HI))
        if K:
            # state after each token i of the chunk: exp(cs_i) S_prev + sum_{j<=i} w[i, j] x_j B_j^T
            P, N = x.shape[2], Bq.shape[1]
            xb = (x[:, :, :, None] * Bq[None, :, None, :]).reshape(hb, Q, P * N)
            st = jnp.einsum("hij,hjk->hik", w, xb, precision=_HI).reshape(hb, Q, P, N)
            st = st + jnp.exp(cs)[:, :, None, None] * S_prev[:, None]
            stbuf[...] = jnp.swapaxes(st, 0, 1)
            for r in range(K):  # snapshot r: the state after token L - r (1-based), if in this chunk
                i = length - r - c * Q - 1

                @pl.when((i >= 0) & (i < nvalid))
                def _snap():
                    snap_ref[0, r] = stbuf[i].astype(snap_ref.dtype)

    @pl.when(live & (c == nc - 1))
    def _finish():  # RS-18: the final (or, for L = 0, the starting) state goes back to the slot
        cp = pltpu.make_async_copy(state, rows, sems.at[0])
        cp.start()
        cp.wait()
