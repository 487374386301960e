"""Gated delta rule (GDN) over a slot pool: chunked variable-length prefill and single-token update
(spec/recurrent.md RS-28 … RS-33, with RS-3 … RS-6, RS-17).

Chunked prefill. Grid: (sequence s, state head h, block of BLOCK_V value channels). A program walks its
sequence (tokens cu_seqlens[s]:cu_seqlens[s+1], any stride) in chunks of BT tokens with a
[K_PAD, BLOCK_V] float32 state tile S carried across chunks in registers:

* start (RS-5): the slot's row, or exact zeros *selected* by masking the load when has_initial_state[s]
  is False (a NaN/inf row is never read);
* q/k head h // (H // Hk) (RS-28); optional L2 normalisation x / sqrt(sum x^2 + 1e-6) (RS-29);
* per chunk, the closed (WY / UT-transform) form of RS-33 with tl.dot (input_precision="ieee", so
  float32 stays float32 rather than TF32 on GPUs):
      gam = cumsum(g);  D[i, j] = exp(gam_i - gam_j) for j <= i, else 0
      L   = strictly_lower(beta_i D_ij (k_i . k_j));  T = (I + L)^-1 (forward substitution, BT rows)
      U   = T (beta * (V - exp(gam) * (K S)))           the deltas u_i of RS-30
      out = scale (exp(gam) * (Q S) + ((Q K^T) * D) U)
      S   = exp(gam_last) S + (K * exp(gam_last - gam))^T U
  Chunks start at the sequence's first token and never cross sequences; BT follows the chunk_size hint
  within [16, 64] (RS-33: the chunking may change results only within class R);
* the final state is stored into the row in place (the adapter's copy of the pool), rounded once to the
  pool dtype (RS-6); a length-0 sequence stores its starting state (zeros when fresh, RS-32).

Masked tokens (past the sequence's end) get g = 0, beta = 0 and k = v = q = 0: they add no decay and
write nothing. Padding sequences (slot -1): every load is masked, output tokens are stored as exactly
0.0 (RS-3), the pool is not written (RS-4).

Single-token update. Grid: (row b, state head h, V block); RS-30 in four float32 steps on the row's
[K_PAD, BLOCK_V] tile (decay, delta from the decayed state, rank-1 write, read of the new state).
Padding rows: output 0.0, nothing loaded or stored.
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import live_mask  # noqa: E402


@triton.jit
def _l2norm_rows(x, NORM: tl.constexpr):
    """RS-29 over the last axis of a [R, K_PAD] tile (zero padding adds nothing to the sum)."""
    if NORM:
        x = x / tl.sqrt(tl.sum(x * x, axis=1) + 1e-6)[:, None]
    return x


@triton.jit
def _gdn_chunked_kernel(state_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, cu_ptr, idx_ptr, init_ptr, out_ptr,
                        K, V, heads_per_qk, scale,
                        s_ss, s_sh, s_sk, s_sv, s_qt, s_qh, s_qk, s_kt, s_kh, s_kk, s_vt, s_vh, s_vv,
                        s_gt, s_gh, s_bt, s_bh, s_cu, s_idx, s_init, s_ot, s_oh, s_ov,
                        BT: tl.constexpr, K_PAD: tl.constexpr, BLOCK_V: tl.constexpr,
                        HAS_IDX: tl.constexpr, HAS_INIT: tl.constexpr, NORM: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    c = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    j = tl.arange(0, K_PAD)
    i = tl.arange(0, BT)
    lo = tl.load(cu_ptr + s * s_cu).to(tl.int64)
    hi = tl.load(cu_ptr + (s + 1) * s_cu).to(tl.int64)
    if HAS_IDX:
        slot = tl.load(idx_ptr + s * s_idx).to(tl.int64)
    else:
        slot = s
    read_slot = slot
    if HAS_INIT:
        read_slot = tl.where(tl.load(init_ptr + s * s_init) != 0, slot, -1)   # RS-5: select zeros
    hq = h // heads_per_qk                                                     # RS-28
    c_in = c < V
    c_ok = c_in & live_mask(c, slot)
    j_ok = (j < K) & live_mask(j, slot)
    sp = state_ptr + slot * s_ss + h * s_sh + j[:, None] * s_sk + c[None, :] * s_sv
    read = ((j < K) & live_mask(j, read_slot))[:, None] & c_ok[None, :]
    S = tl.load(sp, mask=read, other=0.0).to(tl.float32)

    causal = i[:, None] >= i[None, :]
    strict = i[:, None] > i[None, :]
    eye = tl.where(i[:, None] == i[None, :], 1.0, 0.0)
    for c0 in range(lo, hi, BT):
        t = c0 + i
        t_ok = (t < hi) & live_mask(i, slot)
        tk = t_ok[:, None] & j_ok[None, :]
        tv = t_ok[:, None] & c_ok[None, :]
        qc = tl.load(q_ptr + t[:, None] * s_qt + hq * s_qh + j[None, :] * s_qk, mask=tk, other=0.0).to(tl.float32)
        kc = tl.load(k_ptr + t[:, None] * s_kt + hq * s_kh + j[None, :] * s_kk, mask=tk, other=0.0).to(tl.float32)
        vc = tl.load(v_ptr + t[:, None] * s_vt + h * s_vh + c[None, :] * s_vv, mask=tv, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + t * s_gt + h * s_gh, mask=t_ok, other=0.0).to(tl.float32)
        beta = tl.load(beta_ptr + t * s_bt + h * s_bh, mask=t_ok, other=0.0).to(tl.float32)
        qc = _l2norm_rows(qc, NORM)
        kc = _l2norm_rows(kc, NORM)
        gam = tl.cumsum(g, axis=0)                                                  # [BT]
        decay = tl.where(causal, tl.exp(tl.where(causal, gam[:, None] - gam[None, :], 0.0)), 0.0)
        kk = tl.dot(kc, tl.trans(kc), input_precision="ieee")                      # [BT, BT]
        Lm = tl.where(strict, beta[:, None] * decay * kk, 0.0)
        # UT transform: T = (I + L)^-1 by forward substitution, row r = e_r - L[r, :] T (rows < r done).
        T = eye
        for r in range(1, BT):
            l_row = tl.sum(tl.where(i[:, None] == r, Lm, 0.0), axis=0)              # L[r, :]
            new = tl.where(i == r, 1.0, 0.0) - tl.sum(l_row[:, None] * T, axis=0)
            T = tl.where(i[:, None] == r, new[None, :], T)
        ks = tl.dot(kc, S, input_precision="ieee")                                  # [BT, BLOCK_V]
        rhs = beta[:, None] * (vc - tl.exp(gam)[:, None] * ks)
        U = tl.dot(T, rhs, input_precision="ieee")                                  # deltas u_i
        qk = tl.dot(qc, tl.trans(kc), input_precision="ieee") * decay
        y = tl.exp(gam)[:, None] * tl.dot(qc, S, input_precision="ieee") + tl.dot(qk, U, input_precision="ieee")
        y = tl.where(tv, y * scale, 0.0)                                            # RS-3 for padding
        tl.store(out_ptr + t[:, None] * s_ot + h * s_oh + c[None, :] * s_ov, y,
                 mask=(t < hi)[:, None] & c_in[None, :])
        last = tl.sum(g, axis=0)                                                    # gam of the last token
        w = tl.where(t_ok, tl.exp(last - gam), 0.0)
        S = tl.exp(last) * S + tl.dot(tl.trans(kc * w[:, None]), U, input_precision="ieee")
    tl.store(sp, S.to(state_ptr.dtype.element_ty), mask=j_ok[:, None] & c_ok[None, :])   # RS-32


@triton.jit
def _gdn_update_kernel(state_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
                       K, V, heads_per_qk, scale,
                       s_ss, s_sh, s_sk, s_sv, s_qb, s_qh, s_qk, s_kb, s_kh, s_kk, s_vb, s_vh, s_vv,
                       s_gb, s_gh, s_bb, s_bh, s_idx, s_ob, s_oh, s_ov,
                       K_PAD: tl.constexpr, BLOCK_V: tl.constexpr, HAS_IDX: tl.constexpr, NORM: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    c = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    j = tl.arange(0, K_PAD)
    if HAS_IDX:
        slot = tl.load(idx_ptr + b * s_idx).to(tl.int64)
    else:
        slot = b
    hq = h // heads_per_qk
    c_in = c < V
    c_ok = c_in & live_mask(c, slot)
    j_ok = (j < K) & live_mask(j, slot)
    row = j_ok[:, None] & c_ok[None, :]
    sp = state_ptr + slot * s_ss + h * s_sh + j[:, None] * s_sk + c[None, :] * s_sv
    S = tl.load(sp, mask=row, other=0.0).to(tl.float32)
    q = tl.load(q_ptr + b * s_qb + hq * s_qh + j * s_qk, mask=j_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + b * s_kb + hq * s_kh + j * s_kk, mask=j_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + b * s_vb + h * s_vh + c * s_vv, mask=c_ok, other=0.0).to(tl.float32)
    live = live_mask(j, slot)
    g = tl.sum(tl.where(j == 0, tl.load(g_ptr + b * s_gb + h * s_gh + j * 0, mask=live, other=0.0), 0.0),
               axis=0).to(tl.float32)
    beta = tl.sum(tl.where(j == 0, tl.load(beta_ptr + b * s_bb + h * s_bh + j * 0, mask=live, other=0.0), 0.0),
                  axis=0).to(tl.float32)
    if NORM:
        q = q / tl.sqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k / tl.sqrt(tl.sum(k * k, axis=0) + 1e-6)
    S = tl.exp(g) * S                                                   # 1. decay
    u = beta * (v - tl.sum(S * k[:, None], axis=0))                     # 2. delta from the decayed state
    S = S + k[:, None] * u[None, :]                                     # 3. write
    y = scale * tl.sum(S * q[:, None], axis=0)                          # 4. read the new state
    tl.store(out_ptr + b * s_ob + h * s_oh + c * s_ov, tl.where(c_ok, y, 0.0), mask=c_in)
    tl.store(sp, S.to(state_ptr.dtype.element_ty), mask=row)


def gated_delta_rule_chunked_(state, q, k, v, g, beta, cu, idx, has_init, out, *, scale: float,
                              chunk_size: int, norm: bool):
    """Launch. state [num_slots, H, K, V] float32|float64 (updated in place); q, k [T, Hk, K];
    v [T, H, V]; g, beta [T, H]; cu int[S+1]; idx int[S] or None; has_init uint8[S] or None;
    out float32 [T, H, V] (every token written)."""
    seqs = cu.shape[0] - 1
    _, H, K, V = state.shape
    if seqs == 0 or H == 0 or V == 0:
        return
    k_pad = max(16, triton.next_power_of_2(max(K, 1)))     # tl.dot needs every dim >= 16
    block_v = max(16, min(triton.next_power_of_2(V), 64))
    bt = max(16, min(triton.next_power_of_2(chunk_size), 64))
    grid = (seqs, H, triton.cdiv(V, block_v))
    _gdn_chunked_kernel[grid](
        state, q, k, v, g, beta, cu, idx if idx is not None else cu, has_init if has_init is not None else cu, out,
        K, V, H // q.shape[1], float(scale),
        *state.stride(), *q.stride(), *k.stride(), *v.stride(), *g.stride(), *beta.stride(), cu.stride(0),
        idx.stride(0) if idx is not None else 0, has_init.stride(0) if has_init is not None else 0,
        *out.stride(),
        BT=bt, K_PAD=k_pad, BLOCK_V=block_v, HAS_IDX=idx is not None, HAS_INIT=has_init is not None, NORM=norm)


def gated_delta_rule_update_(state, q, k, v, g, beta, idx, out, *, scale: float, norm: bool):
    """Launch. state [num_slots, H, K, V] (updated in place); q, k [B, Hk, K]; v [B, H, V]; g, beta [B, H];
    idx int[B] or None; out float32 [B, H, V] (every row written)."""
    rows = v.shape[0]
    _, H, K, V = state.shape
    if rows == 0 or H == 0 or V == 0:
        return
    k_pad = triton.next_power_of_2(max(K, 1))
    block_v = min(triton.next_power_of_2(V), 64)
    grid = (rows, H, triton.cdiv(V, block_v))
    _gdn_update_kernel[grid](
        state, q, k, v, g, beta, idx if idx is not None else g, out,
        K, V, H // q.shape[1], float(scale),
        *state.stride(), *q.stride(), *k.stride(), *v.stride(), *g.stride(), *beta.stride(),
        idx.stride(0) if idx is not None else 0, *out.stride(),
        K_PAD=k_pad, BLOCK_V=block_v, HAS_IDX=idx is not None, NORM=norm)
