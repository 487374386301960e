"""Triton ssd_chunked_scan against the reference (RS-5, RS-16 .. RS-19) on tiny packed batches.

Tolerances (spec/numerics.md "## Recurrent"): padding tokens, padding snapshots and unaddressed rows
bit for bit (NU-R1); outputs, final states and snapshots r <= L_s elementwise class R (NU-R2, NU-R4):
|a - r| <= 2 * n * 2^-24 * M + 2 * u_out * |r| with n = L_s * N (+1 for D x), M the largest term.
Reason: the kernel's chunking and float32 summation order are free (RS-8, RS-18); decays in (0, 1]
damp earlier rounding errors. Snapshots r > L_s are unspecified and not compared (RS-19).
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


@pytest.mark.parametrize("lengths,chunk,snaps,options", [([3, 0, 5], 64, 0, True), ([2, 0, 5], 2, 3, False),
                                                        ([0, 3, 20], 16, 4, True)])
def test_ssd_chunked_scan_matches_reference(backend, lengths, chunk, snaps, options):
    """RS-17/18 varlen (empty sequences, several chunks), RS-5 fresh rows holding NaN, RS-3 padding
    sequence (NaN tokens -> zeros), RS-19 snapshots, strided state_indices / cu_seqlens views."""
    rng = np.random.default_rng(len(lengths) + chunk + snaps)
    H, G, P, N, ns = 2, 1, 2, 3, 5
    cu_buf = np.zeros(2 * (len(lengths) + 1), np.int32)
    cu_buf[::2] = np.concatenate([[0], np.cumsum(lengths)])
    cu = cu_buf[::2]
    T = int(cu[-1])
    state = rng.standard_normal((ns, H, P, N)).astype(np.float32)
    x, dt = rng.standard_normal((T, H, P)), np.abs(rng.standard_normal((T, H))) * 0.5
    A, Bm, Cm = -np.abs(rng.standard_normal(H)), rng.standard_normal((T, G, N)), rng.standard_normal((T, G, N))
    kw = dict(D=rng.standard_normal(H), z=rng.standard_normal((T, H, P)), dt_bias=rng.standard_normal(H) * 0.1,
              dt_softplus=True) if options else {}
    idx = np.array([3, -1, 0], np.int32)
    has_init = np.array([False, True, True])
    state[3] = np.nan                                   # fresh row: must not be read (RS-5)
    state[4] = np.nan                                   # canary: never addressed (RS-4)
    for a in (x, dt, Bm, Cm):
        a[cu[1]:cu[2]] = np.nan                         # padding sequence reads nothing (RS-3)
    args = (state, x, dt, A, Bm, Cm, cu)
    kw.update(chunk_size=chunk, state_indices=idx, has_initial_state=has_init, num_snapshots=snaps)
    exp = ref.ssd_chunked_scan(*args, **kw)
    got = backend.ssd_chunked_scan(*args, **kw)
    assert np.array_equal(_bits(got.state[[1, 2, 4]]), _bits(state[[1, 2, 4]]))
    pad = np.arange(cu[1], cu[2])
    assert np.all(got.out[pad] == 0.0) and np.all(got.snapshots[1] == 0.0)
    live = np.concatenate([np.arange(cu[0], cu[1]), np.arange(cu[2], cu[3])])
    n = max(lengths) * N + 1
    M_state = max(np.abs(state[0]).max(), 5 * np.abs(x[live]).max() * np.abs(Bm[live]).max(), 1.0)
    M = M_state * max(np.abs(Cm[live]).max(), 1.0) * 4
    tol = lambda e, m: 2 * n * U32 * m + 2 * U32 * np.abs(e)  # noqa: E731
    assert np.all(np.abs(got.out[live] - exp.out[live]) <= tol(exp.out[live], M))
    assert np.all(np.abs(got.state[[3, 0]] - exp.state[[3, 0]]) <= tol(exp.state[[3, 0]], M_state))
    for s in (0, 2):
        r = min(snaps, lengths[s] + 1)
        e = exp.snapshots[s, :r].astype(np.float64)
        assert np.all(np.abs(got.snapshots[s, :r] - e) <= tol(e, M_state))
