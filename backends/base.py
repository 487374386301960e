"""The backend protocol: what a kernel library implements to be checked by kvconform.

A backend is an object with a name, a version, serialisable capability claims and one method per op.
Every op method has the same name and signature as the reference function in `kvconform.reference`
(see OPS below), takes NumPy arrays in the canonical layout of the spec, and returns NumPy arrays in the
same structure as the reference returns (an array, or a NamedTuple of arrays). The backend converts to
its own layout and device internally. Ops are pure: a backend must not modify its input arrays (our
adapters copy before running in-place kernels).

Floating outputs may be returned in the backend's own output dtype; the suite compares them with the
tolerance of spec/numerics.md for that dtype. Integer outputs and stored data are compared exactly.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

#: op name -> spec family (the spec file and the clause prefix). Method names on a backend.
OPS: dict[str, str] = {
    "ragged_paged_attention": "paged_attention",
    "write_kv": "paged_attention",
    "rotate_keys": "rotation",
    "shift_keys": "rotation",
    "accumulate_scores": "eviction",
    "plan_eviction": "eviction",
    "causal_conv1d_update": "recurrent",
    "selective_state_update": "recurrent",
    "ssd_chunked_scan": "recurrent",
    "rwkv6_wkv": "recurrent",
    "gated_delta_rule_update": "recurrent",
    "gated_delta_rule_chunked": "recurrent",
}


@dataclass(frozen=True)
class OpClaims:
    """What a backend claims to support for one op. A claimed case that fails is a failure; a case
    outside the claims is reported `unsupported` (and `unclaimed-pass` if it is run and passes).

    dtypes:     dtypes of the floating activations (q, k, x, ...), canonical names ("float32", "bfloat16")
    kv_dtypes:  storage dtypes of caches / state pools ("bfloat16", "float8_e4m3fn", "int8", ...)
    page_sizes: page (block) sizes supported; None = any
    head_dims:  head dims supported; None = any
    layouts:    layout variants ("half", "interleaved", "separate", "combined", "flat", ...)
    features:   optional features ("sliding_window", "soft_cap", "sinks", "quantized_kv",
                "return_scores", "per_token_deltas", "per_block_deltas", "state_indices", ...)
    limits:     any other numeric limits, e.g. {"max_head_dim": 256, "max_num_seqs": 64}
    """
    dtypes: tuple[str, ...] = ()
    kv_dtypes: tuple[str, ...] = ()
    page_sizes: tuple[int, ...] | None = None
    head_dims: tuple[int, ...] | None = None
    layouts: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    limits: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else (dict(v) if isinstance(v, Mapping) else v))
                for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class Availability:
    """Whether the backend can run on this machine, and on what (shown by `kvconform list`)."""
    ok: bool
    reason: str = ""     # why not, e.g. "torch is not installed"
    device: str = ""     # e.g. "cpu (Triton interpreter)", "NVIDIA H100", "cpu (Pallas TPU interpret mode)"


class Backend:
    """Base class for backends. Subclasses set `name`/`version`, override `capabilities` and
    `availability`, and define a method for each op they claim (same signature as the reference)."""

    name: str = "unnamed"
    version: str = "0"

    def availability(self) -> Availability:
        return Availability(ok=True, device="cpu")

    def capabilities(self) -> dict[str, OpClaims]:
        """op name -> claims; ops not listed are unsupported."""
        return {}

    def describe(self) -> dict:
        """Serialisable summary for reports and `kvconform list`."""
        avail = self.availability()
        return {
            "name": self.name,
            "version": self.version,
            "available": avail.ok,
            "reason": avail.reason,
            "device": avail.device,
            "capabilities": {op: claims.to_json() for op, claims in self.capabilities().items()},
        }
