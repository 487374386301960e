"""Permissions of the recurrent family (RS-8, RS-18, RS-20, RS-36, RS-44; NU-R2).

- `PaddingOutputsNan`: claims RS-36's `padding_outputs: "unspecified"` and writes NaN in every padding
  row's outputs (and a padding sequence's snapshots): what `torch.empty_like` leaves.
- `SsdChunkedFloat32`: the SSD scan in float32 in the chunked closed form of RS-18, the way Triton and CUDA
  SSD kernels compute it (mamba_ssm `ssd_chunk_scan.py`, vLLM's copy): float32 softplus with the threshold
  of RS-9, float32 prefix sums of `dt' A`, decays `exp(cs_i - cs_j)`, float32 matrix products, the state
  carried between chunks in float32; outputs in the activations' dtype.
- `RwkvLogDecays`: RWKV6 in float32 taking log decays (RS-20: "a backend taking log-decay converts"):
  `log w` in float32, each step `S <- exp(log w) S + k v^T`; it claims RS-44's `decays: "positive"` since
  `log 0 = -inf` is no decay a log-space kernel can take.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kvconform import reference
from kvconform.reference.recurrent.rwkv6 import WKV6, validate_rwkv6_wkv
from kvconform.reference.recurrent.slots import gather_rows, scatter_rows
from kvconform.reference.recurrent.ssd_scan import SSDScan, validate_ssd_chunked_scan

from . import Permission, permission

F32 = np.float32
KERNEL_OPS = ("causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv",
              "gated_delta_rule_update", "gated_delta_rule_chunked")


def _with_limits(claims, ops, limits: dict):
    return {op: (dataclasses.replace(c, limits={**c.limits, **limits}) if op in ops else c)
            for op, c in claims.items()}


def _padding_tokens(cu, idx) -> np.ndarray:
    """Token indices of padding sequences (state_indices -1, RS-3)."""
    cu, idx = np.asarray(cu), np.asarray(idx)
    return np.concatenate([np.arange(cu[s], cu[s + 1]) for s in np.flatnonzero(idx < 0)] + [np.zeros(0, int)])


@permission(id="padding_outputs_unspecified", ops=KERNEL_OPS, clause="RS-36, RS-3",
            description="claims padding_outputs 'unspecified' and writes NaN in padding rows' outputs and "
                        "snapshots (what torch.empty_like leaves)")
class PaddingOutputsNan(Permission):
    def capabilities(self):
        return _with_limits(super().capabilities(), KERNEL_OPS, {"padding_outputs": "unspecified"})

    @staticmethod
    def _nan_at(result, field: str, rows):
        arr = np.array(getattr(result, field), dtype=np.float64, copy=True)
        arr[rows] = np.nan
        return result._replace(**{field: arr})

    def _per_row(self, name, *args, **kw):
        result = getattr(reference, name)(*args, **kw)
        idx = kw.get("state_indices")
        return result if idx is None else self._nan_at(result, "out", np.asarray(idx) < 0)

    def causal_conv1d_update(self, *args, **kw):
        return self._per_row("causal_conv1d_update", *args, **kw)

    def selective_state_update(self, *args, **kw):
        return self._per_row("selective_state_update", *args, **kw)

    def gated_delta_rule_update(self, *args, **kw):
        return self._per_row("gated_delta_rule_update", *args, **kw)

    def _packed(self, name, *args, **kw):
        result = getattr(reference, name)(*args, **kw)
        idx = kw.get("state_indices")
        if idx is None:
            return result
        cu = kw["cu_seqlens"] if "cu_seqlens" in kw else args[6]     # the 7th argument of all three ops
        result = self._nan_at(result, "out", _padding_tokens(cu, idx))
        if "snapshots" in result._fields and result.snapshots.size:
            result = self._nan_at(result, "snapshots", np.asarray(idx) < 0)
        return result

    def ssd_chunked_scan(self, *args, **kw):
        return self._packed("ssd_chunked_scan", *args, **kw)

    def rwkv6_wkv(self, *args, **kw):
        return self._packed("rwkv6_wkv", *args, **kw)

    def gated_delta_rule_chunked(self, *args, **kw):
        return self._packed("gated_delta_rule_chunked", *args, **kw)


def _softplus32(x):
    """RS-9 in float32: x past 20, else log1p(exp(x)) (float32 log1p keeps softplus(-30) = 9.4e-14)."""
    x = x.astype(F32)
    with np.errstate(over="ignore"):
        return np.where(x > F32(20), x, np.log1p(np.exp(x))).astype(F32)


@permission(id=("ssd_chunked_float32", "output_in_required_precision"), ops="ssd_chunked_scan",
            clause="RS-8, RS-18, NU-R2",
            description="the chunked closed form of RS-18 in float32 (prefix sums of dt' A, decays "
                        "exp(cs_i - cs_j), float32 products, state carried in float32), chunk = the hint")
class SsdChunkedFloat32(Permission):
    own_chunk = 0     # 0: the hint

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, **kw):
        call = validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)
        if self.own_chunk:
            call = call._replace(chunk_size=self.own_chunk)
        act = np.asarray(x).dtype
        f = {name: None if getattr(call, name) is None else getattr(call, name).astype(F32)
             for name in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")}
        dtp = f["dt"] if f["dt_bias"] is None else (f["dt"] + f["dt_bias"]).astype(F32)
        if call.dt_softplus:
            dtp = _softplus32(dtp)
        cu, idx = call.cu_seqlens, call.state_indices
        seqs, (_, H, P, N) = cu.shape[0] - 1, call.state.shape
        group = H // call.B.shape[1]
        start = gather_rows(call.state, idx, call.has_initial_state).astype(F32)     # [S, H, P, N]
        final = start.copy()
        out = np.zeros(call.x.shape, F32)
        snaps = np.zeros((seqs, call.num_snapshots, H, P, N), F32)
        heads_group = np.arange(H) // group
        for s in range(seqs):
            if idx[s] < 0:
                continue
            lo, hi = int(cu[s]), int(cu[s + 1])
            snaps[s, hi - lo + 1:] = np.nan                    # RS-19: r > L_s unspecified
            if hi - lo < call.num_snapshots:
                snaps[s, hi - lo] = start[s]
            S = start[s]                                        # [H, P, N]
            for c0 in range(lo, hi, call.chunk_size):
                c1 = min(hi, c0 + call.chunk_size)
                # snapshot r is the state after L - r tokens: those that end inside this chunk
                wanted = {t: hi - (c0 + t + 1) for t in range(c1 - c0) if hi - (c0 + t + 1) < call.num_snapshots}
                out[c0:c1], S, states = _ssd_chunk32(S, f["x"][c0:c1], dtp[c0:c1], f["A"],
                                                     f["B"][c0:c1][:, heads_group], f["C"][c0:c1][:, heads_group],
                                                     wanted)
                for t, r in wanted.items():
                    snaps[s, r] = states[t]
            final[s] = S
        if f["D"] is not None:
            out = (out + f["D"][None, :, None] * f["x"]).astype(F32)
        if f["z"] is not None:
            z = f["z"]
            out = (out * (z / (F32(1) + np.exp(-z)))).astype(F32)
        out[_padding_tokens(cu, idx)] = 0.0                     # RS-3
        return SSDScan(out.astype(act), scatter_rows(call.state, idx, final.astype(np.float64)),
                       snaps.astype(call.state.dtype))


@permission(id="chunk_size_ignored", ops="ssd_chunked_scan", clause="RS-18",
            description="the float32 chunked form with chunks of 3 tokens whatever chunk_size says (a hint)")
class SsdOwnChunkFloat32(SsdChunkedFloat32):
    own_chunk = 3


def _ssd_chunk32(S, x, dt, A, B, C, wanted):
    """One chunk of Q tokens, all heads, in float32 (RS-18's closed form), as float32 matrix products.

    S: float32[H, P, N] state entering; x: [Q, H, P]; dt: [Q, H] (dt'); A: [H]; B, C: [Q, H, N] (each
    head's group); wanted: token offsets t whose state (after t + 1 tokens) is asked for.
    Returns (y [Q, H, P] without D and z, the state after the chunk [H, P, N], {t: state [H, P, N]}).
    """
    Q = x.shape[0]
    cs = np.cumsum((dt * A).astype(F32), axis=0, dtype=F32).T                     # [H, Q]
    causal = np.tri(Q, dtype=bool)
    seg = np.where(causal, (cs[:, :, None] - cs[:, None, :]).astype(F32), F32(0))  # [H, i, j]
    decay = np.where(causal, np.exp(seg), F32(0)).astype(F32)
    Ch, Bh, xh = C.transpose(1, 0, 2), B.transpose(1, 0, 2), x.transpose(1, 0, 2)   # [H, Q, .]
    weights = (np.matmul(Ch, Bh.transpose(0, 2, 1)) * decay * dt.T[:, None, :]).astype(F32)
    y = (np.matmul(weights, xh) + np.exp(cs)[..., None] * np.matmul(Ch, S.transpose(0, 2, 1))).astype(F32)

    def state_after(t):
        w = (np.exp((cs[:, t:t + 1] - cs[:, :t + 1]).astype(F32)) * dt.T[:, :t + 1]).astype(F32)   # [H, t+1]
        absorbed = np.matmul((xh[:, :t + 1] * w[..., None]).transpose(0, 2, 1), Bh[:, :t + 1])     # [H, P, N]
        return (np.exp(cs[:, t])[:, None, None] * S + absorbed).astype(F32)

    return y.transpose(1, 0, 2), state_after(Q - 1), {t: state_after(t) for t in wanted}


@permission(id="log_decays", ops="rwkv6_wkv", clause="RS-20, RS-44, NU-R2",
            description="claims decays 'positive' and computes chunks of 16 tokens in log space in float32 "
                        "(fla's chunked RWKV6 form): prefix sums of log w, decays exp(L_t - L_s)")
class RwkvLogDecays(Permission):
    chunk = 16

    def capabilities(self):
        return _with_limits(super().capabilities(), ("rwkv6_wkv",), {"decays": "positive"})

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, **kw):
        call = validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)
        act = np.asarray(r).dtype
        r32, k32, v32, u32 = (a.astype(F32) for a in (call.r, call.k, call.v, call.u))
        with np.errstate(divide="ignore"):
            log_w = np.log(call.w.astype(F32)).astype(F32)      # log 0 = -inf: why RS-44's claim exists
        cu, idx = call.cu_seqlens, call.state_indices
        S_all = gather_rows(call.state, idx, call.has_initial_state).astype(F32)    # [S, H, K, V]
        out = np.zeros(call.v.shape, F32)
        for s in range(cu.shape[0] - 1):
            if idx[s] < 0:
                continue
            for c0 in range(int(cu[s]), int(cu[s + 1]), self.chunk):
                c1 = min(int(cu[s + 1]), c0 + self.chunk)
                out[c0:c1], S_all[s] = _rwkv_chunk32(S_all[s], r32[c0:c1], k32[c0:c1], v32[c0:c1],
                                                     log_w[c0:c1], u32)
        return WKV6(out.astype(act), scatter_rows(call.state, idx, S_all.astype(np.float64)))


def _rwkv_chunk32(S, r, k, v, log_w, u):
    """One chunk of Q tokens, all heads, in log space (RS-20 unrolled), float32.

    S: [H, K, V] state entering; r, k, log_w: [Q, H, K]; v: [Q, H, V]; u: [H, K].
    With L_t = sum_{j<=t} log w_j and L_{-1} = 0: y_t = (r_t e^{L_{t-1}}) S + sum_{s<t} <r_t, k_s e^{L_{t-1} - L_s}>
    v_s + <r_t u, k_t> v_t; the state after the chunk is e^{L_{Q-1}} S + sum_s (k_s e^{L_{Q-1} - L_s}) v_s^T.
    Returns (y [Q, H, V], new state [H, K, V])."""
    with np.errstate(invalid="ignore", over="ignore"):
        L = np.cumsum(log_w, axis=0, dtype=F32)                                    # [Q, H, K]
        prev = np.concatenate([np.zeros_like(L[:1]), L[:-1]]).astype(F32)          # L_{t-1}
        y = np.einsum("thk,hkv->thv", (r * np.exp(prev)).astype(F32), S).astype(F32)
        ratio = np.exp((prev[:, None] - L[None, :]).astype(F32)).astype(F32)       # [t, s, H, K]
        scores = np.einsum("thk,shk,tshk->hts", r, k, ratio).astype(F32)
        scores = np.where(np.tri(r.shape[0], k=-1, dtype=bool)[None], scores, F32(0))
        y = (y + np.einsum("hts,shv->thv", scores, v)).astype(F32)
        y = (y + np.einsum("thk,hk,thk->th", r, u, k)[..., None] * v).astype(F32)
        tail = np.exp((L[-1][None] - L).astype(F32)).astype(F32)                   # [Q, H, K]
        S = (np.exp(L[-1])[..., None] * S + np.einsum("shk,shv->hkv", (k * tail).astype(F32), v)).astype(F32)
    return y, S
