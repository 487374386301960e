"""Causal depthwise conv1d update over a slot pool of windows (spec/recurrent.md RS-10 .. RS-12).

Grid: (batch row b, block of BLOCK_C channels). A program reads its row's slot through state_indices
(any stride), and for each of the T new tokens forms the W-wide window [state | x_0 .. x_{T-1}] as a
[BLOCK_C, W_PAD] tile: columns left of W-1 come from the pool row, the rest from x (RS-11). The taps are
loaded once. Accumulation is float32; the output is float32.

State (RS-12): the new row is window columns T .. T+W-2. Those values are *copies* -- pool values in the
pool dtype, or x converted once to the pool dtype -- never passed through float32, so the row is exact
(NU-R1) for float64 pools too. The row is read and written in place (the adapter passes a copy of the
pool); every load of the row happens before its store, and programs own disjoint channel blocks.

Padding rows (slot -1, RS-3): no load touches the pool or x (all masked), the output is stored as 0.0
and nothing is written to the pool.
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import live_mask, silu  # noqa: E402


@triton.jit
def _conv1d_update_kernel(x_ptr, state_ptr, w_ptr, bias_ptr, idx_ptr, out_ptr,
                          T, C, stride_xb, stride_xt, stride_xc,
                          stride_ss, stride_sc, stride_sw, stride_wc, stride_ww, stride_bias, stride_idx,
                          stride_ob, stride_ot, stride_oc,
                          W: tl.constexpr, W_PAD: tl.constexpr, S_PAD: tl.constexpr, BLOCK_C: tl.constexpr,
                          HAS_BIAS: tl.constexpr, SILU: tl.constexpr, HAS_IDX: tl.constexpr):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    if HAS_IDX:
        slot = tl.load(idx_ptr + b * stride_idx).to(tl.int64)
    else:
        slot = b.to(tl.int64)       # RS-2: None means row b uses slot b
    live = live_mask(tl.arange(0, W_PAD), slot)   # over the window columns
    srow = state_ptr + slot * stride_ss
    xrow = x_ptr + b.to(tl.int64) * stride_xb
    j = tl.arange(0, W_PAD)
    wt = tl.load(w_ptr + c[:, None] * stride_wc + j[None, :] * stride_ww,
                 mask=c_ok[:, None] & (j < W)[None, :], other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c * stride_bias, mask=c_ok, other=0.0).to(tl.float32)
    else:
        bias = tl.zeros([BLOCK_C], tl.float32)
    for t in range(0, T):
        col = t + j                                   # window column of tap j for token t
        from_s = live & (j < W) & (col < W - 1)
        from_x = live & (j < W) & (col >= W - 1)
        m_s = c_ok[:, None] & from_s[None, :]
        m_x = c_ok[:, None] & from_x[None, :]
        sv = tl.load(srow + c[:, None] * stride_sc + col[None, :] * stride_sw, mask=m_s, other=0.0)
        xv = tl.load(xrow + (col - (W - 1))[None, :] * stride_xt + c[:, None] * stride_xc, mask=m_x, other=0.0)
        win = tl.where(m_s, sv.to(tl.float32), xv.to(tl.float32))
        acc = tl.sum(win * wt, axis=1) + bias          # RS-11 (summation order unspecified, RS-8)
        if SILU:
            acc = silu(acc)
        acc = tl.where(live_mask(c, slot), acc, 0.0)   # RS-3: padding outputs are exactly 0.0
        tl.store(out_ptr + b.to(tl.int64) * stride_ob + t * stride_ot + c * stride_oc, acc, mask=c_ok)
    # RS-12: new row column i = window column T + i; copies in the pool dtype (exact).
    i = tl.arange(0, S_PAD)
    src = T + i
    keep = live_mask(i, slot) & (i < W - 1)
    m_s = c_ok[:, None] & (keep & (src < W - 1))[None, :]
    m_x = c_ok[:, None] & (keep & (src >= W - 1))[None, :]
    sv = tl.load(srow + c[:, None] * stride_sc + src[None, :] * stride_sw, mask=m_s, other=0.0)
    xv = tl.load(xrow + (src - (W - 1))[None, :] * stride_xt + c[:, None] * stride_xc, mask=m_x, other=0.0)
    new = tl.where(m_s, sv, xv.to(state_ptr.dtype.element_ty))
    tl.store(srow + c[:, None] * stride_sc + i[None, :] * stride_sw, new, mask=m_s | m_x)


def conv1d_update_(x, state, weight, bias, idx, out, *, silu: bool):
    """Launch. x [B, T, C] (any float dtype, any strides); state [num_slots, C, W-1] float32|float64,
    updated in place; weight [C, W]; bias [C] or None; idx int[B] (a strided view is fine) or None;
    out float32 [B, T, C] written for every row (zeros for padding rows)."""
    B, T, C = x.shape
    W = weight.shape[1]
    if B == 0 or C == 0:
        return
    w_pad = triton.next_power_of_2(W)
    block_c = max(1, min(triton.next_power_of_2(C), 4096 // w_pad, 256))
    grid = (B, triton.cdiv(C, block_c))
    _conv1d_update_kernel[grid](
        x, state, weight, bias if bias is not None else weight, idx if idx is not None else weight, out,
        T, C, *x.stride(), *state.stride(), *weight.stride(), bias.stride(0) if bias is not None else 0,
        idx.stride(0) if idx is not None else 0, *out.stride(),
        W=W, W_PAD=w_pad, S_PAD=triton.next_power_of_2(max(1, W - 1)), BLOCK_C=block_c,
        HAS_BIAS=bias is not None, SILU=silu, HAS_IDX=idx is not None)
