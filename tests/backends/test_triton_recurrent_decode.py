"""Triton causal_conv1d_update and selective_state_update against the reference (RS-2 .. RS-16).

Tolerances (spec/numerics.md "## Recurrent"): conv windows, padding rows and unaddressed rows are
compared bit for bit (NU-R1: copies only); outputs and written SSM states use the elementwise class-R
bound of NU-R2/NU-6, |a - r| <= 2 * n * 2^-24 * M + 2 * u_out * |r|, with n = W (+1 with bias) for the
conv output, n = N + 1 for the SSU output and n = 2 per state element, M the largest term magnitude.
Reason: the kernels sum in float32 in their own order (RS-8); wrong taps, rows, groups or heads miss it
by O(1). The NU-6 aggregate check is left to the conformance run (on one- or two-element regions it is a
quarter of the elementwise bound, which float32 math cannot meet in general).
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from kvconform import reference as ref  # noqa: E402

U32 = 2.0 ** -24


@pytest.fixture(scope="module")
def backend():
    return make_backend()


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _class_r(got, exp, n, M, u_out=U32):
    tol = 2 * n * U32 * M + 2 * u_out * np.abs(exp)
    assert np.all(np.abs(got.astype(np.float64) - exp) <= tol), np.max(np.abs(got - exp) - tol)


def _strided(idx):
    """state_indices as a strided view at an offset inside a larger buffer (metadata packing)."""
    buf = np.full(3 * len(idx) + 1, 99, np.int32)
    buf[1::3] = idx
    return buf[1::3]


@pytest.mark.parametrize("width,steps,pool_dtype,x_dtype", [(4, None, np.float32, np.float32),
                                                            (3, 2, np.float64, np.float64),
                                                            (1, 3, np.float32, np.float16),
                                                            (2, None, np.float64, np.float32)])
def test_conv1d_update_matches_reference(backend, width, steps, pool_dtype, x_dtype):
    """RS-10 .. RS-12 (rank 2 and 3 x, W = 1 included), RS-2 strided indices, RS-3 padding (NaN inputs,
    zero output), RS-4 untouched / canary rows bitwise, windows exact in the pool dtype (NU-R1)."""
    rng = np.random.default_rng(width * 10 + (steps or 0))
    B, C, ns = 4, 5, 6
    x = rng.standard_normal((B, C) if steps is None else (B, steps, C)).astype(x_dtype)
    pool = rng.standard_normal((ns, C, width - 1)).astype(pool_dtype)
    pool[5] = np.nan                                          # canary: never addressed
    idx = _strided(np.array([3, -1, 0, 4], np.int32))
    x[1] = np.nan                                             # a padding row reads nothing
    w, bias = rng.standard_normal((C, width)), rng.standard_normal(C)
    before = pool.copy()
    exp = ref.causal_conv1d_update(x, pool, w, bias, activation="silu", state_indices=idx)
    got = backend.causal_conv1d_update(x, pool, w, bias, activation="silu", state_indices=idx)
    assert np.array_equal(_bits(got.conv_state), _bits(exp.conv_state))   # windows and untouched rows
    assert np.array_equal(_bits(pool), _bits(before))                     # pure
    assert np.all(got.out[1] == 0.0)
    live = [0, 2, 3]
    M = np.abs(w).max() * max(np.abs(x[live].astype(np.float64)).max(), np.abs(pool[[3, 0, 4]]).max(initial=0.0),
                              1.0) + np.abs(bias).max()
    _class_r(got.out[live], exp.out[live], width + 1, M)


def test_conv1d_update_defaults(backend):
    """RS-2: no state_indices (row b uses slot b), no bias, no activation."""
    rng = np.random.default_rng(7)
    x, pool, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 3, 2)).astype(np.float32), \
        rng.standard_normal((3, 3))
    exp, got = ref.causal_conv1d_update(x, pool, w), backend.causal_conv1d_update(x, pool, w)
    assert np.array_equal(_bits(got.conv_state), _bits(exp.conv_state))
    _class_r(got.out, exp.out, 3, np.abs(w).max() * 3)


def _ssu_inputs(rng, mamba2, B, ns, pool_dtype):
    if mamba2:
        H, G, P, N = 4, 2, 3, 5
        state = rng.standard_normal((ns, H, P, N))
        x, z, dt = rng.standard_normal((B, H, P)), rng.standard_normal((B, H, P)), np.abs(rng.standard_normal((B, H)))
        A, D, bias = -np.abs(rng.standard_normal(H)), rng.standard_normal(H), rng.standard_normal(H) * 0.1
        Bm, Cm = rng.standard_normal((B, G, N)), rng.standard_normal((B, G, N))
    else:
        Dm, N = 5, 3
        state = rng.standard_normal((ns, Dm, N))
        x, z, dt = rng.standard_normal((B, Dm)), rng.standard_normal((B, Dm)), np.abs(rng.standard_normal((B, Dm)))
        A, D, bias = -np.abs(rng.standard_normal((Dm, N))), rng.standard_normal(Dm), rng.standard_normal(Dm) * 0.1
        Bm, Cm = rng.standard_normal((B, N)), rng.standard_normal((B, N))
    return state.astype(pool_dtype), x, dt, A, Bm, Cm, dict(D=D, z=z, dt_bias=bias)


@pytest.mark.parametrize("mamba2", [False, True])
@pytest.mark.parametrize("pool_dtype,options,softplus", [(np.float32, True, True), (np.float64, False, False)])
def test_selective_state_update_matches_reference(backend, mamba2, pool_dtype, options, softplus):
    """RS-14 (dt_bias, pinned softplus), RS-15 Mamba1, RS-16 Mamba2 with groups h // (H // G), D and z;
    RS-3 padding rows (NaN inputs) give exactly 0 and write nothing; RS-4 untouched rows bitwise."""
    rng = np.random.default_rng(11 + mamba2)
    state, x, dt, A, Bm, Cm, kw = _ssu_inputs(rng, mamba2, 3, 5, pool_dtype)
    kw = kw if options else {}
    state[1] = np.nan                                          # canary row
    idx = _strided(np.array([3, -1, 0], np.int32))
    for a in (x, dt, Bm, Cm):
        a[1] = np.nan                                          # padding row inputs are poison
    exp = ref.selective_state_update(state, x, dt, A, Bm, Cm, dt_softplus=softplus, state_indices=idx, **kw)
    got = backend.selective_state_update(state, x, dt, A, Bm, Cm, dt_softplus=softplus, state_indices=idx, **kw)
    assert np.array_equal(_bits(got.state[[1, 2, 4]]), _bits(state[[1, 2, 4]]))
    assert np.all(got.out[1] == 0.0)
    live = [0, 2]
    N = state.shape[-1]
    M_state = max(np.abs(state[[3, 0]]).max(), 10.0 * np.abs(x[live]).max() * np.abs(Bm[live]).max())
    _class_r(got.state[[3, 0]], exp.state[[3, 0]], 2, M_state, 2.0 ** -24 if pool_dtype == np.float32 else 2.0 ** -53)
    M_out = max(M_state * np.abs(Cm[live]).max(), np.abs(x[live]).max() * 3) * 3
    _class_r(got.out[live], exp.out[live], N + 1, M_out)


def test_selective_state_update_group_mapping(backend):
    """RS-16: head h reads group h // (H // G) (repeat_interleave), not h % G; G = 2, H = 4."""
    rng = np.random.default_rng(5)
    state, x, dt, A, Bm, Cm, _ = _ssu_inputs(rng, True, 2, 2, np.float32)
    Bm[:, 1] += 5.0                                            # make the two groups very different
    exp = ref.selective_state_update(state, x, dt, A, Bm, Cm)
    got = backend.selective_state_update(state, x, dt, A, Bm, Cm)
    _class_r(got.state, exp.state, 2, 50.0)


def test_rejects_duplicate_slots(backend):
    """RS-4: a duplicate non-negative slot is a ValueError naming state_indices."""
    with pytest.raises(ValueError, match="state_indices"):
        backend.causal_conv1d_update(np.zeros((2, 1)), np.zeros((3, 1, 1), np.float32), np.ones((1, 2)),
                                     state_indices=np.array([1, 1], np.int32))
