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


# --- chunked variable-length prefill (RS-32, RS-33) ------------------------------------------------

_HI = jax.lax.Precision.HIGHEST   # float32 products on a TPU (the default uses bfloat16 passes)


def gated_delta_chunked_kernel(q, k, v, g, beta, scale, pool, cu, slots, init, *, chunk: int, num_chunks: int,
                               heads_per_block: int, norm: bool, interpret):
    """q, k: f32[Tp, Hk, K]; v: f32[Tp, H, V]; g, beta: f32[Tp, H]; scale: f32[1, 1];
    pool: f32[num_slots, H, K, V]; cu: i32[S+1]; slots: i32[S] (-1 = padding); init: i32[S] (0 = fresh).
    Tp >= T + chunk (zero rows, so every chunk window is in bounds); heads_per_block divides H // Hk.
    Returns (out f32[S * num_chunks * chunk, H, V] chunk-major, pool).

    Grid (sequences, head blocks, chunks), the chunk axis innermost and sequential; cu_seqlens,
    state_indices and has_initial_state are scalar-prefetched. Step (s, j, c) DMAs the Q-token window
    that starts at cu_seqlens[s] + c * Q from the packed token-major arrays in HBM; the [hb, K, V] state
    lives in VMEM scratch across the chunks of one (sequence, head block): DMA'd from pool[slot] at chunk
    0 (or *set* to zeros for a fresh sequence, RS-5), advanced by the WY form of RS-33 per chunk, DMA'd
    back after the last chunk (a length-0 sequence writes its starting state). Tokens past the sequence's
    end are masked out by selection (g = beta = 0, k = v = q = 0: no decay, no write). A padding sequence
    issues no DMA; its outputs are exact zeros (RS-3)."""
    Tp, H, V = v.shape
    Hk, K = q.shape[1], q.shape[2]
    S = slots.shape[0]
    hb, Q, nc = heads_per_block, chunk, num_chunks
    assert (H // Hk) % hb == 0, (H, Hk, hb)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3, grid=(S, H // hb, nc),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 5                       # q, k, v, g, beta (HBM)
        + [pl.BlockSpec((1, 1), lambda s, j, c, *_: (0, 0)),                   # scale
           pl.BlockSpec(memory_space=pl.ANY)],                                 # pool (HBM)
        out_specs=[pl.BlockSpec((Q, hb, V), lambda s, j, c, *_: (s * nc + c, j, 0)),
                   pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((hb, K, V), jnp.float32),                   # running state
                        pltpu.VMEM((Q, 1, K), jnp.float32),                    # q window
                        pltpu.VMEM((Q, 1, K), jnp.float32),                    # k window
                        pltpu.VMEM((Q, hb, V), jnp.float32),                   # v window
                        pltpu.VMEM((Q, hb), jnp.float32),                      # g window
                        pltpu.VMEM((Q, hb), jnp.float32),                      # beta window
                        pltpu.SemaphoreType.DMA((6,))])
    kernel = functools.partial(_chunk_kernel, hb=hb, Q=Q, nc=nc, per_qk=H // Hk, norm=norm)
    call = pl.pallas_call(kernel, grid_spec=grid_spec,
                          out_shape=[jax.ShapeDtypeStruct((S * nc * Q, H, V), jnp.float32),
                                     jax.ShapeDtypeStruct(pool.shape, pool.dtype)],
                          input_output_aliases={9: 1}, interpret=interpret,
                          # the chunk axis carries the state in scratch: it must run in order
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "parallel", "arbitrary")))
    return call(cu, slots, init, q, k, v, g, beta, scale, pool)


def _unit_rows(x):
    return x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2NORM_EPS)


