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
from .selective_state import effective_dt, head_groups
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
    g = head_groups(heads, call.B.shape[1])
    Bh, Ch = call.B[:, g], call.C[:, g]                           # [T, H, N]

    start = gather_rows(pool, idx, call.has_initial_state)        # [S, H, P, N]
    final = np.zeros_like(start)
    out = np.zeros_like(xa)
    snaps = np.zeros((seqs, k_snap, heads, p, n))
    for s in range(seqs):
        if idx[s] < 0:
            continue
        lo, hi = int(cu[s]), int(cu[s + 1])
        # Snapshot r is the state after token (L - r); r = L is the starting state itself.
        length = hi - lo
        wanted = {length - r: r for r in range(min(k_snap, length + 1))}
        snaps[s, length + 1:] = np.nan
        S = start[s]
        if 0 in wanted:
            snaps[s, wanted[0]] = S
        for c0 in range(lo, hi, chunk):
            c1 = min(c0 + chunk, hi)
            y, S_end, at = _chunk(S, xa[c0:c1], dtp[c0:c1], Aa, Bh[c0:c1], Ch[c0:c1],
                                  [t - (c0 - lo) for t in wanted if c0 - lo < t <= c1 - lo])
            out[c0:c1] = y
            for t_rel, S_t in at.items():
                snaps[s, wanted[t_rel + (c0 - lo)]] = S_t
            S = S_end
        final[s] = S
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


def _chunk(S, x, dt, A, Bh, Ch, want):
    """One chunk in closed form (RS-18). S [H,P,N]; x [Q,H,P]; dt [Q,H] (dt'); Bh, Ch [Q,H,N].

    cs_i = sum_{k<=i} dt_k A (per head); the decay from token j to token i >= j is exp(cs_i - cs_j).
    Returns (y without D/z [Q,H,P], state after the chunk, {t: state after the chunk's first t tokens}
    for t in `want`).
    """
    q = x.shape[0]
    cs = np.cumsum(dt * A[None], axis=0)                          # [Q, H]
    causal = np.tril(np.ones((q, q), dtype=bool))[:, :, None]     # [i, j, 1]
    seg = np.where(causal, cs[:, None, :] - cs[None, :, :], -np.inf)
    decay = np.exp(seg)                                           # [i, j, H], 0 above the diagonal
    cb = np.einsum("ihn,jhn->ijh", Ch, Bh)
    y_intra = np.einsum("ijh,jh,jhp->ihp", cb * decay, dt, x)
    y_inter = np.einsum("hpn,ihn->ihp", S, Ch) * np.exp(cs)[:, :, None]

    def state_after(t):  # t tokens of the chunk absorbed, 1 <= t <= Q
        w = np.exp(cs[t - 1][None, :] - cs[:t]) * dt[:t]          # [t, H]
        return np.exp(cs[t - 1])[:, None, None] * S + np.einsum("jh,jhp,jhn->hpn", w, x[:t], Bh[:t])

    return y_intra + y_inter, state_after(q), {t: state_after(t) for t in want}


def _padding_tokens(cu, idx, tokens):
    mask = np.zeros(tokens, dtype=bool)
    for s in np.flatnonzero(idx < 0):
        mask[cu[s]:cu[s + 1]] = True
    return mask
