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


def kv_heads_per_block(hq: int, hkv: int, q_dtype, kv_dtype) -> int:
    """KV heads per grid step of the attention kernel (spec/paged_attention.md PA-47).

    The q block holds hb * group query heads in its second-minor axis and the page DMA hb K/V pairs
    (2 * hb combined rows): each must fill whole sublane tiles (8 * packing rows) unless it spans the
    whole axis. The smallest such hb dividing Hkv is the lcm of the q tile and the group, in KV heads,
    rounded up until the combined rows tile too (the rule of jax's ragged_paged_attention
    `get_min_heads_per_blk`, jax/experimental/pallas/ops/tpu/ragged_paged_attention/kernel.py); when no
    proper divisor of Hkv qualifies, one block takes all heads. So a block never splits a KV head's
    group of query heads, and small head counts (Hkv <= 3 here) always run as one block.
    """
    group = hq // hkv
    q_tile, kv_tile = SUBLANES * packing(q_dtype), SUBLANES * packing(kv_dtype)
    for hb in range(1, hkv):
        if hkv % hb == 0 and (hb * group) % q_tile == 0 and (2 * hb) % kv_tile == 0:
            return hb
    return hkv
