"""Tests of the re-rotation reference (spec/rotation.md, RO-*): golden cases, identities, errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from kvconform.conformance.engine import tolerance
from kvconform.reference import rerotation_lut, rope, rotate_keys, shift_keys
from kvconform.reference.dtypes import resolve_dtype
from kvconform.reference.rotation import inverse_frequencies

U64 = 2.0 ** -53
U32 = 2.0 ** -24
FAST = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------------------------------------------------
# Generated cases


def identity_tol(m: float, max_abs_shift: float, lut_u: float = 0.0) -> float:
    """Bound for comparing two float64 paths of RoPE (spec/numerics.md "Rotation").

    Each path rounds each angle once (relative u, so an absolute angle error u*|shift| since w_j <= 1) and
    each pair update a few times (<= 3u*m per update); three angle roundings and three updates meet in an
    identity test. A LUT stored in lower precision adds its own rounding, 2*lut_u*m per update.
    """
    return m * (3 * U64 * max_abs_shift * 2 + 16 * U64 + 4 * lut_u)


@st.composite
def rotation_cases(draw, max_rows=6):
    """A RoPE'd key cache with the position of every slot, and a random rotation plan."""
    num_pages = draw(st.integers(1, 5))
    page_size = draw(st.integers(1, 4))
    hkv = draw(st.integers(1, 3))
    rotary_dim = 2 * draw(st.integers(1, 4))
    head_dim = rotary_dim + draw(st.sampled_from([0, 0, 2, 3]))
    layout = draw(st.sampled_from(["half", "interleaved"]))
    theta = draw(st.sampled_from([10000.0, 500000.0, 10.0, 1.5]))
    block_size = draw(st.integers(1, 8))
    rows = draw(st.integers(1, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    raw = rng.standard_normal((num_pages, page_size, hkv, head_dim))
    positions = rng.integers(rows * block_size, 4096, size=(num_pages, page_size))
    n = draw(st.integers(0, num_pages))
    idx = rng.permutation(num_pages)[:n].astype(np.int32)
    per_token = draw(st.booleans())
    deltas = rng.integers(0, rows, size=(n, page_size if per_token else 1)).astype(np.int32)
    return dict(raw=raw, positions=positions, idx=idx, deltas=deltas, rows=rows, block_size=block_size,
                theta=theta, layout=layout, rotary_dim=rotary_dim)


def encode(raw, positions, *, theta, layout, rotary_dim):
    """rope() applied page-wise: token slot (page, t) encoded at positions[page, t]."""
    P, B, H, D = raw.shape
    flat = rope(raw.reshape(P * B, H, D), positions.reshape(-1), theta=theta, layout=layout,
                rotary_dim=rotary_dim)
    return flat.reshape(P, B, H, D)


def moved_positions(c):
    """positions after rotation by LUT rows: listed slots move back by row * block_size (RO-6)."""
    new = c["positions"].copy()
    rows = np.broadcast_to(c["deltas"], (len(c["idx"]), new.shape[1]))
    new[c["idx"]] -= rows * c["block_size"]
    return new


def lut_of(c, dtype=np.float64):
    return rerotation_lut(c["rows"], c["rotary_dim"], theta=c["theta"], block_size=c["block_size"]).astype(dtype)


def pair_max(x):
    return float(np.abs(x).max()) * math.sqrt(2) if x.size else 0.0


# ---------------------------------------------------------------------------------------------------------
# Golden cases: expected values written out by hand


def test_lut_golden_RO6():
    """theta=100, rotary_dim=4: w = (100**0, 100**-0.5) = (1, 0.1); block 2 -> row r angles (2r, 0.2r)."""
    lut = rerotation_lut(3, 4, theta=100.0, block_size=2)
    expected = np.array([
        [1.0, 1.0, -0.0, -0.0],
        [math.cos(2.0), math.cos(0.2), -math.sin(2.0), -math.sin(0.2)],
        [math.cos(4.0), math.cos(0.4), -math.sin(4.0), -math.sin(0.4)],
    ])
    assert lut.shape == (3, 4) and lut.dtype == np.float64
    np.testing.assert_allclose(lut, expected, rtol=4 * U64, atol=4 * U64)
    np.testing.assert_array_equal(lut[0], [1.0, 1.0, 0.0, 0.0])


def test_inverse_frequencies_golden_RO3():
    """w_j = theta ** (-2j / d): theta=10000, d=8 -> 1, 0.1, 0.01, 0.001."""
    np.testing.assert_allclose(inverse_frequencies(8, theta=10000.0), [1.0, 0.1, 0.01, 0.001], rtol=2 * U64)


# Row 1 of a hand-made LUT: pair 0 turns by 90 degrees (c=0, s=1), pair 1 by (c, s) = (0.6, 0.8).
HAND_LUT = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.6, 1.0, 0.8]])


