"""The gated delta rule reference (spec/recurrent.md RS-28 … RS-35): hand-worked goldens, a cross-check
against the paper's equations (tests/reference/_gated_delta_paper.py), identities and argument errors."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvconform import reference as R

from ._gated_delta_paper import paper_scan
from ._recurrent_cases import bits, close

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _golden_inputs():
    """Two tokens, one head, K = 2, V = 1, scale 1 (the arithmetic is in the test docstrings)."""
    q = np.array([[[1.0, 1.0]], [[1.0, 0.0]]])
    k = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    v = np.array([[[3.0]], [[0.0]]])
    g = np.array([[math.log(0.5)], [0.0]])
    beta = np.array([[0.5], [1.0]])
    state = np.array([[[[1.0], [2.0]]]])             # [1 slot, H=1, K=2, V=1]
    return q, k, v, g, beta, state


def test_rs30_golden_two_tokens_update():
    """RS-30 by hand. Token 1: decay S = 0.5 [1, 2] = [0.5, 1]; S^T k = 0.5; u = 0.5 (3 - 0.5) = 1.25;
    S = [0.5 + 1.25, 1] = [1.75, 1]; out = S^T [1, 1] = 2.75. Token 2: decay exp(0) = 1; S^T k = 1;
    u = 1 (0 - 1) = -1; S = [1.75, 0]; out = S^T [1, 0] = 1.75."""
    q, k, v, g, beta, state = _golden_inputs()
    r1 = R.gated_delta_rule_update(q[:1], k[:1], v[:1], g[:1], beta[:1], state, scale=1.0)
    assert r1.out[0, 0, 0] == 2.75
    assert r1.state[0, 0, :, 0].tolist() == [1.75, 1.0]
    r2 = R.gated_delta_rule_update(q[1:], k[1:], v[1:], g[1:], beta[1:], r1.state, scale=1.0)
    assert r2.out[0, 0, 0] == 1.75
    assert r2.state[0, 0, :, 0].tolist() == [1.75, 0.0]


@pytest.mark.parametrize("chunk", [1, 2, 64])
def test_rs33_golden_two_tokens_chunked(chunk):
    """RS-32/RS-33: the same two tokens as one sequence give the same numbers for every chunk size."""
    q, k, v, g, beta, state = _golden_inputs()
    res = R.gated_delta_rule_chunked(q, k, v, g, beta, state, np.array([0, 2]), chunk_size=chunk, scale=1.0)
    assert np.allclose(res.out[:, 0, 0], [2.75, 1.75], rtol=0, atol=1e-15)
    assert np.allclose(res.state[0, 0, :, 0], [1.75, 0.0], rtol=0, atol=1e-15)


def test_rs29_golden_l2norm_and_default_scale():
    """RS-29: q = k = [3, 4] normalise to [3, 4] / sqrt(25 + 1e-6); zero state, g = 0, beta = 1, v = 2:
    u = 2, S = k^ u, out = K^-1/2 (q^ . k^) u = 2^-1/2 * 25 / (25 + 1e-6) * 2."""
    x = np.array([[[3.0, 4.0]]])
    state = np.zeros((1, 1, 2, 1))
    res = R.gated_delta_rule_update(x, x, np.array([[[2.0]]]), np.zeros((1, 1)), np.ones((1, 1)), state,
                                    use_qk_l2norm=True)
    expected = 2 ** -0.5 * 25.0 / (25.0 + 1e-6) * 2.0
    assert abs(res.out[0, 0, 0] - expected) <= 1e-15
    assert np.allclose(res.state[0, 0, :, 0], 2.0 * np.array([3.0, 4.0]) / math.sqrt(25.0 + 1e-6), atol=1e-15)


def test_rs28_golden_head_sharing():
    """RS-28: H = 4 state heads over Hk = 2 q/k heads: heads 0, 1 read q/k head 0 and heads 2, 3 head 1
    (h // (H // Hk)), not h % Hk. Zero state, g = 0, beta = 1: out[h] = scale (q_j . k_j) v[h]."""
    q = np.array([[[1.0, 0.0], [0.0, 2.0]]])          # [1, Hk=2, K=2]
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    v = np.array([[[1.0], [2.0], [3.0], [4.0]]])      # [1, H=4, V=1]
    res = R.gated_delta_rule_update(q, k, v, np.zeros((1, 4)), np.ones((1, 4)), np.zeros((1, 4, 2, 1)),
                                    scale=1.0)
    assert res.out[0, :, 0].tolist() == [1.0, 2.0, 6.0, 8.0]


def _inputs(rng, tokens, heads, qk_heads, dk, dv, num_slots, norm):
    kscale = 1.0 if norm or dk == 0 else 1.0 / math.sqrt(dk)   # RS-35: beta |k|^2 <= 1 without normalisation
    return dict(q=rng.standard_normal((tokens, qk_heads, dk)),
                k=rng.uniform(-kscale, kscale, (tokens, qk_heads, dk)),
                v=rng.standard_normal((tokens, heads, dv)),
                g=-rng.uniform(0.0, 1.5, (tokens, heads)),
                beta=rng.uniform(0.0, 1.0, (tokens, heads)),
                state=rng.standard_normal((num_slots, heads, dk, dv)))


@st.composite
def scans(draw, max_seqs=3, max_len=9):
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=max_seqs))
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    heads, qk_heads = draw(st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]))
    norm = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    seqs = len(lengths)
    inp = _inputs(rng, int(cu[-1]), heads, qk_heads, draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                  seqs + 2, norm)
    slots = rng.permutation(seqs + 2)[:seqs].astype(np.int32)
    if draw(st.booleans()):
        slots[draw(st.integers(0, seqs - 1))] = -1
    has_init = rng.random(seqs) < 0.6
    for s in np.flatnonzero(~has_init):
        if slots[s] >= 0:
            inp["state"][slots[s]] = np.nan             # RS-5: never read
    scale = draw(st.sampled_from([None, 0.5]))
    return inp, cu, slots, has_init, norm, scale


