"""Malformed inputs, one module per op family: the cases of the "errors" layer (DESIGN.md section 4).

Each family module has `RULES = {op: (Rule, ...)}`, a table of the rejection rules its spec states, in spec
order, and `valid(op, claims, variant)`, the strategy of valid cases they start from. A `Rule` starts from
a valid case drawn within the backend's claims and breaks exactly one rule, naming the clauses that state
it and the argument an error must name. Only rules inside the claims are broken: a rule on an optional
feature needs the feature claimed (`Rule.variant` / `Rule.features`), and type rules use types the spec
never allows (an integer `q`, a float `kv_lens`), not merely unclaimed dtypes, which are `unsupported`.

A suite test runs one rule table as one parametrized test per op (see conformance/README.md):

    @conformance_test(op="write_kv", layer="errors", clauses=malformed.clauses_of(kv_bad.RULES["write_kv"]))
    @pytest.mark.parametrize("rule", kv_bad.RULES["write_kv"], ids=str)
    def test_write_kv_rejects(kvc, rule):
        malformed.check_rejects(kvc, kv_bad, "write_kv", rule)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.rejection import Rejection

#: Examples per error test, as a fraction of the profile's (ci: 3, quick: 1, thorough: 30). Every rule is
#: a test of its own and a backend's argument checks do not depend on values, so a few cases suffice.
BUDGET = 0.12

#: Returned by a `corrupt` function as the value of an input to leave the argument out of the call.
OMIT = object()

Corrupt = Callable[[Any, dict, OpClaims], "dict | tuple[dict, str]"]


@dataclass(frozen=True)
class Rule:
    """One rejection rule of a spec, and how to break it.

    name:      the test id, e.g. "duplicate_slot"
    clauses:   the clauses stating the rule, the precondition clause first (e.g. ("PA-42", "PA-46"))
    arguments: the argument(s) the error message must name; any one suffices (a rule tying two arguments
               may be reported from either side)
    rule:      the rule in words, shown in failures: "slot_mapping must not repeat a slot"
    corrupt:   corrupt(draw, inputs, claims) -> {argument: new value or OMIT}, or (that dict, argument)
               when the argument to name is drawn (e.g. k_scale or v_scale); may `assume` a property of
               the valid case (keep such filters mild)
    variant:   the family's Variant (features-matrix column) to draw the valid case from; None: the
               first column of the op whose features the backend claims
    features:  further features the backend must claim for the rule to be inside its claims
    requires:  claims -> None, or why the rule cannot be broken within these claims (-> unsupported)
    narrow:    claims -> claims, restricting the valid draw (e.g. int8 pages only)
    """
    name: str
    clauses: tuple[str, ...]
    arguments: tuple[str, ...]
    rule: str
    corrupt: Corrupt
    variant: Any = None
    features: tuple[str, ...] = ()
    requires: Callable[[OpClaims], str | None] | None = None
    narrow: Callable[[OpClaims], OpClaims] | None = None

    def __str__(self) -> str:
        return self.name


def rule(name: str, clauses, arguments, text: str, corrupt: Corrupt, **kw) -> Rule:
    """`Rule` with single strings accepted for clauses and arguments."""
    as_tuple = lambda v: (v,) if isinstance(v, str) else tuple(v)
    return Rule(name, as_tuple(clauses), as_tuple(arguments), text, corrupt, **kw)


def clauses_of(rules) -> tuple[str, ...]:
    """Every clause a rule table cites, in first-cited order (for the test's marker)."""
    return tuple(dict.fromkeys(c for r in rules for c in r.clauses))


@st.composite
def rejected_cases(draw, valid, rule: Rule, claims: OpClaims):
    """A case drawn from `valid` with `rule` broken, carrying the Rejection the backend must produce."""
    case: Case = draw(valid)
    inputs = dict(case.inputs)
    edit = rule.corrupt(draw, inputs, claims)
    edit, arguments = edit if isinstance(edit, tuple) else (edit, rule.arguments)
    for name, value in edit.items():
        if value is OMIT:
            inputs.pop(name, None)
        else:
            inputs[name] = value
    params = dict(case.params, broken=rule.name)
    arguments = (arguments,) if isinstance(arguments, str) else tuple(arguments)
    return Case(case.op, inputs, params, case.seed, Rejection(rule.clauses, arguments, rule.rule))


def check_rejects(kvc, family, op: str, rule: Rule) -> None:
    """The body of an errors-layer test: every drawn case breaking `rule` must be rejected."""
    kvc.cite(*rule.clauses)
    variant = rule.variant or _first_claimed(kvc, family.VARIANTS[op], op)
    claims = kvc.claims(op, features=tuple(dict.fromkeys(variant.features + rule.features)))
    why = rule.requires(claims) if rule.requires is not None else None
    if why:
        pytest.skip(f"unsupported: {why}")
    if rule.narrow is not None:
        claims = rule.narrow(claims)
    kvc.for_all(rejected_cases(family.valid(op, claims, variant), rule, claims), kvc.expect_rejected,
                budget=BUDGET)


def _first_claimed(kvc, variants, op: str):
    claimed = set(kvc.claims(op).features)
    for variant in variants:
        if set(variant.features) <= claimed:
            return variant
    return variants[0]   # kvc.claims then reports the missing features as unsupported


# --- small edits shared by the family modules -----------------------------------------------------

def index(draw, n: int) -> int:
    """A position in [0, n), n >= 1 (shrinks towards 0)."""
    return draw(st.integers(0, n - 1))


def grown(arr: np.ndarray, axis: int, by: int = 1) -> np.ndarray:
    """`arr` with `by` zero entries appended along `axis` (a shape off by one)."""
    pad = list(arr.shape)
    pad[axis] = by
    return np.concatenate([arr, np.zeros(pad, dtype=arr.dtype)], axis=axis)


def as_int(arr) -> np.ndarray:
    """An integer array of the shape of `arr` (a float input given an integer dtype)."""
    return np.ones(np.shape(arr), dtype=np.int32)


def as_float(arr) -> np.ndarray:
    """The same integers in float32 (an integer input given a float dtype)."""
    return np.asarray(arr).astype(np.float32)


def need(condition) -> None:
    """Keep only valid cases where the rule can be broken (a mild Hypothesis filter)."""
    assume(bool(condition))


def copied(x: dict, name: str) -> np.ndarray:
    return np.array(x[name], copy=True)


def set_at(x: dict, name: str, where, value) -> dict:
    """{name: a copy of x[name] with x[name][where] = value}."""
    arr = copied(x, name)
    arr[where] = value
    return {name: arr}
