"""Running hand-worked goldens (their data: strategies/golden_cases.py): each golden restated in the options
a backend claims, required of it exactly as its case uses them, compared with its hand-worked value.
"""
from __future__ import annotations

from typing import Callable

import pytest

from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.core import conformance_test
from kvconform.conformance.strategies.golden_cases import (Golden, at_end, fixed,  # noqa: F401 (the suite's names)
                                                           restated_at)


def run(kvc, golden: Golden, uses: Callable[[Case], tuple[set, dict]], conventions: Callable = lambda c: {}) -> None:
    """Run `golden` on the backend: restated in the options it claims, skipped as unsupported unless every
    dimension its case uses is claimed, compared with the hand-worked value. `conventions(claims)`: params
    the family's checks read (e.g. padding_outputs "unspecified", RS-36)."""
    kvc.cite(*golden.clauses)
    claims = kvc.claims(features=golden.features)
    options = frozenset(o for o in golden.options if o in claims.features)
    if options:
        claims = kvc.claims(features=golden.features + tuple(sorted(options)))
    case, expected = golden.build(options)
    _, space = uses(case)
    kvc.require(claims, **space)
    case.params.update(space, golden=golden.name, options=sorted(options), **conventions(claims))
    kvc.expect(case, kvc.call(case), expected, what="hand-worked value")


def suite_test(op: str, table, uses: Callable, conventions: Callable = lambda c: {}):
    """The golden test of `op` for a suite module: one item per golden of `table` (its GOLDENS) for `op`,
    citing their clauses, each run by `run`. Assign it to a `test_...` name of the module."""
    chosen = [g for g in table if g.op == op]

    @conformance_test(op=op, layer="golden", clauses=tuple(sorted({c for g in chosen for c in g.clauses})))
    @pytest.mark.parametrize("golden", chosen, ids=str)
    def test(kvc, golden):
        run(kvc, golden, uses, conventions)
    return test


