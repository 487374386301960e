"""Dimensions of the eviction ops accumulate_scores and plan_eviction (spec/eviction.md)."""
from __future__ import annotations

from .model import Dimension
from . import sources as src

REGISTRY = {
    "accumulate_scores": (
        Dimension("tokens", ("acc[0]", "counts[0]", "step_scores[0]"), *src.KEYS, small_max=64, cheap=True,
                  unwritten=("acc[0]", "counts[0]"),
                  why_kind="the accumulator past T left unwritten (a grid over the first tile of tokens)"),
    ),
    "plan_eviction": (
        Dimension("tokens", ("acc[0]", "counts[0]"), *src.KEYS, small_max=64, cheap=True,
                  unwritten=("acc[0]", "counts[0]"),
                  why_kind="the compacted accumulator past T left unwritten"),
        Dimension("blocks", ("block_table[0]",), *src.PAGES_PER_SEQ, small_max=16, cheap=True,
                  unwritten=("block_table[0]",),
                  why_kind="the surviving block table past T left unwritten (a compaction that stops at T)"),
        Dimension("block_size", ("config.block_size",), *src.PAGE_SIZE, small_max=16,
                  no_mutant="a block's tokens are a slice of acc and counts: the tokens mutants cover T"),
        Dimension("pool_pages", ("max(block_table)",), 2 ** 31 - 1,
                  "block_table is int32: physical page ids up to INT32_MAX (spec/eviction.md EV-1)",
                  small_max=64, cheap=True, no_mutant="ids, not an axis: its reach is the 16-bit narrowing",
                  ids=("block_table",)),
    ),
}
