"""The two pointwise functions of the recurrent kernels, with the pinned softplus threshold (RS-9)."""
from __future__ import annotations

import numpy as np

#: softplus(x) is x itself above this threshold (RS-9), as in the common Mamba kernels.
SOFTPLUS_THRESHOLD = 20.0


def softplus(x: np.ndarray) -> np.ndarray:
    """x if x > 20 else log1p(exp(x)), float64 (RS-9)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > SOFTPLUS_THRESHOLD, x, np.log1p(np.exp(np.minimum(x, SOFTPLUS_THRESHOLD))))


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) computed as x / (1 + exp(-x)), float64 (RS-9)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # exp(-x) = inf for x << 0 gives the correct limit -0.0
        return x / (1.0 + np.exp(-x))
