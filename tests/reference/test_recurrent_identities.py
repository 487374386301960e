"""Oracle-free identities of the recurrent reference: chunked == token by token, split invariance,
no leakage, untouched rows, group mapping, conv layouts (spec/recurrent.md)."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvconform import reference as R

from ._recurrent_cases import (bits, close, mamba2_inputs, rwkv6_chunking, rwkv6_token_by_token, same_values, ssd,
                               ssd_token_by_token)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def packed_lengths(draw, max_seqs=3, max_len=9):
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=max_seqs))
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


@FAST
@given(cu=packed_lengths(), chunk=st.integers(1, 10), heads_groups=st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3)]),
       seed=st.integers(0, 2**31), snaps=st.integers(0, 4), pad_first=st.booleans())
def test_rs18_chunked_equals_token_by_token(cu, chunk, heads_groups, seed, snaps, pad_first):
    """RS-18/RS-19: outputs, final states and snapshots of the chunked scan equal the iterated RS-16 update
    for every chunk size; RS-5: has_initial_state False ignores a NaN row; RS-3: padding sequence."""
    rng = np.random.default_rng(seed)
    heads, groups = heads_groups
    seqs = len(cu) - 1
    inp = mamba2_inputs(rng, int(cu[-1]), heads, groups, 2, 3, num_slots=seqs + 2)
    slots = rng.permutation(seqs + 2)[:seqs].astype(np.int32)
    if pad_first:
        slots[0] = -1
    has_init = rng.random(seqs) < 0.5
    for s in np.flatnonzero(~has_init):
        if slots[s] >= 0:
            inp["state"][slots[s]] = np.nan
    res = ssd(inp, cu, chunk_size=chunk, state_indices=slots, has_initial_state=has_init, num_snapshots=snaps)
    out, finals, snap = ssd_token_by_token(inp, cu, slots, has_init, snapshots=snaps)
    assert close(res.out, out)
    for slot, state in finals.items():
        assert close(res.state[slot], state)
    assert np.array_equal(np.isnan(res.snapshots), np.isnan(snap))
    assert close(np.nan_to_num(res.snapshots), np.nan_to_num(snap))
    untouched = np.setdiff1d(np.arange(seqs + 2), slots)
    assert bits(res.state[untouched]) == bits(inp["state"][untouched])  # RS-4


@FAST
@given(length=st.integers(1, 16), cuts=st.lists(st.integers(0, 16), max_size=3), chunk=st.integers(1, 6),
       seed=st.integers(0, 2**31))
def test_rs18_split_prefill_carrying_state(length, cuts, chunk, seed):
    """RS-18: a prefill cut into pieces that carry the state through the pool equals one call."""
    rng = np.random.default_rng(seed)
    inp = mamba2_inputs(rng, length, 4, 2, 2, 3, num_slots=2)
    whole = ssd(inp, np.array([0, length]), chunk_size=chunk, state_indices=np.array([1]))
    bounds = sorted({0, length, *[c for c in cuts if c <= length]})
    pool, outs = inp["state"], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        piece = {k: (v[lo:hi] if k in ("x", "dt", "B", "C", "z") else v) for k, v in inp.items()}
        piece["state"] = pool
        res = ssd(piece, np.array([0, hi - lo]), chunk_size=chunk, state_indices=np.array([1]))
        pool = res.state
        outs.append(res.out)
    assert close(np.concatenate(outs), whole.out)
    assert close(pool, whole.state)
    assert bits(pool[0]) == bits(inp["state"][0])


@FAST
@given(cu=packed_lengths(max_seqs=4), seed=st.integers(0, 2**31), shift=st.integers(1, 3))
def test_rs7_ssd_no_leakage_alone_vs_packed_order_and_slot(cu, seed, shift):
    """RS-7: a sequence's results do not depend on the other sequences, their order, padding or its slot
    (bitwise for the reference, whose arithmetic for a sequence does not depend on the batch: RS-8)."""
    rng = np.random.default_rng(seed)
    seqs = len(cu) - 1
    num_slots = seqs + 4
    inp = mamba2_inputs(rng, int(cu[-1]), 4, 2, 2, 3, num_slots=num_slots)
    slots = np.arange(seqs, dtype=np.int32)
    packed = ssd(inp, cu, chunk_size=3, state_indices=slots, num_snapshots=2)
    order = rng.permutation(seqs)
    lens = np.diff(cu)
    for s in range(seqs):
        lo, hi = cu[s], cu[s + 1]
        alone = {k: (v[lo:hi] if k in ("x", "dt", "B", "C", "z") else v) for k, v in inp.items()}
        # alone, in a shifted slot, behind a padding sequence with tokens of its own
        alone["state"] = np.full_like(inp["state"], np.nan)
        alone["state"][s + shift] = inp["state"][s]
        pad_len = 2
        for k in ("x", "dt", "B", "C", "z"):
            alone[k] = np.concatenate([rng.standard_normal((pad_len,) + alone[k].shape[1:]), alone[k]])
        res = ssd(alone, np.array([0, pad_len, pad_len + hi - lo]), chunk_size=3,
                  state_indices=np.array([-1, s + shift]), num_snapshots=2)
        assert bits(res.out[pad_len:]) == bits(packed.out[lo:hi])
        assert not res.out[:pad_len].any()                     # RS-3
        assert bits(res.state[s + shift]) == bits(packed.state[s])
        assert bits(res.snapshots[1]) == bits(packed.snapshots[s])
        assert not res.snapshots[0].any()
    # permuted order of the packed sequences
    new_cu = np.concatenate([[0], np.cumsum(lens[order])])
    perm_tokens = np.concatenate([np.arange(cu[s], cu[s + 1]) for s in order]).astype(int)
    perm = {k: (v[perm_tokens] if k in ("x", "dt", "B", "C", "z") else v) for k, v in inp.items()}
    res = ssd(perm, new_cu, chunk_size=3, state_indices=slots[order], num_snapshots=2)
    assert bits(res.out) == bits(packed.out[perm_tokens])
    assert bits(res.state) == bits(packed.state)


@FAST
@given(batch=st.integers(1, 5), seed=st.integers(0, 2**31), mamba2=st.booleans())
def test_rs4_rs7_ssu_untouched_canary_rows_and_batch_independence(batch, seed, mamba2):
    """RS-4: rows not addressed (NaN canaries included) are bitwise unchanged; RS-3: padding rows;
    RS-7: each row equals the same row run alone in slot 0."""
    rng = np.random.default_rng(seed)
    num_slots = 2 * batch + 2
    if mamba2:
        H, G, P, N = 4, 2, 2, 3
        pool = rng.standard_normal((num_slots, H, P, N)).astype(np.float32)
        args = [rng.standard_normal((batch, H, P)), rng.standard_normal((batch, H)), -rng.random(H),
                rng.standard_normal((batch, G, N)), rng.standard_normal((batch, G, N))]
        kw = dict(D=rng.random(H), z=rng.standard_normal((batch, H, P)), dt_bias=rng.random(H))
    else:
        Dm, N = 3, 2
        pool = rng.standard_normal((num_slots, Dm, N)).astype(np.float32)
        args = [rng.standard_normal((batch, Dm)), rng.standard_normal((batch, Dm)), -rng.random((Dm, N)),
                rng.standard_normal((batch, N)), rng.standard_normal((batch, N))]
        kw = dict(D=rng.random(Dm), z=rng.standard_normal((batch, Dm)), dt_bias=rng.random(Dm))
    slots = rng.permutation(num_slots)[:batch].astype(np.int32)
    slots[rng.random(batch) < 0.3] = -1
    untouched = np.setdiff1d(np.arange(num_slots), slots)
    pool[untouched[: len(untouched) // 2]] = np.nan     # canaries
    before = pool.copy()
    res = R.selective_state_update(pool, *args, **kw, dt_softplus=True, state_indices=slots)
    assert bits(pool) == bits(before)                   # inputs never modified
    assert bits(res.state[untouched]) == bits(pool[untouched])
    assert not res.out[slots < 0].any()
    for b in np.flatnonzero(slots >= 0):
        x, dt, A, B, C = args
        one = R.selective_state_update(pool[slots[b]:slots[b] + 1], x[b:b + 1], dt[b:b + 1], A, B[b:b + 1],
                                       C[b:b + 1], D=kw["D"], z=kw["z"][b:b + 1], dt_bias=kw["dt_bias"],
                                       dt_softplus=True)
        assert bits(one.out[0]) == bits(res.out[b])
        assert bits(one.state[0]) == bits(res.state[slots[b]])


@FAST
@given(seed=st.integers(0, 2**31), G=st.sampled_from([2, 3]), ratio=st.sampled_from([2, 3]))
def test_rs16_group_mapping_matches_per_head_mamba1(seed, G, ratio):
    """RS-16: with G > 1 and H/G > 1 and asymmetric B/C, head h behaves as a Mamba1 state whose B, C are
    group h // (H // G) and whose A is the head's scalar."""
    rng = np.random.default_rng(seed)
    H, P, N = G * ratio, 2, 3
    state = rng.standard_normal((1, H, P, N))
    x, dt, A = rng.standard_normal((1, H, P)), rng.random((1, H)), -rng.random(H)
    B, C = rng.standard_normal((1, G, N)), 3 * rng.standard_normal((1, G, N)) + 1
    res = R.selective_state_update(state, x, dt, A, B, C)
    for h in range(H):
        g = h // (H // G)
        one = R.selective_state_update(state[:, h], x[:, h], np.repeat(dt[:, h:h + 1], P, axis=1),
                                       np.full((P, N), A[h]), B[:, g], C[:, g])
        assert close(one.out[0], res.out[0, h], rtol=1e-15)
        assert close(one.state[0], res.state[0, h], rtol=1e-15)