def _chunk_kernel(cu_ref, slots_ref, init_ref, q_hbm, k_hbm, v_hbm, g_hbm, b_hbm, scale_ref, pool_in, o_ref,
                  pool_out, state, qbuf, kbuf, vbuf, gbuf, bbuf, sems, *, hb, Q, nc, per_qk, norm):
    del pool_in  # aliased to pool_out
    s, j, c = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    slot = slots_ref[s]
    live = slot >= 0
    start = cu_ref[s] + c * Q
    nvalid = jnp.clip(cu_ref[s + 1] - start, 0, Q)
    h0 = j * hb
    hq = h0 // per_qk                                                # RS-28: one q/k head per block
    rows = pool_out.at[slot, pl.ds(h0, hb)]                          # [hb, K, V] in HBM

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
    def _chunk():
        copies = [pltpu.make_async_copy(q_hbm.at[pl.ds(start, Q), pl.ds(hq, 1)], qbuf, sems.at[1]),
                  pltpu.make_async_copy(k_hbm.at[pl.ds(start, Q), pl.ds(hq, 1)], kbuf, sems.at[2]),
                  pltpu.make_async_copy(v_hbm.at[pl.ds(start, Q), pl.ds(h0, hb)], vbuf, sems.at[3]),
                  pltpu.make_async_copy(g_hbm.at[pl.ds(start, Q), pl.ds(h0, hb)], gbuf, sems.at[4]),
                  pltpu.make_async_copy(b_hbm.at[pl.ds(start, Q), pl.ds(h0, hb)], bbuf, sems.at[5])]
        for cp in copies:
            cp.start()
        for cp in copies:
            cp.wait()
        i = jax.lax.broadcasted_iota(jnp.int32, (Q, Q), 0)
        jj = jax.lax.broadcasted_iota(jnp.int32, (Q, Q), 1)
        tok = jax.lax.broadcasted_iota(jnp.int32, (Q, 1), 0) < nvalid          # [Q, 1] tokens of this sequence
        qc = jnp.where(tok, qbuf[:, 0, :], 0.0)                                 # [Q, K]
        kc = jnp.where(tok, kbuf[:, 0, :], 0.0)
        if norm:
            qc, kc = _unit_rows(qc), _unit_rows(kc)
        vc = jnp.where(tok[:, :, None], vbuf[...], 0.0)                          # [Q, hb, V]
        g = jnp.where(tok, gbuf[...], 0.0).T                                    # [hb, Q]
        beta = jnp.where(tok, bbuf[...], 0.0).T                                 # [hb, Q]
        lower = jnp.where(i >= jj, 1.0, 0.0)
        gam = jnp.dot(g, lower.T, precision=_HI)                                # [hb, Q] inclusive prefix sums
        causal = (i >= jj)[None]
        decay = jnp.where(causal, jnp.exp(jnp.where(causal, gam[:, :, None] - gam[:, None, :], 0.0)), 0.0)
        kk = jnp.dot(kc, kc.T, precision=_HI)                                   # [Q, Q]
        L = jnp.where((i > jj)[None], beta[:, :, None] * decay * kk[None], 0.0)  # [hb, Q, Q]

        def solve_row(r, T):  # UT transform: row r of (I + L)^-1 = e_r - L[r, :] T (rows < r done)
            l_row = jnp.sum(jnp.where(i[None] == r, L, 0.0), axis=1)            # [hb, Q]
            new = jnp.where(jj[0][None] == r, 1.0, 0.0) - jnp.einsum("hq,hqp->hp", l_row, T, precision=_HI)
            return jnp.where(i[None] == r, new[:, None, :], T)

        T = jax.lax.fori_loop(1, Q, solve_row, jnp.broadcast_to(jnp.where(i == jj, 1.0, 0.0), (hb, Q, Q)))
        S = state[...]                                                          # [hb, K, V]
        ks = jnp.einsum("qk,hkv->hqv", kc, S, precision=_HI)                    # [hb, Q, V]
        vh = jnp.transpose(vc, (1, 0, 2))                                       # [hb, Q, V]
        rhs = beta[:, :, None] * (vh - jnp.exp(gam)[:, :, None] * ks)
        U = jnp.einsum("hqp,hpv->hqv", T, rhs, precision=_HI)                   # deltas u_i (RS-30)
        qs = jnp.einsum("qk,hkv->hqv", qc, S, precision=_HI)
        A = jnp.dot(qc, kc.T, precision=_HI)[None] * decay                      # [hb, Q, Q]
        y = jnp.exp(gam)[:, :, None] * qs + jnp.einsum("hqp,hpv->hqv", A, U, precision=_HI)
        o_ref[...] = jnp.transpose(scale_ref[0, 0] * y, (1, 0, 2))
        last = gam[:, Q - 1:Q]                                                  # [hb, 1] (masked g = 0)
        w = jnp.where(tok.T, jnp.exp(last - gam), 0.0)                          # [hb, Q]
        state[...] = (jnp.exp(last)[:, :, None] * S
                      + jnp.einsum("hq,qk,hqv->hkv", w, kc, U, precision=_HI))

    @pl.when(live & (c == nc - 1))
    def _finish():  # the final (or, for L = 0, the starting) state goes back to the slot
        cp = pltpu.make_async_copy(state, rows, sems.at[0])
        cp.start()
        cp.wait()
