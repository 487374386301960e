"""The reference itself as a backend: claims everything the reference implements.

Running the suite against it checks the suite (zero failures expected) and makes the suite usable on any
machine. Each op method is the reference function, so signatures match by construction.
"""
from __future__ import annotations

from kvconform import reference
from kvconform.version import __version__
from kvconform.backends.base import FEATURES, LAYOUTS, OPS, Availability, Backend, OpClaims
from kvconform.reference import dtypes



class NumpyBackend(Backend):
    name = "numpy"
    version = __version__

    def availability(self) -> Availability:
        return Availability(ok=True, device="cpu (NumPy float64 reference)")

    def capabilities(self) -> dict[str, OpClaims]:
        # every registered feature and layout of each op: the reference implements all of them
        return {op: OpClaims(dtypes=tuple(dtypes.FLOAT_DTYPE_NAMES), kv_dtypes=tuple(dtypes.DTYPES),
                             page_sizes=None, head_dims=None, layouts=LAYOUTS.get(op, ()),
                             features=FEATURES.get(op, ()))
                for op in OPS if hasattr(reference, op)}

    def __getattr__(self, name):
        # Only ops of the protocol that the reference implements become methods.
        if name in OPS and hasattr(reference, name):
            return getattr(reference, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


def make_backend() -> NumpyBackend:
    return NumpyBackend()
