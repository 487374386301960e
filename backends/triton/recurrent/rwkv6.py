"""RWKV6 wkv over packed variable-length sequences and a slot pool (RS-20, with RS-3 .. RS-6, RS-17).

Grid: (sequence s, head h, block of BLOCK_V value channels). A program walks its sequence (tokens
cu_seqlens[s]:cu_seqlens[s+1], read through any stride) one token at a time with a [K_PAD, BLOCK_V]
float32 state tile S (rows k, columns v); each token's products and sums run in float64 and are
rounded once (see the loop for why):

* start (RS-5): the slot's row, or exact zeros *selected* by masking the load when
  has_initial_state[s] is False (a NaN/inf row is never read);
* per token (RS-20, scale 1, w the decay multiplier):
      y[v] = sum_k r[k] (S[k, v] + u[k] k[k] v[v]);   S <- w[k] S[k, v] + k[k] v[v]
  the output reads the state *before* the token, so the bonus u stands in for the current token;
* the final state is stored into the row in place (the adapter's copy of the pool), rounded once to the
  pool dtype (RS-6); a length-0 sequence stores its starting state (zeros when fresh).

Every value-channel block reads the whole key dimension, so blocks are independent (no reduction
across programs). Padding sequences (slot -1): every load is masked, their output tokens are stored as
exactly 0.0 (RS-3), the pool is not written (RS-4).
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import live_mask  # noqa: E402


@triton.jit
def _wkv6_kernel(state_ptr, r_ptr, k_ptr, v_ptr, w_ptr, u_ptr, cu_ptr, idx_ptr, init_ptr, out_ptr,
                 K, V,
                 s_ss, s_sh, s_sk, s_sv, s_rt, s_rh, s_rk, s_kt, s_kh, s_kk, s_vt, s_vh, s_vv,
                 s_wt, s_wh, s_wk, s_uh, s_uk, s_cu, s_idx, s_init, s_ot, s_oh, s_ov,
                 BLOCK_V: tl.constexpr, K_PAD: tl.constexpr, HAS_IDX: tl.constexpr, HAS_INIT: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    c = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    j = tl.arange(0, K_PAD)
    lo = tl.load(cu_ptr + s * s_cu).to(tl.int64)
    hi = tl.load(cu_ptr + (s + 1) * s_cu).to(tl.int64)
    if HAS_IDX:
        slot = tl.load(idx_ptr + s * s_idx).to(tl.int64)
    else:
        slot = s
    read_slot = slot
    if HAS_INIT:
        read_slot = tl.where(tl.load(init_ptr + s * s_init) != 0, slot, -1)   # RS-5: select zeros
    c_in = c < V
    c_ok = c_in & live_mask(c, slot)          # padding: no token value is ever loaded (may be NaN)
    j_ok = (j < K) & live_mask(j, slot)
    row = j_ok[:, None] & c_ok[None, :]
    sp = state_ptr + slot * s_ss + h * s_sh + j[:, None] * s_sk + c[None, :] * s_sv
    read = ((j < K) & live_mask(j, read_slot))[:, None] & c_ok[None, :]
    S = tl.load(sp, mask=read, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + h * s_uh + j * s_uk, mask=j_ok, other=0.0).to(tl.float64)

    # The state tile is carried in float32 between tokens, but each token's arithmetic runs in float64
    # (exact upcasts of the inputs) and is rounded once: the output once to float32, the new state once
    # to float32. Why: for short sequences (n = L_s * K of a few terms) NU-6's aggregate check asks for an
    # error within ~1/2 ulp, which the 3-4 chained float32 roundings of k v, u k v, S + ..., r (...) miss.
    for t in range(lo, hi):
        r = tl.load(r_ptr + t * s_rt + h * s_rh + j * s_rk, mask=j_ok, other=0.0).to(tl.float64)
        kk = tl.load(k_ptr + t * s_kt + h * s_kh + j * s_kk, mask=j_ok, other=0.0).to(tl.float64)
        w = tl.load(w_ptr + t * s_wt + h * s_wh + j * s_wk, mask=j_ok, other=0.0).to(tl.float64)
        v = tl.load(v_ptr + t * s_vt + h * s_vh + c * s_vv, mask=c_ok, other=0.0).to(tl.float64)
        S64 = S.to(tl.float64)
        kv = kk[:, None] * v[None, :]                                              # [K_PAD, BLOCK_V]
        y = tl.sum(r[:, None] * (S64 + u[:, None] * kv), axis=0)                   # reads S before update
        tl.store(out_ptr + t * s_ot + h * s_oh + c * s_ov, tl.where(c_ok, y, 0.0).to(tl.float32), mask=c_in)
        S = (w[:, None] * S64 + kv).to(tl.float32)
    tl.store(sp, S.to(state_ptr.dtype.element_ty), mask=row)                       # final state (RS-20)


def rwkv6_wkv_(state, r, k, v, w, u, cu, idx, has_init, out):
    """Launch. state [num_slots, H, K, V] float32|float64 (updated in place); r, k, w [T, H, K];
    v [T, H, V]; u [H, K]; cu int[S+1]; idx int[S] or None; has_init uint8[S] or None;
    out float32 [T, H, V] (every token written)."""
    seqs = cu.shape[0] - 1
    _, H, K, V = state.shape
    if seqs == 0 or H == 0 or V == 0:
        return
    k_pad = triton.next_power_of_2(max(K, 1))
    block_v = min(triton.next_power_of_2(V), 64)
    grid = (seqs, H, triton.cdiv(V, block_v))
    _wkv6_kernel[grid](
        state, r, k, v, w, u, cu, idx if idx is not None else cu, has_init if has_init is not None else cu, out,
        K, V,
        *state.stride(), *r.stride(), *k.stride(), *v.stride(), *w.stride(), *u.stride(), cu.stride(0),
        idx.stride(0) if idx is not None else 0, has_init.stride(0) if has_init is not None else 0,
        *out.stride(),
        BLOCK_V=block_v, K_PAD=k_pad, HAS_IDX=idx is not None, HAS_INIT=has_init is not None)
