"""KV layouts (spec/paged_attention.md PA-35 .. PA-38): exact conversions in both directions."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvconform.reference import (combine_kv_heads, flatten_kv_heads, split_kv_heads,
                                 unflatten_kv_heads)


def test_combined_puts_k_at_even_and_v_at_odd_heads_PA_36():
    k = np.arange(2 * 1 * 2 * 3, dtype=np.float32).reshape(2, 1, 2, 3)
    v = 100 + k
    kv = combine_kv_heads(k, v)
    assert kv.shape == (2, 1, 4, 3)
    for h in range(2):
        np.testing.assert_array_equal(kv[:, :, 2 * h], k[:, :, h])
        np.testing.assert_array_equal(kv[:, :, 2 * h + 1], v[:, :, h])


def test_flat_puts_head_h_at_columns_h_times_d_PA_37():
    pages = np.arange(1 * 2 * 3 * 4).reshape(1, 2, 3, 4).astype(np.float16)
    flat = flatten_kv_heads(pages)
    assert flat.shape == (1, 2, 12)
    np.testing.assert_array_equal(flat[0, 1, 2 * 4:3 * 4], pages[0, 1, 2])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3), st.integers(1, 4), st.integers(1, 3), st.integers(1, 5),
       st.sampled_from([np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int8]))
def test_round_trips_are_bit_exact_PA_35_PA_38(P, ps, Hkv, D, dtype):
    rng = np.random.default_rng(P * 1000 + ps * 100 + Hkv * 10 + D)
    k = (rng.standard_normal((P, ps, Hkv, D)) * 8).astype(dtype)
    v = (rng.standard_normal((P, ps, Hkv, D)) * 8).astype(dtype)
    back = split_kv_heads(combine_kv_heads(k, v))
    assert back.k_pages.dtype == k.dtype
    np.testing.assert_array_equal(back.k_pages.view(np.uint8), k.view(np.uint8))
    np.testing.assert_array_equal(back.v_pages.view(np.uint8), v.view(np.uint8))
    again = unflatten_kv_heads(flatten_kv_heads(k), D)
    np.testing.assert_array_equal(again.view(np.uint8), k.view(np.uint8))


def test_conversions_return_new_arrays_PA_38():
    k = np.zeros((1, 1, 1, 2))
    flat = flatten_kv_heads(k)
    flat[:] = 1
    assert not k.any()


@pytest.mark.parametrize("fn, args, name", [
    (combine_kv_heads, (np.zeros((1, 1, 2)), np.zeros((1, 1, 2))), "k_pages"),
    (combine_kv_heads, (np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 1, 2))), "v_pages"),
    (combine_kv_heads, (np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2), np.float32)), "v_pages"),
    (split_kv_heads, (np.zeros((1, 1, 3, 2)),), "kv_pages"),
    (flatten_kv_heads, (np.zeros((1, 2, 2)),), "pages"),
    (unflatten_kv_heads, (np.zeros((1, 1, 6)), 4), "head_dim"),
    (unflatten_kv_heads, (np.zeros((1, 1, 6)), 0), "head_dim"),
])
def test_bad_layout_input_names_argument(fn, args, name):
    with pytest.raises(ValueError, match=name):
        fn(*args)
