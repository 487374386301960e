"""Reusable float64 scratch arrays for the reference's large calls (speed only: no value changes).

On the 2-core VM of issue 16 a fresh array costs a page fault per 4 KiB on first touch: 0.4 ms per MiB or
worse whenever two such arrays are live at once (a fresh 32 MiB float64 upcast took 15-90 ms, against
2 ms into an existing array), more than the arithmetic of the loops that made them. Paged attention's KV
heads (keys, values, a logits block), RWKV6's chunk segments and the SSD scan's chunks write into
`Buffers` instead.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Buffers"]


class Buffers:
    """Named float64 buffers, each grown to the largest size asked of it and handed out again.

    An array from `array` stays valid until the next `array` call with the same name; every user writes
    all of it before reading it. Not thread-safe: one `Buffers` per thread of work.
    """

    def __init__(self):
        self._buffers: dict[str, np.ndarray] = {}

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A C-contiguous float64 array of `shape` (contents undefined), from buffer `name`."""
        size = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(size)
        return buffer[:size].reshape(shape)
