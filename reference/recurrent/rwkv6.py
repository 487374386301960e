"""RWKV6 wkv over packed variable-length sequences and a slot pool (spec/recurrent.md RS-20)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..head_workers import head_blocks, head_map
from ..validation import check_shape, float_input
from .slots import gather_rows, initial_flags, pool_input, scatter_rows, slot_indices
from .varlen import cu_seqlens_input


class WKV6(NamedTuple):
    out: np.ndarray    # [T, H, V] float64
    state: np.ndarray  # [num_slots, H, K, V] the new pool, the pool's dtype


class WKV6Call(NamedTuple):
    """The arguments of one ``rwkv6_wkv`` call after validation (RS-2 .. RS-6, RS-17, RS-20).

    r, k, w:           float64[T, H, K]
    v:                 float64[T, H, V]
    u:                 float64[H, K]
    state:             [num_slots, H, K, V] float32|float64, the caller's array (not copied, RS-6)
    cu_seqlens:        int64[S+1], 0 .. T, non-decreasing (RS-17)
    state_indices:     int64[S], slots in [-1, num_slots), -1 = padding, distinct otherwise (RS-2, RS-3)
    has_initial_state: bool[S], all True when it was None (RS-5)
    """
    r: np.ndarray
    k: np.ndarray
    v: np.ndarray
    w: np.ndarray
    u: np.ndarray
    state: np.ndarray
    cu_seqlens: np.ndarray
    state_indices: np.ndarray
    has_initial_state: np.ndarray


def rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None) -> WKV6:
    """RWKV6 time mixing (RS-20): the output reads the old state plus the bonus u.

    r, k, w:           [T, H, K] float; w is the per-channel decay multiplier itself (not its log)
    v:                 [T, H, V] float
    u:                 [H, K] float (bonus)
    state:             [num_slots, H, K, V] float32|float64 pool
    cu_seqlens:        i32[S+1]; state_indices i32[S] (-1 = padding); has_initial_state bool[S]

    Per token and head: y[v] = sum_k r[k] (S[k, v] + u[k] k[k] v[v]); then S <- w[k] S[k, v] + k[k] v[v].
    No scale is applied. Returns WKV6(out, state = new pool with each live sequence's final state).
    """
    call = validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, state_indices=state_indices,
                              has_initial_state=has_initial_state)
    r, k, v, w, u, cu, idx = call.r, call.k, call.v, call.w, call.u, call.cu_seqlens, call.state_indices
    S_all = gather_rows(call.state, idx, call.has_initial_state)  # [S, H, K, V]
    out = np.zeros(v.shape)
    heads, dk, dv = S_all.shape[1:]
    # Heads are independent: a large call runs blocks of heads on a thread pool with one BLAS thread each
    # (head_workers.py, for speed only: each head's sums are its own, whatever the blocks).
    work = r.shape[0] * heads * dk * dv
    with head_map(work, heads) as map_blocks:
        blocks = [h for _, h in head_blocks(work, heads)]
        for s in range(cu.shape[0] - 1):
            if idx[s] < 0:
                continue
            tokens = slice(int(cu[s]), int(cu[s + 1]))

            def run_block(h, s=s, tokens=tokens):
                S_all[s, h] = _recur(S_all[s, h], r[tokens, h], k[tokens, h], v[tokens, h], w[tokens, h], u[h],
                                     out[tokens, h])

            for _ in map_blocks(run_block, blocks):
                pass
    return WKV6(out, scatter_rows(call.state, idx, S_all))


def _recur(S, r, k, v, w, u, out):
    """One sequence through some heads, token by token (RS-20).

    S: float64[Hb, K, V] starting state; r, k, w: float64[L, Hb, K]; v: float64[L, Hb, V]; u: float64[Hb, K].
    Writes out[L, Hb, V] in place; returns the final state.
    """
    S = S.copy()
    kv = np.empty_like(S)   # k v^T of one token, [Hb, K, V]; written in place: no allocation per token
    for t in range(r.shape[0]):
        # r^T (S + diag(u) k v^T) = r^T S + (r . (u * k)) v: the read is a product per head ([1, K] @ [K, V],
        # BLAS), whose order is free (RS-8) and the same for a sequence whatever the batch (RS-7)
        out[t] = (r[t][:, None, :] @ S)[:, 0] + np.sum(r[t] * u * k[t], axis=1)[:, None] * v[t]
        S *= w[t][:, :, None]
        S += np.multiply(k[t][:, :, None], v[t][:, None, :], out=kv)
    return S


def validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None
                       ) -> WKV6Call:
    """Check every argument of `rwkv6_wkv` (RS-2 .. RS-6, RS-17, RS-20) and return them normalised.

    Takes the op's arguments (see `rwkv6_wkv`). Raises ValueError, or TypeError for a wrong type or
    dtype, naming the argument and the broken rule.
    """
    pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
    num_slots, heads, dk, dv = pool.shape
    ra = float_input("r", r, 3, "[T, H, K]")
    tokens = ra.shape[0]
    check_shape("r", ra, (tokens, heads, dk), "[T, H, K]")
    ka = float_input("k", k, 3, "[T, H, K]")
    check_shape("k", ka, (tokens, heads, dk), "[T, H, K]")
    wa = float_input("w", w, 3, "[T, H, K]")
    check_shape("w", wa, (tokens, heads, dk), "[T, H, K]")
    va = float_input("v", v, 3, "[T, H, V]")
    check_shape("v", va, (tokens, heads, dv), "[T, H, V]")
    ua = float_input("u", u, 2, "[H, K]")
    check_shape("u", ua, (heads, dk), "[H, K]")
    cu = cu_seqlens_input(cu_seqlens, tokens)
    seqs = cu.shape[0] - 1
    idx = slot_indices("state_indices", state_indices, seqs, num_slots)
    from_state = initial_flags("has_initial_state", has_initial_state, seqs)
    return WKV6Call(ra, ka, va, wa, ua, pool, cu, idx, from_state)
