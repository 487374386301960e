"""The dimension registry (conformance/strategies/dimensions) knows every size the strategies draw.

For every op: each column's strategy draws a few derandomized examples with the numpy backend's claims;
every axis of every array input is declared by some dimension of the op, and every dimension's size lies in
[0, real_max]; ordinary (non-reach) columns stay within small_max, the size past which the generated
threshold mutants must be caught by reach columns alone (spec/numerics.md "Reach by dimension").
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kvconform.backends.base import OPS
from kvconform.backends.numpy import make_backend
from kvconform.conformance.strategies import eviction as ev
from kvconform.conformance.strategies import metadata as md
from kvconform.conformance.strategies import mla
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.strategies import rotation as ro
from kvconform.conformance.strategies.dimensions import REGISTRY, declares, dimensions, measure
from kvconform.conformance.strategies.dimensions.model import Dimension

#: the recurrent family's dimensions are declared by recurrent.py (its own branch): until it lands, its ops
#: are the only ones allowed to be missing
PENDING = {op for op, family in OPS.items() if family == "recurrent"} - set(REGISTRY)
EXAMPLES = 3


def _variants(strategy, variants):
    return [(str(v), v.long or bool(v.values), functools.partial(strategy, variant=v)) for v in variants]


def _recurrent_columns(op: str):
    """Every column of a recurrent op, each tier (and crossed regime) of its long column on its own."""
    found = []
    for v in rs.VARIANTS[op]:
        for kw, _ in rs.column_runs(op, v):
            name = "-".join([str(v)] + [str(x) for x in kw.values()])
            found.append((name, bool(v.reach), functools.partial(rs.STRATEGIES[op], variant=v, **kw)))
    return found


def _columns(op: str):
    """(column name, is a reach column, strategy(claims)) of every column the op's suite tests draw."""
    if OPS[op] == "recurrent":
        return _recurrent_columns(op)
    if op == "ragged_paged_attention":
        return _variants(pa.attention_cases, pa.ATTENTION_VARIANTS)
    if op == "write_kv":
        return _variants(pa.write_kv_cases, pa.WRITE_VARIANTS)
    if op == "mla_paged_attention":
        return [(str(v), bool(v.reach) or bool(getattr(v, "values", "")), functools.partial(mla.mla_cases, variant=v))
                for v in mla.VARIANTS]
    if op == "ragged_paged_attention_csr":
        return _variants(md.attention_csr_cases, md.csr_attention_variants())
    if op in ("rotate_keys", "shift_keys"):
        cases = ro.rotate_keys_cases if op == "rotate_keys" else ro.shift_keys_cases
        variants = ro.ROTATE_VARIANTS if op == "rotate_keys" else ro.SHIFT_VARIANTS
        return [(str(v), v in (ro.LONG, ro.RANGE), functools.partial(cases, variant=v)) for v in variants]
    if op == "accumulate_scores":
        return [("base", False, ev.accumulate_cases)] + \
            [(r, True, functools.partial(ev.accumulate_cases, reach=r)) for r in ev.REACH]
    if op == "plan_eviction":
        return [("base", False, ev.plan_cases)] + \
            [(r, True, functools.partial(ev.reach_plan_cases, reach=r)) for r in ev.REACH]
    ordinary = md.STRIDED[op][0].cases
    return [("base", False, ordinary)] + [(r, True, functools.partial(md.REACH_CASES[op], reach=r)) for r in md.REACH]


def _draw(strategy, n: int) -> list:
    drawn = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case):
        drawn.append(case)

    collect()
    return drawn


def test_every_op_has_dimensions():
    missing = set(OPS) - set(REGISTRY) - PENDING
    assert not missing, f"ops without declared dimensions: {sorted(missing)}"
    assert not set(REGISTRY) - set(OPS), f"dimensions of unknown ops: {sorted(set(REGISTRY) - set(OPS))}"
    for op, dims in REGISTRY.items():
        assert dims and all(isinstance(d, Dimension) and d.source for d in dims), op


def test_reach_values_pass_every_tile_with_a_tail():
    d = Dimension("x", ("x[0]",), 300, "test", small_max=8, unwritten=("out[0]",))
    assert d.reach_values(budget=10 ** 6) == (16, 32, 64, 128, 256, 300)
    assert d.reach_values(budget=100) == (16, 32, 64, 97)   # 64 + 32 + 1: past 64, not a multiple of 16
    assert d.thresholds() == (16, 32, 64, 128, 256)
    assert Dimension("y", ("y[0]",), 64, "test", small_max=8, unwritten=("out[0]",)).thresholds() == (16, 32)


def test_measure_reads_every_form():
    x = dict(q=np.zeros((5, 3, 2)), cu=np.array([0, 2, 7]), n=4, d=np.array([-9, 3]), s=np.zeros((2, 3)))
    assert [measure(r, x) for r in ("q[1]", "n", "max(cu)", "max(diff(cu))", "max(abs(d))", "len(q)",
                                    "s[0]/2", "s[0]/3", "absent[0]")] == [3, 4, 7, 5, 9, 5, 2, None, None]
    with pytest.raises(ValueError, match="axis reference"):
        measure("q[", x)


@pytest.mark.parametrize("op", sorted(set(OPS) - PENDING))
def test_drawn_sizes_lie_in_the_registry(op):
    claims = make_backend().capabilities()[op]
    dims = dimensions(op)
    problems = []
    for name, reach, strategy in _columns(op):
        try:
            cases = _draw(strategy(claims), EXAMPLES)
        except pytest.skip.Exception:
            continue
        for case in cases:
            x = case.inputs
            for arg, value in x.items():
                if isinstance(value, np.ndarray):
                    for axis in range(value.ndim):
                        if not declares(dims, arg, axis, value.ndim):
                            problems.append(f"{name}: axis {axis} of {arg} {value.shape} is no dimension's")
            for d in dims:
                top = d.real_max if reach else d.small_max
                for ref in d.axes:
                    size = measure(ref, x)
                    if size is not None and not 0 <= size <= top:
                        problems.append(f"{name}: {d.name} {ref} = {size} outside [0, "
                                        f"{'real_max' if reach else 'small_max'} {top}]")
    assert not problems, "\n".join(sorted(set(problems)))
