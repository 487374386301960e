"""Slot mappings, block tables and CSR page tables in the serving stacks' conventions.

The spec's own conventions are vLLM's: a block table `page_indices i32[S, pages_per_seq]` with `kv_lens`
and `cu_q_lens` (vLLM's block_table, seq_lens, query_start_loc), and a slot mapping `slot = page *
page_size + offset` where a negative slot skips a padding token (PA-40, PA-41; vLLM's PAD_SLOT_ID = -1,
vllm/v1/attention/backends/utils.py). FlashInfer's CSR page table (kv_indptr, kv_indices,
kv_last_page_len) is `kvconform.reference.block_table_to_csr` / `csr_to_block_table` (MD-2 .. MD-6), and
its append slot mapping `kvconform.reference.append_slot_mapping` (MD-7): this module builds on them and
never re-derives them.

    sequence_spans          per sequence: its query rows, kv_len and pages in use (for gathering kernels)
    slot_mapping            the slots of a step's new tokens from a block table (vLLM's slot_mapping)
    flashinfer_batch_indices_positions   FlashInfer's (batch_indices, positions) of appended tokens
    sglang_out_cache_loc    a slot mapping as sglang's token locations (its padded slot 0, pages from 1)
    sglang_req_to_token     a block table as sglang's req_to_token [S, max_context_len]
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvconform.reference.metadata import append_slot_mapping, block_table_to_csr
from kvconform.reference.validation import int_input, int_scalar, require

__all__ = ["SequenceSpan", "sequence_spans", "slot_mapping", "flashinfer_batch_indices_positions",
           "sglang_out_cache_loc", "sglang_req_to_token"]


class SequenceSpan(NamedTuple):
    """One counted sequence of a ragged batch: q rows `q[rows]`, `kv_len` keys, `pages` int64[cdiv(kv_len,
    page_size)] its pages in logical order (from the block table's row; entries past them are padding)."""
    index: int
    rows: slice
    kv_len: int
    pages: np.ndarray


def sequence_spans(cu_q_lens, kv_lens, page_indices, num_seqs, page_size) -> list[SequenceSpan]:
    """The num_seqs counted sequences of a block-table batch (PA-4, PA-5, PA-10), each with its query rows,
    kv_len and pages in use, through `block_table_to_csr` (MD-5): cu_q_lens i32[S+1], kv_lens i32[S],
    page_indices i32[S, pages_per_seq]. Rows past cu_q_lens[num_seqs] belong to no sequence."""
    csr = block_table_to_csr(page_indices, kv_lens, num_seqs, page_size)
    cu = int_input("cu_q_lens", cu_q_lens, 1, "[S+1]")
    require(cu.shape[0] > csr.kv_last_page_len.shape[0],
            f"cu_q_lens must have num_seqs + 1 = {csr.kv_last_page_len.shape[0] + 1} entries at least, "
            f"got {cu.shape[0]}")
    lens = int_input("kv_lens", kv_lens, 1, "[S]")
    indptr, indices = csr.kv_indptr.astype(np.int64), csr.kv_indices.astype(np.int64)
    return [SequenceSpan(s, slice(int(cu[s]), int(cu[s + 1])), int(lens[s]), indices[indptr[s]:indptr[s + 1]])
            for s in range(len(indptr) - 1)]


def slot_mapping(cu_q_lens, kv_lens, page_indices, num_seqs, page_size, *, num_tokens: int | None = None):
    """The slots of the new tokens of a step: i32[num_tokens] (T = cu_q_lens[num_seqs] by default).

    Sequence s's q_len = cu_q_lens[s+1] - cu_q_lens[s] new tokens are the last ones of its kv_lens[s]
    (PA-6); token at position p goes to slot page_indices[s, p // page_size] * page_size + p % page_size
    (MD-7, `append_slot_mapping` over `block_table_to_csr`). vLLM computes the same in
    vllm/v1/worker/block_table.py BlockTable.compute_slot_mapping; its padding tokens (num_tokens > T)
    get -1, PAD_SLOT_ID, which write_kv skips (PA-41)."""
    n = int_scalar("num_seqs", num_seqs, minimum=0)
    csr = block_table_to_csr(page_indices, kv_lens, n, page_size)
    cu = int_input("cu_q_lens", cu_q_lens, 1, "[S+1]")
    require(cu.shape[0] >= n + 1, f"cu_q_lens must have num_seqs + 1 = {n + 1} entries at least, got {cu.shape[0]}")
    slots = append_slot_mapping(cu[:n + 1], *csr, page_size)
    total = slots.shape[0] if num_tokens is None else int_scalar("num_tokens", num_tokens, minimum=slots.shape[0])
    return np.concatenate([slots, np.full(total - slots.shape[0], -1, np.int32)]).astype(np.int32)


def flashinfer_batch_indices_positions(qo_indptr, kv_lens) -> tuple[np.ndarray, np.ndarray]:
    """FlashInfer's (batch_indices i32[nnz], positions i32[nnz]) of appended tokens, as
    `append_paged_kv_cache` takes them: token t of sequence b (t < q_len_b) is at position
    kv_lens[b] - q_len_b + t, the positions right-aligned in the sequence (MD-7). qo_indptr i32[S+1]
    (= cu_q_lens), kv_lens i32[S] including the new tokens. Source: flashinfer/page.py
    get_batch_indices_positions (L251 at flashinfer-ai/flashinfer@fb28d72, whose docstring example gives
    positions [4, 3, 4, 2, 3, 4, 1, 2, 3, 4] for append_indptr [0, 1, 3, 6, 10] and seq_lens 5)."""
    qo = int_input("qo_indptr", qo_indptr, 1, "[S+1]")
    lens = int_input("kv_lens", kv_lens, 1, "[S]")
    require(qo.shape[0] == lens.shape[0] + 1,
            f"qo_indptr must have len(kv_lens) + 1 = {lens.shape[0] + 1} entries, got {qo.shape[0]}")
    q_lens = np.diff(qo)
    require(qo[0] == 0, f"qo_indptr[0] must be 0, got {int(qo[0])}")
    bad = np.flatnonzero((q_lens < 0) | (q_lens > lens))
    require(bad.size == 0, f"qo_indptr must give each sequence 0 <= q_len <= kv_lens[b] new tokens; sequence "
                           f"{bad[0] if bad.size else 0} has q_len {q_lens[bad[0]] if bad.size else 0}")
    batch = np.repeat(np.arange(lens.shape[0]), q_lens)
    positions = lens[batch] - q_lens[batch] + (np.arange(batch.shape[0]) - qo[batch])
    return batch.astype(np.int32), positions.astype(np.int32)


def sglang_out_cache_loc(slots, page_size) -> np.ndarray:
    """A slot mapping (negative = padding, PA-41) as sglang's out_cache_loc int64[T] for a buffer from
    `cache_layouts.to_sglang_kv_buffer`: slot s -> s + page_size (canonical page p is sglang page p + 1),
    padding -> 0, sglang's slot for the dummy writes of padded tokens (memory_pool.py, allocator.py at
    sgl-project/sglang@000ccdb)."""
    ps = int_scalar("page_size", page_size, minimum=1)
    s = int_input("slots", slots, 1, "[T]")
    return np.where(s >= 0, s + ps, 0).astype(np.int64)


def sglang_req_to_token(kv_lens, page_indices, num_seqs, page_size, max_context_len: int | None = None):
    """A block table as sglang's ReqToTokenPool.req_to_token i32[num_seqs, max_context_len]: entry [s, p]
    is the token location of position p < kv_lens[s] in the buffer of `to_sglang_kv_buffer` (canonical
    slot + page_size), 0 past kv_len (sglang's padded slot). max_context_len defaults to
    pages_per_seq * page_size. Source: memory_pool.py ReqToTokenPool (sgl-project/sglang@000ccdb)."""
    ps = int_scalar("page_size", page_size, minimum=1)
    n = int_scalar("num_seqs", num_seqs, minimum=0)
    csr = block_table_to_csr(page_indices, kv_lens, n, ps)
    lens = int_input("kv_lens", kv_lens, 1, "[S]")[:n]
    width = int_input("page_indices", page_indices, 2, "[S, pages_per_seq]").shape[1] * ps
    width = width if max_context_len is None else int_scalar("max_context_len", max_context_len, minimum=0)
    table = np.zeros((n, width), np.int32)
    for s in range(n):
        kv_len, pages = int(lens[s]), csr.kv_indices[csr.kv_indptr[s]:csr.kv_indptr[s + 1]].astype(np.int64)
        require(kv_len <= width, f"max_context_len={width} is smaller than kv_lens[{s}]={kv_len}")
        pos = np.arange(kv_len)
        table[s, :kv_len] = (pages[pos // ps] + 1) * ps + pos % ps
    return table
