"""Chunked variable-length Mamba2 (SSD) prefill over a slot pool, with snapshots (RS-17 … RS-19).

The result is defined by RS-18 as the Mamba2 recurrence of RS-16 iterated token by token; this module
computes it chunk by chunk with the closed form of RS-18, so that "chunked == token by token" is a real
test of the spec rather than a tautology.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..buffers import Buffers
from ..head_workers import head_blocks, head_map
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
    x:                 float64[T, H, P] (with upcast=False: the caller's float dtype, not copied)
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
    # x stays in the caller's dtype: each chunk converts its tokens to float64 as it copies them (exactly),
    # so a long call never holds a float64 copy of x (issue 16: 64 MiB of fresh memory at T 4096, H 32,
    # P 64; ~10% of the call on issue 16's VM, and far more when its page faults were slow).
    call = validate_ssd_chunked_scan(
        state, x, dt, A, B, C, cu_seqlens, chunk_size=chunk_size, state_indices=state_indices,
        has_initial_state=has_initial_state, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
        num_snapshots=num_snapshots, upcast=False)
    pool, xa, Aa, cu, idx = call.state, call.x, call.A, call.cu_seqlens, call.state_indices
    _, heads, p, n = pool.shape
    tokens, seqs = xa.shape[0], cu.shape[0] - 1
    chunk, k_snap = call.chunk_size, call.num_snapshots
    dtp = effective_dt(call.dt, call.dt_bias, call.dt_softplus)
    groups = call.B.shape[1]                                      # head h reads group h // (H / G) (RS-16)

    start = gather_rows(pool, idx, call.has_initial_state)        # [S, H, P, N]
    final = np.zeros_like(start)
    out = np.zeros(xa.shape)
    snaps = np.zeros((seqs, k_snap, heads, p, n))
    # Heads are independent (RS-16): a large call runs blocks of a group's heads on a thread pool with one
    # BLAS thread each (head_workers.py, for speed only: each head's products are its own, so every head
    # gets the same bits whatever the blocks).
    work = tokens * heads * p * n
    with head_map(work, heads) as map_blocks:
        blocks = head_blocks(work, heads, groups)
        for s in range(seqs):
            if idx[s] < 0:
                continue
            lo, hi = int(cu[s]), int(cu[s + 1])
            # Snapshot r is the state after token (L - r); r = L is the starting state itself.
            wanted = {hi - lo - r: r for r in range(min(k_snap, hi - lo + 1))}
            snaps[s, hi - lo + 1:] = np.nan

            def scan_block(block, s=s, lo=lo, hi=hi, wanted=wanted):
                g, heads_b = block
                final[s, heads_b] = _scan_heads(start[s, heads_b], xa[lo:hi, heads_b], dtp[lo:hi, heads_b],
                                                Aa[heads_b], call.B[lo:hi, g], call.C[lo:hi, g], chunk, wanted,
                                                out[lo:hi, heads_b], snaps[s, :, heads_b])

            for _ in map_blocks(scan_block, blocks):
                pass
    if call.D is not None:
        out = out + call.D[None, :, None] * xa          # x converted exactly: D is float64
    if call.z is not None:
        out = out * silu(call.z)
    out[_padding_tokens(cu, idx, tokens)] = 0.0
    return SSDScan(out, scatter_rows(pool, idx, final), snaps.astype(pool.dtype))


def _scan_heads(S, x, dt, A, B, C, chunk, wanted, out, snaps):
    """One sequence through some heads of one group, chunk by chunk (RS-18).

    S: float64[Hb, P, N] starting state; x: [L, Hb, P] any float dtype (copied chunk by chunk into
    float64); dt: float64[L, Hb] (dt'); A: float64[Hb]; B, C: float64[L, N] (the group's);
    wanted: {t: r} snapshot r is the state after t tokens.
    Writes out[L, Hb, P] (y without D and z) and snaps[K, Hb, P, N] in place; returns the final state.
    """
    length = x.shape[0]
    # Heads leading, tokens second to last: each chunk's sums are then matrix products per head. x is
    # copied so one chunk at a time, into one buffer (a whole transposed copy costs page faults).
    x_chunk = np.empty((x.shape[1], min(chunk, length), x.shape[2]))  # [Hb, Q, P]
    dt = np.ascontiguousarray(dt.T)                               # [Hb, L]
    if 0 in wanted:
        snaps[wanted[0]] = S
    # The running state, transposed ([Hb, N, P]: the read C S^T is then a product of plain row-major
    # operands, ~25% faster than through a transposed view); each chunk updates it in place.
    S_T = np.ascontiguousarray(S.swapaxes(-1, -2))
    scratch = np.empty_like(S_T)
    work = Buffers()        # each chunk's [Hb, Q, Q] and [Hb, Q, P] temporaries (see buffers.py)
    for c0 in range(0, length, chunk):
        c1 = min(c0 + chunk, length)
        xc = x_chunk[:, :c1 - c0]
        np.copyto(xc, x[c0:c1].transpose(1, 0, 2))
        y, at = _chunk(S_T, xc, dt[:, c0:c1], A, B[c0:c1], C[c0:c1], [t - c0 for t in wanted if c0 < t <= c1],
                       scratch, work)
        out[c0:c1] = y.transpose(1, 0, 2)
        for t_rel, S_t in at.items():
            snaps[wanted[t_rel + c0]] = S_t.swapaxes(-1, -2)
    return S_T.swapaxes(-1, -2)


def _chunk(S_T, x, dt, A, B, C, want, scratch, work):
    """One chunk of Q tokens in closed form (RS-18) for Hb heads of one group:
    S_T [Hb,N,P] (the state transposed); x [Hb,Q,P]; dt [Hb,Q] (dt'); A [Hb]; B, C [Q,N] (the group's,
    shared by its heads); scratch [Hb,N,P], overwritten; work: `Buffers` for the chunk's temporaries.

    cs_i = sum_{k<=i} dt_k A (per head, np.cumsum); the decay from token j to token i >= j is
    exp(cs_i - cs_j). The products over tokens and state columns are matrix products over the two trailing
    axes (`@`, run by BLAS, one per head): their order is free (RS-8) and fixed by this chunk's shapes
    alone, so a sequence gets the same bits whatever else is in the batch (RS-7).
    Returns (y without D/z [Hb,Q,P], valid until the next call with `work`; {t: state after the chunk's
    first t tokens, transposed [Hb,N,P]} for t in `want`) and updates S_T in place to the state after the
    chunk.
    """
    heads, q, p = x.shape
    # The chunk's temporaries are written into `work`'s buffers rather than fresh arrays: every fresh
    # temporary of this size costs page faults, which on issue 16's VM took ~15% of the scan.
    cs = np.cumsum(dt * A[:, None], axis=-1)                      # [Hb, Q]
    seg = np.subtract(cs[:, :, None], cs[:, None, :], out=work.array("seg", (heads, q, q)))  # [Hb, i, j]
    weights = work.array("weights", (heads, q, q))
    np.copyto(weights, 0.0)                                       # 0 above the diagonal
    np.exp(seg, out=weights, where=_causal(q))                    # decay_ij
    weights *= C @ B.T                                            # C_i . B_j decay_ij
    weights *= dt[:, None, :]                                     #   ... dt_j   [Hb, i, j]
    y = np.matmul(C, S_T, out=work.array("y", (heads, q, p)))     # the inter-chunk read C S^T, [Hb, Q, P]
    y *= np.exp(cs)[..., None]
    y += np.matmul(weights, x, out=work.array("x_part", (heads, q, p)))   # plus the intra-chunk part

    def absorbed(t, out=None):  # what the chunk's first t tokens add to the state, 1 <= t <= Q: [Hb, N, P]
        w = np.exp(cs[:, t - 1, None] - cs[:, :t]) * dt[:, :t]               # [Hb, t]
        weighted = np.multiply(w[..., None], x[:, :t, :], out=work.array("x_part", (heads, t, p)))
        return np.matmul(B[:t].T, weighted, out=out)

    def state_after(t):
        return np.exp(cs[:, t - 1])[:, None, None] * S_T + absorbed(t)

    snapshots = {t: state_after(t) for t in want}
    # state_after(q), written over S_T: a fresh [Hb, N, P] state and its temporary per chunk cost more in
    # page faults than the product itself (issue 16)
    S_T *= np.exp(cs[:, q - 1])[:, None, None]
    S_T += absorbed(q, out=scratch)
    return y, snapshots


@functools.cache
def _causal(q):
    """bool[q, q], True where j <= i (row i, column j)."""
    return np.tri(q, dtype=bool)


def validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                              has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False,
                              num_snapshots=0, upcast=True) -> SSDScanCall:
    """Check every argument of `ssd_chunked_scan` (RS-2 .. RS-6, RS-16, RS-17), return them normalised.

    Takes the op's arguments (see `ssd_chunked_scan`); upcast=False leaves x in its own float dtype
    (checked alike). Raises ValueError, or TypeError for a wrong type or dtype, naming the argument and
    the broken rule.
    """
    pool = pool_input("state", state, 4, "[num_slots, H, P, N]")
    num_slots, heads, p, n = pool.shape
    xa, dta, Aa, Ba, Ca = mamba2_inputs("T", heads, p, n, x, dt, A, B, C, upcast_x=upcast)
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


def _padding_tokens(cu, idx, tokens):
    mask = np.zeros(tokens, dtype=bool)
    for s in np.flatnonzero(idx < 0):
        mask[cu[s]:cu[s + 1]] = True
    return mask
