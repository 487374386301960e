"""Permission backends, the dual of the mutants: each takes one latitude the spec grants, in its most
adversarial legal form, and must pass every test of the ops it overrides.

The spec lists every permission in spec/numerics.md, "Permissions" (an id, the clauses that grant it, what
a backend may do). A permission backend is the numpy backend with its op(s) overridden to compute the way a
real kernel taking that permission would: float32 accumulators in the worst legal order, operands rounded
to the compute dtype, padding rows filled with NaN, scales folded into the logits. If the suite fails one of
them, the suite (its draws or a tolerance derivation) is wrong, not the backend: tests/engine/
test_permissions.py runs one `kvconform run` per op with every permission backend of that op and requires
zero failures. A permission class is its own factory:
`kvconform run --backend kvconform.conformance.permissions.<family>:<Class>`. One module per family;
`all_permissions()` imports them all. Imports: reference and backends only (never the harness or the
strategies: a permission backend must not know what the suite draws).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from kvconform.backends.numpy import NumpyBackend


@dataclass(frozen=True)
class PermissionInfo:
    spec: str          # module:Class, loadable as a backend
    ids: tuple         # the permissions it takes: ids of spec/numerics.md "Permissions"
    ops: tuple         # the ops it overrides (every one must pass)
    clause: str        # the clauses that grant it
    description: str   # the adversarial legal form it takes


_REGISTRY: dict[str, PermissionInfo] = {}


class Permission(NumpyBackend):
    """Base of permission backends: claims what the numpy backend claims; override the permitted op(s)."""

    def __init__(self):
        self.name = f"permission-{type(self).__name__}"


def permission(*, id, ops, clause: str, description: str):
    """Register a permission backend; `id` and `ops` are one name or a tuple of them."""
    ops = (ops,) if isinstance(ops, str) else tuple(ops)
    ids = (id,) if isinstance(id, str) else tuple(id)

    def register(cls):
        spec = f"{cls.__module__}:{cls.__name__}"
        _REGISTRY[spec] = PermissionInfo(spec, ids, ops, clause, description)
        cls.permission_info = _REGISTRY[spec]
        return cls
    return register


def all_permissions() -> list[PermissionInfo]:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return sorted(_REGISTRY.values(), key=lambda p: p.spec)
