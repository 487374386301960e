"""Diagnosis variations as data: a failing case restated with one thing changed.

Each builder returns `(label, case)` or None when the change does not apply; a strategy family's
`DIAGNOSIS[op](case)` lists the variations worth trying for its op (inputs widened or narrowed, a
feature turned off, padding rows dropped), and the harness's diagnosis (harness/diagnosis.py) runs them.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes


def widened(case: Case, names, label: str, to: str = "float32") -> tuple[str, Case] | None:
    """A variation with the float inputs `names` converted exactly to `to` (same values), or None if none
    of them is narrower than `to`."""
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


def rows_dropped(case: Case, label: str, names, keep) -> tuple[str, Case] | None:
    """A variation without the padding rows: the leading rows of inputs `names` where `keep` (bool[rows])
    is False are dropped (all of them, if need be: an empty batch is a valid call); None when every row is
    kept (nothing to vary)."""
    keep = np.asarray(keep, bool)
    if keep.all():
        return None
    inputs = dict(case.inputs)
    for name in names:
        value = inputs.get(name)
        if isinstance(value, np.ndarray) and value.shape[:1] == keep.shape:
            inputs[name] = np.ascontiguousarray(value[keep])
    return label, Case(case.op, inputs, dict(case.params), case.seed)
