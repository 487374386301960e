"""Gated delta rule (GDN) states: single-token update and chunked variable-length prefill through a slot
pool (spec/recurrent.md RS-28 … RS-34).

Per token and state head h (S the head's state [K, V], q/k read from head h // (H // Hk)):

    q^, k^ = l2norm(q), l2norm(k)      (only with use_qk_l2norm; x / sqrt(sum x^2 + 1e-6), RS-29)
    S      <- exp(g) S                  (decay first; g is the log of the decay, RS-30)
    u      =  beta (v - S^T k^)         (the delta, read from the decayed state)
    S      <- S + k^ u^T
    out    =  scale S^T q^              (the new state)

The chunked op evaluates the same recurrence chunk by chunk in the closed (WY) form of RS-33.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_shape, float_input, int_scalar, positive_float, require
from .args import bool_flag
from .reductions import ordered_sum
from .slots import gather_rows, initial_flags, pool_input, scatter_rows, slot_indices
from .varlen import cu_seqlens_input

#: The epsilon of the optional L2 normalisation of q and k, added under the square root (RS-29).
L2NORM_EPS = 1e-6


class GatedDeltaUpdate(NamedTuple):
    out: np.ndarray    # [B, H, V] float64
    state: np.ndarray  # [num_slots, H, K, V] the new pool, the pool's dtype


class GatedDeltaScan(NamedTuple):
    out: np.ndarray    # [T, H, V] float64
    state: np.ndarray  # [num_slots, H, K, V] the new pool, the pool's dtype


class GatedDeltaCall(NamedTuple):
    """The arguments of one gated delta rule call after validation (RS-28 … RS-32).

    q, k:              float64[R, Hk, K], R = B (update) or T (chunked); Hk divides H
    v:                 float64[R, H, V]
    g, beta:           float64[R, H]
    state:             [num_slots, H, K, V] float32|float64, the caller's array (not copied, RS-6)
    scale:             float > 0 (K ** -0.5 when None was given, RS-29)
    use_qk_l2norm:     bool
    state_indices:     int64[B] or int64[S], -1 = padding, distinct otherwise (RS-2 … RS-4)
    cu_seqlens:        int64[S+1] (chunked only, else None)
    has_initial_state: bool[S] (chunked only, else None)
    chunk_size:        int >= 1 (chunked only, else None)
    """
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    g: np.ndarray
    beta: np.ndarray
    state: np.ndarray
    scale: float
    use_qk_l2norm: bool
    state_indices: np.ndarray
    cu_seqlens: np.ndarray | None = None
    has_initial_state: np.ndarray | None = None
    chunk_size: int | None = None


def qk_heads(num_heads: int, num_qk_heads: int) -> np.ndarray:
    """The q/k head each state head reads: h // (H // Hk) (RS-28, consecutive heads share)."""
    return np.arange(num_heads) // (num_heads // num_qk_heads)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """x / sqrt(sum_k x[..., k]^2 + 1e-6) over the last axis (RS-29), float64."""
    return x / np.sqrt(ordered_sum(x * x, axis=-1) + L2NORM_EPS)[..., None]


def gated_delta_rule_update(q, k, v, g, beta, state, *, scale=None, use_qk_l2norm=False,
                            state_indices=None) -> GatedDeltaUpdate:
    """One decode token per batch row through the gated delta rule (RS-28 … RS-31).

    q, k:          [B, Hk, K] float; Hk >= 1 divides H; state head h reads q/k head h // (H // Hk)
    v:             [B, H, V] float
    g:             [B, H] float, the log of the per-head decay (decay = exp(g))
    beta:          [B, H] float, the per-head write strength
    state:         [num_slots, H, K, V] float32|float64 pool
    scale:         float > 0, default K ** -0.5
    use_qk_l2norm: bool, normalise q and k over K first (eps 1e-6 under the square root)
    state_indices: i32[B] slot of each row, -1 = padding (None: row b uses slot b)

    Returns GatedDeltaUpdate(out [B, H, V] float64, state = the new pool). Padding rows: out 0, pool
    untouched.
    """
    call = validate_gated_delta_rule_update(q, k, v, g, beta, state, scale=scale,
                                            use_qk_l2norm=use_qk_l2norm, state_indices=state_indices)
    idx = call.state_indices
    start = gather_rows(call.state, idx, np.ones(idx.shape[0], dtype=bool))   # [B, H, K, V]
    qh, kh = _prepared_qk(call)
    out = np.zeros(call.v.shape)
    final = np.zeros_like(start)
    for b in np.flatnonzero(idx >= 0):
        out[b], final[b] = _step(start[b], qh[b], kh[b], call.v[b], call.g[b], call.beta[b], call.scale)
    return GatedDeltaUpdate(out, scatter_rows(call.state, idx, final))


def gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, *, chunk_size=64, scale=None,
                             use_qk_l2norm=False, state_indices=None, has_initial_state=None
                             ) -> GatedDeltaScan:
    """Prefill S packed sequences through the gated delta rule, chunk by chunk (RS-32, RS-33).

    q, k:              [T, Hk, K] float; v: [T, H, V] float; g, beta: [T, H] float (as the update op)
    state:             [num_slots, H, K, V] float32|float64 pool
    cu_seqlens:        i32[S+1]; sequence s is tokens cu_seqlens[s]:cu_seqlens[s+1] (length 0 allowed)
    chunk_size:        int >= 1, a hint; chunks start at each sequence's first token (RS-33)
    scale, use_qk_l2norm as the update op
    state_indices:     i32[S] slot of each sequence, -1 = padding (None: sequence s uses slot s)
    has_initial_state: bool[S]; False starts from exact zeros whatever the row holds (None: all True)

    Returns GatedDeltaScan(out [T, H, V] float64, state = the new pool with each live sequence's final
    state). Padding sequences: out rows 0, pool untouched.
    """
    call = validate_gated_delta_rule_chunked(
        q, k, v, g, beta, state, cu_seqlens, chunk_size=chunk_size, scale=scale,
        use_qk_l2norm=use_qk_l2norm, state_indices=state_indices, has_initial_state=has_initial_state)
    idx, cu = call.state_indices, call.cu_seqlens
    start = gather_rows(call.state, idx, call.has_initial_state)             # [S, H, K, V]
    qh, kh = _prepared_qk(call)
    out = np.zeros(call.v.shape)
    final = np.zeros_like(start)
    for s in np.flatnonzero(idx >= 0):
        S = start[s]
        for c0 in range(int(cu[s]), int(cu[s + 1]), call.chunk_size):
            c1 = min(c0 + call.chunk_size, int(cu[s + 1]))
            out[c0:c1], S = _chunk(S, qh[c0:c1], kh[c0:c1], call.v[c0:c1], call.g[c0:c1],
                                   call.beta[c0:c1], call.scale)
        final[s] = S
    return GatedDeltaScan(out, scatter_rows(call.state, idx, final))


def _prepared_qk(call: GatedDeltaCall) -> tuple[np.ndarray, np.ndarray]:
    """q and k per state head [R, H, K], L2-normalised when asked (RS-28, RS-29)."""
    q, k = call.q, call.k
    if call.use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    heads = qk_heads(call.v.shape[1], q.shape[1])
    return q[:, heads], k[:, heads]


def _step(S, q, k, v, g, beta, scale):
    """One token (RS-30). S [H, K, V]; q, k [H, K]; v [H, V]; g, beta [H]. Returns (out [H, V], S)."""
    S = np.exp(g)[:, None, None] * S                                   # decay first
    u = beta[:, None] * (v - ordered_sum(S * k[:, :, None], axis=1))  # delta from the decayed state
    S = S + k[:, :, None] * u[:, None, :]
    return scale * ordered_sum(S * q[:, :, None], axis=1), S          # read the new state


def _chunk(S, q, k, v, g, beta, scale):
    """One chunk of Q tokens in closed (WY) form (RS-33). S [H, K, V]; q, k [Q, H, K]; v [Q, H, V];
    g, beta [Q, H]. Returns (out [Q, H, V], state after the chunk [H, K, V]).

    With gam_i = sum_{j<=i} g_j (per head) and the decay exp(gam_i - gam_j) from token j to i >= j:
        (I + L) U = diag(beta) (V - diag(exp(gam)) K S),  L_ij = beta_i exp(gam_i - gam_j) k_i . k_j, j < i
        out_i     = scale (exp(gam_i) S^T q_i + sum_{j<=i} exp(gam_i - gam_j) (q_i . k_j) u_j)
        S_end     = exp(gam_last) S + sum_j exp(gam_last - gam_j) k_j u_j^T
    """
    n = q.shape[0]
    gam = np.cumsum(g, axis=0)                                         # [Q, H]
    lower = np.tril(np.ones((n, n), dtype=bool))[:, :, None]           # [i, j, 1]
    decay = np.exp(np.where(lower, gam[:, None, :] - gam[None, :, :], -np.inf))   # [i, j, H]
    kk = np.einsum("ihk,jhk->ijh", k, k)
    strict = np.tril(np.ones((n, n), dtype=bool), -1)[:, :, None]
    L = np.where(strict, beta[:, None, :] * decay * kk, 0.0)           # [i, j, H]
    rhs = beta[:, :, None] * (v - np.exp(gam)[:, :, None] * np.einsum("hkv,ihk->ihv", S, k))
    u = np.zeros_like(rhs)                                             # forward substitution
    for i in range(n):
        u[i] = rhs[i] - np.einsum("jh,jhv->hv", L[i, :i], u[:i])
    qk = np.einsum("ihk,jhk->ijh", q, k) * decay                       # 0 above the diagonal
    out = scale * (np.exp(gam)[:, :, None] * np.einsum("hkv,ihk->ihv", S, q)
                   + np.einsum("ijh,jhv->ihv", qk, u))
    w = np.exp(gam[-1][None, :] - gam)                                 # [Q, H]
    S_end = np.exp(gam[-1])[:, None, None] * S + np.einsum("jh,jhk,jhv->hkv", w, k, u)
    return out, S_end


