"""Chunked variable-length Mamba2 (SSD) prefill over a slot pool, with snapshots (RS-17 … RS-19).

The result is defined by RS-18 as the Mamba2 recurrence of RS-16 iterated token by token; this module
computes it chunk by chunk with the closed form of RS-18, so that "chunked == token by token" is a real
test of the spec rather than a tautology.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import int_scalar
from .activations import silu
from .args import bool_flag, mamba2_inputs, mamba2_options
from .selective_state import effective_dt
from .slots import gather_rows, initial_flags, pool_input, scatter_rows, slot_indices
from .varlen import cu_seqlens_input


class SSDScan(NamedTuple):
    out: np.ndarray        # [T, H, P] float64
    state: np.ndarray      # [num_slots, H, P, N] the new pool, the pool's dtype
    snapshots: np.ndarray  # [S, K, H, P, N] the pool's dtype; K = num_snapshots


class SSDScanCall(NamedTuple):
    """The arguments of one ``ssd_chunked_scan`` call after validation (RS-2 .. RS-6, RS-17).

    state:             [num_slots, H, P, N] float32|float64, the caller's array (not copied, RS-6)
    x:                 float64[T, H, P]
    dt:                float64[T, H]
    A:                 float64[H]
    B, C:              float64[T, G, N], G divides H (RS-16)
    cu_seqlens:        int64[S+1], 0 .. T, non-decreasing (RS-17)
    chunk_size:        int >= 1 (RS-18)
    state_indices:     int64[S], slots in [-1, num_slots), -1 = padding, distinct otherwise (RS-2, RS-3)
    has_initial_state: bool[S], all True when it was None (RS-5)
    D, dt_bias:        float64[H] or None
    z:                 float64[T, H, P] or None
    dt_softplus:       bool (RS-14)
    num_snapshots:     int K >= 0 (RS-19)
    """
    state: np.ndarray
    x: np.ndarray
    dt: np.ndarray
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    cu_seqlens: np.ndarray
    chunk_size: int
    state_indices: np.ndarray
    has_initial_state: np.ndarray
    D: np.ndarray | None
    z: np.ndarray | None
    dt_bias: np.ndarray | None
    dt_softplus: bool
    num_snapshots: int


def ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                     has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False,
                     num_snapshots=0) -> SSDScan:
    """Prefill S packed sequences through the Mamba2 recurrence (RS-17 … RS-19).

    state:             [num_slots, H, P, N] float32|float64 pool
    x, z:              [T, H, P] float (z optional)
    dt:                [T, H] float; A, D, dt_bias: [H] float (D, dt_bias optional)
    B, C:              [T, G, N] float, G divides H; head h reads group h // (H // G)
    cu_seqlens:        i32[S+1]; sequence s is tokens cu_seqlens[s]:cu_seqlens[s+1]
    chunk_size:        int >= 1; chunks start at each sequence's first token (RS-18)
    state_indices:     i32[S] slot of each sequence, -1 = padding (None: sequence s uses slot s)
    has_initial_state: bool[S]; False starts from exact zeros whatever the row holds (None: all True)
    num_snapshots:     K >= 0; snapshot r of sequence s is its state after all but its last r tokens

    Returns SSDScan(out, state = new pool with each live sequence's final state, snapshots).
    Padding sequences: out rows 0, snapshots 0, pool untouched. Snapshots r > L_s are NaN (RS-19).
    """
    call = validate_ssd_chunked_scan(
        state, x, dt, A, B, C, cu_seqlens, chunk_size=chunk_size, state_indices=state_indices,
        has_initial_state=has_initial_state, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
        num_snapshots=num_snapshots)
    pool, xa, Aa, cu, idx = call.state, call.x, call.A, call.cu_seqlens, call.state_indices
    _, heads, p, n = pool.shape
    tokens, seqs = xa.shape[0], cu.shape[0] - 1
    chunk, k_snap = call.chunk_size, call.num_snapshots
    dtp = effective_dt(call.dt, call.dt_bias, call.dt_softplus)
    groups = call.B.shape[1]
    per_group = heads // groups                                   # head h reads group h // per_group (RS-16)

    start = gather_rows(pool, idx, call.has_initial_state)        # [S, H, P, N]
    final = np.zeros_like(start)
    out = np.zeros_like(xa)
    snaps = np.zeros((seqs, k_snap, heads, p, n))
    for s in range(seqs):
        if idx[s] < 0:
            continue
        lo, hi = int(cu[s]), int(cu[s + 1])
        length = hi - lo
        # The sequence's tokens with (group, head in group) leading, tokens second to last: each chunk's
        # sums are then matrix products per head, and B, C are shared by the heads of their group.
        x_g = np.ascontiguousarray(xa[lo:hi].transpose(1, 0, 2)).reshape(groups, per_group, length, p)
        dt_g = np.ascontiguousarray(dtp[lo:hi].T).reshape(groups, per_group, length)
        A_g = Aa.reshape(groups, per_group)
        B_g = np.ascontiguousarray(call.B[lo:hi].transpose(1, 0, 2))[:, None]   # [G, 1, L, N]
        C_g = np.ascontiguousarray(call.C[lo:hi].transpose(1, 0, 2))[:, None]
        # Snapshot r is the state after token (L - r); r = L is the starting state itself.
        wanted = {length - r: r for r in range(min(k_snap, length + 1))}
        snaps[s, length + 1:] = np.nan
        S = start[s].reshape(groups, per_group, p, n)
        if 0 in wanted:
            snaps[s, wanted[0]] = start[s]
        for c0 in range(0, length, chunk):
            c1 = min(c0 + chunk, length)
            y, S_end, at = _chunk(S, x_g[..., c0:c1, :], dt_g[..., c0:c1], A_g, B_g[..., c0:c1, :],
                                  C_g[..., c0:c1, :], [t - c0 for t in wanted if c0 < t <= c1])
            out[lo + c0:lo + c1] = y.reshape(heads, c1 - c0, p).transpose(1, 0, 2)
            for t_rel, S_t in at.items():
                snaps[s, wanted[t_rel + c0]] = S_t.reshape(heads, p, n)
            S = S_end
        final[s] = S.reshape(heads, p, n)
    if call.D is not None:
        out = out + call.D[None, :, None] * xa
    if call.z is not None:
        out = out * silu(call.z)
    out[_padding_tokens(cu, idx, tokens)] = 0.0
    return SSDScan(out, scatter_rows(pool, idx, final), snaps.astype(pool.dtype))


def validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                              has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False,
                              num_snapshots=0) -> SSDScanCall:
    """Check every argument of `ssd_chunked_scan` (RS-2 .. RS-6, RS-16, RS-17), return them normalised.

    Takes the op's arguments (see `ssd_chunked_scan`). Raises ValueError, or TypeError for a wrong type
    or dtype, naming the argument and the broken rule.
    """
    pool = pool_input("state", state, 4, "[num_slots, H, P, N]")
    num_slots, heads, p, n = pool.shape
    xa, dta, Aa, Ba, Ca = mamba2_inputs("T", heads, p, n, x, dt, A, B, C)
    tokens = xa.shape[0]
    cu = cu_seqlens_input(cu_seqlens, tokens)
    seqs = cu.shape[0] - 1
    chunk = int_scalar("chunk_size", chunk_size, minimum=1)
    k_snap = int_scalar("num_snapshots", num_snapshots, minimum=0)
    idx = slot_indices("state_indices", state_indices, seqs, num_slots)
    from_state = initial_flags("has_initial_state", has_initial_state, seqs)
    Da, za, bias = mamba2_options("T", tokens, heads, p, D, z, dt_bias)
    softplus_dt = bool_flag("dt_softplus", dt_softplus)
    return SSDScanCall(pool, xa, dta, Aa, Ba, Ca, cu, chunk, idx, from_state, Da, za, bias, softplus_dt,
                       k_snap)


def _chunk(S, x, dt, A, B, C, want):
    """One chunk in closed form (RS-18), with leading axes (G groups, H/G heads per group):
    S [G,Hg,P,N]; x [G,Hg,Q,P]; dt [G,Hg,Q] (dt'); A [G,Hg]; B, C [G,1,Q,N] (shared by a group's heads).

    cs_i = sum_{k<=i} dt_k A (per head, np.cumsum); the decay from token j to token i >= j is
    exp(cs_i - cs_j). The products over tokens and state columns are matrix products over the two trailing
    axes (`@`, run by BLAS): their order is free (RS-8) and fixed by this chunk's shapes alone, so a
    sequence gets the same bits whatever else is in the batch (RS-7).
    Returns (y without D/z [G,Hg,Q,P], state after the chunk, {t: state after the chunk's first t tokens}
    for t in `want`).
    """
    q = x.shape[-2]
    cs = np.cumsum(dt * A[..., None], axis=-1)                    # [G, Hg, Q]
    causal = np.tril(np.ones((q, q), dtype=bool))                 # [i, j]
    seg = cs[..., :, None] - cs[..., None, :]                     # [G, Hg, i, j]
    decay = np.exp(seg, out=np.zeros_like(seg), where=causal)     # 0 above the diagonal
    cb = C @ B.swapaxes(-1, -2)                                   # [G, 1, i, j] = C_i . B_j
    y_intra = (cb * decay * dt[..., None, :]) @ x                 # [G, Hg, Q, P]
    y_inter = (C @ S.swapaxes(-1, -2)) * np.exp(cs)[..., None]

    def state_after(t):  # t tokens of the chunk absorbed, 1 <= t <= Q
        w = np.exp(cs[..., t - 1, None] - cs[..., :t]) * dt[..., :t]           # [G, Hg, t]
        absorbed = (w[..., None] * x[..., :t, :]).swapaxes(-1, -2) @ B[..., :t, :]   # [G, Hg, P, N]
        return np.exp(cs[..., t - 1])[..., None, None] * S + absorbed

    return y_intra + y_inter, state_after(q), {t: state_after(t) for t in want}


def _padding_tokens(cu, idx, tokens):
    mask = np.zeros(tokens, dtype=bool)
    for s in np.flatnonzero(idx < 0):
        mask[cu[s]:cu[s + 1]] = True
    return mask
