"""Permission `recurrent_float32` (RS-8, NU-R2, NU-R2g): the token-by-token recurrent kernels in float32.

Every input converted to float32, every product and sum a float32 operation (sums in reverse order, one
rounding per term), the state held in float32 between tokens of one call, outputs returned in the
activations' dtype (the required precision, NU-3) and written state rows rounded to the pool's dtype.
Conv windows are copies (class E, RS-12): they are moved exactly, as every kernel must.
"""
from __future__ import annotations

import numpy as np

from kvconform.reference.recurrent.conv1d import ConvUpdate, validate_causal_conv1d_update
from kvconform.reference.recurrent.gated_delta import (GatedDeltaScan, GatedDeltaUpdate, L2NORM_EPS, qk_heads,
                                                        validate_gated_delta_rule_chunked,
                                                        validate_gated_delta_rule_update)
from kvconform.reference.recurrent.selective_state import (SelectiveStateUpdate, head_groups,
                                                            validate_selective_state_update)
from kvconform.reference.recurrent.slots import gather_rows, scatter_rows

from . import Permission, permission
from .recurrent import _padding_tokens, _softplus32

F32 = np.float32


def _rsum(x, axis: int):
    """float32 sum along `axis`, last term first, one rounding per term."""
    x = np.flip(x.astype(F32), axis=axis)
    return np.take(np.cumsum(x, axis=axis, dtype=F32), -1, axis=axis) if x.shape[axis] else \
        np.zeros(np.delete(x.shape, axis), F32)


def _silu32(x):
    x = x.astype(F32)
    with np.errstate(over="ignore"):
        return (x / (F32(1) + np.exp(-x))).astype(F32)


@permission(id=("recurrent_float32", "chunk_size_ignored", "output_in_required_precision"),
            ops=("causal_conv1d_update", "selective_state_update", "gated_delta_rule_update",
                 "gated_delta_rule_chunked"),
            clause="RS-8, NU-3, NU-R2, NU-R2g",
            description="float32 arithmetic, sums last term first, state in float32 between tokens, outputs "
                        "in the activations' dtype (gated delta rule chunked: token by token, chunk_size ignored)")
