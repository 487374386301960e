"""Selective state update, one token per batch row: Mamba1 and multi-head Mamba2 (RS-14 .. RS-16).

Both forms run one kernel on the general layout state [num_slots, H, P, N]: Mamba1 is one head of
P = D channels. Per-head vs per-channel parameters differ only in strides, so the same arithmetic
serves both: dt is [B, H, P] with stride_dtp = 0 for Mamba2 ([B, H]); A is [H, P, N] with strides
(1, 0, 0) for Mamba2 ([H]) and (0, sD, sN) for Mamba1 ([D, N]); D and dt_bias are [H, P] likewise.
B and C are [B, G, N] (Mamba1: G = 1); head h reads group h // (H // G) (RS-16, repeat_interleave).

Grid: (batch row b, head h, block of BLOCK_P channels). A program loads its [BLOCK_P, N] tile of the
row (float32 math), applies S <- S * exp(dt' A) + (dt' x) B^T, reads y = S_new C + D x, gates by
silu(z), and stores the tile back into the same row (in place on the adapter's copy of the pool,
rounded once to the pool dtype, RS-6). Programs own disjoint tiles; the load precedes the store.

Bandwidth: the state is the only large operand, read once and written once in one pass (the loads
and stores are marked evict_first, so the small per-row operands x, B, C, dt stay cached for the other
heads of the row). With A constant per head (Mamba2, A_PER_ROW), the decay exp(dt' A) is one value per
channel, computed on the [BLOCK_P] vector instead of the [BLOCK_P, N] tile, and A is never loaded as a
tile (the same values: the result is bit-identical). Tiles hold about 4096 state elements; the unit
stride of N is specialised by Triton, so state rows load as wide vectors.
Padding rows (slot -1): every load is masked, the output is stored as exactly 0.0, the pool is not
written (RS-3, RS-4).
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import live_mask, silu, softplus  # noqa: E402


@triton.jit
def _ssu_kernel(state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, idx_ptr, out_ptr,
                P, N, heads_per_group,
                s_ss, s_sh, s_sp, s_sn, s_xb, s_xh, s_xp, s_db, s_dh, s_dp, s_ah, s_ap, s_an,
                s_bb, s_bg, s_bn, s_cb, s_cg, s_cn, s_Dh, s_Dp, s_zb, s_zh, s_zp, s_biash, s_biasp,
                s_idx, s_ob, s_oh, s_op,
                BLOCK_P: tl.constexpr, N_PAD: tl.constexpr, HAS_IDX: tl.constexpr, HAS_D: tl.constexpr,
                HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, A_PER_ROW: tl.constexpr):
    """A_PER_ROW: A's strides along P and N are 0 (Mamba2: one A per head), so the decay is per channel."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, N_PAD)
    if HAS_IDX:
        slot = tl.load(idx_ptr + b * s_idx).to(tl.int64)
    else:
        slot = b
    p_ok = (p < P) & live_mask(p, slot)
    n_ok = (n < N) & live_mask(n, slot)
    tile = p_ok[:, None] & n_ok[None, :]
    g = h // heads_per_group
    x = tl.load(x_ptr + b * s_xb + h * s_xh + p * s_xp, mask=p_ok, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + b * s_db + h * s_dh + p * s_dp, mask=p_ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        dt += tl.load(bias_ptr + h * s_biash + p * s_biasp, mask=p_ok, other=0.0).to(tl.float32)
    if SOFTPLUS:
        dt = softplus(dt)                                  # RS-14 / RS-9, no clamp
    Bv = tl.load(B_ptr + b * s_bb + g * s_bg + n * s_bn, mask=n_ok, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + b * s_cb + g * s_cg + n * s_cn, mask=n_ok, other=0.0).to(tl.float32)
    sp = state_ptr + slot * s_ss + h * s_sh + p[:, None] * s_sp + n[None, :] * s_sn
    S = tl.load(sp, mask=tile, other=0.0, eviction_policy="evict_first").to(tl.float32)
    if A_PER_ROW:
        A = tl.load(A_ptr + h * s_ah + p * 0, mask=p_ok, other=0.0).to(tl.float32)
        S = S * tl.exp(dt * A)[:, None] + (dt * x)[:, None] * Bv[None, :]      # RS-16
    else:
        A = tl.load(A_ptr + h * s_ah + p[:, None] * s_ap + n[None, :] * s_an, mask=tile, other=0.0).to(tl.float32)
        S = S * tl.exp(dt[:, None] * A) + (dt * x)[:, None] * Bv[None, :]      # RS-15
    y = tl.sum(S * Cv[None, :], axis=1)                                    # uses the new S
    if HAS_D:
        y += tl.load(D_ptr + h * s_Dh + p * s_Dp, mask=p_ok, other=0.0).to(tl.float32) * x
    if HAS_Z:
        y *= silu(tl.load(z_ptr + b * s_zb + h * s_zh + p * s_zp, mask=p_ok, other=0.0).to(tl.float32))
    y = tl.where(p_ok, y, 0.0)                                             # RS-3
    tl.store(out_ptr + b * s_ob + h * s_oh + p * s_op, y, mask=p < P)
    tl.store(sp, S.to(state_ptr.dtype.element_ty), mask=tile, eviction_policy="evict_first")   # RS-6


def selective_state_update_(state, x, dt, A, B, C, D, z, dt_bias, idx, out, *, dt_softplus: bool):
    """Launch on the general layout (see the module docstring; the adapter builds the views).

    state [num_slots, H, P, N] float32|float64, updated in place; x, z, dt, out [B, H, P] (dt, z any
    strides, stride 0 allowed); A [H, P, N]; B, C [B, G, N]; D, dt_bias [H, P] or None; idx int[B] or
    None; out float32."""
    batch, heads, P = x.shape
    N, groups = state.shape[3], B.shape[1]
    if batch == 0 or heads == 0 or P == 0:
        return
    n_pad = triton.next_power_of_2(max(N, 1))
    block_p = max(1, min(triton.next_power_of_2(P), max(1, 4096 // n_pad), 128))
    grid = (batch, heads, triton.cdiv(P, block_p))
    dummy = x
    _ssu_kernel[grid](
        state, x, dt, A, B, C, D if D is not None else dummy, z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy, idx if idx is not None else dummy, out,
        P, N, heads // groups,
        *state.stride(), *x.stride(), *dt.stride(), *A.stride(), *B.stride(), *C.stride(),
        *(D.stride() if D is not None else (0, 0)), *(z.stride() if z is not None else (0, 0, 0)),
        *(dt_bias.stride() if dt_bias is not None else (0, 0)), idx.stride(0) if idx is not None else 0,
        *out.stride(),
        BLOCK_P=block_p, N_PAD=n_pad, HAS_IDX=idx is not None, HAS_D=D is not None, HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None, SOFTPLUS=dt_softplus, A_PER_ROW=A.stride(1) == 0 and A.stride(2) == 0)
