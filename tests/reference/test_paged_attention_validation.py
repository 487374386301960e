"""PA-26 .. PA-30: every precondition of ragged_paged_attention raises ValueError/TypeError naming the
argument. Each case starts from one valid call and breaks exactly one rule."""
from __future__ import annotations

import numpy as np
import ml_dtypes
import pytest

from kvconform.reference import ragged_paged_attention

P, PS, HKV, HQ, D = 3, 4, 2, 4, 8


def valid_args() -> dict:
    rng = np.random.default_rng(0)
    # Sequence 0: kv_len 6 (pages 0, 1), q_len 2; sequence 1: kv_len 3 (page 2), q_len 1.
    return dict(q=rng.standard_normal((4, HQ, D)).astype(np.float32),
                k_pages=rng.standard_normal((P, PS, HKV, D)).astype(np.float32),
                v_pages=rng.standard_normal((P, PS, HKV, D)).astype(np.float32),
                kv_lens=np.array([6, 3], np.int32), page_indices=np.array([[0, 1], [2, 0]], np.int32),
                cu_q_lens=np.array([0, 2, 3], np.int32), num_seqs=2)


def call(**changes):
    return ragged_paged_attention(**{**valid_args(), **changes})


def test_valid_call_passes():
    assert call().shape == (4, HQ, D)


I8 = np.zeros((P, PS, HKV, D), np.int8)
F8 = np.zeros((P, PS, HKV, D), ml_dtypes.float8_e4m3fn)

CASES = [
    # (error type, name that must appear in the message, changes)
    (TypeError, "q", dict(q=np.zeros((4, HQ, D), np.int32))),
    (ValueError, "q", dict(q=np.zeros((4, HQ * D)))),
    (ValueError, "k_pages", dict(k_pages=np.zeros((P, PS, HKV * D)))),
    (TypeError, "k_pages", dict(k_pages=np.zeros((P, PS, HKV, D), np.int32))),
    (ValueError, "v_pages", dict(v_pages=np.zeros((P, PS, HKV, D + 1)))),
    (ValueError, "v_pages", dict(v_pages=np.zeros((P, PS, HKV, D), np.float16))),
    (ValueError, "head dim", dict(k_pages=np.zeros((P, PS, HKV, 4)), v_pages=np.zeros((P, PS, HKV, 4)))),
    (ValueError, "Hq % Hkv", dict(k_pages=np.zeros((P, PS, 3, D)), v_pages=np.zeros((P, PS, 3, D)))),
    (ValueError, "page_size", dict(k_pages=np.zeros((P, 0, HKV, D)), v_pages=np.zeros((P, 0, HKV, D)))),
    (ValueError, "q", dict(q=np.zeros((4, 0, D)))),
    (TypeError, "kv_lens", dict(kv_lens=np.array([6.0, 3.0]))),
    (ValueError, "kv_lens", dict(kv_lens=np.array([[6, 3]]))),
    (TypeError, "page_indices", dict(page_indices=np.array([[0.0, 1.0], [2.0, 0.0]]))),
    (ValueError, "page_indices", dict(page_indices=np.array([[0, 1]]))),
    (ValueError, "page_indices", dict(page_indices=np.array([0, 1, 2]))),
    (TypeError, "cu_q_lens", dict(cu_q_lens=np.array([0.0, 2.0, 3.0]))),
    (ValueError, "cu_q_lens", dict(cu_q_lens=np.array([0, 2]))),
    (TypeError, "num_seqs", dict(num_seqs=2.0)),
    (TypeError, "num_seqs", dict(num_seqs=True)),
    (ValueError, "num_seqs", dict(num_seqs=3)),
    (ValueError, "num_seqs", dict(num_seqs=-1)),
    (ValueError, "cu_q_lens[0]", dict(cu_q_lens=np.array([1, 2, 3]))),
    (ValueError, "cu_q_lens must be non-decreasing", dict(cu_q_lens=np.array([0, 2, 1]))),
    (ValueError, "cu_q_lens[num_seqs]", dict(cu_q_lens=np.array([0, 2, 5]))),
    (ValueError, "kv_lens", dict(kv_lens=np.array([6, -1]), cu_q_lens=np.array([0, 2, 2]))),
    (ValueError, "q_len <= kv_len", dict(kv_lens=np.array([1, 3]))),
    (ValueError, "kv_lens must fit the page table", dict(kv_lens=np.array([9, 3]))),
    (ValueError, "page_indices[0,1]", dict(page_indices=np.array([[0, 3], [2, 0]]))),
    (ValueError, "page_indices[1,0]", dict(page_indices=np.array([[0, 1], [-1, 0]]))),
    (ValueError, "sm_scale", dict(sm_scale=0.0)),
    (ValueError, "sm_scale", dict(sm_scale=float("nan"))),
    (TypeError, "sm_scale", dict(sm_scale="0.5")),
    (ValueError, "sliding_window", dict(sliding_window=0)),
    (TypeError, "sliding_window", dict(sliding_window=2.5)),
    (ValueError, "soft_cap", dict(soft_cap=-1.0)),
    (ValueError, "soft_cap", dict(soft_cap=float("inf"))),
    (ValueError, "sinks", dict(sinks=np.zeros(HQ + 1))),
    (TypeError, "sinks", dict(sinks=np.zeros(HQ, np.int32))),
    (ValueError, "sinks", dict(sinks=np.array([0.0, np.nan, 0.0, 0.0]))),
    (ValueError, "sinks", dict(sinks=np.array([0.0, np.inf, 0.0, 0.0]))),
    (ValueError, "k_scale", dict(k_pages=I8, v_pages=I8, v_scale=1.0)),
    (ValueError, "v_scale", dict(k_pages=F8, v_pages=F8, k_scale=1.0)),
    (ValueError, "k_scale", dict(k_scale=1.0)),
    (ValueError, "k_scale", dict(k_pages=I8, v_pages=I8, k_scale=0.0, v_scale=1.0)),
    (ValueError, "v_scale", dict(k_pages=I8, v_pages=I8, k_scale=1.0, v_scale=1e-50)),  # 0 in float32
    (TypeError, "return_scores", dict(return_scores="yes")),
]


@pytest.mark.parametrize("error, name, changes", CASES,
                         ids=[f"{i}-{name}" for i, (_, name, _) in enumerate(CASES)])
def test_precondition_names_argument_PA_26_to_PA_30(error, name, changes):
    with pytest.raises(error) as info:
        call(**changes)
    assert name in str(info.value), str(info.value)


def test_message_reports_offending_values():
    with pytest.raises(ValueError, match=r"cu_q_lens\[2\]=1 < cu_q_lens\[1\]=2"):
        call(cu_q_lens=np.array([0, 2, 1]))


def test_entries_of_sequences_past_num_seqs_are_not_checked_PA_5():
    # Sequence 1 is not counted: its kv_len, offsets and pages may hold anything.
    out = call(num_seqs=1, kv_lens=np.array([6, -4]), cu_q_lens=np.array([0, 2, -9]),
               page_indices=np.array([[0, 1], [99, -3]]))
    assert np.isfinite(out[:2]).all()


def test_unused_page_table_entries_are_not_checked_PA_24():
    # Sequence 1 (kv_len 3) uses one page: its second entry may be any integer.
    assert np.isfinite(call(page_indices=np.array([[0, 1], [2, -12345]]))[:3]).all()


def test_num_seqs_as_one_element_array_PA_5():
    np.testing.assert_array_equal(call(num_seqs=np.array([2], np.int32)), call())
