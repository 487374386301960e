"""JSON that every parser reads: non-finite numbers written as strings.

Python's `json.dumps` writes float infinity and NaN as the bare words `Infinity` and `NaN`, which are not
JSON (RFC 8259 section 6): a browser's `JSON.parse`, `jq` and most CI tools reject the whole file. What a
run writes (report.json, a backend's description) may hold such numbers from a backend (a claim of
`float("inf")`, an error measure) or from the records, so `dumps` writes them as the strings "inf",
"-inf" and "nan", the form the records already use for an error ratio with no allowed error
(report/build.py), and refuses any it missed (`allow_nan=False`).
"""
from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (in dicts, lists, tuples, at any depth) as "inf", "-inf" or
    "nan"; other values unchanged."""
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs) -> str:
    """`json.dumps` of `finite(value)`, never with a bare Infinity or NaN (kwargs: indent, default, ...)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
