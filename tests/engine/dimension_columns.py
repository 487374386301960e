"""Every column an op's suite tests draw, as strategies of the numpy backend's claims, and a derandomized
draw of a few examples: shared by the registry's range test (test_dimensions.py) and the threshold mutants'
invisibility test (test_threshold_mutants.py)."""
from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings

from kvconform.backends.base import OPS
from kvconform.conformance.strategies import eviction as ev
from kvconform.conformance.strategies import metadata as md
from kvconform.conformance.strategies import mla
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.strategies import rotation as ro
from kvconform.conformance.dimensions import REGISTRY

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


def columns(op: str):
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
        return [(str(v), bool(v.reach), functools.partial(cases, variant=v)) for v in variants]
    if op == "accumulate_scores":
        return [("base", False, ev.accumulate_cases)] + \
            [(r, True, functools.partial(ev.accumulate_cases, reach=r)) for r in ev.REACH]
    if op == "plan_eviction":
        return [("base", False, ev.plan_cases)] + \
            [(r, True, functools.partial(ev.reach_plan_cases, reach=r)) for r in ev.REACH]
    ordinary = md.STRIDED[op][0].cases
    return [("base", False, ordinary)] + \
        [(r, True, functools.partial(md.REACH_CASES[op], reach=r)) for r in md.reach_columns(op)]


def draw(strategy, n: int) -> list:
    drawn = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case):
        drawn.append(case)

    collect()
    return drawn
