"""Attention over the CSR layout (MD-23): the block-table reference on converted metadata."""
from __future__ import annotations

import numpy as np

from ..validation import check_index_range, int_input, require
from .tables import I32, csr_to_block_table, validate_csr


def ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None):
    """`ragged_paged_attention` (spec/paged_attention.md) with its page table in CSR form (MD-23).

    q: [T, Hq, D] float; k_pages, v_pages: [P, page_size, Hkv, D]; qo_indptr: i32[S+1] (= cu_q_lens,
    MD-7); kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S] (MD-2 .. MD-4), page_size
    taken from k_pages. Every sequence counts (num_seqs = S). Options as ragged_paged_attention (no
    per-token scores). Returns out: float64[T, Hq, D], identical to the block-table call on
    csr_to_block_table's conversion (MD-5).
    """
    table, qo, S = _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len)
    from ..paged_attention import ragged_paged_attention
    return ragged_paged_attention(q, k_pages, v_pages, table.kv_lens, table.page_indices, qo, S,
                                  sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap,
                                  sinks=sinks, k_scale=k_scale, v_scale=v_scale)


def _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len):
    k = np.asarray(k_pages)
    require(k.ndim == 4, f"k_pages must have rank 4 [P, page_size, Hkv, D], got shape {tuple(k.shape)}")
    P = int(k.shape[1])
    indptr, indices, _, _ = validate_csr(kv_indptr, kv_indices, kv_last_page_len, P)
    # checked here, on the argument the caller gave, before MD-5's conversion turns it into a block table
    # whose own check would name `page_indices`, an argument this op does not have
    check_index_range("kv_indices", indices, 0, int(k.shape[0]),
                      f" (page ids index k_pages' {int(k.shape[0])} pages, MD-2, MD-23)")
    qo = int_input("qo_indptr", qo_indptr, 1, "[S+1]")
    S = indptr.shape[0] - 1
    require(qo.shape[0] == S + 1, f"qo_indptr must have shape [S+1] = ({S + 1},) like kv_indptr, got {tuple(qo.shape)}")
    width = max(1, int(np.diff(indptr).max()) if S else 1)
    return csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, P, width), qo.astype(I32), S


def validate_ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                        *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                                        k_scale=None, v_scale=None):
    """Check `ragged_paged_attention_csr`'s arguments (MD-2 .. MD-4, MD-23, and PA's rules); returns the
    normalised block-table call of `validate_ragged_paged_attention` (MD-5's conversion)."""
    table, qo, S = _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len)
    from ..paged_attention import validate_ragged_paged_attention
    return validate_ragged_paged_attention(q, k_pages, v_pages, table.kv_lens, table.page_indices, qo, S,
                                           sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap,
                                           sinks=sinks, k_scale=k_scale, v_scale=v_scale)
