"""Why a shrunk counterexample fails: re-run it with variations and report which ones pass.

Runs once per failing test, after Hypothesis has shrunk the failure (`Harness._attach_diagnosis`), and
never changes the verdict. Two kinds:

- a **poison** failure (`Harness.check_poison`) is re-run with each declared poison region alone
  ("fails only when V slots past kv_len in the last used page hold NaN");
- a **differential** failure is re-run with each optional feature turned off and each narrow input
  widened exactly (bfloat16 -> float32), from the family's `DIAGNOSIS[op](case)` in
  `strategies/<family>.py` ("passes when soft_cap is off; fails with q float32 too").

A variation whose call raises (e.g. a dtype the backend does not claim) is "n/a" and tells nothing; a
crash stops the diagnosis (a restart per variation would cost more than it tells).
"""
from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from kvconform import reference
from kvconform.backends.base import OPS

from .case import Case
from .worker import BackendCrash, BackendError, BackendProtocolError, exception_line


def diagnose(kvc, kind: tuple) -> dict | None:
    """{"summary": one line, "variations": [{"name", "outcome", "detail"}]} or None (nothing to vary)."""
    if kind[0] == "poison":
        return _diagnose_poison(kvc, kind[1], kind[2])
    if kind[0] == "differential":
        return _diagnose_differential(kvc, kind[1])
    if kind[0] == "history":
        return _diagnose_history(kvc, kind[1])
    return None


def _diagnose_history(kvc, case: Case) -> dict:
    """A history failure whose case also fails right after an identical call is a plain error of the
    backend (the calls before it do not matter): say so, with the differential variations."""
    history = {"summary": "the same inputs give another result depending on the calls before them "
                          "(state kept between calls, or a cache keyed by shape or address)", "variations": []}
    try:
        expected = kvc.reference(case)
    except Exception:
        return history
    _run(kvc, case, expected)                     # the call before the next one is this very case
    outcome, detail = _run(kvc, case, expected)
    if outcome == "n/a":                          # it raises: an error of the backend, not its history
        return {"summary": f"not call history: the same case raises right after an identical call ({detail})",
                "variations": [{"name": "same case called twice", "outcome": outcome, "detail": detail}]}
    if outcome != "fail":
        return history
    inner = _diagnose_differential(kvc, case) or {"summary": "", "variations": []}
    summary = ("not call history: fails against the reference even right after an identical call"
               + (f"; {inner['summary']}" if inner["summary"] else ""))
    return {"summary": summary,
            "variations": [{"name": "same case called twice", "outcome": outcome, "detail": detail}]
            + inner["variations"]}


def region_phrase(case: Case, name: str) -> str:
    """'V slots past kv_len in the last used page (v_tail) hold NaN'."""
    region = next(r for r in case.poison if r.name == name)
    value = region.value
    if value is None:
        dt = np.asarray(case.inputs[region.input]).dtype
        held = "-128" if dt == np.int8 else "NaN"
    elif isinstance(value, float) and not np.isfinite(value):
        held = repr(float(value))
    else:
        held = f"{value!r} (out of range)"
    return f"{region.what or name} ({name}) hold {held}"


def _diagnose_poison(kvc, case: Case, clean_actual: Any) -> dict:
    from .harness import poison_expectation
    from .harness import compare_outputs
    names = case.poison_names()
    variations = []
    clean_ref = kvc.reference(case)
    # The clean result judged against itself fails only for reasons that have nothing to do with poison
    # (an output narrower than the case requires, a wrong structure): say so instead of blaming a region.
    own = [r for r in compare_outputs(case, clean_actual, clean_actual) if not r.ok]
    if own:
        return {"summary": "fails without any poison too, so not a poison finding: " + own[0].summary()[:200],
                "variations": [{"name": "no poison", "outcome": "fail", "detail": own[0].summary()[:240]}]}
    for name in names:
        variant = case.with_poison([name])
        try:
            expected = poison_expectation(clean_ref, kvc.reference(variant), clean_actual)
        except Exception as exc:   # the reference rejects it: a suite bug, say so rather than guess
            variations.append({"name": f"only {name} poisoned", "outcome": "n/a", "detail": str(exc)[:200]})
            continue
        outcome, detail = _run(kvc, variant, expected)
        variations.append({"name": f"only {name} poisoned", "region": name, "outcome": outcome, "detail": detail})
        if outcome == "crash":
            break
    failing = [v["region"] for v in variations if v["outcome"] in ("fail", "crash")]
    tried = [v for v in variations if v["outcome"] in ("pass", "fail", "crash")]
    if failing and len(failing) < len(tried):
        summary = "fails only when " + "; or when ".join(region_phrase(case, n) for n in failing)
    elif failing:
        summary = "fails whichever don't-care region holds poison: " + ", ".join(failing)
    else:
        summary = ("no region alone makes it fail; only poison in several regions together does ("
                   + ", ".join(names) + ")")
    return {"summary": summary, "variations": variations}


