"""RWKV6 wkv over packed variable-length sequences and a slot pool (spec/recurrent.md RS-20)."""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..buffers import Buffers
from ..head_workers import head_blocks, head_map
from ..validation import check_shape, float_array, float_input
from .slots import gather_rows, initial_flags, pool_input, scatter_rows, slot_indices
from .varlen import cu_seqlens_input


class WKV6(NamedTuple):
    out: np.ndarray    # [T, H, V] float64
    state: np.ndarray  # [num_slots, H, K, V] the new pool, the pool's dtype


class WKV6Call(NamedTuple):
    """The arguments of one ``rwkv6_wkv`` call after validation (RS-2 .. RS-6, RS-17, RS-20).

    r, k, w:           float64[T, H, K] (with upcast=False: the caller's float dtype, not copied)
    v:                 float64[T, H, V] (likewise)
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
    Whole chunks of a long sequence are computed in an equivalent closed form where neither form can
    overflow or underflow (`_chunks`): the two then differ only by the rounding of their terms (RS-8). The
    rest runs token by token (`_recur`).
    """
    # r, k, v, w stay in the caller's dtype: each chunk converts its tokens to float64 as it copies them
    # (exactly), so a long call never holds a float64 copy of them (issue 16: 128 MiB of fresh memory at
    # T 2048, H 32, K = V = 64, a fifth of the call's time on issue 16's VM).
    call = validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, state_indices=state_indices,
                              has_initial_state=has_initial_state, upcast=False)
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
                S_all[s, h] = _scan(S_all[s, h], r[tokens, h], k[tokens, h], v[tokens, h], w[tokens, h], u[h],
                                    out[tokens, h])

            for _ in map_blocks(run_block, blocks):
                pass
    return WKV6(out, scatter_rows(call.state, idx, S_all))


# Whole chunks of _CHUNK tokens take a closed form (`_chunks`): the recurrence regrouped so that its products
# are GEMMs and the state is touched once per chunk rather than once per token (issue 16's speed). It is
# taken per head and chunk only where neither form can overflow or underflow (`_closed_form_holds`), so the
# two differ only by the rounding of their terms (class R, RS-8); every other case (zero, negative or
# extreme decays, non-finite values, extreme magnitudes) and each sequence's last partial chunk run the
# recurrence as RS-20 states it (`_recur`), and so give exactly its NaN, infinities and underflows.
_CHUNK = 32
_SEGMENT = 4         # chunks whose elementwise work and products are formed together
# Bounds of the closed form: nonzero |r|, |k|, |v| within [2^-100, 2^100], nonzero |S| within [2^-500, 2^100]
# and the decay products P within [2^-200, 2^200] (u: see `_closed_form_holds`). Every product either form
# makes then lies within [2^-800, 2^700] (a decay ratio P[t-1] / P[s] is within 2^+-400), far inside
# float64's normal range, so neither form overflows or underflows; they differ by the rounding of their
# terms, and where a sum cancels both are off by that rounding relative to its terms (RS-8). Without the
# floor on S, a state entry of 2^-876 under decays 2^-200 then 2^400 underflowed to 0 in the recurrence
# and not in the closed form (found by review, 2026-11-26).
_INPUTS = 2.0 ** 100
_DECAYS = 2.0 ** 200
_STATE_FLOOR = 2.0 ** -500


def _scan(S, r, k, v, w, u, out):
    """One sequence through some heads (RS-20): whole chunks in closed form where it holds, the rest token
    by token.

    S: float64[Hb, K, V] starting state; r, k, w: [L, Hb, K] and v: [L, Hb, V], any float dtype (read as
    float64); u: float64[Hb, K]. Writes out[L, Hb, V] in place; returns the final state (a new array).
    """
    length, chunk = r.shape[0], _CHUNK
    whole = length - length % chunk if S.size else 0    # no chunks for zero-size heads
    S = S.copy()
    work = Buffers()    # one set of temporaries for all segments (see buffers.py)
    for start in range(0, whole, chunk * _SEGMENT):
        seg = slice(start, min(whole, start + chunk * _SEGMENT))
        _chunks(S, r[seg], k[seg], v[seg], w[seg], u, out[seg], work)
    return _recur(S, r[whole:], k[whole:], v[whole:], w[whole:], u, out[whole:])


