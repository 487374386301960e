"""The backend protocol: what a kernel library implements to be checked by kvconform.

A backend is an object with a name, a version, serialisable capability claims and one method per op.
Every op method has the same name and signature as the reference function in `kvconform.reference`
(see OPS below), takes NumPy arrays in the canonical layout of the spec, and returns arrays in the same
structure as the reference returns: an array, or a tuple of arrays in the reference's field order (a
NamedTuple with any field names, or a plain tuple). An array is a NumPy array or anything the engine
converts exactly (conformance/protocol.py): a torch tensor of any dtype on any device, a jax array, an
object with `__array__`, `__array_interface__` or `__dlpack__`. The backend converts to its own layout and
device internally (`kvconform.adapters`: exact dtype conversion, the serving stacks' cache layouts and
page tables). Ops are pure: a backend must not modify its input arrays nor return one of them or a view of
one (`kvconform.adapters.to_torch` copies, so in-place kernels never touch the caller's arrays).

Floating outputs may be returned in any float dtype at least as precise as the case requires: the
tolerance comes from the case's inputs (spec/numerics.md NU-3), never from the returned dtype, and an
output narrower than that fails. Integer outputs and stored data are compared exactly.

A case outside what a kernel can do is stated up front in the claims (`OpClaims`); a backend may also
decline one call by raising `Unsupported` (also `kvconform.Unsupported`) with its reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .claims import (CASE_MEMORY_BUDGET, OpClaims, case_memory_budget, claims_problems,  # noqa: F401
                     description_problems, did_you_mean, dtype_names, size_constraint_problem)
from .vocabulary import (CLAIM_FIELDS, CONVENTIONS, FEATURES, LAYOUTS, LIMIT_KINDS, LIMITS, OPS,  # noqa: F401
                         SIZE_CONSTRAINT_KEYS, convention_problem)


class Unsupported(Exception):
    """Raised by a backend op for a case outside its kernel ("head_dim 96: tiles need D % 128 == 0").

    For a case outside the backend's claims (e.g. with `--run-unclaimed`) the test is reported
    `unsupported` with this reason, never as a pass. For a case inside its claims it is a failure: the
    backend claims more than it supports (state the limit in `OpClaims.limits` instead)."""


@dataclass(frozen=True)
class Availability:
    """Whether the backend can run on this machine, and on what (shown by `kvconform list`)."""
    ok: bool
    reason: str = ""     # why not, e.g. "torch is not installed"
    device: str = ""     # e.g. "cpu (Triton interpreter)", "NVIDIA H100", "cpu (Pallas TPU interpret mode)"
    native: bool = False  # runs natively on an accelerator (GPU/TPU), not in an interpreter or on the CPU:


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
        """Serialisable summary for reports and `kvconform list` (checked by `description_problems`).
        Raises TypeError, in words, for an availability() or capabilities() of the wrong type."""
        avail = self.availability()
        if not isinstance(avail, Availability):
            raise TypeError(f"availability() must return kvconform.backends.base.Availability, got "
                            f"{type(avail).__name__}")
        capabilities = self.capabilities()
        if not isinstance(capabilities, Mapping):
            raise TypeError(f"capabilities() must return a dict of op name -> OpClaims, got "
                            f"{type(capabilities).__name__}")
        wrong = [f"{op!r} -> {type(c).__name__}" for op, c in capabilities.items() if not isinstance(c, OpClaims)]
        if wrong:
            raise TypeError(f"capabilities() must map op names to OpClaims, got {', '.join(wrong)}")
        return {
            "name": self.name,
            "version": self.version,
            "available": avail.ok,
            "reason": avail.reason,
            "device": avail.device,
            "native": avail.native,
            "capabilities": {op: claims.to_json() for op, claims in capabilities.items()},
        }
