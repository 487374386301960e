"""Converters between the canonical conv window and the two other layouts in use (RS-13).

canonical: [..., C, W-1], the last W-1 pre-conv inputs, oldest first.
rolled:    [..., C, W], one extra oldest column that the next step discards (column 0 is never read).
circular:  [..., C, L] with L >= W-1 and a count `cache_seqlens` of inputs written so far; input number p
           (0-based) sits in column p % L; the buffer starts as zeros.
"""
from __future__ import annotations

import numpy as np

from ..validation import float_input, int_input, int_scalar, require


def window_from_rolled(rolled) -> np.ndarray:
    """Canonical window of a W-wide rolled state: its last W-1 columns."""
    arr = float_input("rolled", rolled)
    require(arr.ndim >= 2 and arr.shape[-1] >= 1, f"rolled must be [..., C, W] with W >= 1, got {arr.shape}")
    return arr[..., 1:]


def window_to_rolled(window) -> np.ndarray:
    """A rolled state holding `window`; the discarded column 0 is set to zero."""
    arr = float_input("window", window)
    require(arr.ndim >= 2, f"window must be [..., C, W-1], got {arr.shape}")
    return np.concatenate([np.zeros(arr.shape[:-1] + (1,)), arr], axis=-1)


def window_from_circular(buffer, cache_seqlens, width: int) -> np.ndarray:
    """Canonical window of conv width `width` read from circular buffers [B, C, L] (RS-13).

    cache_seqlens: i32[B] inputs written so far per row. Column i of the window is input number
    cache_seqlens - (W-1) + i, read from column (that number) mod L.
    """
    buf = float_input("buffer", buffer, 3, "[B, C, L]")
    lens = int_input("cache_seqlens", cache_seqlens, 1, "[B]")
    width = int_scalar("width", width, minimum=1)
    require(lens.shape[0] == buf.shape[0], f"cache_seqlens must have shape [B] = ({buf.shape[0]},), got {lens.shape}")
    require(buf.shape[2] >= width - 1, f"buffer length L must be >= W-1 = {width - 1}, got {buf.shape[2]}")
    require(bool((lens >= 0).all()), "cache_seqlens must be >= 0")
    cols = (lens[:, None] - (width - 1) + np.arange(width - 1)[None, :]) % max(buf.shape[2], 1)
    return np.take_along_axis(buf, cols[:, None, :], axis=2) if width > 1 else buf[:, :, :0]
