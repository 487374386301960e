"""The Pallas in-place key re-rotation kernel against the reference (spec/rotation.md RO-1 .. RO-10).

Bound (numerics class U, ULP-bounded): the kernel rounds the LUT to float32 (<= 1/2 ulp each of c and s)
and forms a*c - b*s in float32 (two products and a sum, <= 3/2 ulp relative to |a|+|b|), so the error is
below 4 float32 ulps of max(|a|, |b|) per pair; the test uses 4 * eps32 * (|a| + |b|) per token.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from suite_checks import assert_conforms, inputs_of
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402

BACKEND = make_backend()
EPS32 = 2.0 ** -23


def _check(actual, expected, k):
    scale = np.abs(k.astype(np.float64)).max(axis=-1, keepdims=True) * 2
    assert np.all(np.abs(actual.astype(np.float64) - expected) <= 4 * EPS32 * scale + 1e-30)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_lut_rotation_matches_reference(layout, rotary_dim):
    """RO-1, RO-2, RO-5, RO-7, RO-8: per-token deltas, partial rotary dims, unlisted blocks bitwise kept."""
    rng = np.random.default_rng(5)
    k = rng.standard_normal((6, 4, 2, 8)).astype(np.float32)
    idx = np.array([4, 1, 2])
    lut = reference.rerotation_lut(5, rotary_dim or 8, theta=10000.0, block_size=4)
    deltas = rng.integers(0, 5, (3, 4))
    actual = BACKEND.rotate_keys(k, idx, deltas, lut, layout=layout, rotary_dim=rotary_dim)
    expected = reference.rotate_keys(k, idx, deltas, lut, layout=layout, rotary_dim=rotary_dim)
    assert actual.dtype == np.float32
    _check(actual, expected, k)
    np.testing.assert_array_equal(actual[[0, 3, 5]], k[[0, 3, 5]])
    if rotary_dim:
        np.testing.assert_array_equal(actual[..., rotary_dim:], k[..., rotary_dim:])


def test_per_block_equals_repeated_bitwise():
    """RO-7: deltas [n, 1] give the same bits as their repeat to [n, page_size]."""
    rng = np.random.default_rng(6)
    k = rng.standard_normal((5, 4, 1, 8)).astype(ml_dtypes.bfloat16)
    lut = reference.rerotation_lut(4, 8, theta=500.0, block_size=4)
    idx, d = np.array([3, 0]), np.array([[2], [3]])
    a = BACKEND.rotate_keys(k, idx, d, lut)
    b = BACKEND.rotate_keys(k, idx, np.repeat(d, 4, axis=1), lut)
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    assert a.dtype == k.dtype


def test_shift_keys_theta_form():
    """RO-10: shifting rope(x, p) by delta equals rope(x, p + delta) (and matches the reference)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 2, 8))
    pos = np.array([3, 4, 5, 6])
    k = reference.rope(x, pos, theta=100.0, layout="interleaved").astype(np.float32)[None]
    args = (k, np.array([0]), np.array([[-3]]))
    out = BACKEND.shift_keys(*args, theta=100.0, layout="interleaved")
    # against the reference on the float32-rounded keys, through the suite's check (NU-RO3); the float64
    # identity rope(x, p) shifted == rope(x, p + delta) itself is tested in tests/reference (NU-RO4)
    assert_conforms("shift_keys", inputs_of("shift_keys", *args, theta=100.0, layout="interleaved"), out)


def test_golden_quarter_turn():
    """Hand-worked: LUT row [cos, sin] = [0, 1] (a quarter turn) maps pair (1, 2) to (1*0 - 2*1, 1*1 + 2*0)
    = (-2, 1)."""
    k = np.array([1.0, 2.0], np.float32).reshape(1, 1, 1, 2)
    lut = np.array([[1.0, 0.0], [0.0, 1.0]])
    out = BACKEND.rotate_keys(k, np.array([0]), np.array([[1]]), lut)
    np.testing.assert_array_equal(out.reshape(2), [-2.0, 1.0])


def test_errors_name_the_argument():
    k = np.zeros((2, 2, 1, 4), np.float32)
    lut = np.zeros((3, 4))
    with pytest.raises(ValueError, match="rotated_block_indices"):
        BACKEND.rotate_keys(k, np.array([0, 0]), np.zeros((2, 1), int), lut)
    with pytest.raises(ValueError, match="rotation_deltas"):
        BACKEND.rotate_keys(k, np.array([0]), np.array([[3]]), lut)
    with pytest.raises(ValueError, match="rotation_deltas"):
        BACKEND.rotate_keys(k, np.array([0]), np.zeros((1, 3), int), lut)
    with pytest.raises(ValueError, match="rotary_dim"):
        BACKEND.rotate_keys(k, np.array([0]), np.zeros((1, 1), int), lut, rotary_dim=3)