@pytest.mark.parametrize("layout, expected", [
    # half pairs (0,2), (1,3): (1,3) -> (1*0 - 3*1, 1*1 + 3*0) = (-3, 1);
    #                          (2,4) -> (2*.6 - 4*.8, 2*.8 + 4*.6) = (-2, 4)
    ("half", [-3.0, -2.0, 1.0, 4.0]),
    # interleaved pairs (0,1), (2,3): (1,2) -> (-2, 1); (3,4) -> (3*.6 - 4*.8, 3*.8 + 4*.6) = (-1.4, 4.8)
    ("interleaved", [-2.0, 1.0, -1.4, 4.8]),
])
def test_small_rotation_golden_RO5_RO9(layout, expected):
    """Two pages of 2 slots, 2 heads, D=6 with rotary_dim=4; page 1 rotated per token by rows [0, 1]."""
    k = np.zeros((2, 2, 2, 6))
    k[:, :, :, :4] = [1.0, 2.0, 3.0, 4.0]
    k[:, :, :, 4:] = [7.0, 8.0]
    out = rotate_keys(k, np.array([1], np.int32), np.array([[0, 1]], np.int32), HAND_LUT,
                      layout=layout, rotary_dim=4)
    want = k.copy()
    want[1, 1, :, :4] = expected  # both heads, the slot with row 1; dims 4, 5 untouched (RO-1)
    np.testing.assert_allclose(out, want, rtol=0, atol=4 * U64 * 8)
    np.testing.assert_array_equal(out[0], k[0])
    np.testing.assert_array_equal(out[..., 4:], k[..., 4:])


def test_rope_golden_RO4():
    """rope of (1, 0) at position 3 with theta irrelevant for j=0 (w_0 = 1): (cos 3, sin 3)."""
    out = rope(np.array([[[1.0, 0.0]]]), np.array([3]), theta=10000.0)
    np.testing.assert_allclose(out[0, 0], [math.cos(3.0), math.sin(3.0)], rtol=2 * U64)


# ---------------------------------------------------------------------------------------------------------
# Identities (spec/rotation.md "Identities")


@FAST
@given(rotation_cases())
def test_inverse_identity_I1_RO6(c):
    """rotate_keys(rope(k, p), row r) == rope(k, p - r*block_size) within the float64 bound."""
    kw = dict(theta=c["theta"], layout=c["layout"], rotary_dim=c["rotary_dim"])
    k = encode(c["raw"], c["positions"], **kw)
    got = rotate_keys(k, c["idx"], c["deltas"], lut_of(c), layout=c["layout"], rotary_dim=c["rotary_dim"])
    want = encode(c["raw"], moved_positions(c), **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=identity_tol(pair_max(c["raw"]), 4096))


@FAST
@given(rotation_cases(), st.sampled_from(["float32", "float16"]))
def test_inverse_identity_low_precision_lut(c, lut_dtype):
    """A float32 / float16 LUT is used as given; the identity then holds within its rounding (numerics)."""
    kw = dict(theta=c["theta"], layout=c["layout"], rotary_dim=c["rotary_dim"])
    k = encode(c["raw"], c["positions"], **kw)
    got = rotate_keys(k, c["idx"], c["deltas"], lut_of(c, lut_dtype), layout=c["layout"],
                      rotary_dim=c["rotary_dim"])
    want = encode(c["raw"], moved_positions(c), **kw)
    lut_u = U32 if lut_dtype == "float32" else 2.0 ** -11
    np.testing.assert_allclose(got, want, rtol=0, atol=identity_tol(pair_max(c["raw"]), 4096, lut_u))


