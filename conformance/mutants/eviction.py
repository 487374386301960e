"""Mutants of the eviction family: realistic planning / accumulation bugs, each wrapping the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.eviction import EvictionPlan, ScoreState

from . import Mutant, mutant


def _plan_for(evicted: np.ndarray, table, acc, counts, block: int) -> EvictionPlan:
    """The compaction that follows from a (possibly wrong) choice of evicted blocks (EV-12 .. EV-15)."""
    table = np.asarray(table)
    keep = np.ones(table.shape[0], dtype=bool)
    keep[evicted] = False
    kept = np.flatnonzero(keep)
    shift = np.cumsum(~keep)[kept]
    tokens = np.repeat(keep, block)[:np.asarray(acc).shape[0]]
    return EvictionPlan(np.sort(evicted).astype(np.int32), table[kept].astype(np.int32),
                        table[kept[shift > 0]].astype(np.int32), shift[shift > 0].reshape(-1, 1).astype(np.int32),
                        np.asarray(acc, np.float64)[tokens], np.asarray(counts)[tokens].astype(np.int32))


def _choose(acc, counts, config, first: int, stop: int, *, ties_high: bool) -> np.ndarray:
    B = config.block_size
    k = max(0, np.asarray(acc).shape[0] // B - config.max_cache_size // B)
    beta = reference.block_scores(acc, counts, config)
    cand = np.arange(first, stop)
    order = np.lexsort((-cand if ties_high else cand, beta[cand]))
    return cand[order][:k]


@mutant(op="plan_eviction", clause="EV-10",
        description="ties broken toward the higher logical index (a descending-index stable sort)")
class TiesToHigherIndex(Mutant):
    def plan_eviction(self, block_table, acc, counts, config):
        B = config.block_size
        stop = np.asarray(acc).shape[0] // B - config.recent_size // B
        chosen = _choose(acc, counts, config, config.start_size // B, stop, ties_high=True)
        return _plan_for(chosen, block_table, acc, counts, B)


@mutant(op="plan_eviction", clause="EV-8",
        description="the partially filled last block counts as a block of the evictable range (cdiv for floor)")
class PartialBlockEvictable(Mutant):
    def plan_eviction(self, block_table, acc, counts, config):
        B = config.block_size
        stop = -(-np.asarray(acc).shape[0] // B) - config.recent_size // B
        chosen = _choose(acc, counts, config, config.start_size // B, stop, ties_high=False)
        return _plan_for(chosen, block_table, acc, counts, B)


@mutant(op="accumulate_scores", clause="EV-5",
        description="every new token starts with count 1 instead of k, k-1, ..., 1")
class NewTokensCountOne(Mutant):
    def accumulate_scores(self, acc, counts, step_scores):
        state = reference.accumulate_scores(acc, counts, step_scores)
        fixed = state.counts.copy()
        fixed[np.asarray(acc).shape[0]:] = 1
        return ScoreState(state.acc, fixed)


@mutant(op="plan_eviction", clause="EV-10",
        description="ties broken toward the lower physical page (a sort on (score, page id)) instead of the "
                    "lower logical index")
class TiesByPhysicalPage(Mutant):
    def plan_eviction(self, block_table, acc, counts, config):
        reference.plan_eviction(block_table, acc, counts, config)   # EV-17 as given
        B = config.block_size
        k = max(0, np.asarray(acc).shape[0] // B - config.max_cache_size // B)
        beta = reference.block_scores(acc, counts, config)
        cand = np.arange(config.start_size // B, np.asarray(acc).shape[0] // B - config.recent_size // B)
        chosen = cand[np.lexsort((np.asarray(block_table)[cand], beta[cand]))][:k]
        return _plan_for(chosen, block_table, acc, counts, B)


#: candidates one selection step compares (the Triton kernel's _BLOCKS_J)
SELECTION_TILE = 128


@mutant(op="plan_eviction", clause="EV-10",
        description="each evictable block ranked only against the first 128 candidates (a selection kernel whose "
                    "compare loop never leaves its first tile): past 128 evictable blocks the wrong blocks go",
        only_caught_by="long", max_size=1200)
class SelectionRanksFirstTile(Mutant):
    def plan_eviction(self, block_table, acc, counts, config):
        reference.plan_eviction(block_table, acc, counts, config)   # EV-17 as given
        B = config.block_size
        first, stop = config.start_size // B, np.asarray(acc).shape[0] // B - config.recent_size // B
        k = max(0, np.asarray(acc).shape[0] // B - config.max_cache_size // B)
        beta = reference.block_scores(acc, counts, config)
        cand = np.arange(first, stop)
        tile = cand[:SELECTION_TILE]
        rank = np.array([np.sum((beta[tile] < beta[i]) | ((beta[tile] == beta[i]) & (tile < i))) for i in cand])
        return _plan_for(cand[rank < k], block_table, acc, counts, B)
