"""Permission of the eviction family (NU-EV2): `accumulate_scores` in the required precision.

The required precision of `acc` is the wider of the dtypes of `acc` and `step_scores` (NU-3, NU-EV2). A
kernel adds in that precision: float32 inputs give a float32 sum, rounded once, returned as float32.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kvconform.reference.eviction import ScoreState, validate_accumulate_scores

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
