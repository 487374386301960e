"""write_kv (spec/paged_attention.md PA-40 .. PA-46): golden scatters, quantize-on-write, validation."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvconform.reference import write_kv

E4M3 = ml_dtypes.float8_e4m3fn


def pools(P=3, ps=4, Hkv=2, D=2, dtype=np.float32, fill=-1.0):
    return np.full((P, ps, Hkv, D), fill, dtype), np.full((P, ps, Hkv, D), fill, dtype)


def test_slot_addresses_page_and_offset_PA_40_PA_41():
    k_pages, v_pages = pools()
    k = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2)
    # slot 9 = page 2, offset 1; slot -1 skips token 1; slot 0 = page 0, offset 0.
    res = write_kv(k_pages, v_pages, k, -k, np.array([9, -1, 0], np.int32))
    expected = np.full_like(k_pages, -1.0)
    expected[2, 1] = k[0]
    expected[0, 0] = k[2]
    np.testing.assert_array_equal(res.k_pages, expected)
    expected_v = np.full_like(v_pages, -1.0)
    expected_v[2, 1] = -k[0]
    expected_v[0, 0] = -k[2]
    np.testing.assert_array_equal(res.v_pages, expected_v)
    assert res.k_pages.dtype == np.float32
    assert (k_pages == -1).all()  # PA-46: inputs untouched


def test_float_pages_round_to_nearest_even_through_float32_PA_43():
    k_pages, v_pages = pools(P=1, ps=4, Hkv=1, D=1, dtype=ml_dtypes.bfloat16, fill=0.0)
    # bfloat16 has 8 significant bits: spacing 2**-7 in [1, 2).
    #   1 + 2**-8 is a tie -> even 1.0;  1 + 3 * 2**-8 is a tie -> even 1 + 2**-6;
    #   1 + 2**-8 + 2**-30 rounds to float32 1 + 2**-8 first (pinned), then ties to 1.0.
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -30, 2.0 ** 200]).reshape(4, 1, 1)
    res = write_kv(k_pages, v_pages, x, x, np.arange(4))
    np.testing.assert_array_equal(res.k_pages.reshape(-1).astype(np.float64),
                                  [1.0, 1 + 2 ** -6, 1.0, np.inf])  # 2**200 overflows float32: inf


def test_quantize_on_write_scales_rounds_and_saturates_PA_44():
    k_pages, v_pages = pools(P=1, ps=4, Hkv=1, D=1, dtype=np.int8, fill=0)
    x = np.array([1.25, 1.75, 2.5, 1000.0], dtype=np.float32).reshape(4, 1, 1)
    # scale 0.5: x / 0.5 = [2.5, 3.5, 5, 2000] -> ties to even [2, 4, 5], saturate 127.
    res = write_kv(k_pages, v_pages, x, -x, np.arange(4), k_scale=0.5, v_scale=0.5)
    np.testing.assert_array_equal(res.k_pages.reshape(-1), [2, 4, 5, 127])
    np.testing.assert_array_equal(res.v_pages.reshape(-1), [-2, -4, -5, -128])
    f8k, f8v = pools(P=1, ps=2, Hkv=1, D=1, dtype=E4M3, fill=0.0)
    # e4m3fn: max 448; 3 significant bits in [16, 32): spacing 2. 17 / 1 is a tie -> 16; 1e6 saturates.
    y = np.array([17.0, 1e6]).reshape(2, 1, 1)
    res = write_kv(f8k, f8v, y, y, np.arange(2), k_scale=1.0, v_scale=2.0)
    np.testing.assert_array_equal(res.k_pages.reshape(-1).astype(np.float64), [16.0, 448.0])
    # v: 17 / 2 = 8.5; spacing 1 in [8, 16): tie -> 8.
    np.testing.assert_array_equal(res.v_pages.reshape(-1).astype(np.float64), [8.0, 448.0])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_only_written_slots_change_PA_45(P, ps, data):
    """PA-45: every element outside the written slots is bitwise unchanged (NaN payloads included)."""
    k_pages, v_pages = pools(P=P, ps=ps, Hkv=1, D=2, fill=np.nan)
    slots = data.draw(st.lists(st.integers(-3, P * ps - 1), max_size=P * ps + 2).filter(
        lambda s: len({x for x in s if x >= 0}) == len([x for x in s if x >= 0])))
    k = np.arange(len(slots) * 2, dtype=np.float32).reshape(-1, 1, 2)
    res = write_kv(k_pages, v_pages, k, k, np.asarray(slots, dtype=np.int64))
    flat = res.k_pages.reshape(-1, 1, 2)
    for slot in range(P * ps):
        if slot in slots:
            np.testing.assert_array_equal(flat[slot], k[slots.index(slot)])
        else:
            assert np.isnan(flat[slot]).all()


def w(**changes):
    k_pages, v_pages = pools()
    args = dict(k_pages=k_pages, v_pages=v_pages, k=np.zeros((2, 2, 2)), v=np.zeros((2, 2, 2)),
                slot_mapping=np.array([0, 5]))
    return write_kv(**{**args, **changes})


I8 = np.zeros((3, 4, 2, 2), np.int8)

CASES = [
    (TypeError, "k_pages", dict(k_pages=np.zeros((3, 4, 2, 2), np.int32))),
    (ValueError, "k_pages", dict(k_pages=np.zeros((3, 4, 4)))),
    (ValueError, "v_pages", dict(v_pages=np.zeros((3, 4, 2, 3), np.float32))),
    (ValueError, "v_pages", dict(v_pages=np.zeros((3, 4, 2, 2), np.float16))),
    (TypeError, "k", dict(k=np.zeros((2, 2, 2), np.int32))),
    (ValueError, "k", dict(k=np.zeros((2, 3, 2)))),
    (ValueError, "v", dict(v=np.zeros((3, 2, 2)))),
    (TypeError, "slot_mapping", dict(slot_mapping=np.array([0.0, 5.0]))),
    (ValueError, "slot_mapping", dict(slot_mapping=np.array([0, 12]))),
    (ValueError, "slot_mapping", dict(slot_mapping=np.array([5, 5]))),
    (ValueError, "k_scale", dict(k_pages=I8, v_pages=I8, v_scale=1.0)),
    (ValueError, "v_scale", dict(k_pages=I8, v_pages=I8, k_scale=1.0)),
    (ValueError, "k_scale", dict(k_scale=2.0)),
    (ValueError, "k_scale", dict(k_pages=I8, v_pages=I8, k_scale=-1.0, v_scale=1.0)),
    (ValueError, "k", dict(k_pages=I8, v_pages=I8, k_scale=1.0, v_scale=1.0,
                           k=np.full((2, 2, 2), np.nan))),
]


@pytest.mark.parametrize("error, name, changes", CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)])
def test_precondition_names_argument_PA_42_PA_46(error, name, changes):
    with pytest.raises(error) as info:
        w(**changes)
    assert name in str(info.value), str(info.value)


def test_duplicate_negative_slots_and_skipped_nan_are_fine_PA_41():
    # Two padding tokens share slot -1; their NaN values are never quantized (int8 would reject NaN).
    k_pages, v_pages = pools(dtype=np.int8, fill=0)
    k = np.array([np.nan, 3.0, np.nan]).reshape(3, 1, 1) * np.ones((3, 2, 2))
    res = write_kv(k_pages, v_pages, k, k, np.array([-1, 2, -1]), k_scale=1.0, v_scale=1.0)
    assert (res.k_pages[0, 2] == 3).all() and res.k_pages.sum() == 12


def test_padding_rows_past_the_slot_mapping_are_never_read_PA_50():
    # k/v padded to 5 rows for 2 tokens: rows 2.. hold NaN (int8 would reject NaN in a written token)
    k_pages, v_pages = pools(dtype=np.int8, fill=0)
    k = np.full((5, 2, 2), np.nan)
    k[:2] = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    slots = np.array([6, 1], np.int32)
    padded = write_kv(k_pages, v_pages, k, -k, slots, k_scale=1.0, v_scale=1.0)
    exact = write_kv(k_pages, v_pages, k[:2], -k[:2], slots, k_scale=1.0, v_scale=1.0)
    np.testing.assert_array_equal(padded.k_pages, exact.k_pages)
    np.testing.assert_array_equal(padded.v_pages, exact.v_pages)
    assert padded.k_pages[1, 2, 1, 1] == 4 and padded.k_pages[0, 1, 0, 0] == 5


@pytest.mark.parametrize("k_rows, v_rows, name", [(1, 1, "k"), (3, 2, "v"), (3, 4, "v")])
def test_fewer_rows_than_slots_or_k_and_v_padded_apart_are_rejected_PA_50(k_rows, v_rows, name):
    k_pages, v_pages = pools()
    with pytest.raises(ValueError) as info:
        write_kv(k_pages, v_pages, np.zeros((k_rows, 2, 2)), np.zeros((v_rows, 2, 2)), np.array([0, 5]))
    assert name in str(info.value).split()[0], str(info.value)
