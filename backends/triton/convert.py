"""NumPy <-> torch conversion for the Triton adapter (canonical layout both ways).

bfloat16 and float8 arrays (ml_dtypes) have no torch.from_numpy path; they travel as their integer bit
patterns and are re-viewed on the torch side, so no value is ever rounded in transit. Integer metadata
keeps its offset and strides (a view into a larger buffer stays a view) so that kernels are exercised
on strided metadata exactly as a caller passed it.

Unlike `kvconform.adapters.to_torch` (always a copy), `to_torch` here shares the caller's memory on the CPU
unless `copy` is set: our kernels never write an input they were not given a copy of, and the interpreter
run of the gate would pay for every copy. The way back and the dtype table are the adapters' own.
"""
from __future__ import annotations

import numpy as np

from kvconform.adapters.arrays import to_numpy, torch_dtype as _torch_dtype  # noqa: F401 (to_numpy: re-export)
from kvconform.reference import dtypes

_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


def to_torch(x: np.ndarray, device: str, *, copy: bool = False):
    """A torch tensor with the same dtype and values as `x` on `device` (a copy when `copy` is set,
    so in-place kernels never touch the caller's array)."""
    import torch
    x = np.asarray(x)
    name = dtypes.dtype_name(x.dtype)
    if any(s < 0 or s % x.itemsize for s in x.strides) or not x.flags.writeable or copy:
        x = np.array(x, copy=True, order="C")
    if name in _BITS:
        t = torch.from_numpy(x.view(_BITS[name])).view(_torch_dtype(name))
    else:
        t = torch.from_numpy(x)
    return t.to(device) if device != "cpu" else t


def metadata(x, device: str):
    """Integer metadata as an int32/int64 tensor, keeping offset and strides where possible."""
    x = np.asarray(x)
    if x.dtype not in (np.int32, np.int64):
        x = x.astype(np.int64)
    return to_torch(x, device)
