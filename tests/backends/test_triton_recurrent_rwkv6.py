"""Triton rwkv6_wkv against the reference (RS-3 .. RS-5, RS-17, RS-20) on tiny packed batches.

Tolerances (spec/numerics.md "## Recurrent"): padding tokens and unaddressed rows bit for bit (NU-R1);
outputs and final states elementwise class R (NU-R2): |a - r| <= 2 * n * 2^-24 * M + 2 * u_out * |r|
with n = L_s * K, M a bound on the magnitude of the summed terms. Reason: the kernel's float32
summation order is free (RS-8); decays w in (0, 1] damp earlier rounding errors.
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


@pytest.mark.parametrize("lengths,dk,dv,act", [([3, 0, 5], 3, 2, np.float64), ([0, 2, 4], 4, 3, np.float32),
                                               ([1, 3, 0], 2, 5, np.float16)])
def test_rwkv6_wkv_matches_reference(backend, lengths, dk, dv, act):
    """RS-17 varlen with an empty sequence, RS-5 fresh row holding NaN, RS-3 padding sequence (NaN
    tokens -> zeros, row untouched), RS-4 unaddressed rows bitwise, strided state_indices / cu_seqlens."""
    rng = np.random.default_rng(sum(lengths) + dk * 10 + dv)
    H, ns = 2, 5
    cu_buf = np.zeros(2 * (len(lengths) + 1), np.int32)
    cu_buf[::2] = np.concatenate([[0], np.cumsum(lengths)])
    cu = cu_buf[::2]
    T = int(cu[-1])
    state = rng.standard_normal((ns, H, dk, dv)).astype(np.float32)
    r, k = (rng.standard_normal((T, H, dk)).astype(act) for _ in range(2))
    v = rng.standard_normal((T, H, dv)).astype(act)
    w = rng.uniform(0.05, 1.0, (T, H, dk)).astype(act)
    u = rng.standard_normal((H, dk)).astype(act)
    pad_seq = 1
    idx_buf = np.full(6, 7, np.int32)
    idx_buf[::2] = [3, -1, 0]
    idx = idx_buf[::2]
    has_init = np.array([False, True, True])
    state[3] = np.nan                                   # fresh row: must not be read (RS-5)
    state[4] = np.nan                                   # canary: never addressed (RS-4)
    for a in (r, k, v, w):
        a[cu[pad_seq]:cu[pad_seq + 1]] = np.nan         # padding sequence reads nothing (RS-3)
    args = (r, k, v, w, u, state, cu)
    kw = dict(state_indices=idx, has_initial_state=has_init)
    exp = ref.rwkv6_wkv(*args, **kw)
    got = backend.rwkv6_wkv(*args, **kw)
    assert got.out.dtype == np.float32 and got.state.dtype == state.dtype
    assert np.array_equal(_bits(got.state[[1, 2, 4]]), _bits(state[[1, 2, 4]]))
    pad = np.arange(cu[pad_seq], cu[pad_seq + 1])
    assert np.all(got.out[pad] == 0.0) and not np.signbit(got.out[pad]).any()
    for s, slot in ((0, 3), (2, 0)):
        toks = np.arange(cu[s], cu[s + 1])
        n = max(lengths[s], 1) * dk
        f = lambda a: np.abs(a[toks].astype(np.float64)).max(initial=0.0)  # noqa: E731
        M_state = max(np.abs(state[slot]).max() if has_init[s] else 0.0,
                      max(lengths[s], 1) * f(k) * f(v), 1.0)
        M = M_state * max(f(r), 1.0) * (1 + max(np.abs(u).max(), 1.0)) * dk
        tol = lambda e, m: 2 * n * U32 * m + 2 * U32 * np.abs(e)  # noqa: E731
        e_out = exp.out[toks]
        assert np.all(np.abs(got.out[toks] - e_out) <= tol(e_out, M)), s
        e_st = exp.state[slot].astype(np.float64)
        assert np.all(np.abs(got.state[slot] - e_st) <= tol(e_st, M_state)), s
    if lengths[0] == 0:                                 # fresh empty sequence stores exact zeros (RS-5)
        assert np.all(got.state[3] == 0.0)


def test_rwkv6_wkv_defaults_and_errors(backend):
    """No state_indices (sequence s uses row s) and no has_initial_state (all rows read); malformed
    arguments fail with the reference's message (validation reuses its helpers)."""
    rng = np.random.default_rng(7)
    T, H, dk, dv = 4, 1, 2, 3
    cu = np.array([0, 1, 4], np.int32)
    r, k, w = rng.standard_normal((T, H, dk)), rng.standard_normal((T, H, dk)), rng.uniform(0.1, 1, (T, H, dk))
    v, u = rng.standard_normal((T, H, dv)), rng.standard_normal((H, dk))
    state = rng.standard_normal((3, H, dk, dv)).astype(np.float32)
    exp = ref.rwkv6_wkv(r, k, v, w, u, state, cu)
    got = backend.rwkv6_wkv(r, k, v, w, u, state, cu)
    n = 3 * dk                                          # NU-R2: n = L_s * K, longest sequence 3
    M_state = max(np.abs(state).max(), 3 * np.abs(k).max() * np.abs(v).max(), 1.0)
    M = M_state * max(np.abs(r).max(), 1.0) * (1 + max(np.abs(u).max(), 1.0)) * dk
    tol = lambda e, m: 2 * n * U32 * m + 2 * U32 * np.abs(e)  # noqa: E731
    assert np.all(np.abs(got.out - exp.out) <= tol(exp.out, M))
    assert np.all(np.abs(got.state[:2] - exp.state[:2]) <= tol(exp.state[:2].astype(np.float64), M_state))
    assert np.array_equal(_bits(got.state[2]), _bits(state[2]))
    for bad in (dict(u=np.zeros((H, dk + 1))), dict(v=np.zeros((T, H + 1, dv)))):
        a = {**dict(r=r, k=k, v=v, w=w, u=u, state=state, cu_seqlens=cu), **bad}
        with pytest.raises(ValueError) as want:
            ref.rwkv6_wkv(**a)
        with pytest.raises(ValueError) as have:
            backend.rwkv6_wkv(**a)
        assert str(have.value) == str(want.value)
