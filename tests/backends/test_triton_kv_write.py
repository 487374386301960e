"""Triton KV write against the reference, bit for bit (PA-40 .. PA-46), under the interpreter.

The quantize-on-write rule is pinned (reference/dtypes.py), so stored data must be identical,
including the interpreter's known-bad float32 -> bfloat16 / float8 conversions, which the kernel avoids.
"""
from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from kvconform import reference as ref  # noqa: E402
from kvconform.reference import dtypes  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
KV_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")


@pytest.fixture(scope="module")
def backend():
    return make_backend()


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), kv_dtype=st.sampled_from(KV_DTYPES),
       in_dtype=st.sampled_from(["float32", "float16", "bfloat16", "float64"]),
       magnitude=st.sampled_from([1e-6, 1.0, 300.0, 1e5]))
def test_write_kv_bit_exact(backend, seed, kv_dtype, in_dtype, magnitude):
    """PA-41 skip, PA-43 float rounding through float32, PA-44 quantize (rne, saturate), PA-45 rest kept."""
    rng = np.random.default_rng(seed)
    P, ps, hkv, d = int(rng.integers(1, 5)), int(rng.choice([1, 3, 4])), int(rng.integers(1, 3)), 8
    n = int(rng.integers(0, P * ps + 1))
    slots = rng.permutation(P * ps)[:n]
    slots[rng.random(n) < 0.3] = -1
    slots = slots.astype(np.int32)
    kvd = dtypes.resolve_dtype(kv_dtype)
    pool = (rng.standard_normal((P, ps, hkv, d)) * 4).astype(np.float32)
    k_pages = pool.astype(kvd) if kvd != np.int8 else rng.integers(-128, 128, pool.shape).astype(np.int8)
    v_pages = k_pages[::-1].copy()
    k = (rng.standard_normal((n, hkv, d)) * magnitude).astype(dtypes.resolve_dtype(in_dtype))
    v = (rng.standard_normal((n, hkv, d)) * magnitude).astype(dtypes.resolve_dtype(in_dtype))
    scale = float(np.float32(rng.choice([0.013, 1.0, 7.5]))) if dtypes.is_quantized_dtype(kvd) else None
    before = (k_pages.copy(), v_pages.copy(), k.copy(), v.copy())
    expected = ref.write_kv(k_pages, v_pages, k, v, slots, k_scale=scale, v_scale=scale)
    got = backend.write_kv(k_pages, v_pages, k, v, slots, k_scale=scale, v_scale=scale)
    assert got.k_pages.dtype == kvd
    assert np.array_equal(_bits(got.k_pages), _bits(expected.k_pages))
    assert np.array_equal(_bits(got.v_pages), _bits(expected.v_pages))
    for a, b in zip(before, (k_pages, v_pages, k, v)):  # inputs untouched
        assert np.array_equal(_bits(a), _bits(b))


def test_interpreter_conversion_pitfalls_are_avoided(backend):
    """Values the interpreter rounds wrongly (toolchain notes): -2.71828 -> bf16 -2.71875 (not
    -2.703125, truncation); 1.97 -> e4m3 2.0 (carry); ties to even; saturation at 448 / 57344 / 127."""
    cases = {
        "bfloat16": ([-2.71828, 1 + 2**-8, 1 + 3 * 2**-8], [-2.71875, 1.0, 1 + 2**-6]),
        "float8_e4m3fn": ([1.97, 1.0625, 1.1875, 1000.0, -500.0, 2**-10, 3 * 2**-10],
                          [2.0, 1.0, 1.25, 448.0, -448.0, 0.0, 2**-8]),
        "float8_e5m2": ([1.97, 1e6, 1.125, 3 * 2**-17], [2.0, 57344.0, 1.0, 2**-15]),
        "int8": ([2.5, 3.5, -2.5, 300.0, -300.0, 0.49999997], [2, 4, -2, 127, -128, 0]),
    }
    for name, (values, expected) in cases.items():
        n = len(values)
        pages = np.zeros((1, n, 1, 1), dtype=dtypes.resolve_dtype(name))
        x = np.array(values, np.float32).reshape(n, 1, 1)
        scale = 1.0 if dtypes.is_quantized_dtype(pages.dtype) else None
        got = backend.write_kv(pages, pages, x, x, np.arange(n, dtype=np.int32), k_scale=scale, v_scale=scale)
        np.testing.assert_array_equal(got.k_pages.reshape(-1).astype(np.float64), np.array(expected),
                                      err_msg=name)


def test_strided_slot_mapping(backend):
    """Metadata views at an offset with a stride are honoured (issue 6)."""
    buf = np.array([99, 3, 99, -1, 99, 0, 99], np.int64)
    slots = buf[1::2]
    pages = np.zeros((1, 4, 1, 2), np.float32)
    k = np.arange(6, dtype=np.float32).reshape(3, 1, 2) + 1
    got = backend.write_kv(pages, pages, k, k, slots)
    assert got.k_pages[0, :, 0, 0].tolist() == [5.0, 0.0, 0.0, 1.0]


def test_rejects_duplicate_slots(backend):
    """PA-42: duplicate non-negative slots are an error naming slot_mapping."""
    pages = np.zeros((1, 4, 1, 2), np.float32)
    k = np.zeros((2, 1, 2), np.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        backend.write_kv(pages, pages, k, k, np.array([1, 1], np.int32))