def _state_dims(pool: np.ndarray) -> tuple[int, int, int, int]:
    """(num_slots, H, K, V) of the pool; H, K and V must be >= 1 (RS-28): an empty head, key or value
    dimension is no layer (and K = 0 has no default scale K ** -0.5)."""
    num_slots, heads, dk, dv = pool.shape
    require(heads >= 1 and dk >= 1 and dv >= 1,
            f"state must have H >= 1 heads, key dim K >= 1 and value dim V >= 1 (RS-28), "
            f"got shape {tuple(pool.shape)} [num_slots, H, K, V]")
    return num_slots, heads, dk, dv


def _heads_inputs(rows: str, heads: int, dk: int, dv: int, q, k, v, g, beta):
    qa = float_input("q", q, 3, f"[{rows}, Hk, K]")
    count, qk_h = qa.shape[0], qa.shape[1]
    check_shape("q", qa, (count, qk_h, dk), f"[{rows}, Hk, K]")
    require(qk_h >= 1 and heads % qk_h == 0,
            f"q must have a head count Hk that divides the state's H = {heads}, got Hk = {qk_h}")
    ka = float_input("k", k, 3, f"[{rows}, Hk, K]")
    check_shape("k", ka, (count, qk_h, dk), f"[{rows}, Hk, K]")
    va = float_input("v", v, 3, f"[{rows}, H, V]")
    check_shape("v", va, (count, heads, dv), f"[{rows}, H, V]")
    ga = float_input("g", g, 2, f"[{rows}, H]")
    check_shape("g", ga, (count, heads), f"[{rows}, H]")
    ba = float_input("beta", beta, 2, f"[{rows}, H]")
    check_shape("beta", ba, (count, heads), f"[{rows}, H]")
    return qa, ka, va, ga, ba


def _scale(scale, dk: int) -> float:
    return dk ** -0.5 if scale is None else positive_float("scale", scale)


def validate_gated_delta_rule_update(q, k, v, g, beta, state, *, scale=None, use_qk_l2norm=False,
                                     state_indices=None) -> GatedDeltaCall:
    """Check every argument of `gated_delta_rule_update` (RS-2 … RS-6, RS-28 … RS-31) and return them
    normalised. Raises ValueError, or TypeError for a wrong type or dtype, naming the argument."""
    pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
    num_slots, heads, dk, dv = _state_dims(pool)
    qa, ka, va, ga, ba = _heads_inputs("B", heads, dk, dv, q, k, v, g, beta)
    norm = bool_flag("use_qk_l2norm", use_qk_l2norm)
    idx = slot_indices("state_indices", state_indices, qa.shape[0], num_slots)
    return GatedDeltaCall(qa, ka, va, ga, ba, pool, _scale(scale, dk), norm, idx)


def validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, *, chunk_size=64, scale=None,
                                      use_qk_l2norm=False, state_indices=None, has_initial_state=None
                                      ) -> GatedDeltaCall:
    """Check every argument of `gated_delta_rule_chunked` (RS-2 … RS-6, RS-17, RS-28 … RS-33) and return
    them normalised. Raises ValueError, or TypeError for a wrong type or dtype, naming the argument."""
    pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
    num_slots, heads, dk, dv = _state_dims(pool)
    qa, ka, va, ga, ba = _heads_inputs("T", heads, dk, dv, q, k, v, g, beta)
    cu = cu_seqlens_input(cu_seqlens, qa.shape[0])
    seqs = cu.shape[0] - 1
    chunk = int_scalar("chunk_size", chunk_size, minimum=1)
    norm = bool_flag("use_qk_l2norm", use_qk_l2norm)
    idx = slot_indices("state_indices", state_indices, seqs, num_slots)
    flags = initial_flags("has_initial_state", has_initial_state, seqs)
    return GatedDeltaCall(qa, ka, va, ga, ba, pool, _scale(scale, dk), norm, idx, cu, flags, chunk)