@FAST
@given(rotation_cases(max_rows=4), st.data())
def test_composition_I2(c, data):
    """Rotating by r1 then r2 equals rotating by r1 + r2 (llama.cpp #3825 lost the first shift)."""
    n, width = c["deltas"].shape
    second = np.array(data.draw(st.lists(st.integers(0, c["rows"] - 1), min_size=n * width,
                                         max_size=n * width)), np.int32).reshape(n, width)
    lut = rerotation_lut(2 * c["rows"], c["rotary_dim"], theta=c["theta"], block_size=c["block_size"])
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    k = encode(c["raw"], c["positions"], theta=c["theta"], **kw)
    twice = rotate_keys(rotate_keys(k, c["idx"], c["deltas"], lut, **kw), c["idx"], second, lut, **kw)
    once = rotate_keys(k, c["idx"], c["deltas"] + second, lut, **kw)
    np.testing.assert_allclose(twice, once, rtol=0, atol=identity_tol(pair_max(c["raw"]), 4096))


@FAST
@given(rotation_cases())
def test_row_zero_is_identity_I3(c):
    k = c["raw"]
    zeros = np.zeros_like(c["deltas"])
    out = rotate_keys(k, c["idx"], zeros, lut_of(c), layout=c["layout"], rotary_dim=c["rotary_dim"])
    assert (out == k).all()  # == ignores the sign of zero (unspecified, spec/rotation.md)
    out = shift_keys(k, c["idx"], zeros, theta=c["theta"], layout=c["layout"], rotary_dim=c["rotary_dim"])
    assert (out == k).all()


@FAST
@given(rotation_cases())
def test_pair_norms_kept_I4(c):
    out = rotate_keys(c["raw"], c["idx"], c["deltas"], lut_of(c), layout=c["layout"],
                      rotary_dim=c["rotary_dim"])
    h = c["rotary_dim"] // 2
    if c["layout"] == "half":
        pairs = lambda x: (x[..., :h], x[..., h:2 * h])  # noqa: E731
    else:
        pairs = lambda x: (x[..., 0:2 * h:2], x[..., 1:2 * h:2])  # noqa: E731
    a0, b0 = pairs(c["raw"])
    a1, b1 = pairs(out)
    np.testing.assert_allclose(np.hypot(a1, b1), np.hypot(a0, b0), rtol=0,
                               atol=identity_tol(pair_max(c["raw"]), 0))


@FAST
@given(rotation_cases())
def test_per_block_equals_repeat_bitwise_I5_RO7(c):
    page_size = c["raw"].shape[1]
    per_block = c["deltas"][:, :1]
    repeated = np.repeat(per_block, page_size, axis=1)
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    a = rotate_keys(c["raw"], c["idx"], per_block, lut_of(c), **kw)
    b = rotate_keys(c["raw"], c["idx"], repeated, lut_of(c), **kw)
    assert a.tobytes() == b.tobytes()
    shifts = -per_block * c["block_size"]
    a = shift_keys(c["raw"], c["idx"], shifts, theta=c["theta"], **kw)
    b = shift_keys(c["raw"], c["idx"], np.repeat(shifts, page_size, axis=1), theta=c["theta"], **kw)
    assert a.tobytes() == b.tobytes()


@FAST
@given(rotation_cases(), st.randoms(use_true_random=False))
def test_joint_permutation_is_noop_RO8(c, rnd):
    order = list(range(len(c["idx"])))
    rnd.shuffle(order)
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    a = rotate_keys(c["raw"], c["idx"], c["deltas"], lut_of(c), **kw)
    b = rotate_keys(c["raw"], c["idx"][order], c["deltas"][order], lut_of(c), **kw)
    assert a.tobytes() == b.tobytes()


