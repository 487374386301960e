"""The Pallas causal conv1d update kernel against the reference (spec/recurrent.md RS-2, RS-3, RS-10..12).

The new state rows are copies of inputs (exact: class E); the output is a W-term float32 sum of products
(class R): |err| <= 2 * W * u32 * sum_j |w_j * win_j| (+ bias); the test uses 4 * W * u32 * that sum.
"""
from __future__ import annotations

import numpy as np
from suite_checks import assert_conforms, inputs_of
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402

BACKEND = make_backend()


@pytest.mark.parametrize("T,activation", [(1, None), (3, "silu")])
def test_matches_reference_with_padding_and_canary_rows(T, activation):
    rng = np.random.default_rng(3)
    B, C, W, slots = 4, 5, 4, 6
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    pool = rng.standard_normal((slots, C, W - 1)).astype(np.float32)
    pool[5] = np.nan  # canary: a row nobody addresses stays bitwise NaN
    weight = rng.standard_normal((C, W)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    idx = np.array([3, -1, 0, 2])
    x_in = x[:, 0] if T == 1 else x
    expected = reference.causal_conv1d_update(x_in, pool, weight, bias, activation=activation, state_indices=idx)
    actual = BACKEND.causal_conv1d_update(x_in, pool, weight, bias, activation=activation, state_indices=idx)
    # NU-R1 exact windows and zero padding rows, NU-R2 class R outputs: the suite's own checks
    assert_conforms("causal_conv1d_update", inputs_of("causal_conv1d_update", x_in, pool, weight, bias,
                                                      activation=activation, state_indices=idx), actual, expected)


def test_golden_three_taps():
    """Hand-worked: state [1, 2], x = 3, weight [1, 10, 100] -> out = 1 + 20 + 300 = 321, state [2, 3]."""
    res = BACKEND.causal_conv1d_update(np.array([[3.0]], np.float32), np.array([[[1.0, 2.0]]], np.float32),
                                       np.array([[1.0, 10.0, 100.0]], np.float32))
    assert float(res.out[0, 0]) == 321.0
    np.testing.assert_array_equal(res.conv_state[0, 0], [2.0, 3.0])


def test_errors_name_the_argument():
    pool = np.zeros((2, 3, 2), np.float32)
    x = np.zeros((2, 3), np.float32)
    w = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="state_indices"):
        BACKEND.causal_conv1d_update(x, pool, w, state_indices=np.array([1, 1]))
    with pytest.raises(ValueError, match="conv_state"):
        BACKEND.causal_conv1d_update(x, pool[:, :, :1], w)
    with pytest.raises(ValueError, match="weight"):
        BACKEND.causal_conv1d_update(x, np.zeros((2, 3, 0), np.float32), w[:, :1])
