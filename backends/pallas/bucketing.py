"""Shape buckets: the padded shapes the adapters hand to the kernels.

Every distinct shape is a separate compiled kernel (about 1-2 s per compile in interpret mode, against
tens of milliseconds per call once compiled), and Hypothesis draws many small shapes. The adapters pad
each axis to a bucket so that draws share a few compiled kernels:
- counts (tokens, sequences, batch rows, slots, pages) go up to a power of two with a floor;
- the minor axes of recurrent states (P, N, K, V, channels) go up to a multiple of 8 sublanes;
- heads go up to a power of two *per group*: [G, H/G] -> [G', H'/G'], so head h of group g keeps
  reading group g (spec/recurrent.md RS-16).
Padding is inert by construction and the adapters drop it from the results: padded rows, tokens,
sequences and slots belong to no call (slot -1, length 0, no page-table entry), padded channels and heads
carry zeros in every input that injects into a state (x, B, k, v), so their states stay zero and they add
nothing to a real output.
"""
from __future__ import annotations

import numpy as np

from .tiling import SUBLANES, round_up


def pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum)."""
    n = max(int(n), int(minimum), 1)
    return 1 << (n - 1).bit_length()


def sublanes(n: int) -> int:
    """n rounded up to whole 8-row sublane tiles (at least one)."""
    return round_up(max(int(n), 1), SUBLANES)


def embed(a: np.ndarray, shape: tuple[int, ...], fill=0.0, dtype=np.float32) -> np.ndarray:
    """`a` in the leading corner of a new `shape` array of `fill` (every axis of a padded, none cut)."""
    out = np.full(shape, fill, dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


class HeadBuckets:
    """Heads H in G groups padded to G' = pow2(G) groups of pow2(H / G) heads.

    `pad(a, axis)` moves an array's head axis (length H, or G for per-group arrays) to the padded layout;
    `unpad(a, axis)` takes the real heads back out.
    """

    def __init__(self, heads: int, groups: int = 1):
        self.heads, self.groups = heads, groups
        self.per_group = heads // groups
        self.padded_groups, self.padded_per_group = pow2(groups), pow2(self.per_group)
        self.padded_heads = self.padded_groups * self.padded_per_group

    def pad(self, a: np.ndarray, axis: int, *, per_group: bool = False) -> np.ndarray:
        a = np.moveaxis(np.asarray(a), axis, 0)
        if per_group:
            out = embed(a, (self.padded_groups,) + a.shape[1:])
        else:
            split = a.reshape((self.groups, self.per_group) + a.shape[1:])
            out = embed(split, (self.padded_groups, self.padded_per_group) + a.shape[1:])
            out = out.reshape((self.padded_heads,) + a.shape[1:])
        return np.moveaxis(out, 0, axis)

    def unpad(self, a: np.ndarray, axis: int) -> np.ndarray:
        a = np.moveaxis(np.asarray(a), axis, 0)
        split = a.reshape((self.padded_groups, self.padded_per_group) + a.shape[1:])
        real = split[:self.groups, :self.per_group].reshape((self.heads,) + a.shape[1:])
        return np.moveaxis(real, 0, axis)