@FAST
@given(case=scans(), chunk=st.integers(1, 10))
def test_rs33_chunked_equals_paper_token_by_token(case, chunk):
    """RS-30/RS-32/RS-33: the reference's chunked WY form equals the paper's recurrence, per token and
    head, for every chunk size; RS-5 fresh rows over NaN; RS-3 padding outputs 0 and pool untouched;
    RS-28 head sharing; RS-29 normalisation and default scale (NU-R3 bound)."""
    inp, cu, slots, has_init, norm, scale = case
    res = R.gated_delta_rule_chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["state"], cu,
                                     chunk_size=chunk, scale=scale, use_qk_l2norm=norm, state_indices=slots,
                                     has_initial_state=has_init)
    out, finals = paper_scan(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["state"], cu, slots,
                             has_init, scale=scale, use_qk_l2norm=norm)
    assert close(res.out, out)
    for slot, S in finals.items():
        assert close(res.state[slot], S)
    touched = set(finals)
    for slot in range(inp["state"].shape[0]):
        if slot not in touched:
            assert bits(res.state[slot]) == bits(inp["state"][slot])
    for s in np.flatnonzero(slots < 0):
        assert np.all(res.out[cu[s]:cu[s + 1]] == 0.0)


@FAST
@given(case=scans(max_seqs=1, max_len=12), cut=st.integers(0, 12), chunk=st.integers(1, 5))
def test_rs34_split_prefill_equals_one_call(case, cut, chunk):
    """RS-34(a): a sequence prefilled in two calls (state carried through its slot) equals one call."""
    inp, cu, slots, has_init, norm, scale = case
    slot = abs(int(slots[0])) if slots[0] >= 0 else 0
    length = int(cu[-1])
    cut = min(cut, length)
    kw = dict(scale=scale, use_qk_l2norm=norm, state_indices=np.array([slot]), chunk_size=chunk)
    x = {n: inp[n] for n in ("q", "k", "v", "g", "beta")}
    whole = R.gated_delta_rule_chunked(**x, state=inp["state"], cu_seqlens=np.array([0, length]),
                                       has_initial_state=has_init[:1], **kw)
    first = R.gated_delta_rule_chunked(**{n: a[:cut] for n, a in x.items()}, state=inp["state"],
                                       cu_seqlens=np.array([0, cut]), has_initial_state=has_init[:1], **kw)
    second = R.gated_delta_rule_chunked(**{n: a[cut:] for n, a in x.items()}, state=first.state,
                                        cu_seqlens=np.array([0, length - cut]), **kw)
    assert close(np.concatenate([first.out, second.out]), whole.out)
    assert close(second.state[slot], whole.state[slot])


@FAST
@given(case=scans(max_seqs=3, max_len=1))
def test_rs34_update_equals_one_token_sequences(case):
    """RS-34(b): the update op equals the chunked op on one-token sequences (lengths 1, all initial)."""
    inp, _, slots, _, norm, scale = case
    rows = slots.shape[0]
    rng = np.random.default_rng(rows)
    x = _inputs(rng, rows, inp["v"].shape[1], inp["q"].shape[1], inp["q"].shape[2], inp["v"].shape[2],
                inp["state"].shape[0], norm)
    upd = R.gated_delta_rule_update(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], scale=scale,
                                    use_qk_l2norm=norm, state_indices=slots)
    chk = R.gated_delta_rule_chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"],
                                     np.arange(rows + 1, dtype=np.int32), scale=scale, use_qk_l2norm=norm,
                                     state_indices=slots)
    assert close(upd.out, chk.out) and close(upd.state, chk.state)


