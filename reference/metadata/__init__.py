"""Paged-KV metadata (spec/metadata.md, clauses MD-1 .. MD-23): CSR page tables and their block-table
form, the append slot mapping, the packed auxiliary arena, and the page-table manager that produces them.

NumPy only; every array is int32 unless stated (arena bytes: uint8, byte offsets/sizes: int64).

Two conventions describe one paged cache (MD-1):
  block table (jax / torch_xla / vLLM, spec/paged_attention.md): page_indices i32[S, pages_per_seq],
      kv_lens i32[S], num_seqs;
  CSR (FlashInfer / TVM): kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S].
`qo_indptr` of the CSR world is `cu_q_lens` of the block-table world (MD-7).
"""
from __future__ import annotations

from .arena import (ARENA_ORDER, ArenaLayout, arena_layout, arena_views, pack_arena, slot_mapping_from_arena,
                    validate_arena_layout, validate_slot_mapping_from_arena)
from .csr_attention import ragged_paged_attention_csr, validate_ragged_paged_attention_csr
from .page_table import MANAGER_COMMANDS, PageTableState, empty_page_table, page_table_step, validate_page_table_step
from .tables import (BlockTable, CsrPageTable, append_slot_mapping, block_table_to_csr, csr_to_block_table,
                     validate_append_slot_mapping, validate_block_table_to_csr, validate_csr_to_block_table)

__all__ = [
    "CsrPageTable", "BlockTable", "ArenaLayout", "PageTableState",
    "block_table_to_csr", "csr_to_block_table", "append_slot_mapping",
    "arena_layout", "pack_arena", "arena_views", "slot_mapping_from_arena",
    "empty_page_table", "page_table_step", "MANAGER_COMMANDS", "ARENA_ORDER",
    "ragged_paged_attention_csr",
    "validate_block_table_to_csr", "validate_csr_to_block_table", "validate_append_slot_mapping",
    "validate_arena_layout", "validate_slot_mapping_from_arena", "validate_page_table_step",
    "validate_ragged_paged_attention_csr",
]
