"""The Pallas RWKV6 wkv kernel against the reference (spec/recurrent.md RS-2 .. RS-6, RS-17, RS-20).

Tolerances (spec/numerics.md NU-R1, NU-R2): untouched pool rows and padding outputs bit for bit; outputs
and final states class R with n = L_s * K (L_s the longest sequence), M the largest term magnitude
(|r| |S_t|, |r u k v|, |k v| over the states S_t the sequences pass through, computed here in float64).
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


def _inputs(rng, T, H, K, V, slots):
    return dict(r=rng.standard_normal((T, H, K)).astype(F32), k=rng.standard_normal((T, H, K)).astype(F32),
                v=rng.standard_normal((T, H, V)).astype(F32), w=rng.uniform(0.3, 1.0, (T, H, K)).astype(F32),
                u=rng.standard_normal((H, K)).astype(F32), state=rng.standard_normal((slots, H, K, V)).astype(F32))


def _check(inp, cu, idx, init):
    """The suite's checks: NU-R1 exact untouched rows and zero padding outputs, NU-R2 class R."""
    before = {k: v.copy() for k, v in inp.items()}
    inputs = inputs_of("rwkv6_wkv", inp["r"], inp["k"], inp["v"], inp["w"], inp["u"], inp["state"], cu,
                       state_indices=idx, has_initial_state=init)
    got = BACKEND.rwkv6_wkv(**inputs)
    for k in inp:
        assert np.array_equal(inp[k].view(np.uint8), before[k].view(np.uint8))  # RS-4: inputs unmodified
    assert_conforms("rwkv6_wkv", inputs, got)
    return got


def test_varlen_padding_fresh_empty_and_canaries():
    """Lengths 5, 0 (written back unchanged), 12 (padding), 3 (fresh over a NaN row, RS-5), 9 (two
    windows of 8); a NaN canary row nobody addresses."""
    rng = np.random.default_rng(31)
    cu = np.array([0, 5, 5, 17, 20, 29])
    inp = _inputs(rng, 29, 2, 4, 3, 7)
    inp["state"][[4, 6]] = np.nan
    got = _check(inp, cu, np.array([2, 0, -1, 4, 1]), np.array([True, True, True, False, True]))
    assert np.array_equal(got.state[0], inp["state"][0])


def test_default_slots_and_golden():
    """state_indices / has_initial_state None; then a hand-worked token: S = 1, r = 2, k = 3, v = 5,
    u = 0.5, w = 0.25 -> y = 2 * (1 + 0.5 * 3 * 5) = 17, S' = 0.25 * 1 + 3 * 5 = 15.25."""
    rng = np.random.default_rng(32)
    _check(_inputs(rng, 6, 2, 4, 3, 2), np.array([0, 2, 6]), None, None)
    one = lambda v: np.array([[[v]]], F32)  # noqa: E731
    res = BACKEND.rwkv6_wkv(one(2.0), one(3.0), one(5.0), one(0.25), np.array([[0.5]], F32),
                            np.array([[[[1.0]]]], F32), np.array([0, 1]))
    assert float(res.out[0, 0, 0]) == 17.0 and float(res.state[0, 0, 0, 0]) == 15.25


def test_errors_name_the_argument():
    rng = np.random.default_rng(33)
    inp = _inputs(rng, 4, 2, 4, 3, 2)
    args = (inp["r"], inp["k"], inp["v"], inp["w"], inp["u"], inp["state"])
    with pytest.raises(ValueError, match="state_indices"):
        BACKEND.rwkv6_wkv(*args, np.array([0, 2, 4]), state_indices=np.array([0, 0]))
    with pytest.raises(ValueError, match="u must have shape"):
        BACKEND.rwkv6_wkv(*args[:4], inp["u"][:, :2], inp["state"], np.array([0, 4]))
    with pytest.raises(TypeError, match="state"):
        BACKEND.rwkv6_wkv(*args[:5], inp["state"].astype(np.float16), np.array([0, 4]))
