"""Input builders and token-by-token oracles shared by the recurrent tests (not a test module)."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from kvconform import reference as R


def mamba2_inputs(rng, tokens, heads, groups, p, n, *, num_slots=4):
    """Random Mamba2 prefill inputs in the tested domain (A < 0, moderate dt)."""
    return dict(
        x=rng.standard_normal((tokens, heads, p)),
        dt=rng.uniform(-2.0, 1.0, (tokens, heads)),
        A=-rng.uniform(0.1, 2.0, heads),
        B=rng.standard_normal((tokens, groups, n)),
        C=rng.standard_normal((tokens, groups, n)),
        D=rng.standard_normal(heads),
        z=rng.standard_normal((tokens, heads, p)),
        dt_bias=rng.uniform(-0.5, 0.5, heads),
        state=rng.standard_normal((num_slots, heads, p, n)),
    )


def ssd_token_by_token(inp, cu_seqlens, state_indices, has_initial_state, *, snapshots=0):
    """RS-18's definition: the Mamba2 update of RS-16 iterated one token at a time, per sequence.

    Returns (out [T, H, P], final states {slot: [H, P, N]}, snapshots [S, K, H, P, N] (NaN past L)).
    """
    tokens, heads, p = inp["x"].shape
    n = inp["B"].shape[2]
    out = np.zeros((tokens, heads, p))
    finals, snaps = {}, np.full((len(state_indices), snapshots, heads, p, n), np.nan)
    for s, slot in enumerate(state_indices):
        lo, hi = cu_seqlens[s], cu_seqlens[s + 1]
        if slot < 0:
            out[lo:hi] = 0.0
            snaps[s] = 0.0
            continue
        row = inp["state"][slot:slot + 1].astype(np.float64) if has_initial_state[s] else np.zeros((1, heads, p, n))
        history = [row[0]]
        for t in range(lo, hi):
            res = R.selective_state_update(
                row, inp["x"][t:t + 1], inp["dt"][t:t + 1], inp["A"], inp["B"][t:t + 1], inp["C"][t:t + 1],
                D=inp["D"], z=inp["z"][t:t + 1], dt_bias=inp["dt_bias"], dt_softplus=True)
            out[t], row = res.out[0], res.state
            history.append(row[0])
        finals[slot] = row[0]
        for r in range(min(snapshots, len(history))):
            snaps[s, r] = history[-1 - r]
    return out, finals, snaps


def ssd(inp, cu_seqlens, **kw):
    return R.ssd_chunked_scan(inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], cu_seqlens,
                              D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True, **kw)


def close(a, b, rtol=1e-9):
    """Reference-vs-reference agreement bound of spec/numerics.md (Recurrent, self-consistency)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= rtol * scale))


def bits(a):
    """Bytes of an array, for bitwise comparison that also treats NaN payloads exactly."""
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()


def rwkv6_token_by_token(r, k, v, w, u, S):
    """The reference's RS-20 with no closed-form chunk (every token through its recurrence), one sequence.

    r, k, w: [L, H, K]; v: [L, H, V]; u: [H, K]; S: [H, K, V] starting state. Returns (out [L, H, V], state).
    """
    with rwkv6_chunking(1 << 62, 1):
        res = R.rwkv6_wkv(r, k, v, w, u, np.asarray(S)[None], np.array([0, r.shape[0]]))
    return res.out, res.state[0]


@contextmanager
def rwkv6_chunking(chunk: int, segment: int):
    """Run `rwkv6_wkv` with closed-form chunks of `chunk` tokens, `segment` chunks at a time (module
    constants of reference/recurrent/rwkv6.py; restored on exit)."""
    from kvconform.reference.recurrent import rwkv6
    saved = rwkv6._CHUNK, rwkv6._SEGMENT
    rwkv6._CHUNK, rwkv6._SEGMENT = chunk, segment
    try:
        yield rwkv6
    finally:
        rwkv6._CHUNK, rwkv6._SEGMENT = saved


def same_values(a, b, rtol=1e-9):
    """`close` on the finite entries, and NaN, +inf and -inf exactly where the other side has them."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    for test in (np.isnan, np.isposinf, np.isneginf):
        if not np.array_equal(test(a), test(b)):
            return False
    finite = np.isfinite(b)
    return close(a[finite], b[finite], rtol)