def _recur(S, r, k, v, w, u, out):
    """Some tokens of one sequence through some heads, token by token: RS-20 as the spec states it.

    S: float64[Hb, K, V] starting state; r, k, w: [L, Hb, K] and v: [L, Hb, V], any float dtype (upcast
    here, exactly); u: float64[Hb, K]. Writes out[L, Hb, V] in place; returns the final state (a new array).
    """
    r, k, v, w = (dtypes.upcast(x) for x in (r, k, v, w))
    S = S.copy()
    kv = np.empty_like(S)   # k v^T of one token, [Hb, K, V]; written in place: no allocation per token
    for t in range(r.shape[0]):
        # r^T (S + diag(u) k v^T) = r^T S + (r . (u * k)) v: the read is a product per head ([1, K] @ [K, V],
        # BLAS), whose order is free (RS-8) and the same for a sequence whatever the batch (RS-7)
        out[t] = (r[t][:, None, :] @ S)[:, 0] + np.sum(r[t] * u * k[t], axis=1)[:, None] * v[t]
        S *= w[t][:, :, None]
        S += np.multiply(k[t][:, :, None], v[t][:, None, :], out=kv)
    return S


def _chunks(S, r, k, v, w, u, out, work):
    """C whole chunks of Q = _CHUNK tokens of one sequence through some heads: RS-20 unrolled over each chunk.

    S: float64[Hb, K, V] state before them, updated in place; r, k, w: [C*Q, Hb, K] and v: [C*Q, Hb, V],
    any float dtype (converted exactly to float64 as they are copied or read); u: float64[Hb, K];
    writes out[C*Q, Hb, V]; work: `Buffers` for the temporaries.

    Inside a chunk, with P[t] = prod_{j<=t} w[j] per channel (P[-1] = 1), the state token t reads is
    S_t = P[t-1] S + sum_{s<t} (P[t-1] / P[s]) k[s] v[s]^T, so
        y[t]   = (r[t] P[t-1]) S + sum_{s<t} <r[t] P[t-1], k[s] / P[s]> v[s] + <r[t] u, k[t]> v[t]
        S_next = P[Q-1] (S + sum_s (k[s] / P[s]) v[s]^T).
    A head and chunk where `_closed_form_holds` fails, or whose state entering the chunk has a nonzero
    entry outside [_STATE_FLOOR, _INPUTS] in magnitude (or one not finite), runs `_recur` instead, from
    the same state.
    """
    heads, dk, dv, Q = r.shape[1], r.shape[2], v.shape[2], _CHUNK
    C = r.shape[0] // Q
    # The temporaries, from `work`: decays [C, Q, Hb, K] token-major as the inputs; the rest head-major
    # (every per-head matrix then has one layout whatever Hb: the same BLAS calls): r, k, P, r_dec, k_inc,
    # scratch [Hb, C, Q, K]; v, y [Hb, C, Q, V]; scores [Hb, C, Q, Q]; read [Hb, Q, V]; write [Hb, K, V].
    shapes = dict(decays=(C, Q, heads, dk), v=(heads, C, Q, dv), y=(heads, C, Q, dv), scores=(heads, C, Q, Q),
                  read=(heads, Q, dv), write=(heads, dk, dv),
                  **{name: (heads, C, Q, dk) for name in ("r", "k", "P", "r_dec", "k_inc", "scratch")})
    W = SimpleNamespace(**{name: work.array(name, shape) for name, shape in shapes.items()})
    chunked = [x.reshape(C, Q, heads, -1) for x in (r, k, v, w)]          # views [C, Q, Hb, .]
    # Everything up to the loop is also formed for chunks where the form does not hold (they are redone
    # token by token): their overflows and invalid values are expected, and silenced.
    with np.errstate(all="ignore"):
        P = W.decays                 # a cumprod along Q, token-major (~5x faster than along a strided axis)
        P[:, 0] = chunked[3][:, 0]
        for t in range(1, Q):
            np.multiply(P[:, t - 1], chunked[3][:, t], out=P[:, t])
        for dst, x in ((W.r, chunked[0]), (W.k, chunked[1]), (W.v, chunked[2]), (W.P, P)):
            np.copyto(dst, x.transpose(2, 0, 1, 3))
        P = W.P
        holds = _closed_form_holds(P, W.r, W.k, W.v, W.scratch, W.y)        # [Hb, C]
        last = P[:, :, -1:]                                                # P[Q-1], [Hb, C, 1, K]
        W.r_dec[:, :, 0] = W.r[:, :, 0]
        np.multiply(W.r[:, :, 1:], P[:, :, :-1], out=W.r_dec[:, :, 1:])             # r[t] P[t-1]
        np.divide(W.k, P, out=W.k_inc)                                              # k[s] / P[s]
        np.matmul(W.r_dec, W.k_inc.transpose(0, 1, 3, 2), out=W.scores)              # [Hb, C, Q, Q]
        # entries s >= t are not decays (their factors P[t-1] / P[s] >= 1 may overflow): zeroed, not masked
        # by a product; the diagonal is the bonus u (s = t)
        np.copyto(W.scores, 0.0, where=_upper_triangle(Q))
        diagonal = np.arange(Q)
        bonus = np.multiply(W.r, u[:, None, None, :], out=W.scratch)            # r u k, as `_recur` orders it
        bonus *= W.k
        W.scores[..., diagonal, diagonal] = bonus.sum(axis=3)
        np.matmul(W.scores, W.v, out=W.y)                                                # [Hb, C, Q, V]
    for c in range(C):
        # S grows or shrinks with the decays: checked at every chunk (NaN compares False)
        fast = holds[:, c] & _magnitudes_within(np.abs(S, out=W.write), (1, 2), _STATE_FLOOR)
        if fast.all():
            W.y[:, c] += np.matmul(W.r_dec[:, c], S, out=W.read)
            S += np.matmul(W.k_inc[:, c].transpose(0, 2, 1), W.v[:, c], out=W.write)
            S *= last[:, c].transpose(0, 2, 1)
            continue
        for h in np.flatnonzero(fast):
            W.y[h, c] += W.r_dec[h, c] @ S[h]
            S[h] = last[h, c].T * (S[h] + W.k_inc[h, c].T @ W.v[h, c])
        slow = ~fast
        y_slow = np.empty((Q, int(slow.sum()), W.v.shape[3]))
        S[slow] = _recur(S[slow], *(x[c][:, slow] for x in chunked), u[slow], y_slow)
        W.y[slow, c] = y_slow.transpose(1, 0, 2)
    np.copyto(out.reshape(C, Q, heads, -1), W.y.transpose(1, 2, 0, 3))


