"""Permissions of the eviction family: `accumulate_scores` in the required precision (NU-EV2), `plan_eviction`
with float32 block scores (NU-EV3).

The required precision of `acc` is the wider of the dtypes of `acc` and `step_scores` (NU-3, NU-EV2). A
kernel adds in that precision: float32 inputs give a float32 sum, rounded once, returned as float32.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kvconform.reference.eviction import (EvictionPlan, ScoreState, validate_accumulate_scores,
                                        validate_plan_eviction)

from . import Permission, permission


@permission(id="acc_in_required_precision", ops="accumulate_scores", clause="NU-EV2, NU-3",
            description="acc + step_scores added in the wider of the two inputs' dtypes (float32 for float32 "
                        "inputs) and returned in it")
class AccumulateInRequiredPrecision(Permission):
    def accumulate_scores(self, acc, counts, step_scores):
        call = validate_accumulate_scores(acc, counts, step_scores)
        # the required precision: the input dtype with the smaller epsilon; added in it (float32 when narrower)
        wide = min((np.asarray(acc).dtype, np.asarray(step_scores).dtype), key=lambda d: ml_dtypes.finfo(d).eps)
        ct = wide if wide.itemsize >= 4 else np.dtype(np.float32)
        new = call.step_scores.shape[0] - call.acc.shape[0]
        padded = np.concatenate([call.acc.astype(ct), np.zeros(new, ct)])
        total = (padded + call.step_scores.astype(ct)).astype(ct).astype(wide)
        counts_out = np.concatenate([call.counts + new, np.arange(new, 0, -1)]).astype(np.int32)
        return ScoreState(total, counts_out)


@permission(id="block_scores_float32", ops="plan_eviction", clause="NU-EV3, EV-6, EV-7",
            description="block scores in float32: tau = fl32(acc) / fl32(counts) in float32, each block summed "
                        "in float32 last token first; the selection then as EV-10 on those scores")
class BlockScoresFloat32(Permission):
    def plan_eviction(self, block_table, acc, counts, config):
        call = validate_plan_eviction(block_table, acc, counts, config)
        table, acc64, cnt, cfg = call.block_table, call.acc, call.counts, call.config
        block = cfg.block_size
        acc32 = acc64.astype(np.float32)
        tau = (acc32 / cnt.astype(np.float32)).astype(np.float32) if cfg.aggregation == "norm_sum" else acc32
        num_blocks = table.shape[0]
        padded = np.concatenate([tau, np.zeros(num_blocks * block - tau.shape[0], np.float32)])
        rows = np.flip(padded.reshape(num_blocks, block), axis=1)
        scores = np.cumsum(rows, axis=1, dtype=np.float32)[:, -1] if block else np.zeros(num_blocks, np.float32)
        full = acc64.shape[0] // block
        num_evict = max(0, full - cfg.max_cache_size // block)
        candidates = np.arange(cfg.start_size // block, full - cfg.recent_size // block)
        ranked = candidates[np.lexsort((candidates, scores[candidates]))]
        evicted = np.sort(ranked[:num_evict])
        keep = np.ones(num_blocks, dtype=bool)
        keep[evicted] = False
        kept = np.flatnonzero(keep)
        shift = np.cumsum(~keep)[kept]
        moved = shift > 0
        token_keep = np.repeat(keep, block)[:acc64.shape[0]]
        return EvictionPlan(evicted_blocks=evicted.astype(np.int32), block_table=table[kept].astype(np.int32),
                            rotated_block_indices=table[kept[moved]].astype(np.int32),
                            rotation_deltas=shift[moved].reshape(-1, 1).astype(np.int32),
                            acc=np.asarray(acc)[token_keep], counts=cnt[token_keep].astype(np.int32))