def _diagnose_differential(kvc, case: Case) -> dict | None:
    module = importlib.import_module(f"kvconform.conformance.strategies.{OPS[case.op]}")
    make = getattr(module, "DIAGNOSIS", {}).get(case.op)
    if make is None:
        return None
    variations = []
    for label, variant in make(case):
        try:
            expected = kvc.reference(variant)
        except Exception as exc:
            variations.append({"name": label, "outcome": "n/a", "detail": f"reference: {str(exc)[:160]}"})
            continue
        outcome, detail = _run(kvc, variant, expected)
        variations.append({"name": label, "outcome": outcome, "detail": detail})
        if outcome == "crash":
            break
    if not variations:
        return None
    passing = [v["name"] for v in variations if v["outcome"] == "pass"]
    failing = [v["name"] for v in variations if v["outcome"] in ("fail", "crash")]
    if passing and failing:
        summary = f"passes with {', '.join(passing)}; still fails with {', '.join(failing)}"
    elif passing:
        summary = f"passes with {', '.join(passing)}"
    elif failing:
        summary = f"fails in every variation tried ({', '.join(failing)})"
    else:
        summary = "no variation could be run (" + "; ".join(f"{v['name']}: {v['detail']}" for v in variations) + ")"
    return {"summary": summary, "variations": variations}


def _run(kvc, case: Case, expected: Any) -> tuple[str, str]:
    """Call the backend on `case` directly (no failure recording) and judge it: pass, fail, n/a, crash."""
    from .harness import compare_outputs
    try:
        actual, mutated = kvc.worker.call(case.op, case.inputs, timeout=kvc.call_timeout)
    except BackendError as exc:
        return "n/a", f"backend raised {exc.type_name}: {exception_line(exc.message)[:160]}"
    except BackendProtocolError as exc:
        return "n/a", str(exc)[:200]
    except BackendCrash as exc:
        return "crash", str(exc)[:200]
    if mutated:
        return "fail", "modified its inputs or returned them: " + "; ".join(mutated)[:200]
    try:
        results = compare_outputs(case, expected, actual)
    except Exception as exc:
        return "n/a", f"not comparable: {type(exc).__name__}: {str(exc)[:160]}"
    bad = [r for r in results if not r.ok]
    if not bad:
        worst = max((r.error_ratio for r in results), default=0.0)
        return "pass", f"error/allowed {worst:.3g}"
    return "fail", bad[0].summary()[:240]


def widened(case: Case, names, label: str, to: str = "float32") -> tuple[str, Case] | None:
    """A variation with the float inputs `names` converted exactly to `to` (same values), or None if none
    of them is narrower than `to`."""
    from kvconform.reference import dtypes
    inputs = dict(case.inputs)
    changed = False
    for name in names:
        arr = inputs.get(name)
        if isinstance(arr, np.ndarray) and dtypes.is_float_dtype(arr.dtype) and \
                not dtypes.is_quantized_dtype(arr.dtype) and arr.dtype.itemsize < np.dtype(to).itemsize:
            inputs[name] = arr.astype(to)
            changed = True
    if not changed:
        return None
    params = dict(case.params)
    return label, Case(case.op, inputs, params, case.seed)


def narrowed(case: Case, names, label: str, to: str = "bfloat16") -> tuple[str, Case] | None:
    """A variation with the values of the float inputs `names` rounded to `to` but kept in their own dtype
    (the case's tolerance is unchanged), or None if none of them is wider than `to`. A backend that passes
    it computes those inputs in `to` (e.g. float32 KV silently read as bfloat16)."""
    import ml_dtypes
    from kvconform.reference import dtypes
    narrow = np.dtype(getattr(ml_dtypes, to, None) or to)
    inputs = dict(case.inputs)
    changed = False
    for name in names:
        arr = inputs.get(name)
        if isinstance(arr, np.ndarray) and dtypes.is_float_dtype(arr.dtype) and \
                not dtypes.is_quantized_dtype(arr.dtype) and arr.dtype.itemsize > narrow.itemsize:
            rounded = arr.astype(narrow).astype(arr.dtype)
            changed = changed or not np.array_equal(rounded, arr, equal_nan=True)
            inputs[name] = rounded
    return (label, Case(case.op, inputs, dict(case.params), case.seed)) if changed else None


def without(case: Case, label: str, **replace) -> tuple[str, Case] | None:
    """A variation with some keyword inputs removed (value None) or replaced; None when nothing changes."""
    inputs = dict(case.inputs)
    changed = False
    for key, value in replace.items():
        if key in inputs and inputs[key] is not None:
            changed = True
            if value is None:
                del inputs[key]
            else:
                inputs[key] = value
    return (label, Case(case.op, inputs, dict(case.params), case.seed)) if changed else None


_ = reference
