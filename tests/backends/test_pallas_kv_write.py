"""The Pallas KV write kernel against the reference: class E, bitwise in the storage dtype.

Clauses: PA-40 .. PA-46 (slot = page * page_size + offset, negative slots skip, quantize-on-write is
saturate(rne(fl32(x) / fl32(scale))), nothing else changes, duplicates rejected).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402

BACKEND = make_backend()
STORAGE = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
           "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8}


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("storage", list(STORAGE))
def test_bitwise_equal_to_reference(storage):
    """PA-43/PA-44 rounding incl. ties, saturation and huge values; PA-41 skips; PA-45 untouched rows."""
    rng = np.random.default_rng(11)
    dt = np.dtype(STORAGE[storage])
    P, ps, hkv, D, N = 5, 4, 2, 8, 11
    k_pages = (rng.standard_normal((P, ps, hkv, D)) * 3).astype(dt)
    v_pages = (rng.standard_normal((P, ps, hkv, D)) * 3).astype(dt)
    k = (rng.standard_normal((N, hkv, D)) * 40).astype(np.float32)
    v = (rng.standard_normal((N, hkv, D)) * 40).astype(ml_dtypes.bfloat16)
    k[0, 0, :4] = [2.5, 3.5, -0.5, 1e30]  # int8 ties to even, saturation
    slots = np.array([19, -1, 0, 7, -3, 3, 12, 8, -1, 2, 16])
    opts = {"k_scale": 0.5, "v_scale": 3.0} if storage in ("float8_e4m3fn", "float8_e5m2", "int8") else {}
    if storage in ("float16",):
        k[0, 0, 3] = 1e3
    expected = reference.write_kv(k_pages, v_pages, k, v, slots, **opts)
    before = _bits(k_pages).copy()
    actual = BACKEND.write_kv(k_pages, v_pages, k, v, slots, **opts)
    assert actual.k_pages.dtype == dt and actual.v_pages.dtype == dt
    np.testing.assert_array_equal(_bits(actual.k_pages), _bits(expected.k_pages))
    np.testing.assert_array_equal(_bits(actual.v_pages), _bits(expected.v_pages))
    np.testing.assert_array_equal(_bits(k_pages), before)  # inputs not modified


def test_golden_int8_quantize():
    """Hand-worked: scale 0.5 -> 1.25/0.5 = 2.5 -> 2 (ties to even); -0.75/0.5 = -1.5 -> -2;
    100/0.5 = 200 -> 127 (saturate)."""
    pages = np.zeros((1, 2, 1, 3), np.int8)
    k = np.array([[[1.25, -0.75, 100.0]]], np.float32)
    out = BACKEND.write_kv(pages, pages, k, k, np.array([1]), k_scale=0.5, v_scale=0.5)
    np.testing.assert_array_equal(out.k_pages[0, 1, 0], [2, -2, 127])
    np.testing.assert_array_equal(out.k_pages[0, 0, 0], [0, 0, 0])


def test_errors_name_the_argument():
    pages = np.zeros((2, 2, 1, 4), np.float32)
    k = np.zeros((2, 1, 4), np.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        BACKEND.write_kv(pages, pages, k, k, np.array([1, 1]))  # duplicate
    with pytest.raises(ValueError, match="slot_mapping"):
        BACKEND.write_kv(pages, pages, k, k, np.array([0, 4]))  # out of range
    with pytest.raises(ValueError, match="k_scale"):
        BACKEND.write_kv(pages.astype(np.int8), pages.astype(np.int8), k, k, np.array([0, 1]))
    with pytest.raises(ValueError, match="k must have shape"):
        BACKEND.write_kv(pages, pages, k[:, :, :3], k, np.array([0, 1]))
    with pytest.raises(TypeError, match="float64"):
        BACKEND.write_kv(pages.astype(np.float64), pages.astype(np.float64), k, k, np.array([0, 1]))