@FAST
@given(rotation_cases())
def test_heads_independent_I7(c):
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    whole = rotate_keys(c["raw"], c["idx"], c["deltas"], lut_of(c), **kw)
    for h in range(c["raw"].shape[2]):
        alone = rotate_keys(c["raw"][:, :, h:h + 1], c["idx"], c["deltas"], lut_of(c), **kw)
        assert alone.tobytes() == np.ascontiguousarray(whole[:, :, h:h + 1]).tobytes()


@FAST
@given(rotation_cases())
def test_untouched_pages_and_dims_RO1_RO11(c):
    """Unlisted pages (poisoned with NaN here) and dims past rotary_dim come back bit for bit; inputs kept."""
    k = c["raw"].copy()
    unlisted = np.setdiff1d(np.arange(k.shape[0]), c["idx"])
    k[unlisted] = np.nan
    before = k.copy()
    lut = lut_of(c)
    out = rotate_keys(k, c["idx"], c["deltas"], lut, layout=c["layout"], rotary_dim=c["rotary_dim"])
    assert np.isnan(out[unlisted]).all()
    np.testing.assert_array_equal(out[..., c["rotary_dim"]:], k[..., c["rotary_dim"]:])
    assert k.tobytes() == before.tobytes() and out.dtype == np.float64
    np.testing.assert_array_equal(lut, lut_of(c))


@FAST
@given(rotation_cases(), st.data())
def test_shift_keys_moves_to_p_plus_delta_RO10(c, data):
    """Theta form: rope(k, p) shifted by any-sign delta == rope(k, p + delta)."""
    n, width = c["deltas"].shape
    shifts = np.array(data.draw(st.lists(st.integers(-3000, 3000), min_size=n * width, max_size=n * width)),
                      np.int32).reshape(n, width)
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    k = encode(c["raw"], c["positions"], theta=c["theta"], **kw)
    got = shift_keys(k, c["idx"], shifts, theta=c["theta"], **kw)
    new_pos = c["positions"].copy()
    new_pos[c["idx"]] += np.broadcast_to(shifts, (n, new_pos.shape[1]))
    want = encode(c["raw"], new_pos, theta=c["theta"], **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=identity_tol(pair_max(c["raw"]), 7096))


@FAST
@given(rotation_cases())
def test_shift_keys_matches_lut_rows_RO10(c):
    """shift by -r*block_size and LUT row r use the same angles (RO-3), so agree to a rounding."""
    kw = dict(layout=c["layout"], rotary_dim=c["rotary_dim"])
    a = rotate_keys(c["raw"], c["idx"], c["deltas"], lut_of(c), **kw)
    b = shift_keys(c["raw"], c["idx"], -c["block_size"] * c["deltas"], theta=c["theta"], **kw)
    np.testing.assert_allclose(a, b, rtol=0, atol=8 * U64 * pair_max(c["raw"]))


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.integers(-2000, 2000), st.integers(-2000, 2000),
       st.integers(-2000, 2000), st.sampled_from(["half", "interleaved"]))
