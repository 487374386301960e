"""Pallas (TPU) kernels for kvconform; on CPU they run in Pallas TPU interpret mode.

`make_backend()` returns the adapter. jax is imported only when a kernel runs or availability is asked,
never by importing this package.
"""
from __future__ import annotations


def make_backend():
    from .backend import PallasBackend
    return PallasBackend()


__all__ = ["make_backend"]