@FAST
@given(case=scans(max_seqs=3, max_len=6), chunk=st.integers(1, 4))
def test_rs34_no_leakage_bitwise(case, chunk):
    """RS-34(c)/RS-7: each live sequence run alone, in another slot, gives bitwise the packed result."""
    inp, cu, slots, has_init, norm, scale = case
    packed = R.gated_delta_rule_chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["state"], cu,
                                        chunk_size=chunk, scale=scale, use_qk_l2norm=norm, state_indices=slots,
                                        has_initial_state=has_init)
    for s in np.flatnonzero(slots >= 0):
        lo, hi = int(cu[s]), int(cu[s + 1])
        alone_pool = np.zeros((2,) + inp["state"].shape[1:])
        alone_pool[1] = inp["state"][slots[s]]
        alone = R.gated_delta_rule_chunked(
            *(inp[n][lo:hi] for n in ("q", "k", "v", "g", "beta")), alone_pool, np.array([0, hi - lo]),
            chunk_size=chunk, scale=scale, use_qk_l2norm=norm, state_indices=np.array([1]),
            has_initial_state=has_init[s:s + 1])
        assert bits(alone.out) == bits(packed.out[lo:hi])
        assert bits(alone.state[1]) == bits(packed.state[slots[s]])


def _valid_update():
    rng = np.random.default_rng(0)
    x = _inputs(rng, 2, 4, 2, 3, 2, 3, False)
    return x


@pytest.mark.parametrize("change, error, words", [
    (dict(q=np.zeros((2, 3, 3))), ValueError, "q"),                       # Hk = 3 does not divide H = 4
    (dict(k=np.zeros((2, 2, 4))), ValueError, "k"),
    (dict(v=np.zeros((2, 4, 3))), ValueError, "v"),
    (dict(g=np.zeros((2, 3))), ValueError, "g"),
    (dict(beta=np.zeros((2,))), ValueError, "beta"),
    (dict(q=np.zeros((2, 2, 3), dtype=np.int32)), TypeError, "q"),
    (dict(state=np.zeros((3, 4, 3, 2), dtype=np.float16)), TypeError, "state"),
    (dict(scale=0.0), ValueError, "scale"),
    (dict(scale="1"), TypeError, "scale"),
    (dict(use_qk_l2norm=1), TypeError, "use_qk_l2norm"),
    (dict(state_indices=np.array([1, 1])), ValueError, "state_indices"),
    (dict(state_indices=np.array([0, 3])), ValueError, "state_indices"),
])
def test_rs28_rs31_update_rejects(change, error, words):
    """RS-28/RS-29/RS-31 (RS-2, RS-4, RS-6): malformed arguments raise, naming the argument."""
    x = dict(_valid_update(), **change)
    with pytest.raises(error, match=words):
        R.gated_delta_rule_update(**x)


@pytest.mark.parametrize("change, error, words", [
    (dict(cu_seqlens=np.array([0, 1])), ValueError, "cu_seqlens"),
    (dict(chunk_size=0), ValueError, "chunk_size"),
    (dict(has_initial_state=np.array([1, 0])), TypeError, "has_initial_state"),
    (dict(state_indices=np.array([2, 2])), ValueError, "state_indices"),
])
def test_rs32_chunked_rejects(change, error, words):
    """RS-32 (RS-17, RS-33): malformed packing, chunk size, flags and slots raise, naming the argument."""
    x = {**_valid_update(), "cu_seqlens": np.array([0, 1, 2]), **change}
    with pytest.raises(error, match=words):
        R.gated_delta_rule_chunked(**x)


@pytest.mark.parametrize("tokens, heads, qk_heads, dk, dv", [
    (2, 2, 1, 0, 3),     # K = 0: no default scale K ** -0.5 (was a ZeroDivisionError)
    (2, 0, 1, 3, 2),     # H = 0 (Hk = 1 "divides" it): was accepted silently
    (2, 2, 1, 3, 0),     # V = 0: was accepted silently
])
@pytest.mark.parametrize("op", ["update", "chunked"])
def test_rs28_empty_head_key_or_value_dims_are_rejected(op, tokens, heads, qk_heads, dk, dv):
    """RS-28/RS-32: H, K, V >= 1; an empty dimension is a one-line ValueError naming `state`."""
    x = _inputs(np.random.default_rng(0), tokens, heads, qk_heads, dk, dv, 3, False)
    if op == "chunked":
        x["cu_seqlens"] = np.array([0, 1, 2])
    with pytest.raises(ValueError, match=r"^state must have H >= 1 heads, key dim K >= 1 and value dim V >= 1 "
                                         r"\(RS-28\), got shape \(3, %d, %d, %d\)" % (heads, dk, dv)):
        getattr(R, f"gated_delta_rule_{op}")(**x)


def test_rs28_an_empty_batch_is_legal():
    """B = 0 (T = 0, S = 0 for the chunked op) gives empty outputs and leaves the pool as it was."""
    x = _inputs(np.random.default_rng(0), 0, 2, 1, 3, 2, 3, False)
    up = R.gated_delta_rule_update(**x, state_indices=np.zeros(0, np.int32))
    assert up.out.shape == (0, 2, 2) and bits(up.state) == bits(x["state"])
    scan = R.gated_delta_rule_chunked(**x, cu_seqlens=np.array([0]), state_indices=np.zeros(0, np.int32))
    assert scan.out.shape == (0, 2, 2) and bits(scan.state) == bits(x["state"])
