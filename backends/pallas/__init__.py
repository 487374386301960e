"""Pallas (TPU) kernels for kvconform; on CPU they run in Pallas TPU interpret mode.

`make_backend()` returns the adapter. jax is imported only when a kernel runs or availability is asked,
never by importing this package. Made before jax is imported (as in the suite's worker), it asks XLA for
`runtime.HOST_DEVICES` CPU devices and a CPU client thread pool larger than that, so the head-sharded
attention runs on CPU too (2, 4 and 8 shards), and for quicker CPU compiles of the interpret-mode kernels
(`runtime.CPU_COMPILE_FLAGS`).
"""
from __future__ import annotations


def make_backend():
    from .runtime import configure_host_xla
    configure_host_xla()     # before jax is imported: CPU devices for head sharding (PA-49), compile flags
    from .backend import PallasBackend
    return PallasBackend()


__all__ = ["make_backend"]
