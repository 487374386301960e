"""The reference itself as a backend: claims everything the reference implements.

Running the suite against it checks the suite (zero failures expected) and makes the suite usable on any
machine. Each op method is the reference function, so signatures match by construction.
"""
from __future__ import annotations

from kvconform import __version__, reference
from kvconform.backends.base import OPS, Availability, Backend, OpClaims
from kvconform.reference import dtypes

#: every optional feature any family defines; the reference implements all of them
ALL_FEATURES = ("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores",
                "per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas",
                "state_indices", "theta_form", "lut_form",
                "initial_states", "snapshots", "padding_slots", "multi_token", "bias", "silu", "mamba2",
                "qk_l2norm")
ALL_LAYOUTS = ("separate", "combined", "flat", "half", "interleaved")


class NumpyBackend(Backend):
    name = "numpy"
    version = __version__

    def availability(self) -> Availability:
        return Availability(ok=True, device="cpu (NumPy float64 reference)")

    def capabilities(self) -> dict[str, OpClaims]:
        claims = OpClaims(dtypes=tuple(n for n in dtypes.FLOAT_DTYPE_NAMES),
                          kv_dtypes=tuple(dtypes.DTYPES),
                          page_sizes=None, head_dims=None, layouts=ALL_LAYOUTS, features=ALL_FEATURES)
        return {op: claims for op in OPS if hasattr(reference, op)}

    def __getattr__(self, name):
        # Only ops of the protocol that the reference implements become methods.
        if name in OPS and hasattr(reference, name):
            return getattr(reference, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


def make_backend() -> NumpyBackend:
    return NumpyBackend()
