"""Two runtime patches for bugs of Pallas TPU interpret mode in jax 0.10.2 (the interpreter, not a kernel).

Our own kernels avoid both constructs; jax's `ragged_paged_attention` kernel uses both and runs natively on a
TPU, so in interpret mode it needs them (research/toolchain.md). Each patch wraps one interpreter function;
it changes nothing for calls the interpreter already handles.

1. Loading from a reshaped ref (`ref.reshape(...)[start::step]`): the interpreter turns every transform of a
   ref into an index range and fails on a `ReshapeTransform` ("'ReshapeTransform' object has no attribute
   'indices'", jax/_src/pallas/mosaic/interpret/utils.py `to_range`). Patched `get`: read the ref up to the
   reshape through the interpreter, then reshape the value and index it as the remaining transforms say.
2. Masked stores into refs of rank >= 2: the bounds check of `SharedMemory.swap_buffer_content`
   (jax/_src/pallas/mosaic/interpret/shared_memory.py) clears only leading-axis rows of its in-bounds mask
   for every axis, so a store whose mask is true past a later axis's extent on the first axis is rejected
   as out of bounds although every element is in bounds. Patched: a masked swap whose range lies wholly in
   the buffer is done as an unmasked swap of the merged value (mask ? new : old), which is what a masked
   store means; partly out-of-bounds swaps still go to the interpreter's own check.

`apply()` is idempotent and refuses other jax versions (the patched functions are version-specific).
"""
from __future__ import annotations

import functools

PATCHED_JAX = "0.10.2"
_applied = False


def apply() -> None:
    """Install both patches (once per process). Raises RuntimeError on another jax version."""
    global _applied
    if _applied:
        return
    import jax
    if jax.__version__ != PATCHED_JAX:
        raise RuntimeError(f"interpreter patches are written for jax {PATCHED_JAX}, found jax {jax.__version__}")
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import shared_memory
    ipc.get = _get_through_reshape(ipc.get)
    shared_memory.SharedMemory.swap_buffer_content = _in_bounds_masked_swap(
        shared_memory.SharedMemory.swap_buffer_content)
    _applied = True


def _index_of(indexer):
    """An NDIndexer's indices as a NumPy index tuple (ints and strided slices)."""
    out = []
    for idx in indexer.indices:
        if hasattr(idx, "stride"):
            start, size, stride = int(idx.start), int(idx.size), int(idx.stride)
            out.append(slice(start, start + size * stride, stride))
        else:
            out.append(int(idx))
    return tuple(out)


def _get_through_reshape(get):
    from jax._src.state.types import ReshapeTransform

    @functools.wraps(get)
    def patched(token, device_id, local_core_id, memory_space, buffer_id, transforms, *args, **kwargs):
        first = next((n for n, t in enumerate(transforms) if isinstance(t, ReshapeTransform)), None)
        if first is None:
            return get(token, device_id, local_core_id, memory_space, buffer_id, transforms, *args, **kwargs)
        token, value = get(token, device_id, local_core_id, memory_space, buffer_id, tuple(transforms[:first]),
                           *args, **kwargs)
        value = value.reshape(transforms[first].shape)
        for t in transforms[first + 1:]:
            value = value.reshape(t.shape) if isinstance(t, ReshapeTransform) else value[_index_of(t)]
        return token, value

    return patched


def _in_bounds_masked_swap(swap):
    import numpy as np

    @functools.wraps(swap)
    def patched(self, key, rnge, value, mask, *args, **kwargs):
        if mask is None:
            return swap(self, key, rnge, value, mask, *args, **kwargs)
        try:
            old = np.array(self.mem[key][rnge])
        except (IndexError, KeyError, TypeError):
            old = None
        if old is None or old.shape != value.shape:   # not wholly in bounds: the interpreter's own check
            return swap(self, key, rnge, value, mask, *args, **kwargs)
        result, shape_and_dtype, clock = swap(self, key, rnge, np.where(mask, value, old), None, *args, **kwargs)
        if result is not None:
            result = np.where(mask, result, value)
        return result, shape_and_dtype, clock

    return patched


__all__ = ["apply", "PATCHED_JAX"]