def test_relative_invariance_I8(seed, p_q, p_k, s, layout):
    """rope(q, P) . rope(k, p) depends only on P - p."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 1, 1, 8))
    kw = dict(theta=10000.0, layout=layout)
    a = (rope(q, [p_q], **kw) * rope(k, [p_k], **kw)).sum()
    b = (rope(q, [p_q + s], **kw) * rope(k, [p_k + s], **kw)).sum()
    m = np.abs(q).max() * np.abs(k).max() * 16
    assert abs(a - b) <= m * U64 * (64 + 16 * 6000)


@FAST
@given(rotation_cases(), st.integers(1, 5))
def test_half_coefficients_on_interleaved_keys_fail_I9(c, row):
    """Negative test: keys encoded interleaved, rotated as half-split, miss rope(k, p - d) (row != 0)."""
    assume(c["rotary_dim"] >= 4)  # with a single pair both layouts coincide
    P, page_size = c["raw"].shape[:2]
    idx = np.arange(P, dtype=np.int32)
    deltas = np.full((P, 1), row, np.int32)
    lut = rerotation_lut(row + 1, c["rotary_dim"], theta=c["theta"], block_size=c["block_size"])
    kw = dict(theta=c["theta"], layout="interleaved", rotary_dim=c["rotary_dim"])
    k = encode(c["raw"], c["positions"], **kw)
    want = encode(c["raw"], c["positions"] - row * c["block_size"], **kw)
    right = rotate_keys(k, idx, deltas, lut, layout="interleaved", rotary_dim=c["rotary_dim"])
    wrong = rotate_keys(k, idx, deltas, lut, layout="half", rotary_dim=c["rotary_dim"])
    tol = identity_tol(pair_max(c["raw"]), 4096)
    assert np.abs(right - want).max() <= tol
    assert np.abs(wrong - want).max() > 1e3 * tol


# ---------------------------------------------------------------------------------------------------------
# Errors (RO-12)

K = np.zeros((3, 2, 1, 8))
IDX = np.array([0, 2], np.int32)
ROWS = np.array([[1], [0]], np.int32)
LUT = rerotation_lut(3, 8, theta=10000.0, block_size=2)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rotation_deltas=np.array([[3], [0]], np.int32)), ValueError, r"rotation_deltas\[0,0\]=3 .*range"),
    (dict(rotation_deltas=np.array([[-1], [0]], np.int32)), ValueError, r"rotation_deltas.*range"),
    (dict(rotated_block_indices=np.array([2, 2], np.int32)), ValueError, r"rotated_block_indices.*duplicates"),
    (dict(rotated_block_indices=np.array([0, 3], np.int32)), ValueError, r"rotated_block_indices\[1\]=3"),
    (dict(rotated_block_indices=np.array([-1, 0], np.int32)), ValueError, r"rotated_block_indices.*range"),
    (dict(rotation_deltas=np.zeros((2, 3), np.int32)), ValueError, r"rotation_deltas.*\[n, 1\].*page_size"),
    (dict(rotation_deltas=np.zeros((1, 1), np.int32)), ValueError, r"rotation_deltas.*one row per"),
    (dict(rotation_deltas=np.zeros(2, np.int32)), ValueError, r"rotation_deltas must have rank 2"),
    (dict(rotation_deltas=np.zeros((2, 1))), TypeError, r"rotation_deltas must have an integer dtype"),
    (dict(rotated_block_indices=np.zeros((2, 1), np.int32)), ValueError, r"rotated_block_indices.*rank 1"),
    (dict(rotated_block_indices=np.array([0.0, 2.0])), TypeError, r"rotated_block_indices.*integer"),
    (dict(rotary_dim=5, trig_lut=np.ones((3, 5))), ValueError, r"rotary_dim must be even"),
    (dict(rotary_dim=10), ValueError, r"rotary_dim must be <= 8"),
    (dict(rotary_dim=0), ValueError, r"rotary_dim must be >= 2"),
    (dict(rotary_dim=4), ValueError, r"trig_lut must have width rotary_dim = 4"),
    (dict(trig_lut=np.ones((0, 8))), ValueError, r"trig_lut must have at least one row"),
    (dict(trig_lut=np.ones(8)), ValueError, r"trig_lut must have rank 2"),
    (dict(trig_lut=np.ones((3, 8), np.int32)), TypeError, r"trig_lut must have a floating dtype"),
    (dict(layout="neox"), ValueError, r"layout must be one of"),
    (dict(k_pages=np.zeros((3, 2, 8))), ValueError, r"k_pages must have rank 4"),
    (dict(k_pages=np.zeros((3, 2, 1, 8), np.int8)), TypeError, r"k_pages must have a floating dtype"),
])
def test_rotate_keys_errors_RO12(kwargs, error, match):
    args = dict(k_pages=K, rotated_block_indices=IDX, rotation_deltas=ROWS, trig_lut=LUT)
    args.update(kwargs)
    extra = {name: args.pop(name) for name in ("layout", "rotary_dim") if name in args}
    with pytest.raises(error, match=match):
        rotate_keys(**args, **extra)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(position_deltas=np.array([[2 ** 31], [0]], np.int64)), ValueError, r"position_deltas.*int32"),
    (dict(position_deltas=np.zeros((2, 3), np.int32)), ValueError, r"position_deltas.*page_size"),
    (dict(theta=0.0), ValueError, r"theta must be finite and > 0"),
    (dict(theta=float("nan")), ValueError, r"theta must be finite and > 0"),
    (dict(theta="big"), TypeError, r"theta must be a number"),
    (dict(rotated_block_indices=np.array([1, 1], np.int32)), ValueError, r"duplicates"),
    (dict(layout="gptj"), ValueError, r"layout must be one of"),
    (dict(rotary_dim=3), ValueError, r"rotary_dim must be even"),
])
def test_shift_keys_errors_RO12(kwargs, error, match):
    args = dict(k_pages=K, rotated_block_indices=IDX, position_deltas=-2 * ROWS, theta=10000.0)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        shift_keys(**args)


@pytest.mark.parametrize("call, error, match", [
    (lambda: rope(np.zeros((2, 1, 4)), np.zeros(3, np.int32), theta=1e4), ValueError, r"positions must have shape"),
    (lambda: rope(np.zeros(4), np.zeros(1, np.int32), theta=1e4), ValueError, r"x must have rank >= 2"),
    (lambda: rope(np.zeros((1, 4)), np.array([2 ** 31]), theta=1e4), ValueError, r"positions.*int32"),
    (lambda: rope(np.zeros((1, 4)), np.zeros(1, np.int32), theta=-1.0), ValueError, r"theta"),
    (lambda: rope(np.zeros((1, 4)), np.zeros(1, np.int32), theta=1e4, layout="x"), ValueError, r"layout"),
    (lambda: rerotation_lut(0, 4, theta=1e4, block_size=2), ValueError, r"num_rows must be >= 1"),
    (lambda: rerotation_lut(2, 3, theta=1e4, block_size=2), ValueError, r"rotary_dim must be even"),
    (lambda: rerotation_lut(2, 4, theta=1e4, block_size=0), ValueError, r"block_size must be >= 1"),
    (lambda: rerotation_lut(2 ** 20, 4, theta=1e4, block_size=2 ** 12), ValueError, r"fit in int32"),
    (lambda: rerotation_lut(2.0, 4, theta=1e4, block_size=2), TypeError, r"num_rows must be an integer"),
])
def test_helper_errors_RO12(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_empty_plan_returns_copy_RO8():
    out = rotate_keys(K + 1.0, np.zeros(0, np.int32), np.zeros((0, 1), np.int32), LUT)
    np.testing.assert_array_equal(out, K + 1.0)


# ---------------------------------------------------------------------------------------------------------
# The tolerances of spec/numerics.md admit a correct float32 implementation (NU-RO2, NU-RO3), whatever the
# cache dtype it stores (float32, or bfloat16 / float16 rounded once at the end), and reject one that
# rounds the LUT to a narrow cache's dtype first (issue 31)

CACHES = ("float32", "bfloat16", "float16")


def _float32_rotation(k, idx, cos, sin, layout, rotary_dim, cache="float32"):
    """A float32 'backend': coefficients rounded to float32, products and sums in float32, the result
    stored in the `cache` dtype."""
    out = k.astype(np.float32).copy()
    h = rotary_dim // 2
    j = np.arange(h)
    first, second = (j, j + h) if layout == "half" else (2 * j, 2 * j + 1)
    a, b = out[idx][..., first], out[idx][..., second]
    c, s = cos.astype(np.float32), sin.astype(np.float32)
    block = out[idx]
    block[..., first] = a * c - b * s
    block[..., second] = a * s + b * c
    out[idx] = block
    return out.astype(resolve_dtype(cache))


def _pair_max(x, layout, rotary_dim):
    """m of spec/numerics.md for every rotary element: max(|x|, |y|) over the element's own pair."""
    h = rotary_dim // 2
    j = np.arange(h)
    first, second = (j, j + h) if layout == "half" else (2 * j, 2 * j + 1)
    x = np.abs(x.astype(np.float64))
    m = np.zeros(x.shape[:-1] + (rotary_dim,))
    m[..., first] = m[..., second] = np.maximum(x[..., first], x[..., second])
    return m


