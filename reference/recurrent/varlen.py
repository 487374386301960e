"""Packed variable-length sequences: the `cu_seqlens` rules shared by the prefill kernels (RS-17)."""
from __future__ import annotations

import numpy as np

from ..validation import int_input, require


def cu_seqlens_input(cu_seqlens, num_tokens: int) -> np.ndarray:
    """Validated i64[S+1]: starts at 0, non-decreasing, ends at the token count T."""
    cu = int_input("cu_seqlens", cu_seqlens, 1, "[S+1]")
    require(cu.shape[0] >= 1, "cu_seqlens must have at least one entry [S+1], got shape (0,)")
    require(cu[0] == 0, f"cu_seqlens[0] must be 0, got {int(cu[0])}")
    drops = np.flatnonzero(np.diff(cu) < 0)
    if drops.size:
        i = int(drops[0]) + 1
        raise ValueError(f"cu_seqlens must be non-decreasing (cu_seqlens[{i}]={int(cu[i])} < "
                         f"cu_seqlens[{i - 1}]={int(cu[i - 1])})")
    require(cu[-1] == num_tokens,
            f"cu_seqlens[-1] must equal the number of packed tokens T = {num_tokens}, got {int(cu[-1])}")
    return cu
