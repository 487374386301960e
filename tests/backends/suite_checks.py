"""One source of tolerances for our kernel tests: the conformance suite's own checks (spec/numerics.md).

`assert_conforms(op, inputs, actual)` compares a backend result with the reference (or with a hand-worked
`expected`) through the family's CHECKS, exactly as `kvconform run` does, so no kernel test carries a
bound of its own."""
from __future__ import annotations

import inspect

from kvconform import reference
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import compare_outputs


def inputs_of(op: str, *args, **kwargs) -> dict:
    """The keyword inputs of a reference call `op(*args, **kwargs)` (positional names filled in)."""
    bound = inspect.signature(getattr(reference, op)).bind_partial(*args, **kwargs)
    return dict(bound.arguments)


def assert_conforms(op: str, inputs: dict, actual, expected=None, *, what: str = "reference") -> None:
    case = Case(op, inputs, {})
    if expected is None:
        expected = getattr(reference, op)(**inputs)
    bad = [r for r in compare_outputs(case, expected, actual) if not r.ok]
    assert not bad, f"[{op}] differs from the {what}: " + "; ".join(r.summary() for r in bad)