def _rotate_error_and_bound(c, cache, lut_rounding=None):
    keys = c["raw"].astype(resolve_dtype(cache))
    lut = lut_of(c)
    ref = rotate_keys(keys, c["idx"], c["deltas"], lut, layout=c["layout"], rotary_dim=c["rotary_dim"])
    h = c["rotary_dim"] // 2
    rows = lut[np.broadcast_to(c["deltas"], (len(c["idx"]), keys.shape[1]))][:, :, None, :]
    if lut_rounding is not None:
        rows = rows.astype(resolve_dtype(lut_rounding)).astype(np.float64)
    got = _float32_rotation(keys, c["idx"], rows[..., :h], rows[..., h:], c["layout"], c["rotary_dim"], cache)
    r = c["rotary_dim"]
    err = np.abs(got.astype(np.float64) - ref)[..., :r]
    bound = tolerance.ulp(ref[..., :r], cache) + 4 * tolerance.u_compute(cache) * _pair_max(keys, c["layout"], r)
    return err[c["idx"]], bound[c["idx"]]


@FAST
@pytest.mark.parametrize("cache", CACHES)
@given(c=rotation_cases())
def test_float32_rotate_within_NU_RO2(cache, c):
    err, bound = _rotate_error_and_bound(c, cache)
    assert (err <= bound).all()


