"""The Pallas selective state update kernel against the reference (spec/recurrent.md RS-2 .. RS-6, RS-9,
RS-14 .. RS-16).

Tolerances (spec/numerics.md NU-R1, NU-R2): rows not addressed and padding rows of the pool, and padding
outputs, are compared bit for bit; the output is class R with n = N + 1 (N products S_new C plus D x) and
the new state class R with n = 2 (decayed state plus injection), M the largest term magnitude, computed
here in float64 from the reference's values.
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


def _check(pool, x, dt, A, B, C, idx, kw, mamba2):
    """The suite's checks (NU-R1 exact untouched rows and zero padding outputs, NU-R2 class R)."""
    before = pool.copy()
    inputs = inputs_of("selective_state_update", pool, x, dt, A, B, C, state_indices=idx, **kw)
    got = BACKEND.selective_state_update(**inputs)
    assert np.array_equal(pool.view(np.uint8), before.view(np.uint8))  # RS-4: inputs are not modified
    assert_conforms("selective_state_update", inputs, got)


def _mamba2_inputs(rng, batch, H, G, P, N, slots):
    pool = rng.standard_normal((slots, H, P, N)).astype(F32)
    return dict(pool=pool, x=rng.standard_normal((batch, H, P)).astype(F32),
                dt=rng.standard_normal((batch, H)).astype(F32), A=-rng.uniform(0.2, 2.0, H).astype(F32),
                B=rng.standard_normal((batch, G, N)).astype(F32), C=rng.standard_normal((batch, G, N)).astype(F32))


def test_mamba2_grouped_with_padding_canaries_and_every_option():
    """H = 4 heads in G = 2 groups (head h reads group h // 2, RS-16); a padding row (RS-3); a NaN canary
    row nobody addresses and a NaN row behind the padding entry stay bitwise (RS-4); dt + dt_bias above
    the softplus threshold for one head (RS-9: taken as is)."""
    rng = np.random.default_rng(11)
    inp = _mamba2_inputs(rng, 3, 4, 2, 2, 8, 6)
    inp["pool"][4] = np.nan
    inp["pool"][5] = np.nan
    inp["dt"][0, 1] = 24.0  # dt' = 24.5 > 20: softplus is the identity there; A * 24.5 decays hard
    kw = dict(D=rng.standard_normal(4).astype(F32), z=rng.standard_normal((3, 4, 2)).astype(F32),
              dt_bias=np.full(4, 0.5, F32), dt_softplus=True)
    idx = np.array([2, -1, 0])
    _check(inp["pool"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], idx, kw, mamba2=True)


def test_mamba2_single_group_plain_and_default_slots():
    """G = 1, no D / z / dt_bias / softplus; state_indices None (row b uses slot b, RS-2)."""
    rng = np.random.default_rng(12)
    inp = _mamba2_inputs(rng, 2, 4, 1, 2, 8, 3)
    dt = np.abs(inp["dt"])  # without softplus dt' = dt; keep it in the tested domain (decay <= 1)
    _check(inp["pool"], inp["x"], dt, inp["A"], inp["B"], inp["C"], None, {}, mamba2=True)


def test_mamba1_per_channel_with_padding_and_options():
    rng = np.random.default_rng(13)
    batch, dim, N, slots = 3, 6, 8, 5
    pool = rng.standard_normal((slots, dim, N)).astype(F32)
    pool[1] = np.nan  # behind the padding entry
    x = rng.standard_normal((batch, dim)).astype(F32)
    dt = rng.standard_normal((batch, dim)).astype(F32)
    A = -rng.uniform(0.2, 2.0, (dim, N)).astype(F32)
    B = rng.standard_normal((batch, N)).astype(F32)
    C = rng.standard_normal((batch, N)).astype(F32)
    kw = dict(D=rng.standard_normal(dim).astype(F32), z=rng.standard_normal((batch, dim)).astype(F32),
              dt_bias=rng.standard_normal(dim).astype(F32), dt_softplus=True)
    _check(pool, x, dt, A, B, C, np.array([4, -1, 0]), kw, mamba2=False)


def test_golden_mamba1_one_channel():
    """Hand-worked (RS-15): S = 2, x = 1, dt = 0.5, A = 0 (decay 1), B = 2, C = 1 ->
    S' = 2 * 1 + 0.5 * 1 * 2 = 3, y = 3 * 1 = 3 (D, z absent)."""
    res = BACKEND.selective_state_update(np.array([[[2.0]]], F32), np.array([[1.0]], F32),
                                         np.array([[0.5]], F32), np.array([[0.0]], F32),
                                         np.array([[2.0]], F32), np.array([[1.0]], F32))
    assert float(res.out[0, 0]) == 3.0 and float(res.state[0, 0, 0]) == 3.0


def test_errors_name_the_argument():
    rng = np.random.default_rng(14)
    inp = _mamba2_inputs(rng, 2, 4, 2, 2, 8, 3)
    args = (inp["pool"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"])
    with pytest.raises(ValueError, match="state_indices"):  # RS-4: duplicates are an error
        BACKEND.selective_state_update(*args, state_indices=np.array([1, 1]))
    with pytest.raises(ValueError, match="B must have a group count"):
        BACKEND.selective_state_update(*args[:4], inp["B"][:, :1].repeat(3, 1), inp["C"])
    with pytest.raises(TypeError, match="state"):  # RS-6: half-precision pools are outside the spec
        BACKEND.selective_state_update(inp["pool"].astype(np.float16), *args[1:])
    with pytest.raises(TypeError, match="dt_softplus"):
        BACKEND.selective_state_update(*args, dt_softplus=1)
