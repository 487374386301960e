"""The Pallas chunked variable-length SSD scan against the reference (spec/recurrent.md RS-2 .. RS-6,
RS-16 .. RS-19).

Tolerances (spec/numerics.md NU-R1, NU-R2, NU-R4): untouched pool rows, padding outputs and padding
snapshots bit for bit; outputs, final states and snapshots r <= L_s class R with n = L_s * N (L_s the
longest sequence of the call), M the largest term magnitude (|C| |S_t|, |D x|, |dt' x B| over the states
S_t the sequences pass through, computed here token by token in float64); snapshots r > L_s never compared.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402

from suite_checks import assert_conforms, inputs_of  # noqa: E402

BACKEND = make_backend()
F32 = np.float32


def _inputs(rng, T, H, G, P, N, slots):
    return dict(state=rng.standard_normal((slots, H, P, N)).astype(F32),
                x=rng.standard_normal((T, H, P)).astype(F32), dt=rng.standard_normal((T, H)).astype(F32),
                A=-rng.uniform(0.2, 1.5, H).astype(F32), B=rng.standard_normal((T, G, N)).astype(F32),
                C=rng.standard_normal((T, G, N)).astype(F32))


def _check(inp, cu, idx, init, K, chunk, kw):
    """The suite's checks: NU-R1 exact untouched rows, zero padding outputs and snapshots, NU-R2 class R
    for outputs, final states and snapshots r <= L_s (NU-R4)."""
    before = {k: v.copy() for k, v in inp.items()}
    inputs = inputs_of("ssd_chunked_scan", inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], cu,
                       chunk_size=chunk, state_indices=idx, has_initial_state=init, num_snapshots=K, **kw)
    got = BACKEND.ssd_chunked_scan(**inputs)
    for k in inp:
        assert np.array_equal(inp[k].view(np.uint8), before[k].view(np.uint8))  # RS-4: inputs unmodified
    exp = reference.ssd_chunked_scan(**inputs)
    assert_conforms("ssd_chunked_scan", inputs, got, exp)
    return got, exp


def test_varlen_padding_fresh_empty_and_snapshots():
    """Lengths 12 (two chunks of 8), 0 (with a state: written back unchanged), 6 (padding: out 0, row
    untouched), 3 (< K: snapshot r = 3 is the starting state), 4 (fresh, its NaN row ignored, RS-5);
    a NaN canary row nobody addresses; every option on."""
    rng = np.random.default_rng(21)
    cu = np.array([0, 12, 12, 18, 21, 25])
    H, G, P, N = 4, 2, 2, 4
    inp = _inputs(rng, 25, H, G, P, N, 7)
    inp["state"][[4, 6]] = np.nan  # 4: fresh sequence's row; 6: canary nobody addresses
    kw = dict(D=rng.standard_normal(H).astype(F32), z=rng.standard_normal((25, H, P)).astype(F32),
              dt_bias=np.full(H, -0.5, F32), dt_softplus=True)
    idx = np.array([2, 0, -1, 1, 4])
    init = np.array([True, True, True, True, False])
    got, _ = _check(inp, cu, idx, init, K=4, chunk=8, kw=kw)
    assert np.array_equal(got.state[0], inp["state"][0])  # length 0 with a state: the starting state, RS-18


def test_single_group_default_slots_chunk_hint():
    """G = 1, no options, state_indices / has_initial_state None, the default chunk hint 64 (one chunk
    per sequence); then the same call with chunk hint 1: results agree within class R (RS-18)."""
    rng = np.random.default_rng(22)
    cu = np.array([0, 9, 16])
    inp = _inputs(rng, 16, 2, 1, 2, 4, 2)
    inp["dt"] = np.abs(inp["dt"])  # without softplus dt' = dt: keep decays in (0, 1]
    a, _ = _check(inp, cu, None, None, K=0, chunk=64, kw={})
    b, _ = _check(inp, cu, None, None, K=0, chunk=1, kw={})
    assert a.snapshots.shape == (2, 0, 2, 2, 4)


def test_fresh_empty_sequence_writes_zeros():
    """RS-18: a length-0 fresh sequence writes its starting state, exact zeros, over a NaN row."""
    rng = np.random.default_rng(23)
    inp = _inputs(rng, 4, 2, 1, 2, 4, 2)
    inp["state"][1] = np.nan
    inp["dt"] = np.abs(inp["dt"])
    res = BACKEND.ssd_chunked_scan(inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                   np.array([0, 4, 4]), has_initial_state=np.array([True, False]))
    assert np.all(res.state[1] == 0.0)


def test_errors_name_the_argument():
    rng = np.random.default_rng(24)
    inp = _inputs(rng, 4, 2, 1, 2, 4, 2)
    args = (inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"])
    with pytest.raises(ValueError, match="state_indices"):
        BACKEND.ssd_chunked_scan(*args, np.array([0, 2, 4]), state_indices=np.array([1, 1]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        BACKEND.ssd_chunked_scan(*args, np.array([0, 3, 2, 4]))
    with pytest.raises(TypeError, match="has_initial_state"):
        BACKEND.ssd_chunked_scan(*args, np.array([0, 4]), has_initial_state=np.array([1]))
    with pytest.raises(ValueError, match="chunk_size"):
        BACKEND.ssd_chunked_scan(*args, np.array([0, 4]), chunk_size=0)