@pytest.mark.parametrize("cache", ("bfloat16", "float16"))
def test_lut_rounded_to_a_narrow_cache_exceeds_NU_RO2(cache):
    """The same float32 rotation with the LUT first rounded to the cache's dtype (the mutant
    LutRoundedToCacheDtype) leaves NU-RO2 on cancelling pairs: coefficients off by up to 2^-9 / 2^-12."""
    rng = np.random.default_rng(7)
    c = dict(raw=rng.standard_normal((4, 4, 2, 8)), idx=np.arange(4, dtype=np.int32),
             deltas=rng.integers(1, 6, size=(4, 4)).astype(np.int32), rows=6, block_size=3, theta=10000.0,
             layout="half", rotary_dim=8)
    err, bound = _rotate_error_and_bound(c, cache)
    assert (err <= bound).all()
    err, bound = _rotate_error_and_bound(c, cache, lut_rounding=cache)
    assert (err > bound).any()


@FAST
@pytest.mark.parametrize("cache", CACHES)
@given(c=rotation_cases(), data=st.data())
def test_float32_shift_within_NU_RO3(cache, c, data):
    n, width = c["deltas"].shape
    shifts = np.array(data.draw(st.lists(st.integers(-3000, 3000), min_size=n * width, max_size=n * width)),
                      np.int32).reshape(n, width)
    keys = c["raw"].astype(resolve_dtype(cache))
    ref = shift_keys(keys, c["idx"], shifts, theta=c["theta"], layout=c["layout"], rotary_dim=c["rotary_dim"])
    w32 = inverse_frequencies(c["rotary_dim"], theta=c["theta"]).astype(np.float32)
    per_token = np.broadcast_to(shifts, (n, keys.shape[1]))
    angle = (per_token.astype(np.float32)[..., None] * w32)[:, :, None, :]   # the angle in float32
    got = _float32_rotation(keys, c["idx"], np.cos(angle), np.sin(angle), c["layout"], c["rotary_dim"], cache)
    r = c["rotary_dim"]
    delta = np.zeros(keys.shape[:2])
    delta[c["idx"]] = np.abs(per_token)
    u = tolerance.u_compute(cache)
    bound = tolerance.ulp(ref[..., :r], cache) + _pair_max(keys, c["layout"], r) * (6 * u + 3 * u * delta[:, :, None, None])
    err = np.abs(got.astype(np.float64) - ref)[..., :r]
    assert (err <= bound).all()
