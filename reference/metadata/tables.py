"""CSR page tables and block tables (MD-1 .. MD-6) and the append slot mapping (MD-7)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_index_range, int_input, int_scalar, require

I32 = np.int32


_INT32_MAX = 2 ** 31 - 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CsrPageTable(NamedTuple):
    """CSR page table (MD-2 .. MD-4): kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S]."""
    kv_indptr: np.ndarray
    kv_indices: np.ndarray
    kv_last_page_len: np.ndarray


class BlockTable(NamedTuple):
    """Block-table form (MD-5, MD-6): page_indices i32[S, pages_per_seq], kv_lens i32[S]."""
    page_indices: np.ndarray
    kv_lens: np.ndarray


def _page_size(page_size) -> int:
    return int_scalar("page_size", page_size, minimum=1)


def validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size):
    """Checks MD-2 .. MD-4; returns (indptr, indices, last) as int64 and page_size."""
    P = _page_size(page_size)
    indptr = int_input("kv_indptr", kv_indptr, 1, "[S+1]")
    indices = int_input("kv_indices", kv_indices, 1, "[nnz]")
    last = int_input("kv_last_page_len", kv_last_page_len, 1, "[S]")
    require(indptr.shape[0] >= 1, "kv_indptr must have shape [S+1] with S >= 0, got shape (0,)")
    S = indptr.shape[0] - 1
    require(last.shape[0] == S, f"kv_last_page_len must have shape [S] = ({S},) to match kv_indptr [S+1], "
                                f"got {tuple(last.shape)}")
    require(indptr[0] == 0, f"kv_indptr[0] must be 0 (MD-2), got {int(indptr[0])}")
    steps = np.diff(indptr)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"kv_indptr must be non-decreasing (MD-2): kv_indptr[{k + 1}]={int(indptr[k + 1])} < "
                         f"kv_indptr[{k}]={int(indptr[k])}")
    require(indptr[-1] == indices.shape[0],
            f"kv_indptr[S] must equal len(kv_indices) (MD-2): kv_indptr[{S}]={int(indptr[-1])}, "
            f"len(kv_indices)={indices.shape[0]}")
    check_index_range("kv_indices", indices, 0, np.iinfo(np.int32).max + 1, " (page ids are int32 >= 0, MD-2)")
    for i in range(S):
        if steps[i] == 0:
            require(last[i] == 0, f"kv_last_page_len[{i}] must be 0 for a sequence with no pages (MD-4), "
                                  f"got {int(last[i])}")
        else:
            require(1 <= last[i] <= P, f"kv_last_page_len[{i}]={int(last[i])} must lie in [1, page_size={P}] "
                                       f"for a sequence with pages (MD-3)")
    return indptr, indices, last, P


def _kv_lens_from_csr(indptr, last, P):
    pages = np.diff(indptr)
    return np.where(pages > 0, (pages - 1) * P + last, 0)


def validate_block_table_to_csr(page_indices, kv_lens, num_seqs, page_size):
    """Check `block_table_to_csr`'s arguments (MD-22); returns (page_indices i64, kv_lens i64[num_seqs],
    num_seqs, page_size). Raises ValueError/TypeError naming the argument."""
    P = _page_size(page_size)
    table = int_input("page_indices", page_indices, 2, "[S, pages_per_seq]")
    lens = int_input("kv_lens", kv_lens, 1, "[S]")
    S = int_scalar("num_seqs", num_seqs, minimum=0, maximum=lens.shape[0])
    require(table.shape[0] >= S, f"page_indices must have at least num_seqs={S} rows, got {table.shape[0]}")
    lens = lens[:S]
    check_index_range("kv_lens", lens, 0, table.shape[1] * P + 1,
                      f" (at most pages_per_seq * page_size = {table.shape[1] * P})")
    for i in range(S):
        check_index_range("page_indices", table[i, :_cdiv(int(lens[i]), P)], 0, np.iinfo(np.int32).max + 1,
                          " (owned pages are >= 0)")
    return table, lens, S, P


def block_table_to_csr(page_indices, kv_lens, num_seqs, page_size) -> CsrPageTable:
    """Block table -> CSR (MD-2, MD-3, MD-4, MD-5).

    page_indices: i32[S_max, pages_per_seq]; kv_lens: i32[S_max]; only the first `num_seqs` rows count.
    Sequence i owns pages page_indices[i, :cdiv(kv_lens[i], page_size)] in logical order; entries past
    that are padding and never read (MD-6). Returns kv_indptr i32[num_seqs+1] (kv_indptr[0] = 0,
    kv_indptr[i+1] - kv_indptr[i] = cdiv(kv_lens[i], page_size)), kv_indices i32[nnz] (the owned pages,
    sequence after sequence), kv_last_page_len i32[num_seqs] (kv_len - (pages-1)*page_size in
    [1, page_size]; 0 for an empty sequence).
    """
    table, lens, S, P = validate_block_table_to_csr(page_indices, kv_lens, num_seqs, page_size)
    pages = np.array([_cdiv(int(n), P) for n in lens], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(I32)
    indices = np.concatenate([table[i, :pages[i]] for i in range(S)] + [np.zeros(0, np.int64)])
    last = np.where(pages > 0, lens - (pages - 1) * P, 0).astype(I32)
    return CsrPageTable(indptr, indices.astype(I32), last)


def validate_csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq):
    """Check `csr_to_block_table`'s arguments (MD-22); returns (indptr, indices, last as int64, page_size,
    pages_per_seq)."""
    indptr, indices, last, P = validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size)
    W = int_scalar("pages_per_seq", pages_per_seq, minimum=1)
    pages = np.diff(indptr)
    if pages.size and pages.max() > W:
        i = int(np.argmax(pages))
        raise ValueError(f"pages_per_seq={W} is smaller than the {int(pages[i])} pages of sequence {i} (MD-5)")
    return indptr, indices, last, P, W


def csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq) -> BlockTable:
    """CSR -> block table (MD-5, MD-6).

    Returns page_indices i32[S, pages_per_seq] (row i starts with kv_indices[kv_indptr[i]:kv_indptr[i+1]];
    the rest is padding, unspecified by MD-6: the reference writes 0) and kv_lens i32[S]
    (= (pages-1)*page_size + kv_last_page_len, 0 for an empty sequence).
    """
    indptr, indices, last, P, W = validate_csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size,
                                                              pages_per_seq)
    S = indptr.shape[0] - 1
    pages = np.diff(indptr)
    table = np.zeros((S, W), dtype=I32)
    for i in range(S):
        table[i, :pages[i]] = indices[indptr[i]:indptr[i + 1]]
    return BlockTable(table, _kv_lens_from_csr(indptr, last, P).astype(I32))


def validate_append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
    """Check `append_slot_mapping`'s arguments (MD-22); returns (qo, indptr, indices, last as int64, P)."""
    indptr, indices, last, P = validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size)
    qo = int_input("qo_indptr", qo_indptr, 1, "[S+1]")
    S = indptr.shape[0] - 1
    require(qo.shape[0] == S + 1, f"qo_indptr must have shape [S+1] = ({S + 1},) like kv_indptr, got {tuple(qo.shape)}")
    require(qo[0] == 0, f"qo_indptr[0] must be 0 (MD-7), got {int(qo[0])}")
    q_lens = np.diff(qo)
    kv_lens = _kv_lens_from_csr(indptr, last, P)
    for i in range(S):
        require(0 <= q_lens[i] <= kv_lens[i], f"qo_indptr: sequence {i} has q_len={int(q_lens[i])} outside "
                                              f"[0, kv_len={int(kv_lens[i])}] (MD-7)")
        if q_lens[i]:      # MD-7: every slot written is an int32
            first, last_pos = int(kv_lens[i] - q_lens[i]), int(kv_lens[i] - 1)
            pages = indices[indptr[i] + first // P:indptr[i] + last_pos // P + 1]
            top = max(int(pages[:-1].max()) * P + P - 1 if pages.shape[0] > 1 else -1,
                      int(pages[-1]) * P + last_pos % P)
            require(top <= _INT32_MAX, f"kv_indices: sequence {i} writes slot {top} = page * page_size + offset, "
                                       f"past int32 (MD-7)")
    return qo, indptr, indices, last, P


def append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size) -> np.ndarray:
    """Slots of the new tokens of a step (MD-7): i32[T], T = qo_indptr[S].

    qo_indptr: i32[S+1] (= cu_q_lens). Sequence i has kv_len_i tokens in the cache *including* its
    q_len_i = qo_indptr[i+1] - qo_indptr[i] new ones; new token t (0 <= t < q_len_i) sits at position
    p = kv_len_i - q_len_i + t, in page kv_indices[kv_indptr[i] + p // page_size], and its slot is
    page * page_size + p % page_size (the `slot_mapping` of write_kv, PA).
    """
    qo, indptr, indices, last, P = validate_append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                                                page_size)
    S = indptr.shape[0] - 1
    q_lens = np.diff(qo)
    kv_lens = _kv_lens_from_csr(indptr, last, P)
    slots = []
    for i in range(S):
        for p in range(int(kv_lens[i] - q_lens[i]), int(kv_lens[i])):
            slots.append(int(indices[indptr[i] + p // P]) * P + p % P)
    return np.array(slots, dtype=I32)
