"""Comparison helpers for the Pallas recurrent kernel tests (spec/numerics.md "## Recurrent").

NU-R1 (class E): bitwise, any NaN equals any NaN (NU-4). NU-R2 / NU-6 (class R): elementwise
|a - r| <= c_R * n * u_acc * M + 2 * u_out * |r| with c_R = 2, u = 2^-24 (float32 accumulation and
output), n the family's reduction length and M the largest magnitude of a term; plus the aggregate check
sqrt(sum (a - r)^2) <= 0.25 * sqrt(sum tol^2) that catches systematic bias. Any NaN in a compared element
fails (NU-7).
"""
from __future__ import annotations

import numpy as np

U32 = 2.0 ** -24
C_R = 2.0


def assert_bits(actual, expected):
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
    nan = np.isnan(a) & np.isnan(e)
    assert np.array_equal(np.where(nan, 0, a).view(np.uint8), np.where(nan, 0, e).view(np.uint8))


def assert_class_r(actual, expected, n, magnitude, what=""):
    a = np.asarray(actual, np.float64)
    r = np.asarray(expected, np.float64)
    assert a.shape == r.shape, (a.shape, r.shape)
    if a.size == 0:
        return
    assert np.all(np.isfinite(a)), f"{what}: non-finite output (NU-7)"
    tol = C_R * n * U32 * magnitude + 2 * U32 * np.abs(r)
    err = np.abs(a - r)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), f"{what}: |err| {err[worst]:.3g} > tol {tol[worst]:.3g} at {worst}"
    assert np.sqrt(np.sum(err ** 2)) <= 0.25 * np.sqrt(np.sum(tol ** 2)), f"{what}: aggregate (bias) check"
