"""A backend's result against the reference's: fields, comparison contracts, the poison expectation.

`compare_outputs(case, expected, actual)` applies the op's comparison contract (`CHECKS[op]` of its
strategy family: field -> (tolerance, mask), spec/numerics.md) field by field; the harness, the diagnosis,
`check-backend` and `replay` all judge through it.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from kvconform.backends.base import OPS
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.call_errors import BackendError, exception_line
from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.compare import FieldResult, _bits_equal, compare_field
from kvconform.conformance.engine.protocol import structure_problem


def checks_for(op: str) -> Callable:
    """The comparison contract of an op: `CHECKS[op]` of kvconform.conformance.strategies.<family>."""
    module = importlib.import_module(f"kvconform.conformance.strategies.{OPS[op]}")
    return module.CHECKS[op]


def as_fields(result: Any) -> dict[str, Any]:
    """An op result as {field: array}: a single array is the field "out"."""
    if isinstance(result, dict):
        return result
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        return dict(zip(result._fields, result))
    if isinstance(result, tuple):
        return {f"output{i}": r for i, r in enumerate(result)}
    return {"out": result}


def compare_outputs(case: Case, expected: Any, actual: Any, *, exact: bool = False,
                    checks: Callable | None = None) -> list[FieldResult]:
    """Compare every field the op's checks name (mask: the specified region only); `exact`: bit for bit
    (class E, NU-4) over the same regions, for identities a spec states as bitwise; `checks`: another
    comparison contract than `CHECKS[case.op]` (same signature), for a composed property with its own
    numerics clause (e.g. NU-RO6)."""
    exp, act = as_fields(expected), as_fields(actual)
    results = []
    problem = structure_problem(act, exp)
    if problem is not None:
        return [FieldResult("result", False, "structure", problem=problem)]
    if set(act) != set(exp):  # same arity, other names: match by position
        act = dict(zip(exp, act.values()))
    for name, (tol, mask) in (checks or checks_for(case.op))(case, exp, act).items():
        if exact:
            tol = tolerance.exact("class E: a bitwise identity of the spec")
        field_name = name.split(":")[0]   # "scores:zeros" checks another region of "scores"
        results.append(compare_field(name, act[field_name], exp[field_name], tol, mask))
    return results


def raised_lines(exc: BackendError) -> tuple[str, list[str]]:
    """(exception line, lines under it) of a backend exception in a failure message: the real error
    (`worker.exception_line`), where it was raised (innermost frames first), the rest of a multi-line
    message. Reports show a message's first lines, so the real error and its site must come first."""
    first, *rest = exception_line(exc.message).splitlines() or [""]
    return first, [exc.site, *(line.rstrip() for line in rest)]


def poison_expectation(clean_ref: Any, poisoned_ref: Any, clean_actual: Any) -> Any:
    """Field by field: the reference's poisoned result where poison changes the reference's result
    (bitwise), the backend's clean result elsewhere (see `Harness.check_poison`)."""
    ref_c, ref_p, act_c = as_fields(clean_ref), as_fields(poisoned_ref), as_fields(clean_actual)
    if set(act_c) != set(ref_p):
        return poisoned_ref
    out = {}
    for name, rp in ref_p.items():
        rp, rc, ac = np.asarray(rp), np.asarray(ref_c[name]), act_c[name]
        if not isinstance(ac, np.ndarray) or ac.shape != rp.shape:
            return poisoned_ref
        changed = rp.tobytes() != rc.tobytes() and _bit_changes(rc, rp)
        if changed is False or not np.any(changed):
            out[name] = ac
        elif ac.dtype == rp.dtype:
            out[name] = np.where(changed, rp, ac)
        else:
            out[name] = np.where(changed, rp.astype(np.float64), ac.astype(np.float64))
    return out


def _bit_changes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: do a and b differ bitwise (NaN equal to NaN whatever the payload)?"""
    return ~_bits_equal(np.asarray(b), np.asarray(a).astype(np.asarray(b).dtype))


def checks_tolerance_reason(case: Case, fields: list[FieldResult]) -> str:
    return "; ".join(f"{r.name}: {r.tolerance.get('reason') or r.kind}" for r in fields)