class RecurrentFloat32(Permission):
    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        call = validate_causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                             state_indices=state_indices)
        act = np.asarray(x).dtype
        idx, steps, width = call.state_indices, call.x.shape[1], call.weight.shape[1]
        start = gather_rows(call.conv_state, idx, np.ones(idx.shape[0], dtype=bool))
        win = np.concatenate([start, np.swapaxes(call.x, 1, 2)], axis=2)              # exact, float64
        w32, win32 = call.weight.astype(F32), win.astype(F32)
        out = np.zeros(call.x.shape, F32)
        for t in range(steps):
            acc = _rsum(win32[:, :, t:t + width] * w32[None], axis=2)
            if call.bias is not None:
                acc = (acc + call.bias.astype(F32)).astype(F32)
            out[:, t] = _silu32(acc) if call.activation == "silu" else acc
        out[idx < 0] = 0.0
        out = out[:, 0] if call.single else out
        return ConvUpdate(out.astype(act), scatter_rows(call.conv_state, idx, win[:, :, steps:]))

    def selective_state_update(self, state, x, dt, A, B, C, **kw):
        call = validate_selective_state_update(state, x, dt, A, B, C, **kw)
        act, idx, pool = np.asarray(x).dtype, call.state_indices, call.state
        f = {n: None if getattr(call, n) is None else getattr(call, n).astype(F32)
             for n in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")}
        dtp = f["dt"] if f["dt_bias"] is None else (f["dt"] + f["dt_bias"]).astype(F32)
        if call.dt_softplus:
            dtp = _softplus32(dtp)
        if pool.ndim == 3:      # Mamba1: one head of P = D channels
            x4, dt4, A4 = f["x"][:, None], dtp[:, None], f["A"][None]
            Bh, Ch = f["B"][:, None], f["C"][:, None]
            D4 = None if f["D"] is None else f["D"][None]
            z4 = None if f["z"] is None else f["z"][:, None]
        else:
            _, heads, p, n = pool.shape
            g = head_groups(heads, call.B.shape[1])
            x4, dt4 = f["x"], np.broadcast_to(dtp[..., None], call.x.shape)
            A4 = np.broadcast_to(f["A"][:, None, None], (heads, p, n))
            Bh, Ch = f["B"][:, g], f["C"][:, g]
            D4 = None if f["D"] is None else np.broadcast_to(f["D"][:, None], (heads, p))
            z4 = f["z"]
        S = gather_rows(pool, idx, np.ones(idx.shape[0], dtype=bool)).astype(F32)
        S = S[:, None] if pool.ndim == 3 else S
        with np.errstate(under="ignore"):
            decay = np.exp((dt4[..., None] * A4[None]).astype(F32)).astype(F32)
        S = (S * decay + ((dt4 * x4)[..., None] * Bh[:, :, None, :]).astype(F32)).astype(F32)
        y = _rsum(S * Ch[:, :, None, :], axis=-1)
        if D4 is not None:
            y = (y + D4[None] * x4).astype(F32)
        if z4 is not None:
            y = (y * _silu32(z4)).astype(F32)
        if pool.ndim == 3:
            y, S = y[:, 0], S[:, 0]
        y[idx < 0] = 0.0
        return SelectiveStateUpdate(y.astype(act), scatter_rows(pool, idx, S.astype(np.float64)))

    def gated_delta_rule_update(self, q, k, v, g, beta, state, **kw):
        call = validate_gated_delta_rule_update(q, k, v, g, beta, state, **kw)
        idx = call.state_indices
        S = gather_rows(call.state, idx, np.ones(idx.shape[0], dtype=bool)).astype(F32)
        qh, kh = _qk32(call)
        out = np.zeros(call.v.shape, F32)
        for b in np.flatnonzero(idx >= 0):
            out[b], S[b] = _gdn_step32(S[b], qh[b], kh[b], call.v[b].astype(F32), call.g[b].astype(F32),
                                       call.beta[b].astype(F32), F32(call.scale))
        return GatedDeltaUpdate(out.astype(np.asarray(v).dtype), scatter_rows(call.state, idx, S.astype(np.float64)))

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        call = validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        idx, cu = call.state_indices, call.cu_seqlens
        S_all = gather_rows(call.state, idx, call.has_initial_state).astype(F32)
        qh, kh = _qk32(call)
        v32, g32, b32 = call.v.astype(F32), call.g.astype(F32), call.beta.astype(F32)
        out = np.zeros(call.v.shape, F32)
        for s in np.flatnonzero(idx >= 0):
            S = S_all[s]
            for t in range(int(cu[s]), int(cu[s + 1])):
                out[t], S = _gdn_step32(S, qh[t], kh[t], v32[t], g32[t], b32[t], F32(call.scale))
            S_all[s] = S
        out[_padding_tokens(cu, idx)] = 0.0
        return GatedDeltaScan(out.astype(np.asarray(v).dtype),
                              scatter_rows(call.state, idx, S_all.astype(np.float64)))


def _qk32(call):
    """q, k per state head [R, H, K] in float32, L2-normalised in float32 when asked (RS-29)."""
    q, k = call.q.astype(F32), call.k.astype(F32)
    if call.use_qk_l2norm:
        with np.errstate(over="ignore"):
            q, k = ((x / np.sqrt(_rsum(x * x, -1) + F32(L2NORM_EPS))[..., None]).astype(F32) for x in (q, k))
    heads = qk_heads(call.v.shape[1], q.shape[1])
    return q[:, heads], k[:, heads]


def _gdn_step32(S, q, k, v, g, beta, scale):
    """RS-30 in float32. S [H, K, V]; q, k [H, K]; v [H, V]; g, beta [H]. Returns (out [H, V], S)."""
    S = (np.exp(g)[:, None, None] * S).astype(F32)
    u = (beta[:, None] * (v - _rsum(S * k[:, :, None], 1))).astype(F32)
    S = (S + k[:, :, None] * u[:, None, :]).astype(F32)
    return (scale * _rsum(S * q[:, :, None], 1)).astype(F32), S
