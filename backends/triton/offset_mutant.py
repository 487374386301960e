"""A deliberately wrong Triton backend: the KV write and attention kernels compute element offsets in int32.

    kvconform run --backend kvconform.backends.triton.offset_mutant:make_backend --profile scale   # must fail
    kvconform run --backend kvconform.backends.triton.offset_mutant:make_backend --profile ci      # passes

The same kernels as `TritonBackend`, launched with `offset_bits = 32` (the OFFSET constexpr of
paged_attention, paged_prefill and kv_write): page * page_stride and the slot terms are int32
products, exact below 2**31 elements and wrapped past it (a negative offset from the pool's base: a
read or write of other memory, or an illegal-address fault). Every case of the ci profile lies far below
2**31 elements, so it passes there; the scale profile's pools pass 2**31 (conformance/scale.py), where it
must fail. It is the check that the scale profile reaches the offsets the ci profile cannot; it is not
registered with the suite's mutants (conformance/mutants/), which must all fail the ci profile.
"""
from __future__ import annotations

from .backend import TritonBackend


class Int32OffsetsBackend(TritonBackend):
    name = "triton-int32-offsets"
    offset_bits = 32


def make_backend():
    return Int32OffsetsBackend()
