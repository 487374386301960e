"""Mutants of the strided column (spec/numerics.md NU-14): kernels that ignore a stride.

A kernel that computes an argument's element offsets from its shape (`t * H * D + h * D + d`) instead of
its strides reads the right elements from a fresh array and the wrong ones from a view: q, k and v split
from a fused projection, a column of a wider table. Only the strided column hands views.
"""
from __future__ import annotations

import numpy as np

from kvconform import reference

from . import Mutant, mutant


def read_as_contiguous(x: np.ndarray) -> np.ndarray:
    """What a kernel reads at `x`'s first element with the strides of a contiguous array of x's shape (the
    view's own elements for a contiguous `x`, gap memory between its rows for a strided one)."""
    x = np.asarray(x)
    words = x.view(np.dtype(f"u{x.itemsize}"))   # as_strided cannot make bfloat16 / float8 arrays
    strides, step = [], x.itemsize
    for n in reversed(x.shape):
        strides.append(step)
        step *= n
    flat = np.lib.stride_tricks.as_strided(words, x.shape, tuple(reversed(strides)), writeable=False)
    return flat.view(x.dtype).copy()


@mutant(op="write_kv", clause="NU-14", only_caught_by="strided",
        description="k and v read as if contiguous: their row offsets computed from the shape, so k/v split from "
                    "a fused projection (views with a wider row stride) are read from the wrong memory")
class KvRowsReadContiguous(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **options):
        return reference.write_kv(k_pages, v_pages, read_as_contiguous(k), read_as_contiguous(v), slot_mapping,
                                  **options)
