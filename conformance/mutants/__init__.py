"""Deliberately wrong backends: each is the numpy backend with one realistic bug in one op.

They prove the suite has teeth (tests/engine/test_mutants.py): for every registered mutant the suite must
fail the mutated `op`, name `clause` among the failing test's clauses, and leave a small counterexample
(at most `max_size`). A mutant with `only_caught_by` proves one set of tests necessary: every other test of
the op passes it (e.g. a chunk-carry bug that 4-token sequences cannot show; only the `long` tests can).
A mutant class is its own factory: `kvconform run --backend kvconform.conformance.mutants.<family>:<Class>`.
One module per family; `all_mutants()` imports them all.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from kvconform.backends.numpy import NumpyBackend


@dataclass(frozen=True)
class MutantInfo:
    spec: str          # module:Class, loadable as a backend
    op: str            # the op that is wrong
    clause: str        # the clause it violates (must be among the failing test's clauses)
    description: str
    max_size: int = 8  # the largest counterexample (tokens + sequences + heads) shrinking may leave
    only_caught_by: str = ""   # if set: the op's tests whose id lacks it must all pass (e.g. "long"; "a|b": either)
    diagnosis: str = ""        # if set: text some failure of the op must show (its diagnosis or message)
    replay_from: str = ""      # if set: replay the reproducer of the failing test whose id contains it
    generated: str = ""        # if set: made by that generator module (thresholds.py), checked by its own meta-test


_REGISTRY: dict[str, MutantInfo] = {}


class Mutant(NumpyBackend):
    """Base of mutants: claims what the numpy backend claims; override exactly one op."""

    def __init__(self):
        self.name = f"mutant-{type(self).__name__}"


def mutant(*, op: str, clause: str, description: str, max_size: int = 8, only_caught_by: str = "",
           diagnosis: str = "", replay_from: str = "", generated: str = ""):
    def register(cls):
        spec = f"{cls.__module__}:{cls.__name__}"
        _REGISTRY[spec] = MutantInfo(spec, op, clause, description, max_size, only_caught_by, diagnosis,
                                     replay_from, generated)
        cls.mutant_info = _REGISTRY[spec]
        return cls
    return register


def all_mutants(*, generated: bool = False) -> list[MutantInfo]:
    """The hand-written mutants; with generated=True the generated ones (mutants/thresholds.py) alone."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return sorted((m for m in _REGISTRY.values() if bool(m.generated) == generated), key=lambda m: m.spec)
