"""TPU memory tiling facts the kernels and their validation share.

A TPU vector register is 8 sublanes x 128 lanes of 32-bit words; VMEM blocks are tiled the same way.
Narrower dtypes pack several values per 32-bit word along the sublane axis (2 for 16-bit, 4 for 8-bit),
so a block's second-minor extent must be a multiple of 8 * packing unless it spans the whole array axis.
"""
from __future__ import annotations

import numpy as np

LANES = 128
SUBLANES = 8


def packing(dtype) -> int:
    """Values per 32-bit word for a storage dtype (1, 2 or 4)."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in (1, 2, 4):
        raise ValueError(f"TPU kernels store 8-, 16- or 32-bit values, got {np.dtype(dtype).name}")
    return 4 // itemsize


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
