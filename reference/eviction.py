"""Block-granular KV-cache eviction with score accumulation (spec/eviction.md, EV-*).

One sequence at a time. The accumulator state covers every token of the sequence's logical cache:

    acc:    float64[L]   accumulated attention mass per token (EV-4)
    counts: i32[L]       per token, the number of registered query rows that could see it (EV-5)

`accumulate_scores` folds one step's per-token scores (the `scores` row of paged attention) into the
state; `plan_eviction` decides which logical blocks go and returns the compacted block table, the
rotation plan for the blocks that moved (input of `rotate_keys` with a `rerotation_lut`) and the state
with the evicted tokens removed. All integer outputs are exact int32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .validation import check_index_range, check_unique, float_input, int_input, int_scalar, require

__all__ = ["AGGREGATIONS", "EvictionConfig", "ScoreState", "EvictionPlan", "empty_score_state",
           "accumulate_scores", "block_scores", "plan_eviction", "AccumulateScoresCall", "PlanEvictionCall",
           "validate_accumulate_scores", "validate_plan_eviction"]

#: EV-6: "sum" ranks tokens by accumulated mass, "norm_sum" by accumulated mass / count.
AGGREGATIONS = ("sum", "norm_sum")

_INT32_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class EvictionConfig:
    """EV-1: sizes in tokens, multiples of `block_size`; `max_cache_size > start_size + recent_size`."""
    block_size: int
    start_size: int
    recent_size: int
    max_cache_size: int
    aggregation: str = "norm_sum"

    def __post_init__(self):
        block = int_scalar("block_size", self.block_size, minimum=1)
        for name in ("start_size", "recent_size", "max_cache_size"):
            value = int_scalar(name, getattr(self, name), minimum=0, maximum=_INT32_MAX)
            require(value % block == 0, f"{name} must be a multiple of block_size={block}, got {value}")
        require(self.max_cache_size > self.start_size + self.recent_size,
                f"max_cache_size must be > start_size + recent_size = {self.start_size + self.recent_size}, "
                f"got {self.max_cache_size}")
        require(isinstance(self.aggregation, str) and self.aggregation in AGGREGATIONS,
                f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")

    @property
    def evictable_size(self) -> int:
        """Tokens of the evictable area kept after an eviction (EV-1): max_cache_size - start - recent."""
        return self.max_cache_size - self.start_size - self.recent_size


class ScoreState(NamedTuple):
    """EV-3: acc float64[L], counts i32[L] over the L tokens of the logical cache."""
    acc: np.ndarray
    counts: np.ndarray


class EvictionPlan(NamedTuple):
    """EV-10 .. EV-13. k = number of evicted blocks, m = number of moved surviving blocks."""
    evicted_blocks: np.ndarray         # i32[k] logical block indices, ascending
    block_table: np.ndarray            # i32[num_blocks - k] surviving physical pages, order kept
    rotated_block_indices: np.ndarray  # i32[m] physical pages of the surviving blocks that moved
    rotation_deltas: np.ndarray        # i32[m, 1] evicted blocks before each (= LUT row)
    acc: np.ndarray                    # float64[L - k*block_size]
    counts: np.ndarray                 # i32[L - k*block_size]


class AccumulateScoresCall(NamedTuple):
    """The arguments of one ``accumulate_scores`` call after validation (EV-17).

    acc:         float64[L_old], finite (EV-4)
    counts:      int64[L_old], each in [1, 2**31) (EV-5)
    step_scores: float64[L_new], finite, L_new >= L_old; the new counts fit int32
    """
    acc: np.ndarray
    counts: np.ndarray
    step_scores: np.ndarray


class PlanEvictionCall(NamedTuple):
    """The arguments of one ``plan_eviction`` call after validation (EV-1, EV-17).

    block_table: int64[cdiv(L, block_size)] physical pages, unique, in [0, 2**31)
    acc:         float64[L], finite (EV-4)
    counts:      int64[L], each in [1, 2**31) (EV-5)
    config:      the EvictionConfig (EV-1 checked when it was built)
    """
    block_table: np.ndarray
    acc: np.ndarray
    counts: np.ndarray
    config: EvictionConfig


def empty_score_state() -> ScoreState:
    """The state of a sequence with no registered tokens (EV-3)."""
    return ScoreState(np.zeros(0, np.float64), np.zeros(0, np.int32))


def _state(acc, counts) -> tuple[np.ndarray, np.ndarray]:
    acc = float_input("acc", acc, 1, "[L]")
    counts = int_input("counts", counts, 1, "[L]")
    require(counts.shape == acc.shape,
            f"counts must have the shape of acc [L] = {tuple(acc.shape)}, got {tuple(counts.shape)}")
    require(bool(np.isfinite(acc).all()), "acc must be finite")
    check_index_range("counts", counts, 1, _INT32_MAX + 1, " (a registered token has count >= 1)")
    return acc, counts


def accumulate_scores(acc, counts, step_scores) -> ScoreState:
    """Register one step's per-token scores (EV-3, EV-4, EV-5).

    acc: float[L_old], counts: int[L_old] (the previous state; `empty_score_state()` at the start);
    step_scores: float[L_new], L_new >= L_old, finite: the attention mass of every cached token in this
    step (the first L_new entries of paged attention's `scores` row for the sequence).
    Returns ScoreState(acc' float64[L_new], counts' i32[L_new]) with k = L_new - L_old new tokens:
        acc'    = [acc, 0 (k times)] + step_scores
        counts' = [counts + k, k, k-1, ..., 1]
    """
    call = validate_accumulate_scores(acc, counts, step_scores)
    acc, counts, scores = call.acc, call.counts, call.step_scores
    new = scores.shape[0] - acc.shape[0]
    new_acc = np.concatenate([acc, np.zeros(new)]) + scores
    new_counts = np.concatenate([counts + new, np.arange(new, 0, -1)]).astype(np.int32)
    return ScoreState(new_acc, new_counts)


def validate_accumulate_scores(acc, counts, step_scores) -> AccumulateScoresCall:
    """Check every argument of `accumulate_scores` (EV-17) and return them normalised.

    Takes the op's arguments (see `accumulate_scores`). Raises ValueError, or TypeError for a wrong
    dtype, naming the argument and the broken rule.
    """
    acc, counts = _state(acc, counts)
    scores = float_input("step_scores", step_scores, 1, "[L_new]")
    require(scores.shape[0] >= acc.shape[0],
            f"step_scores must cover every tracked token: length {scores.shape[0]} < L_old = {acc.shape[0]}")
    require(bool(np.isfinite(scores).all()), "step_scores must be finite")
    new = scores.shape[0] - acc.shape[0]
    require(counts.size == 0 or int(counts.max()) + new <= _INT32_MAX, "counts would overflow int32")
    return AccumulateScoresCall(acc, counts, scores)


def block_scores(acc, counts, config: EvictionConfig) -> np.ndarray:
    """EV-6, EV-7: float64[cdiv(L, B)], the score of each logical block = left-to-right float64 sum of
    its tokens' values tau_t = acc_t (sum) or fl64(acc_t / counts_t) (norm_sum). The last block may be
    partial (it is never evictable, EV-8)."""
    _config(config)
    acc, counts = _state(acc, counts)
    return _block_scores(acc, counts, config)


def _block_scores(acc: np.ndarray, counts: np.ndarray, config: EvictionConfig) -> np.ndarray:
    tau = acc / counts if config.aggregation == "norm_sum" else acc.copy()
    block = config.block_size
    num_blocks = -(-tau.shape[0] // block)
    padded = np.concatenate([tau, np.zeros(num_blocks * block - tau.shape[0])]).reshape(num_blocks, block)
    total = np.zeros(num_blocks)
    for t in range(block):  # EV-7 pins the order: t = 0, 1, ..., B-1
        total = total + padded[:, t]
    return total


def _config(config) -> EvictionConfig:
    if not isinstance(config, EvictionConfig):
        raise TypeError(f"config must be an EvictionConfig, got {type(config).__name__}")
    return config


def plan_eviction(block_table, acc, counts, config: EvictionConfig) -> EvictionPlan:
    """Decide the eviction of one sequence and plan the compaction (EV-8 .. EV-13).

    block_table: i32[cdiv(L, B)] physical pages of the logical blocks, unique, >= 0;
    acc: float[L], counts: i32[L]: the accumulator state (L = tokens in the cache); config: EvictionConfig.
    With B = block_size, the evictable logical blocks are [b0, b1) = [start_size/B, floor(L/B) -
    recent_size/B) and k = max(0, floor(L/B) - max_cache_size/B) of them go: the k smallest under
    (block score, logical index). Returns an EvictionPlan (all integer arrays int32).
    """
    call = validate_plan_eviction(block_table, acc, counts, config)
    table, acc, counts, config = call.block_table, call.acc, call.counts, call.config
    block = config.block_size
    num_blocks = table.shape[0]
    full_blocks = acc.shape[0] // block
    num_evict = max(0, full_blocks - config.max_cache_size // block)                      # EV-9
    first = config.start_size // block                                                      # EV-8
    scores = _block_scores(acc, counts, config)
    candidates = np.arange(first, full_blocks - config.recent_size // block)
    # EV-10: ascending (score, index); lexsort's last key is the primary key.
    ranked = candidates[np.lexsort((candidates, scores[candidates]))]
    evicted = np.sort(ranked[:num_evict])

    keep = np.ones(num_blocks, dtype=bool)
    keep[evicted] = False
    kept_blocks = np.flatnonzero(keep)
    shift = np.cumsum(~keep)[kept_blocks]          # EV-12: evicted blocks before each survivor
    moved = shift > 0
    token_keep = np.repeat(keep, block)[:acc.shape[0]]
    return EvictionPlan(
        evicted_blocks=evicted.astype(np.int32),
        block_table=table[kept_blocks].astype(np.int32),
        rotated_block_indices=table[kept_blocks[moved]].astype(np.int32),
        rotation_deltas=shift[moved].reshape(-1, 1).astype(np.int32),
        acc=acc[token_keep],
        counts=counts[token_keep].astype(np.int32),
    )


def validate_plan_eviction(block_table, acc, counts, config) -> PlanEvictionCall:
    """Check every argument of `plan_eviction` (EV-1, EV-17) and return them normalised.

    Takes the op's arguments (see `plan_eviction`). Raises ValueError, or TypeError for a wrong type or
    dtype, naming the argument and the broken rule.
    """
    config = _config(config)
    acc, counts = _state(acc, counts)
    block = config.block_size
    table = int_input("block_table", block_table, 1, "[num_blocks]")
    num_blocks = -(-acc.shape[0] // block)
    require(table.shape[0] == num_blocks,
            f"block_table must have cdiv(L, block_size) = cdiv({acc.shape[0]}, {block}) = {num_blocks} "
            f"entries, got {table.shape[0]}")
    check_index_range("block_table", table, 0, _INT32_MAX + 1, " (physical page ids)")
    check_unique("block_table", table)
    return PlanEvictionCall(table, acc, counts, config)
