"""kvconform.adapters.page_tables: slot mappings and tables in vLLM's, FlashInfer's and sglang's conventions,
checked against each stack's documented rule or example and against the reference's write_kv."""
from __future__ import annotations

import numpy as np
import pytest

from kvconform import reference
from kvconform.adapters import (flashinfer_batch_indices_positions, from_sglang_kv_buffer, sequence_kv,
                                sequence_spans, sglang_out_cache_loc, sglang_req_to_token, slot_mapping,
                                to_sglang_kv_buffer)

I32 = np.int32
# page_size 4; seq 0: kv_len 7 over pages [6, 2], 2 new tokens; seq 1: kv_len 1 over page [5], 1 new token;
# seq 2: empty; row 3 lies past num_seqs (padding, never read)
PAGE_INDICES = np.array([[6, 2, -1], [5, -1, -1], [-1, -1, -1], [9, 9, 9]], I32)
KV_LENS = np.array([7, 1, 0, 12], I32)
CU_Q_LENS = np.array([0, 2, 3, 3, 5], I32)


def test_sequence_spans():
    spans = sequence_spans(CU_Q_LENS, KV_LENS, PAGE_INDICES, 3, 4)
    assert [(s.index, s.rows, s.kv_len, s.pages.tolist()) for s in spans] == [
        (0, slice(0, 2), 7, [6, 2]), (1, slice(2, 3), 1, [5]), (2, slice(3, 3), 0, [])]


def test_slot_mapping_is_vllms():
    """vllm/v1/worker/block_table.py compute_slot_mapping: block_table[req, pos // block_size] * block_size
    + pos % block_size for the scheduled positions; padded tokens get PAD_SLOT_ID = -1."""
    slots = slot_mapping(CU_Q_LENS, KV_LENS, PAGE_INDICES, 3, 4, num_tokens=5)
    req = np.array([0, 0, 1])
    pos = np.array([5, 6, 0])                      # the last q_len positions of each kv_len
    vllm = PAGE_INDICES[req, pos // 4] * 4 + pos % 4
    assert slots.dtype == I32 and slots.tolist() == vllm.tolist() + [-1, -1]
    assert slot_mapping(CU_Q_LENS, KV_LENS, PAGE_INDICES, 3, 4).tolist() == vllm.tolist()


def test_flashinfer_batch_indices_positions_docstring_example():
    """flashinfer/page.py get_batch_indices_positions: append_indptr [0, 1, 3, 6, 10], seq_lens 5 each."""
    batch, positions = flashinfer_batch_indices_positions(np.array([0, 1, 3, 6, 10]), np.full(4, 5))
    assert batch.tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert positions.tolist() == [4, 3, 4, 2, 3, 4, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="q_len <= kv_lens"):
        flashinfer_batch_indices_positions(np.array([0, 3]), np.array([2]))


def test_flashinfer_positions_address_the_references_append_slots():
    csr = reference.block_table_to_csr(PAGE_INDICES, KV_LENS, 3, 4)
    batch, positions = flashinfer_batch_indices_positions(CU_Q_LENS[:4], KV_LENS[:3])
    pages = csr.kv_indices[csr.kv_indptr[batch] + positions // 4]
    expected = reference.append_slot_mapping(CU_Q_LENS[:4], *csr, 4)
    assert (pages * 4 + positions % 4).tolist() == expected.tolist()


def test_sglang_writes_and_reads_match_the_reference():
    """Tokens scattered into sglang's token-major buffer at out_cache_loc (padding into its dummy slot 0)
    give the reference's write_kv pools, bit for bit; req_to_token gathers each sequence's keys."""
    rng = np.random.default_rng(3)
    k_pages = rng.standard_normal((10, 4, 2, 3)).astype(np.float32)
    v_pages = rng.standard_normal((10, 4, 2, 3)).astype(np.float32)
    k, v = rng.standard_normal((2, 5, 2, 3)).astype(np.float32)
    slots = slot_mapping(CU_Q_LENS, KV_LENS, PAGE_INDICES, 3, 4, num_tokens=5)
    expected = reference.write_kv(k_pages, v_pages, k, v, slots)
    loc = sglang_out_cache_loc(slots, 4)
    assert loc.tolist() == (slots[:3] + 4).tolist() + [0, 0]
    k_buf, v_buf = to_sglang_kv_buffer(k_pages), to_sglang_kv_buffer(v_pages)
    k_buf[loc], v_buf[loc] = k, v           # sglang's set_kv_buffer: buffer[loc] = cache_k
    assert from_sglang_kv_buffer(k_buf, 4).tobytes() == expected.k_pages.tobytes()
    assert from_sglang_kv_buffer(v_buf, 4).tobytes() == expected.v_pages.tobytes()

    req_to_token = sglang_req_to_token(KV_LENS, PAGE_INDICES, 3, 4, max_context_len=16)
    assert req_to_token.shape == (3, 16) and req_to_token.dtype == I32
    for span in sequence_spans(CU_Q_LENS, KV_LENS, PAGE_INDICES, 3, 4):
        locs = req_to_token[span.index, :span.kv_len]
        assert k_buf[locs].tobytes() == sequence_kv(expected.k_pages, span.pages, span.kv_len).tobytes()
        assert not req_to_token[span.index, span.kv_len:].any()