def _conv_inputs(rng, batch, C, W, steps):
    return (rng.standard_normal((batch, steps, C)).astype(np.float32),
            rng.standard_normal((batch, C, W - 1)).astype(np.float32),
            rng.standard_normal((C, W)), rng.standard_normal(C))


@FAST
@given(W=st.integers(1, 5), steps=st.integers(1, 7), cut=st.integers(0, 7), seed=st.integers(0, 2**31),
       act=st.sampled_from([None, "silu"]))
def test_rs12_conv_multi_token_equals_split_calls(W, steps, cut, seed, act):
    """RS-12: T tokens in one call equal the same tokens split over calls that carry the window."""
    rng = np.random.default_rng(seed)
    x, pool, w, b = _conv_inputs(rng, 2, 3, W, steps)
    cut = min(cut, steps)
    whole = R.causal_conv1d_update(x, pool, w, b, activation=act)
    first = R.causal_conv1d_update(x[:, :cut], pool, w, b, activation=act)
    second = R.causal_conv1d_update(x[:, cut:], first.conv_state, w, b, activation=act)
    assert bits(np.concatenate([first.out, second.out], axis=1)) == bits(whole.out)
    assert bits(second.conv_state) == bits(whole.conv_state)


def _rolled_step(rolled, x, w, b):
    """mamba_ssm-style W-wide state: shift left by one, newest input in the last column."""
    rolled = np.roll(rolled, -1, axis=-1)
    rolled[..., -1] = x
    acc = rolled[..., 0] * w[:, 0]
    for j in range(1, w.shape[1]):
        acc = acc + rolled[..., j] * w[:, j]
    return rolled, acc + b


