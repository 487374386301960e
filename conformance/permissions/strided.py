"""NU-14's latitude: a backend may take another path for a non-contiguous view (copy it first, or a kernel
specialised for unit strides only when it has them) and round differently there.

`StridedOtherPath` computes with the reference (float64, rounded once) when every array argument is
C-contiguous, and takes another permitted form when any is a view: float32 sums for `accumulate_scores`
(NU-EV2) and float32 rotation for `rotate_keys` / `shift_keys` (NU-RO2, NU-RO3). The strided column must
judge the view's result against the reference (the op's checks), never bit for bit against the backend's
own contiguous result, which differs here by design.
"""
from __future__ import annotations

import numpy as np

from kvconform import reference

from . import permission
from .eviction import AccumulateInRequiredPrecision
from .rotation import RotationFloat32


def _any_view(*arrays) -> bool:
    """Whether any of the array arguments is a non-contiguous view (scalars and None are contiguous)."""
    return any(isinstance(a, np.ndarray) and not a.flags.c_contiguous for a in arrays)


@permission(id="strided_path", ops=("accumulate_scores", "rotate_keys", "shift_keys"), clause="NU-14",
            description="the float64 reference on contiguous arguments, the float32 permission backends' "
                        "arithmetic (NU-EV2, NU-RO2, NU-RO3) when any argument is a strided view")
class StridedOtherPath(AccumulateInRequiredPrecision, RotationFloat32):
    def accumulate_scores(self, acc, counts, step_scores):
        if _any_view(acc, counts, step_scores):
            return AccumulateInRequiredPrecision.accumulate_scores(self, acc, counts, step_scores)
        return reference.accumulate_scores(acc, counts, step_scores)

    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw):
        if _any_view(k_pages, rotated_block_indices, rotation_deltas, trig_lut):
            return RotationFloat32.rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw)
        return reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw)

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, **kw):
        if _any_view(k_pages, rotated_block_indices, position_deltas):
            return RotationFloat32.shift_keys(self, k_pages, rotated_block_indices, position_deltas, **kw)
        return reference.shift_keys(k_pages, rotated_block_indices, position_deltas, **kw)
