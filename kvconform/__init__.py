"""kvconform: a reference-versus-optimized conformance suite for the KV-cache kernels of LLM serving.

Sub-packages:
  kvconform.reference    the NumPy oracle (float64, NumPy + ml_dtypes only; optional threadpoolctl for speed)
  kvconform.backends     the backend protocol, registry and our backends (numpy, triton, pallas)
  kvconform.conformance  strategies, comparison, pytest plugin, CLI and reports
  kvconform.adapters     exact NumPy <-> torch conversion, serving-stack cache layouts and page tables, for
                         backends that wrap torch kernels (torch is imported only when a function needs it)

`from kvconform import reference` works without importing torch, jax or triton.
The package root is the facade: it may import every layer (lazily); the layers read the versions from
`kvconform.version`, never from here.
`kvconform.Unsupported`: what a backend raises for a case outside its kernel (backends/base.py).
"""
import importlib

from kvconform.version import SPEC_VERSION, __version__

__all__ = ["reference", "backends", "conformance", "adapters", "Unsupported", "__version__", "SPEC_VERSION"]


def __getattr__(name):
    if name in ("reference", "backends", "conformance", "adapters"):
        return importlib.import_module(f"kvconform.{name}")
    if name == "Unsupported":
        return importlib.import_module("kvconform.backends.base").Unsupported
    raise AttributeError(f"module 'kvconform' has no attribute {name!r}")
