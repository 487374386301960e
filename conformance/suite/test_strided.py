"""The strided column (spec/numerics.md NU-14): every op, each array argument a non-contiguous view.

One test per op of backends/base.py OPS. Each draws a case from the op's own differential strategy (the
first claimed column of its family's `STRIDED[op]` in strategies/<family>.py), hands every array argument
with at least one axis as a view into a wider buffer (conformance/strided.py: rows of a wider table, a
slice of a wider last axis, two axes stored swapped, a column of a table; the layouts take turns over the
arguments, so a case with three or more multi-axis arguments holds them all), built in the worker right
before the call, and compares the result with the reference through the op's own checks (`CHECKS`), as a
contiguous case would be. The memory between the view's elements must come back untouched. A failure's
diagnosis re-runs it with every argument contiguous and with each argument alone strided.

Cases are small and few (the point is the strides, not the size): `BUDGET` of the profile's examples.
"""
from __future__ import annotations

import importlib

from hypothesis import assume
from hypothesis import strategies as st

from kvconform.backends.base import OPS
from kvconform.conformance.engine import strided
from kvconform.conformance.harness import conformance_test

SUITE_OPS = "*"

#: share of the profile's examples (ci: 1, quick: 1, thorough: 10): each new shape costs a JIT backend a compile
BUDGET = 0.04
CLAUSES = ("NU-14",)
#: the share of a case's strided arguments that must be non-contiguous views (drawn cases below are rejected)
MIN_SHARE = 0.75


def columns(op: str) -> tuple[strided.Column, ...]:
    """The op's strided columns, richest first (strategies/<family>.py STRIDED)."""
    return importlib.import_module(f"kvconform.conformance.strategies.{OPS[op]}").STRIDED[op]


@st.composite
def strided_cases(draw, cases, contiguous: tuple[str, ...] = ()):
    """A case of `cases` with its array arguments (all but `contiguous`) handed as strided views; the
    first multi-axis argument's layout is drawn (it shrinks to `rows`), the others take turns after it."""
    case = draw(cases)
    first = draw(st.integers(0, len(strided.LAYOUTS) - 1))
    case = strided.with_layouts(case, strided.layouts_for(case.inputs, first, contiguous))
    # The smallest cases (no tokens, one row, one head) leave most views contiguous after all: with a few
    # examples a test, they would check nothing (NumPy, and a kernel, ignore the stride of a length-1 axis).
    assume(strided.strided_share(case) >= MIN_SHARE)
    return case


def _strided_test(op: str):
    @conformance_test(op=op, layer="differential", clauses=CLAUSES)
    def test(kvc):
        claimed = set(kvc.claims(op).features)
        column = next((c for c in columns(op) if set(c.features) <= claimed), columns(op)[-1])
        claims = kvc.claims(op, features=column.features)
        kvc.for_all(strided_cases(column.cases(claims), column.contiguous), kvc.check, budget=BUDGET)
    test.__name__ = test.__qualname__ = f"test_{op}_strided"
    return test


for _op in OPS:   # one test function per op, so `--ops` and the reports see the op of each
    globals()[f"test_{_op}_strided"] = _strided_test(_op)
del _op
