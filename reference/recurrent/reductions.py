"""Sums in a pinned order, so the reference's result for one sequence is bitwise independent of what else
is in the batch (spec/recurrent.md RS-8: a sequence's arithmetic does not depend on the batch)."""
from __future__ import annotations

import numpy as np


def ordered_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """Sum along `axis` as ((x0 + x1) + x2) + ..., elementwise over the other axes."""
    x = np.moveaxis(x, axis, 0)
    if x.shape[0] == 0:
        return np.zeros(x.shape[1:], dtype=x.dtype)
    acc = x[0].copy()
    for term in x[1:]:
        acc = acc + term
    return acc

