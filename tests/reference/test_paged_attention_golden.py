"""Hand-worked golden cases for ragged_paged_attention; every expected value is arithmetic written here.

The recurring pattern: two visible keys whose logits are 0 and ln 3 get softmax weights
1/(1+3) = 1/4 and 3/(1+3) = 3/4; with values 2 and 6 the output is 2/4 + 18/4 = 5.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kvconform.reference import ragged_paged_attention

LN3 = math.log(3.0)


def one_head(keys, values, q_rows, *, page_size=None, dtype=np.float64, **options):
    """A single sequence, Hq = Hkv = D = 1 (so the default sm_scale is 1 ** -0.5 = 1), one page."""
    n = len(keys)
    page_size = page_size or max(n, 1)
    P = -(-n // page_size) or 1
    k_pages = np.zeros((P, page_size, 1, 1), dtype=dtype)
    v_pages = np.zeros((P, page_size, 1, 1), dtype=dtype)
    k_pages.reshape(-1)[:n] = keys
    v_pages.reshape(-1)[:n] = values
    q = np.asarray(q_rows, dtype=np.float64).reshape(-1, 1, 1)
    return ragged_paged_attention(q, k_pages, v_pages, np.array([n], np.int32),
                                  np.arange(P, dtype=np.int32)[None], np.array([0, len(q)], np.int32),
                                  1, **options)


def test_decode_row_softmax_PA_6_PA_14_PA_20():
    # q*k = [0, ln3] -> weights [1/4, 3/4] -> 2/4 + 6*3/4 = 5; the row sees both keys (pos = 1).
    res = one_head([0.0, 1.0], [2.0, 6.0], [LN3], return_scores=True)
    assert res.out[0, 0, 0] == pytest.approx(5.0, rel=1e-15)
    np.testing.assert_allclose(res.scores[0], [0.25, 0.75], rtol=1e-15)


def test_prefill_rows_are_bottom_right_causal_PA_6_PA_7():
    # kv_len = q_len = 2: row 0 sits at position 0 and sees key 0 only -> v0 = 2;
    # row 1 sees both -> 5. Scores: key 0 gets 1 + 1/4, key 1 gets 3/4.
    res = one_head([0.0, 1.0], [2.0, 6.0], [LN3, LN3], return_scores=True)
    np.testing.assert_allclose(res.out[:, 0, 0], [2.0, 5.0], rtol=1e-15)
    np.testing.assert_allclose(res.scores[0], [1.25, 0.75], rtol=1e-15)


def test_chunk_positions_start_at_kv_len_minus_q_len_PA_6():
    # kv_len 3, q_len 2: rows at positions 1 and 2. keys [0, 1, 0] times q = ln3 -> logits [0, ln3, 0].
    # Row at 1: keys 0,1 -> (2*1 + 6*3)/4 = 5. Row at 2: all -> (2 + 18 + 10)/5 = 6.
    out = one_head([0.0, 1.0, 0.0], [2.0, 6.0, 10.0], [LN3, LN3])
    np.testing.assert_allclose(out[:, 0, 0], [5.0, 6.0], rtol=1e-15)


def test_default_sm_scale_is_inverse_sqrt_head_dim_PA_14():
    # D = 4: default scale 4 ** -0.5 = 1/2; q.k1 = 2 ln3 -> scaled logit ln3 -> output 5 in every column.
    q = np.array([LN3, LN3, 0, 0], dtype=np.float64).reshape(1, 1, 4)
    k = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=np.float64).reshape(1, 2, 1, 4)
    v = np.array([[2, 2, 2, 2], [6, 6, 6, 6]], dtype=np.float64).reshape(1, 2, 1, 4)
    out = ragged_paged_attention(q, k, v, np.array([2]), np.array([[0]]), np.array([0, 1]), 1)
    np.testing.assert_allclose(out[0, 0], [5.0] * 4, rtol=1e-15)
    # sm_scale = 1/4 halves the logit: weights [1, sqrt3] / (1 + sqrt3).
    out = ragged_paged_attention(q, k, v, np.array([2]), np.array([[0]]), np.array([0, 1]), 1, sm_scale=0.25)
    s3 = math.sqrt(3.0)
    np.testing.assert_allclose(out[0, 0], [(2 + 6 * s3) / (1 + s3)] * 4, rtol=1e-14)


def test_sink_adds_to_denominator_only_PA_17_PA_22():
    # logits [0, ln3], sink ln4: denominator 1 + 3 + 4 = 8 -> out (2 + 18)/8 = 2.5;
    # scores [1/8, 3/8] sum to 1/2 = 1 - sink mass 4/8.
    res = one_head([0.0, 1.0], [2.0, 6.0], [LN3], sinks=np.array([math.log(4.0)]), return_scores=True)
    assert res.out[0, 0, 0] == pytest.approx(2.5, rel=1e-15)
    np.testing.assert_allclose(res.scores[0], [0.125, 0.375], rtol=1e-15)


def test_soft_cap_after_scale_saturates_without_overflow_PA_16():
    # Raw logits [0, 1e300 * 1e300 -> huge]: q = 1e200, k1 = 1e100 gives 1e300; cap 1 -> tanh = 1.
    # Weights [1, e] / (1 + e) -> out (2 + 6e) / (1 + e).
    out = one_head([0.0, 1e100], [2.0, 6.0], [1e200], soft_cap=1.0)
    e = math.e
    assert out[0, 0, 0] == pytest.approx((2 + 6 * e) / (1 + e), rel=1e-15)
    # The cap acts on scaled logits: sm_scale 2, q.k = ln3 -> s = 2 ln3, cap 4 -> 4 tanh(ln3 / 2).
    capped = 4 * math.tanh(LN3 / 2)
    out = one_head([0.0, 1.0], [2.0, 6.0], [LN3], soft_cap=4.0, sm_scale=2.0)
    w = math.exp(capped)
    assert out[0, 0, 0] == pytest.approx((2 + 6 * w) / (1 + w), rel=1e-14)


def test_sliding_window_keys_in_open_closed_interval_PA_15():
    # pos 2, W = 2: keys 1 and 2 visible ((0, 2]); key 0 is NaN and must not matter -> 5.
    out = one_head([np.nan, 0.0, 1.0], [np.nan, 2.0, 6.0], [LN3], sliding_window=2)
    assert out[0, 0, 0] == pytest.approx(5.0, rel=1e-15)
    # W = 3 lets key 0 in: logits [ln3 * 2, 0, ln3] -> weights [9, 1, 3] / 13.
    out = one_head([2.0, 0.0, 1.0], [4.0, 2.0, 6.0], [LN3], sliding_window=3)
    assert out[0, 0, 0] == pytest.approx((36 + 2 + 18) / 13, rel=1e-15)


def test_gqa_heads_share_kv_head_PA_12():
    # Hq = 4, Hkv = 2, D = 1: heads 0,1 read KV head 0, heads 2,3 read KV head 1.
    # KV head 0: keys [0, 1], values [2, 6]; KV head 1: keys [0, 1], values [10, 20].
    # q = ln3 -> weights [1/4, 3/4]; q = 0 -> [1/2, 1/2].
    k = np.array([[0, 0], [1, 1]], dtype=np.float64).reshape(1, 2, 2, 1)
    v = np.array([[2, 10], [6, 20]], dtype=np.float64).reshape(1, 2, 2, 1)
    q = np.array([LN3, 0.0, LN3, 0.0]).reshape(1, 4, 1)
    out = ragged_paged_attention(q, k, v, np.array([2]), np.array([[0]]), np.array([0, 1]), 1)
    np.testing.assert_allclose(out[0, :, 0], [5.0, 4.0, 2.5 + 15.0, 15.0], rtol=1e-15)


def test_quantized_int8_and_fp8_scales_PA_18_PA_19():
    # int8 keys [0, 3] * 0.25 = [0, 0.75]; q = 4 ln3 / 3 -> logits [0, ln3];
    # int8 values [4, 12] * 0.5 = [2, 6] -> 5.
    k = np.array([0, 3], dtype=np.int8).reshape(1, 2, 1, 1)
    v = np.array([4, 12], dtype=np.int8).reshape(1, 2, 1, 1)
    q = np.array([4 * LN3 / 3]).reshape(1, 1, 1)
    meta = (np.array([2]), np.array([[0]]), np.array([0, 1]), 1)
    out = ragged_paged_attention(q, k, v, *meta, k_scale=0.25, v_scale=0.5)
    assert out[0, 0, 0] == pytest.approx(5.0, rel=1e-15)
    # float8_e4m3fn: stored 1.5 and 3.0 are exact; v_scale 4 -> values [6, 12]; k_scale 1, q = 0
    # -> uniform weights -> 9.
    import ml_dtypes
    k8 = np.array([1.5, 3.0], dtype=ml_dtypes.float8_e4m3fn).reshape(1, 2, 1, 1)
    out = ragged_paged_attention(np.zeros((1, 1, 1)), k8, k8, *meta, k_scale=1.0, v_scale=4.0)
    assert out[0, 0, 0] == 9.0


def test_ragged_batch_with_empty_sequences_PA_8_PA_25():
    # Sequence 0: kv_len 2, q_len 1 (-> 5). Sequence 1: kv_len 0, q_len 0. Sequence 2: kv_len 1,
    # q_len 0 (prefix only: no rows, scores 0). Sequence 3: kv_len 1, q_len 1 (-> its only value 7).
    # One padding row after the 2 counted rows; sequence 4 is past num_seqs.
    page_size = 2
    k_pages = np.zeros((4, page_size, 1, 1))
    v_pages = np.zeros((4, page_size, 1, 1))
    k_pages[0, :, 0, 0] = [0.0, 1.0]
    v_pages[0, :, 0, 0] = [2.0, 6.0]
    v_pages[2, 0, 0, 0] = 7.0
    q = np.array([LN3, 0.5, np.nan]).reshape(3, 1, 1)
    kv_lens = np.array([2, 0, 1, 1, 99], np.int32)
    table = np.array([[0], [3], [1], [2], [0]], np.int32)
    cu = np.array([0, 1, 1, 1, 2, 2], np.int32)
    res = ragged_paged_attention(q, k_pages, v_pages, kv_lens, table, cu, 4, return_scores=True)
    np.testing.assert_allclose(res.out[:2, 0, 0], [5.0, 7.0], rtol=1e-15)
    np.testing.assert_allclose(res.scores, [[0.25, 0.75], [0, 0], [0, 0], [1, 0], [0, 0]], rtol=1e-15)
    assert res.out[2, 0, 0] == 0.0  # padding row: unspecified by PA-25, the reference writes 0


def test_no_sequences_PA_5():
    q = np.full((2, 1, 1), np.nan)
    pages = np.zeros((1, 1, 1, 1))
    res = ragged_paged_attention(q, pages, pages, np.array([3]), np.array([[5]]), np.array([0, 7]), 0,
                                 return_scores=True)
    assert res.out.shape == (2, 1, 1) and not res.out.any() and not res.scores.any()


def test_inputs_not_modified_PA_20():
    q = np.array([[[LN3]]])
    k = np.array([0.0, 1.0]).reshape(1, 2, 1, 1)
    v = np.array([2.0, 6.0]).reshape(1, 2, 1, 1)
    copies = [a.copy() for a in (q, k, v)]
    ragged_paged_attention(q, k, v, np.array([2]), np.array([[0]]), np.array([0, 1]), 1, soft_cap=2.0,
                           return_scores=True)
    for a, b in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, b)
