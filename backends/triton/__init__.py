"""kvconform's Triton backend: optimized kernels for the KV-cache families (DESIGN.md section 3).

    from kvconform.backends.triton import make_backend
    backend = make_backend()          # TritonBackend, name "triton"
    backend.availability()            # device "cpu (Triton interpreter)" when no CUDA GPU is present

Importing this package imports neither torch nor triton. Without an NVIDIA device node it sets
TRITON_INTERPRET=1 at once (Triton must see it before its first import); the first op call (or
availability()) confirms the device with torch.
"""
from __future__ import annotations

from ._runtime import preselect

preselect()


def make_backend():
    from .backend import TritonBackend
    return TritonBackend()


__all__ = ["make_backend"]