def _circular_step(buf, written, x, w, b):
    """causal-conv1d circular buffer: read the W-1 previous inputs, then store input number p at p % L."""
    L, W = buf.shape[-1], w.shape[1]
    cols = (written[:, None] - (W - 1) + np.arange(W - 1)[None]) % L
    win = np.concatenate([np.take_along_axis(buf, cols[:, None, :], axis=2), x[:, :, None]], axis=2)
    acc = win[..., 0] * w[:, 0]
    for j in range(1, W):
        acc = acc + win[..., j] * w[:, j]
    buf = buf.copy()
    buf[np.arange(buf.shape[0]), :, written % L] = x
    return buf, written + 1, acc + b


@FAST
@given(W=st.integers(2, 5), extra=st.integers(0, 3), steps=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_rs13_three_conv_layouts_agree(W, extra, steps, seed):
    """RS-13: canonical W-1 window, W-wide rolled state and circular buffer (zero-initialised) give the same
    outputs, and their windows convert to the canonical one, token after token from a fresh sequence."""
    rng = np.random.default_rng(seed)
    batch, C = 2, 3
    x = rng.standard_normal((batch, steps, C))
    w, b = rng.standard_normal((C, W)), rng.standard_normal(C)
    canon = np.zeros((batch, C, W - 1))
    rolled = R.window_to_rolled(canon)
    buf, written = np.zeros((batch, C, W - 1 + extra)), np.zeros(batch, dtype=np.int64)
    for t in range(steps):
        res = R.causal_conv1d_update(x[:, t], canon, w, b)
        canon = res.conv_state
        rolled, y_rolled = _rolled_step(rolled, x[:, t], w, b)
        buf, written, y_circ = _circular_step(buf, written, x[:, t], w, b)
        assert close(y_rolled, res.out, rtol=1e-14) and close(y_circ, res.out, rtol=1e-14)
        assert bits(R.window_from_rolled(rolled)) == bits(canon)
        assert bits(R.window_from_circular(buf, written, W)) == bits(canon)


@FAST
@given(cu=packed_lengths(), cut=st.integers(0, 9), seed=st.integers(0, 2**31), chunk=st.integers(1, 4),
       segment=st.integers(1, 2))
def test_rs20_rwkv6_split_and_no_leakage(cu, cut, seed, chunk, segment):
    """RS-20 with RS-7: splitting every sequence in two calls carrying state equals one call, and a sequence
    alone in another slot gives bitwise the same result as packed (closed-form chunks of 1-4 tokens)."""
    with rwkv6_chunking(chunk, segment):
        _rwkv6_split_and_alone(cu, cut, seed)


def _rwkv6_split_and_alone(cu, cut, seed):
    rng = np.random.default_rng(seed)
    seqs, T, H, K, V = len(cu) - 1, int(cu[-1]), 2, 3, 2
    r, k, v = rng.standard_normal((T, H, K)), rng.standard_normal((T, H, K)), rng.standard_normal((T, H, V))
    w, u = rng.uniform(0.2, 1.0, (T, H, K)), rng.standard_normal((H, K))
    pool = rng.standard_normal((seqs + 1, H, K, V))
    slots = np.arange(seqs)
    whole = R.rwkv6_wkv(r, k, v, w, u, pool, cu, state_indices=slots)
    lens = np.diff(cu)
    heads_len = np.minimum(lens, cut)
    first_tok = np.concatenate([np.arange(cu[s], cu[s] + heads_len[s]) for s in range(seqs)]).astype(int)
    second_tok = np.concatenate([np.arange(cu[s] + heads_len[s], cu[s + 1]) for s in range(seqs)]).astype(int)
    cu1 = np.concatenate([[0], np.cumsum(heads_len)])
    cu2 = np.concatenate([[0], np.cumsum(lens - heads_len)])
    a = R.rwkv6_wkv(r[first_tok], k[first_tok], v[first_tok], w[first_tok], u, pool, cu1, state_indices=slots)
    b = R.rwkv6_wkv(r[second_tok], k[second_tok], v[second_tok], w[second_tok], u, a.state, cu2,
                    state_indices=slots)
    out = np.zeros_like(whole.out)
    out[first_tok], out[second_tok] = a.out, b.out
    assert close(out, whole.out) and close(b.state, whole.state)
    for s in range(seqs):
        lo, hi = cu[s], cu[s + 1]
        alone_pool = np.full_like(pool, np.nan)
        alone_pool[seqs] = pool[s]
        one = R.rwkv6_wkv(r[lo:hi], k[lo:hi], v[lo:hi], w[lo:hi], u, alone_pool, np.array([0, hi - lo]),
                          state_indices=np.array([seqs]))
        assert bits(one.out) == bits(whole.out[lo:hi]) and bits(one.state[seqs]) == bits(whole.state[s])
        assert bits(one.state[:seqs]) == bits(alone_pool[:seqs])


def test_rs5_rwkv6_fresh_sequence_ignores_nan_row():
    pool = np.full((1, 1, 1, 1), np.nan)
    res = R.rwkv6_wkv(np.ones((1, 1, 1)), np.ones((1, 1, 1)), np.full((1, 1, 1), 2.0), np.full((1, 1, 1), 0.5),
                      np.ones((1, 1)), pool, np.array([0, 1]), has_initial_state=np.array([False]))
    assert res.out[0, 0, 0] == 2.0 and res.state[0, 0, 0, 0] == 2.0  # y = 1*(0 + 1*1*2); S = 0.5*0 + 2


@FAST
@given(cu=packed_lengths(), heads_groups=st.sampled_from([(2, 1), (4, 2), (6, 3), (8, 1)]), workers=st.integers(2, 4),
       seed=st.integers(0, 2**31), snaps=st.integers(0, 3))
def test_rs8_heads_on_a_thread_pool_change_no_bit(cu, heads_groups, workers, seed, snaps):
    """Large SSD and RWKV6 calls run blocks of heads on a thread pool (reference/head_workers.py). Each
    head's sums are its own (RS-8), so any block split gives the inline result bit for bit."""
    from kvconform.reference import head_workers
    pytest.importorskip("threadpoolctl")   # without it the reference never pools: nothing to compare

    rng = np.random.default_rng(seed)
    heads, groups = heads_groups
    seqs, T = len(cu) - 1, int(cu[-1])
    slots = np.arange(seqs, dtype=np.int32)
    inp = mamba2_inputs(rng, T, heads, groups, 2, 3, num_slots=seqs + 1)
    r, k, v = rng.standard_normal((T, heads, 3)), rng.standard_normal((T, heads, 3)), rng.standard_normal((T, heads, 2))
    w, u, pool = rng.uniform(0.0, 1.0, (T, heads, 3)), rng.standard_normal((heads, 3)), rng.standard_normal((seqs + 1, heads, 3, 2))
    w[rng.random(w.shape) < 0.05] = 0.0     # some heads' chunks leave RWKV6's closed form, others keep it

    def both():
        with rwkv6_chunking(2, 2):
            return (ssd(inp, cu, chunk_size=3, state_indices=slots, num_snapshots=snaps),
                    R.rwkv6_wkv(r, k, v, w, u, pool, cu, state_indices=slots))

    inline = both()
    saved = head_workers._MIN_WORK, head_workers._usable_cpus
    head_workers._MIN_WORK, head_workers._usable_cpus = 0, lambda: workers   # a pool even on one CPU
    try:
        assert head_workers.pool_size(0, heads) > 1
        pooled = both()
    finally:
        head_workers._MIN_WORK, head_workers._usable_cpus = saved
    for a, b in zip(inline, pooled):
        for x, y in zip(a, b):
            assert bits(x) == bits(y)


RWKV6_HAZARDS = ("none", "zero_w", "tiny_w", "growing_w", "nan_v", "inf_r", "nan_u", "nan_state", "inf_state", "huge_k",
                 "large_k", "tiny_r", "zero_r")


@pytest.mark.parametrize("hazard", RWKV6_HAZARDS)
@FAST
@given(length=st.integers(0, 24), heads=st.integers(1, 3), dk=st.integers(1, 4), dv=st.integers(1, 4),
       chunk=st.integers(1, 5), segment=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_rs20_rwkv6_closed_form_chunks_equal_the_recurrence(hazard, length, heads, dk, dv, chunk, segment, seed):
    """RS-20: the reference's closed-form chunks (reference/recurrent/rwkv6.py `_chunks`) give the token by
    token recurrence within NU-R3, with NaN and infinities exactly where it has them, for decays that
    vanish (w = 0), underflow, grow (w > 1) and for non-finite or extreme values (which leave the form)."""
    rng = np.random.default_rng(seed)
    r, k = rng.standard_normal((length, heads, dk)), rng.standard_normal((length, heads, dk))
    v, w = rng.standard_normal((length, heads, dv)), rng.uniform(0.3, 1.0, (length, heads, dk))
    u, S0 = rng.standard_normal((heads, dk)), rng.standard_normal((1, heads, dk, dv))
    spot = (int(rng.integers(length)), int(rng.integers(heads))) if length else None
    if spot is not None or hazard in ("nan_u", "nan_state", "inf_state"):
        values = {"zero_w": ("w", 0.0), "tiny_w": ("w", 1e-130), "growing_w": ("w", 3.0), "nan_v": ("v", np.nan),
                  "inf_r": ("r", np.inf), "huge_k": ("k", 1e200), "large_k": ("k", 1e100), "tiny_r": ("r", 1e-300),
                  "zero_r": ("r", 0.0)}
        if hazard in values:
            name, value = values[hazard]
            {"r": r, "k": k, "v": v, "w": w}[name][spot] = value
        elif hazard == "nan_u":
            u[0, 0] = np.nan
        elif hazard in ("nan_state", "inf_state"):
            S0[0, 0, 0, 0] = np.nan if hazard == "nan_state" else -np.inf
    with rwkv6_chunking(chunk, segment):
        got = R.rwkv6_wkv(r, k, v, w, u, S0, np.array([0, length]))
    out, S = rwkv6_token_by_token(r, k, v, w, u, S0[0])
    assert same_values(got.out, out) and same_values(got.state[0], S)


def test_rs20_rwkv6_closed_form_runs_where_it_holds_and_only_there(monkeypatch):
    """The closed form really carries clean chunks (no token goes through `_recur` but the tail), and a
    zero decay sends only its own head and chunk token by token."""
    rng = np.random.default_rng(7)
    L, heads = 14, 3
    r, k, v = (rng.standard_normal((L, heads, 2)) for _ in range(3))
    w, u, S0 = rng.uniform(0.5, 1.0, (L, heads, 2)), rng.standard_normal((heads, 2)), np.zeros((1, heads, 2, 2))
    with rwkv6_chunking(4, 2) as module:
        recurred = []
        inner = module._recur
        monkeypatch.setattr(module, "_recur", lambda S, r, *a: recurred.append(r.shape[:2]) or inner(S, r, *a))
        R.rwkv6_wkv(r, k, v, w, u, S0, np.array([0, L]))
        assert recurred == [(2, heads)]                 # the 2-token tail only
        recurred.clear()
        w[5, 1, 0] = 0.0                               # chunk 1 (tokens 4-7), head 1
        got = R.rwkv6_wkv(r, k, v, w, u, S0, np.array([0, L]))
        assert recurred == [(4, 1), (2, heads)]
    out, S = rwkv6_token_by_token(r, k, v, w, u, S0[0])
    assert same_values(got.out, out) and same_values(got.state[0], S)


def test_rs20_rwkv6_closed_form_leaves_tiny_values_to_the_recurrence():
    """r = 1e-300 under decays of 1e-5: the form's r P[t-1] would be subnormal (1e-320, a few bits) while
    the recurrence's terms stay normal, so such a chunk must run token by token (`_closed_form_holds`)."""
    one = np.ones((5, 1, 1))
    r, k, v, w = one * 1e-300, one, one, one * 1e-5
    with rwkv6_chunking(5, 1):
        got = R.rwkv6_wkv(r, k, v, w, np.zeros((1, 1)), np.ones((1, 1, 1, 1)), np.array([0, 5]))
    out, S = rwkv6_token_by_token(r, k, v, w, np.zeros((1, 1)), np.ones((1, 1, 1)))
    assert np.all(np.abs(got.out - out) <= 1e-12 * np.abs(out)) and np.all(np.abs(got.state[0] - S) <= 1e-12 * S)


def _rwkv6_case(length, **tokens):
    """One head, K = V = 1, `length` tokens: r = k = v = 0 and w = 1 except the tokens given as
    name={t: value}; u and the starting state as u=..., S=... (default 0)."""
    arrays = {name: np.full((length, 1, 1), 1.0 if name == "w" else 0.0) for name in "rkvw"}
    for name, values in tokens.items():
        if name in arrays:
            for t, value in values.items():
                arrays[name][t] = value
    u = np.full((1, 1), tokens.get("u", 0.0))
    S = np.full((1, 1, 1), tokens.get("S", 0.0))
    return arrays["r"], arrays["k"], arrays["v"], arrays["w"], u, S


# Chunks near float64's limits, where the closed form and the recurrence would overflow or underflow in
# different places (found by review, 2026-11-25): each leaves the closed form (or, for a huge u alone,
# gets the bonus computed as the recurrence computes it), so the result is the recurrence's own, bit for bit.
RWKV6_RANGE_CASES = {
    "k v overflows in the recurrence only": _rwkv6_case(3, k={0: 2.0}, v={0: 1e308}, w={0: 0.5, 1: 0.5, 2: 0.5}),
    "bonus (r u) k overflows": _rwkv6_case(3, r={0: 2.0}, k={0: 0.25}, v={0: 1.0}, u=1e308),
    "bonus (r u) k underflows": _rwkv6_case(3, r={0: 2.0 ** -400}, k={0: 2.0 ** 400}, v={0: 2.0 ** 1000},
                                            u=2.0 ** -1000),
    "state overflows mid-chunk": _rwkv6_case(3, r={2: 1.0}, k={0: 1.0, 1: 1.0}, v={0: 1e308, 1: -1e308}, S=1.5e308),
    "decays peak mid-chunk over a huge state": _rwkv6_case(3, r={0: 1.0, 1: 1.0}, v={0: 1.0, 1: 1.0, 2: 1.0},
                                                           w={0: 2.0 ** 200, 1: 2.0 ** 200, 2: 2.0 ** -400},
                                                           S=2.0 ** 700),
    "score r P / P k overflows, tiny v": _rwkv6_case(3, r={0: 1.0, 1: 1.0, 2: 2.0 ** 300}, k={0: 2.0 ** 300},
                                                     v={0: 2.0 ** -200}, w={0: 2.0 ** -250, 1: 2.0 ** 500}),
    "score underflows, huge v": _rwkv6_case(3, r={2: 2.0 ** -400}, k={0: 2.0 ** -400}, v={0: 2.0 ** 1000},
                                            w={0: 2.0 ** 400, 1: 2.0 ** -800}),
    "k and decay products past the bounds": _rwkv6_case(3, k={0: 2.0 ** 400}, v={0: 2.0 ** -300},
                                                        w={0: 2.0 ** -400, 1: 2.0 ** 800}),
    # each of these breaks one bound only (the others hold), so each clause of the guard is needed
    "state times a growing decay overflows": _rwkv6_case(3, r={1: 0.25}, w={0: 4.0}, S=1e308),
    "decay product past the bound, r P overflows": _rwkv6_case(3, r={1: 2.0 ** 100}, k={0: 1.0}, v={0: 1.0},
                                                               w={0: 2.0 ** 1000, 1: 2.0 ** -1000}),
    "r past the bound, r P overflows": _rwkv6_case(3, r={1: 2.0 ** 900}, k={0: 1.0}, v={0: 1.0},
                                                   w={0: 2.0 ** 200}),
    # found by review, 2026-11-26: the state times the first decay underflows to 0 in the recurrence, and the
    # next decay would lift the closed form's exact 2^-676 into view (the state's floor, _STATE_FLOOR)
    "tiny state underflows mid-chunk, then grows": _rwkv6_case(3, r={t: 2.0 ** 100 for t in range(3)},
                                                               w={0: 2.0 ** -200, 1: 2.0 ** 400}, S=2.0 ** -876),
}


@pytest.mark.parametrize("name", RWKV6_RANGE_CASES)
def test_rs20_rwkv6_closed_form_never_over_or_underflows_where_the_recurrence_does_not(name):
    """Outside the closed form's bounds (reference/recurrent/rwkv6.py _INPUTS, _DECAYS) a chunk runs token
    by token, and u reaches only the bonus, computed alike: the result, NaN, infinities and underflows
    included, is the recurrence's bit for bit."""
    r, k, v, w, u, S = RWKV6_RANGE_CASES[name]
    with np.errstate(all="ignore"):
        with rwkv6_chunking(3, 1):
            got = R.rwkv6_wkv(r, k, v, w, u, S[None], np.array([0, 3]))
        out, state = rwkv6_token_by_token(r, k, v, w, u, S)
    assert bits(got.out) == bits(out) and bits(got.state[0]) == bits(state)


@pytest.mark.parametrize("H,K,V", [(2, 0, 2), (2, 2, 0), (0, 2, 2)])
def test_rs20_rwkv6_zero_size_heads_over_whole_chunks(H, K, V):
    """Zero-size dimensions pass validation; a sequence of whole chunks gives the empty or zero result."""
    L = 8
    with rwkv6_chunking(4, 1):
        res = R.rwkv6_wkv(np.ones((L, H, K)), np.ones((L, H, K)), np.ones((L, H, V)), np.ones((L, H, K)),
                          np.ones((H, K)), np.ones((1, H, K, V)), np.array([0, L]))
    assert res.out.shape == (L, H, V) and not np.any(res.out) and res.state.shape == (1, H, K, V)


def test_rs20_rwkv6_closed_form_warns_only_where_the_recurrence_does():
    """Decay products that overflow in a chunk the form then leaves must not raise NumPy warnings the
    recurrence would not (they would be errors under -W error)."""
    zeros = np.zeros((8, 1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with rwkv6_chunking(4, 2):
            got = R.rwkv6_wkv(zeros, zeros, zeros, np.full((8, 1, 1), 1e200), np.zeros((1, 1)),
                              np.zeros((1, 1, 1, 1)), np.array([0, 8]))
    assert not np.any(got.out) and not np.any(got.state)


_STORAGE_DTYPES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("dtype", _STORAGE_DTYPES)
@pytest.mark.parametrize("chunk,segment", [(4, 2), (32, 4)])
def test_rs6_rwkv6_input_dtype_changes_no_bit(dtype, chunk, segment):
    """RS-6: the result is the math on the exact values of the inputs, so r, k, v, w in a storage dtype give
    the bits their float64 values give. rwkv6_wkv converts them chunk by chunk rather than as whole arrays
    (issue 16), so every path must convert before it computes: whole chunks, a zero decay sent to the
    recurrence, the partial last chunk and a second sequence."""
    from kvconform.reference.dtypes import resolve_dtype
    rng = np.random.default_rng(7)
    cu = np.array([0, 2 * chunk + 3, 3 * chunk + 4])
    T, H, K, V = int(cu[-1]), 3, 4, 5
    r, k = (rng.standard_normal((T, H, K)) for _ in range(2))
    w = rng.uniform(0.5, 1.0, (T, H, K))
    w[1, 2, 0] = 0.0                                   # one head and chunk through the recurrence
    v = rng.standard_normal((T, H, V))
    stored = [x.astype(resolve_dtype(dtype)) for x in (r, k, v, w)]
    exact = [x.astype(np.float64) for x in stored]
    u, S = rng.standard_normal((H, K)).astype(np.float32), rng.standard_normal((2, H, K, V))
    with rwkv6_chunking(chunk, segment):
        got = R.rwkv6_wkv(*stored, u, S, cu)
        want = R.rwkv6_wkv(*exact, u, S, cu)
    assert bits(got.out) == bits(want.out) and bits(got.state) == bits(want.state)


@pytest.mark.parametrize("dtype", _STORAGE_DTYPES)
def test_rs6_ssd_input_dtype_changes_no_bit(dtype):
    """As above for ssd_chunked_scan, which converts x chunk by chunk (issue 16): x in a storage dtype gives
    the bits of its float64 values, with D (which reads x whole), z, snapshots and a partial last chunk."""
    from kvconform.reference.dtypes import resolve_dtype
    inp = mamba2_inputs(np.random.default_rng(3), 23, 4, 2, 3, 5)
    cu = np.array([0, 9, 23])
    stored = inp["x"].astype(resolve_dtype(dtype))
    got = ssd({**inp, "x": stored}, cu, chunk_size=4, num_snapshots=3)
    want = ssd({**inp, "x": stored.astype(np.float64)}, cu, chunk_size=4, num_snapshots=3)
    assert all(bits(a) == bits(b) for a, b in zip(got, want))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rs4_rwkv6_and_ssd_never_write_their_inputs(dtype):
    """RS-4: kernels never modify their inputs. The large inputs now reach the chunks uncopied (issue 16), so
    the reference must only read them: read-only arrays (a write raises) through every path, a zero decay
    and NaN included, and the values unchanged."""
    rng = np.random.default_rng(11)
    T, H, K, V = 19, 2, 3, 4

    def frozen(x):
        x = np.asarray(x, dtype=dtype).copy()
        x.flags.writeable = False
        return x

    r, k, w = (frozen(rng.uniform(0.5, 1.0, (T, H, K))) for _ in range(3))
    v = rng.standard_normal((T, H, V))
    v[3, 1, 2] = np.nan
    v = frozen(v)
    w_zero = np.array(w)
    w_zero[2, 0, 1] = 0.0
    w_zero = frozen(w_zero)
    before = [bits(x) for x in (r, k, v, w_zero)]
    with rwkv6_chunking(4, 2):
        R.rwkv6_wkv(r, k, v, w_zero, frozen(np.ones((H, K))), np.zeros((1, H, K, V)), np.array([0, T]))
    assert [bits(x) for x in (r, k, v, w_zero)] == before
    inp = {name: frozen(x) for name, x in mamba2_inputs(rng, T, 4, 2, 3, 5).items() if name != "state"}
    inp["state"] = np.zeros((4, 4, 3, 5))
    before = {name: bits(x) for name, x in inp.items() if name != "state"}
    ssd(inp, np.array([0, 7, T]), chunk_size=4, num_snapshots=2)
    assert {name: bits(x) for name, x in inp.items() if name != "state"} == before
