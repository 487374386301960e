"""Strategies and comparison contract for the paged-KV metadata family (spec/metadata.md).

Ops: `block_table_to_csr`, `csr_to_block_table`, `append_slot_mapping` (MD-1 .. MD-7), `arena_layout`,
`slot_mapping_from_arena` (MD-8 .. MD-10) and `page_table_step` (the manager, MD-11 .. MD-21). Every
output is integer: class E, compared exactly (spec/numerics.md), the block-table padding of MD-6 masked.

Page tables are drawn with distinct page ids from a shuffled pool (so a page read from the wrong sequence
shows), empty sequences included (MD-4), lengths that fill their last page exactly included (MD-3).
Don't-care inputs are declared as poison regions: block-table padding and rows past `num_seqs` (MD-6) and
the arena bytes outside the arrays (MD-9, MD-10). The arena of `slot_mapping_from_arena` always starts its
first array at a non-zero aligned offset and holds random garbage bytes elsewhere. Manager cases replay
a short random history of valid commands through the reference, then draw one more valid command.

Two reach columns per op (spec/metadata.md, "Reach: sizes and values drawn"): `long` draws decode
batches of 256 rows, block tables wider than one 64- or 128-page tile, a sequence past 2^15 tokens,
prefill chunks past one 64-token block, hundreds of arena arrays, and manager states over thousands of
pages with hundreds of sequences; `range` draws the int32 limits: page ids and slots up to INT32_MAX,
kv_len up to INT32_MAX (page sizes of 2^20 and more keep the tables small), arena sizes and offsets past
2 GiB up to the 2^40 bound, sequence ids and lengths near INT32_MAX. Reach states of the manager are
built directly (valid by MD-11, MD-12), not replayed.
"""
from __future__ import annotations

from kvconform.conformance.engine import strided

from .contract import SEQUENCE_OPS, block_table_checks, exact_checks, sequence_lengths, uses  # noqa: F401
from .csr_attention import (attention_csr_cases, attention_csr_checks, block_table_inputs,  # noqa: F401
                            csr_attention_variants)
from .manager import admitted_step, commands, live, page_table_step_cases, state_of, step, step_case  # noqa: F401
from .reach import (_TABLE_OP, REACH_CASES, _reach_command, _reach_page_size, _reach_params,  # noqa: F401
                    dim_page_tables, reach_append_inputs, reach_append_slot_mapping_cases, reach_arena_layout_cases,
                    reach_block_table_to_csr_cases, reach_csr_to_block_table_cases, reach_page_table_states,
                    reach_page_table_step_cases, reach_page_tables, reach_slot_mapping_from_arena_cases)
from .tables import (ALIGNMENTS, BASE, BUDGETS, DEFAULT_PAGE_SIZES, DIM_BUDGET, DIM_PREFIX, I32,  # noqa: F401
                     INT32_MAX, LONG_ARRAYS, LONG_BUDGET, LONG_NUM_SEQS, LONG_PAGE_SIZES, LONG_POOL, LONG_WIDEST,
                     NUM_PAGES, PADDING, RANGE_BUDGET, RANGE_NBYTES, RANGE_PAGE_SIZES, REACH, Column,
                     _padding_regions, _page_size, admitted, append_inputs, append_slot_mapping_cases,
                     arena_layout_cases, block_table_to_csr_cases, budget, csr_tables, csr_to_block_table_cases,
                     page_tables, reach_columns, shortest, slot_mapping_from_arena_cases)

#: what a case uses, per op (conformance/goldens.py)
USES = {op: uses for op in ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "arena_layout",
                            "slot_mapping_from_arena", "page_table_step")}


CHECKS = {"block_table_to_csr": exact_checks, "csr_to_block_table": block_table_checks,
          "append_slot_mapping": exact_checks, "arena_layout": exact_checks,
          "slot_mapping_from_arena": exact_checks, "page_table_step": exact_checks,
          "ragged_paged_attention_csr": attention_csr_checks}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
# Host-side bookkeeping ops get strided inputs too: an engine's page tables and lengths are slices and
# columns of its wider, preallocated tables. One exception: the arena of slot_mapping_from_arena stays
# contiguous, since MD-8 .. MD-10 define it as one packed byte buffer read at byte offsets (a strided byte
# view has no byte offsets); its offsets array is strided.
STRIDED = {op: strided.columns(strategy) for op, strategy in (
    ("block_table_to_csr", block_table_to_csr_cases), ("csr_to_block_table", csr_to_block_table_cases),
    ("append_slot_mapping", append_slot_mapping_cases), ("arena_layout", arena_layout_cases),
    ("page_table_step", page_table_step_cases))}
STRIDED["slot_mapping_from_arena"] = strided.columns(slot_mapping_from_arena_cases, contiguous=("arena",))
STRIDED["ragged_paged_attention_csr"] = strided.columns(
    attention_csr_cases, *strided.named(csr_attention_variants(), "combined", "base"))
