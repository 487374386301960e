"""Backends for the strided-column tests (tests/engine/test_strided_inputs.py; not part of the package):
one that refuses non-contiguous arrays (so a test can see that views reach the worker) and one that
writes the memory between the elements of its strided input (a kernel storing with the wrong strides)."""
import numpy as np

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend


class ContiguousOnly(NumpyBackend):
    name = "contiguous-only"

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **options):
        for name, arr in dict(k_pages=k_pages, v_pages=v_pages, k=k, v=v, slot_mapping=slot_mapping).items():
            if not arr.flags.c_contiguous:
                raise ValueError(f"{name} is not contiguous (strides {arr.strides})")
        return reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **options)


class GapWriter(NumpyBackend):
    """Zeroes the whole memory span of k (view elements restored): only the gaps between k's rows change."""
    name = "gap-writer"

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **options):
        kept = k.copy()
        last = sum((n - 1) * s for n, s in zip(k.shape, k.strides)) // k.itemsize   # element offset of k's last
        span = np.lib.stride_tricks.as_strided(k, (last + 1,), (k.itemsize,), writeable=True)
        span[...] = 0
        k[...] = kept
        return reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **options)
