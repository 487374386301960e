"""Chunked variable-length Mamba2 (SSD) prefill over a slot pool, with snapshots (RS-17 .. RS-19).

Grid: (sequence s, head h, block of BLOCK_P channels). A program walks its sequence (tokens
cu_seqlens[s]:cu_seqlens[s+1], read through any stride) with a [BLOCK_P, N] float32 state tile:

* start (RS-5): the slot's row, or exact zeros *selected* by masking the load when
  has_initial_state[s] is False (a NaN/inf row is never read);
* chunks of BLOCK_Q tokens in the closed form of RS-18, as three matrix products per chunk
  (tl.dot, input_precision="ieee" so float32 stays float32 rather than TF32 on GPUs):
      cs = cumsum(dt' A);  L[i, j] = exp(cs_i - cs_j) for j <= i, else 0
      y  = (C B^T * L * dt'_j) x  +  exp(cs) * (C S^T)
      S  = exp(cs_last) S + (x * exp(cs_last - cs) dt')^T B
  Chunks start at the sequence's first token and never cross sequences; BLOCK_Q follows the
  chunk_size hint within [16, 64] (results depend on it only within class R, RS-18);
* snapshots (RS-19): the last min(K-1, L) tokens are not chunked but stepped one at a time (the RS-16
  recurrence), so that every state a snapshot needs exists: snapshot r = min(K-1, L) is the state after
  the chunked part (r = L: the starting state), and each step writes the next one down to r = 0;
* the final state is stored into the row in place (the adapter's copy of the pool), rounded once to the
  pool dtype (RS-6); a length-0 sequence stores its starting state (zeros when fresh, RS-18).

Padding sequences (slot -1): every load is masked, their output tokens are stored as exactly 0.0, the
pool is not written; their snapshots stay as the adapter allocated them (zeros, RS-19). Snapshots
r > L_s (unspecified) are never written (zeros).
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import live_mask, silu, softplus  # noqa: E402


@triton.jit
def _dt_eff(dt_ptr, t, h, s_dtt, s_dth, ok, bias, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    """dt' of RS-14 for the tokens t (0 where not ok, so masked tokens add no decay and no input)."""
    dt = tl.load(dt_ptr + t * s_dtt + h * s_dth, mask=ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        dt = dt + bias
    if SOFTPLUS:
        dt = softplus(dt)
    return tl.where(ok, dt, 0.0)


@triton.jit
def _ssd_kernel(state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr,
                cu_ptr, idx_ptr, init_ptr, out_ptr, snap_ptr,
                P, N, heads_per_group, K,
                s_ss, s_sh, s_sp, s_sn, s_xt, s_xh, s_xp, s_dtt, s_dth, s_a, s_bt, s_bg, s_bn,
                s_ct, s_cg, s_cn, s_D, s_zt, s_zh, s_zp, s_bias, s_cu, s_idx, s_init,
                s_ot, s_oh, s_op, s_ks, s_kr, s_kh, s_kp, s_kn,
                BLOCK_Q: tl.constexpr, BLOCK_P: tl.constexpr, N_PAD: tl.constexpr,
                HAS_IDX: tl.constexpr, HAS_INIT: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, N_PAD)
    q = tl.arange(0, BLOCK_Q)
    lo = tl.load(cu_ptr + s * s_cu).to(tl.int64)
    hi = tl.load(cu_ptr + (s + 1) * s_cu).to(tl.int64)
    if HAS_IDX:
        slot = tl.load(idx_ptr + s * s_idx).to(tl.int64)
    else:
        slot = s
    read_slot = slot
    if HAS_INIT:
        read_slot = tl.where(tl.load(init_ptr + s * s_init) != 0, slot, -1)   # RS-5: select zeros
    p_in = p < P
    p_ok = p_in & live_mask(p, slot)
    n_ok = (n < N) & live_mask(n, slot)
    row = p_ok[:, None] & n_ok[None, :]
    g = h // heads_per_group
    A = tl.load(A_ptr + h * s_a).to(tl.float32)
    bias = 0.0
    if HAS_BIAS:
        bias = tl.load(bias_ptr + h * s_bias).to(tl.float32)
    Dh = 0.0
    if HAS_D:
        Dh = tl.load(D_ptr + h * s_D).to(tl.float32)
    sp = state_ptr + slot * s_ss + h * s_sh + p[:, None] * s_sp + n[None, :] * s_sn
    read = p_ok[:, None] & ((n < N) & live_mask(n, read_slot))[None, :]
    S = tl.load(sp, mask=read, other=0.0).to(tl.float32)

    length = hi - lo
    tail = tl.maximum(tl.minimum(K - 1, length), 0)    # tokens stepped one by one for the snapshots
    mid = hi - tail
    causal = q[:, None] >= q[None, :]
    for c0 in range(lo, mid, BLOCK_Q):
        t = c0 + q
        t_ok = (t < mid) & live_mask(q, slot)
        dt = _dt_eff(dt_ptr, t, h, s_dtt, s_dth, t_ok, bias, HAS_BIAS, SOFTPLUS)
        cs = tl.cumsum(dt * A, axis=0)                                            # [Q]
        tp = t_ok[:, None] & p_ok[None, :]
        tn = t_ok[:, None] & n_ok[None, :]
        x = tl.load(x_ptr + t[:, None] * s_xt + h * s_xh + p[None, :] * s_xp, mask=tp, other=0.0).to(tl.float32)
        Bc = tl.load(B_ptr + t[:, None] * s_bt + g * s_bg + n[None, :] * s_bn, mask=tn, other=0.0).to(tl.float32)
        Cc = tl.load(C_ptr + t[:, None] * s_ct + g * s_cg + n[None, :] * s_cn, mask=tn, other=0.0).to(tl.float32)
        seg = tl.where(causal, cs[:, None] - cs[None, :], 0.0)                   # no overflow above the diagonal
        decay = tl.where(causal, tl.exp(seg), 0.0)
        cb = tl.dot(Cc, tl.trans(Bc), input_precision="ieee")                     # [Q, Q]
        y = tl.dot(cb * decay * dt[None, :], x, input_precision="ieee")           # intra-chunk
        y += tl.dot(Cc, tl.trans(S), input_precision="ieee") * tl.exp(cs)[:, None]  # from the entering state
        if HAS_D:
            y += Dh * x
        if HAS_Z:
            y *= silu(tl.load(z_ptr + t[:, None] * s_zt + h * s_zh + p[None, :] * s_zp, mask=tp,
                              other=0.0).to(tl.float32))
        y = tl.where(tp, y, 0.0)                                                  # RS-3 for padding
        tl.store(out_ptr + t[:, None] * s_ot + h * s_oh + p[None, :] * s_op, y,
                 mask=((t < mid)[:, None] & p_in[None, :]))
        last = tl.sum(dt * A, axis=0)                                             # cs of the last token
        w = tl.exp(last - cs) * dt                                                # 0 on masked tokens
        S = tl.exp(last) * S + tl.dot(tl.trans(x * w[:, None]), Bc, input_precision="ieee")

    kp = snap_ptr + s * s_ks + h * s_kh + p[:, None] * s_kp + n[None, :] * s_kn
    snap_ok = row & ((n * 0 + K) > 0)[None, :]
    tl.store(kp + tail * s_kr, S.to(snap_ptr.dtype.element_ty), mask=snap_ok)    # r = tail
    for i in range(0, tail):                                                      # RS-16, one token
        t = mid + i
        dt = _dt_eff(dt_ptr, t, h, s_dtt, s_dth, live_mask(t, slot), bias, HAS_BIAS, SOFTPLUS)
        x = tl.load(x_ptr + t * s_xt + h * s_xh + p * s_xp, mask=p_ok, other=0.0).to(tl.float32)
        Bv = tl.load(B_ptr + t * s_bt + g * s_bg + n * s_bn, mask=n_ok, other=0.0).to(tl.float32)
        Cv = tl.load(C_ptr + t * s_ct + g * s_cg + n * s_cn, mask=n_ok, other=0.0).to(tl.float32)
        S = S * tl.exp(dt * A) + (dt * x)[:, None] * Bv[None, :]
        y = tl.sum(S * Cv[None, :], axis=1)
        if HAS_D:
            y += Dh * x
        if HAS_Z:
            y *= silu(tl.load(z_ptr + t * s_zt + h * s_zh + p * s_zp, mask=p_ok, other=0.0).to(tl.float32))
        tl.store(out_ptr + t * s_ot + h * s_oh + p * s_op, tl.where(p_ok, y, 0.0), mask=p_in)
        tl.store(kp + (tail - 1 - i) * s_kr, S.to(snap_ptr.dtype.element_ty), mask=row)
    tl.store(sp, S.to(state_ptr.dtype.element_ty), mask=row)                      # final state (RS-18)


def ssd_chunked_scan_(state, x, dt, A, B, C, cu, idx, has_init, D, z, dt_bias, out, snaps, *,
                      chunk_size: int, dt_softplus: bool):
    """Launch. state [num_slots, H, P, N] float32|float64 (updated in place); x, z [T, H, P]; dt [T, H];
    A, D, dt_bias [H]; B, C [T, G, N]; cu int[S+1]; idx int[S] or None; has_init uint8[S] or None;
    out float32 [T, H, P] (every token written); snaps [S, K, H, P, N] pool dtype, zero-filled."""
    seqs = cu.shape[0] - 1
    _, H, P, N = state.shape
    if seqs == 0 or H == 0 or P == 0:
        return
    G, K = B.shape[1], snaps.shape[1]
    n_pad = max(16, triton.next_power_of_2(max(N, 1)))      # tl.dot needs every dim >= 16
    block_p = max(16, min(triton.next_power_of_2(P), 64))
    block_q = max(16, min(triton.next_power_of_2(chunk_size), 64))
    grid = (seqs, H, triton.cdiv(P, block_p))
    d = x
    _ssd_kernel[grid](
        state, x, dt, A, B, C, D if D is not None else d, z if z is not None else d,
        dt_bias if dt_bias is not None else d, cu, idx if idx is not None else cu,
        has_init if has_init is not None else cu, out, snaps,
        P, N, H // G, K,
        *state.stride(), *x.stride(), *dt.stride(), A.stride(0), *B.stride(), *C.stride(),
        D.stride(0) if D is not None else 0, *(z.stride() if z is not None else (0, 0, 0)),
        dt_bias.stride(0) if dt_bias is not None else 0, cu.stride(0), idx.stride(0) if idx is not None else 0,
        has_init.stride(0) if has_init is not None else 0, *out.stride(), *snaps.stride(),
        BLOCK_Q=block_q, BLOCK_P=block_p, N_PAD=n_pad, HAS_IDX=idx is not None, HAS_INIT=has_init is not None,
        HAS_D=D is not None, HAS_Z=z is not None, HAS_BIAS=dt_bias is not None, SOFTPLUS=dt_softplus)
