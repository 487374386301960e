"""The dimension registry: every size of every op's arguments, declared once with its real range and source
(spec/numerics.md "Reach by dimension"; model.py says what a Dimension holds).

`REGISTRY[op]` is the op's dimensions; the strategies' draws stay within them (tests/engine/
test_dimensions.py draws every column and checks), `kvconform list --dimensions OP` prints them and
mutants/thresholds.py plants a bug past each tile of each. One module per family; the recurrent family's
is recurrent.py.
"""
from __future__ import annotations

import importlib

from .model import KINDS, NARROW_BITS, TILES, Dimension, declares, measure

_FAMILIES = ("attention", "rotation", "eviction", "metadata", "recurrent")


def _assemble() -> dict[str, tuple[Dimension, ...]]:
    registry: dict[str, tuple[Dimension, ...]] = {}
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
            continue          # a family whose dimensions are not declared yet (the registry test names its ops)
        for op, dims in module.REGISTRY.items():
            if op in registry:
                raise ValueError(f"dimensions of {op} declared twice ({family})")
            names = [d.name for d in dims]
            if len(set(names)) != len(names):
                raise ValueError(f"{op}: a dimension name declared twice: {names}")
            registry[op] = tuple(dims)
    return registry


REGISTRY: dict[str, tuple[Dimension, ...]] = _assemble()


def dimensions(op: str) -> tuple[Dimension, ...]:
    """The op's dimensions; a one-line error naming the op when it has none."""
    if op not in REGISTRY:
        raise KeyError(f"no dimensions declared for op {op!r} (declared: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[op]


__all__ = ["REGISTRY", "dimensions", "Dimension", "KINDS", "TILES", "NARROW_BITS", "declares", "measure"]