@functools.cache
def _upper_triangle(Q):
    """bool[Q, Q], True where s >= t (row t, column s)."""
    return ~np.tri(Q, k=-1, dtype=bool)


def _closed_form_holds(P, r, k, v, scratch_k, scratch_v):
    """Per head and chunk, may `_chunks` use its closed form? bool[Hb, C].

    P: float64[Hb, C, Q, K] the decay products inside each chunk; r, k: float64[Hb, C, Q, K];
    v: float64[Hb, C, Q, V]; scratch_k, scratch_v: float64 like k and v, overwritten.
    Yes where every P lies within [1/_DECAYS, _DECAYS] (so every w is positive and finite) and every r,
    k and v is 0 or of a magnitude within [1/_INPUTS, _INPUTS] (so finite); `_chunks` also bounds the
    state. u needs no bound: it reaches only the bonus sum(r u k), which both forms compute alike, and
    its product with v[t], against which the other terms (at most 2^700) are too small to change an
    overflow. A head's answer reads only its own values, so a head takes the same path whatever block or
    batch it is in (RS-7, RS-8).
    """
    axes = (2, 3)
    holds = (P.min(axis=axes) >= 1 / _DECAYS) & (P.max(axis=axes) <= _DECAYS)     # NaN compares False
    for x, scratch in ((r, scratch_k), (k, scratch_k), (v, scratch_v)):
        holds &= _magnitudes_within(np.abs(x, out=scratch), axes, 1 / _INPUTS)
    return holds


def _magnitudes_within(a, axes, floor):
    """Whether every entry of `a` (magnitudes; NaN compares False) is 0 or within [floor, _INPUTS], reduced
    over `axes`, which are `a`'s trailing two."""
    within = a.max(axis=axes) <= _INPUTS
    small = a.min(axis=axes) < floor                 # a tiny nonzero value, or only a 0 (allowed)
    if small.any():
        within[small] &= np.all((a[small] >= floor) | (a[small] == 0), axis=(1, 2))
    return within


def validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None,
                       upcast=True) -> WKV6Call:
    """Check every argument of `rwkv6_wkv` (RS-2 .. RS-6, RS-17, RS-20) and return them normalised.

    Takes the op's arguments (see `rwkv6_wkv`); upcast=False leaves r, k, v, w in their own float dtype
    (checked alike). Raises ValueError, or TypeError for a wrong type or dtype, naming the argument and
    the broken rule.
    """
    tokens_input = float_input if upcast else float_array
    pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
    num_slots, heads, dk, dv = pool.shape
    ra = tokens_input("r", r, 3, "[T, H, K]")
    tokens = ra.shape[0]
    check_shape("r", ra, (tokens, heads, dk), "[T, H, K]")
    ka = tokens_input("k", k, 3, "[T, H, K]")
    check_shape("k", ka, (tokens, heads, dk), "[T, H, K]")
    wa = tokens_input("w", w, 3, "[T, H, K]")
    check_shape("w", wa, (tokens, heads, dk), "[T, H, K]")
    va = tokens_input("v", v, 3, "[T, H, V]")
    check_shape("v", va, (tokens, heads, dv), "[T, H, V]")
    ua = float_input("u", u, 2, "[H, K]")
    check_shape("u", ua, (heads, dk), "[H, K]")
    cu = cu_seqlens_input(cu_seqlens, tokens)
    seqs = cu.shape[0] - 1
    idx = slot_indices("state_indices", state_indices, seqs, num_slots)
    from_state = initial_flags("has_initial_state", has_initial_state, seqs)
    return WKV6Call(ra, ka, va, wa, ua, pool, cu, idx, from_state)
