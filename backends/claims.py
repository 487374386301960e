"""`OpClaims`, the claims a backend makes for one op, and the checks that turn claims into one-line problems\n(`claims_problems`, `description_problems`) before a run uses them; the vocabulary is vocabulary.py."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .vocabulary import (_NAME_FIELDS, _SIZE_FIELDS, CONVENTIONS, FEATURES, LAYOUTS, LIMIT_KINDS, LIMITS, OPS,
                         SIZE_CONSTRAINT_KEYS, convention_problem)

#: the memory one drawn case may hold, in bytes (spec/numerics.md, "Case size"): a claim whose smallest case
#: is larger cannot be drawn and is a claims problem; the environment variable KVCONFORM_CASE_MEMORY
#: (bytes) sets another budget
CASE_MEMORY_BUDGET = 2 ** 30


def case_memory_budget() -> int:
    """CASE_MEMORY_BUDGET, or KVCONFORM_CASE_MEMORY when it holds an integer number of bytes >= 1."""
    import os
    raw = os.environ.get("KVCONFORM_CASE_MEMORY", "").strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else CASE_MEMORY_BUDGET


def _budget_problem(what: str, smallest: int) -> str | None:
    """Why a claim whose smallest case has one dimension of `smallest` elements cannot be drawn: a float64
    array with that one dimension alone is `smallest * 8` bytes; None within the budget."""
    budget = case_memory_budget()
    if smallest * 8 <= budget:
        return None
    return (f"{what} {smallest}: a case with it cannot be drawn (one float64 row of {smallest} elements is "
            f"{smallest * 8:,} bytes, above the per-case memory budget of {budget:,} bytes; "
            f"KVCONFORM_CASE_MEMORY sets another)")


def dtype_names() -> tuple[str, ...]:
    """The dtype names claims may use: the reference's canonical float and quantized names
    (reference/dtypes.py: "float32", "bfloat16", "float8_e4m3fn", "int8", ...) and NumPy's integer names
    (metadata ops take "int32" / "uint8" arrays)."""
    from kvconform.reference.dtypes import DTYPES
    ints = ("int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    return tuple(DTYPES) + tuple(n for n in ints if n not in DTYPES)


def did_you_mean(name, known) -> str:
    """The end of an unknown-name message: ` (did you mean 'x'?)` naming the closest of `known`, or
    ` (known: ...)` when none is close."""
    import difflib
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(map(str, known)) or 'none'})"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def size_constraint_problem(value) -> str | None:
    """Why `value` is not a size constraint (strategies/constraints.py), in words; None when it is one.
    An int >= 1 is an upper bound; a dict names a set ("values": non-empty list of ints >= 0), multiples
    ("multiple_of": int >= 1) and a range ("min" / "max": ints >= 0, min <= max)."""
    if _is_int(value):
        return None if value >= 1 else f"an upper bound must be >= 1, got {value}"
    if not isinstance(value, Mapping):
        return (f"must be an int (upper bound) or a dict with {', '.join(SIZE_CONSTRAINT_KEYS)}, "
                f"got {type(value).__name__} {value!r}")
    if not value:
        return f"an empty dict constrains nothing: give {', '.join(SIZE_CONSTRAINT_KEYS)}"
    for key in value:
        if key not in SIZE_CONSTRAINT_KEYS:
            return f"unknown constraint key {key!r}{did_you_mean(key, SIZE_CONSTRAINT_KEYS)}"
    values = value.get("values")
    if "values" in value and (not isinstance(values, (list, tuple)) or not values
                              or not all(_is_int(v) and v >= 0 for v in values)):
        return f"'values' must be a non-empty list of integers >= 0, got {values!r}"
    if "multiple_of" in value and not (_is_int(value["multiple_of"]) and value["multiple_of"] >= 1):
        return f"'multiple_of' must be an integer >= 1, got {value['multiple_of']!r}"
    for key in ("min", "max"):
        if key in value and not (_is_int(value[key]) and value[key] >= 0):
            return f"{key!r} must be an integer >= 0, got {value[key]!r}"
    if _is_int(value.get("min")) and _is_int(value.get("max")) and value["min"] > value["max"]:
        return f"'min' {value['min']} is above 'max' {value['max']}"
    return None


def _limit_problem(name: str, value) -> str | None:
    if name in CONVENTIONS:
        return convention_problem(name, value)
    kind = LIMIT_KINDS.get(name, "size")
    if kind == "count":
        return None if _is_int(value) and value >= 1 else f"must be an integer >= 1, got {value!r}"
    if kind == "dtype_pairs":
        known = dtype_names()
        if not isinstance(value, (list, tuple)) or not value:
            return f"must be a non-empty list of [activation dtype, KV dtype] pairs, got {value!r}"
        for pair in value:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                return f"each entry must be an [activation dtype, KV dtype] pair, got {pair!r}"
            for dtype in pair:
                if dtype not in known:
                    return f"unknown dtype {dtype!r}{did_you_mean(dtype, known)}"
        return None
    return size_constraint_problem(value)


def _op_claims_problems(op: str, raw) -> list[str]:
    """Every problem of one op's claims (as OpClaims.to_json writes them), each naming the op."""
    if not isinstance(raw, Mapping):
        return [f"{op}: claims must be OpClaims, got {type(raw).__name__}"]
    fields = [f.name for f in dataclasses.fields(OpClaims)]
    found = [f"{op}: unknown claims field {k!r}{did_you_mean(k, fields)}" for k in raw if k not in fields]
    known_names = {"dtypes": dtype_names(), "kv_dtypes": dtype_names(), "features": FEATURES.get(op, ()),
                   "layouts": LAYOUTS.get(op, ())}
    for field_name in _NAME_FIELDS:
        names = raw.get(field_name) or ()
        kind = field_name[:-1].replace("kv_dtype", "KV dtype")
        if not isinstance(names, (list, tuple)):
            found.append(f"{op}: {field_name} must be a list of names, got {type(names).__name__} {names!r}")
            continue
        for name in names:
            if not isinstance(name, str):
                found.append(f"{op}: {field_name} holds {name!r}, not a name")
            elif name not in known_names[field_name]:
                found.append(f"{op}: unknown {kind} {name!r}{did_you_mean(name, known_names[field_name])}")
    for field_name in _SIZE_FIELDS:
        sizes = raw.get(field_name)
        if sizes is None:
            continue
        if not isinstance(sizes, (list, tuple)) or not sizes:
            found.append(f"{op}: {field_name} must be None (any) or a non-empty list of integers >= 1, "
                         f"got {sizes!r}")
        elif not all(_is_int(v) and v >= 1 for v in sizes):
            bad = ", ".join(repr(v) for v in sizes if not (_is_int(v) and v >= 1))
            found.append(f"{op}: {field_name} must be integers >= 1, got {bad}")
        else:
            problem = _budget_problem(field_name, min(sizes))
            if problem:
                found.append(f"{op}: {problem}")
    limits = raw.get("limits") or {}
    if not isinstance(limits, Mapping):
        found.append(f"{op}: limits must be a dict, got {type(limits).__name__} {limits!r}")
        limits = {}
    for name, value in limits.items():
        if name not in LIMITS.get(op, ()):
            found.append(f"{op}: unknown limit {name!r}{did_you_mean(name, LIMITS.get(op, ()))}")
            continue
        problem = _limit_problem(name, value)
        if problem:
            found.append(f"{op}: limit {name}={value!r}: {problem}")
        elif isinstance(value, Mapping) and LIMIT_KINDS.get(name, "size") == "size":
            smallest = max(value.get("min") or 0, min(value["values"]) if value.get("values") else 0)
            problem = _budget_problem(f"its smallest {name}", smallest)
            if problem:
                found.append(f"{op}: limit {name}={value!r}: {problem}")
    return found


def claims_problems(capabilities: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """{op: [problem in words]} for claims that are not valid data: an unknown op, feature, layout, dtype,
    limit or claims field (each with the closest registered name), a limit whose value breaks its kind
    (LIMIT_KINDS), page sizes or head dims that are not integers >= 1. Empty when every claim is valid.
    `capabilities`: describe()["capabilities"] (OpClaims.to_json per op)."""
    problems: dict[str, list[str]] = {}
    for op, raw in capabilities.items():
        if op not in OPS:
            problems[op] = [f"unknown op {op!r}{did_you_mean(op, OPS)}"]
            continue
        found = _op_claims_problems(op, raw)
        if found:
            problems[op] = found
    return problems


def description_problems(description) -> list[str]:
    """Every reason the description a backend gives of itself (Backend.describe(): name, version,
    available, capabilities) cannot be used to check it, one line each; empty when it is usable."""
    if not isinstance(description, Mapping):
        return [f"describe() must return a dict, got {type(description).__name__}"]
    found = []
    name = description.get("name")
    if not isinstance(name, str) or not name.strip():
        found.append(f"name must be a non-empty str, got {type(name).__name__} {name!r}")
    version = description.get("version")
    if not isinstance(version, str):
        found.append(f"version must be a str, got {type(version).__name__} {version!r}")
    if not isinstance(description.get("available"), bool):
        found.append("availability() must return an Availability (kvconform.backends.base), got "
                     f"available={description.get('available')!r}")
    capabilities = description.get("capabilities")
    if not isinstance(capabilities, Mapping):
        found.append(f"capabilities() must return a dict of op name -> OpClaims, got {type(capabilities).__name__}")
    else:
        found += [p for ps in claims_problems(capabilities).values() for p in ps]
    return found


@dataclass(frozen=True)
class OpClaims:
    """What a backend claims to support for one op. A claimed case that fails is a failure; a case
    outside the claims is reported `unsupported` (and `unclaimed-pass` if it is run and passes).

    dtypes:     dtypes of the floating activations (q, k, x, ...), canonical names ("float32", "bfloat16")
    kv_dtypes:  storage dtypes of caches / state pools ("bfloat16", "float8_e4m3fn", "int8", ...)
    page_sizes: page (block) sizes supported; None = any
    head_dims:  head dims supported; None = any
    layouts:    layout variants ("half", "interleaved", "separate", "combined", "flat", ...)
    features:   optional features ("sliding_window", "soft_cap", "sinks", "quantized_kv",
                "return_scores", "per_token_deltas", "per_block_deltas", "state_indices", ...)
    limits:     constraint claims, registered per op in LIMITS and honoured by every draw
                (conformance/strategies/constraints.py): e.g. {"q_len": {"values": [1]}} (decode-only),
                {"num_kv_heads": {"values": [1, 2, 4]}}, {"head_dim": {"multiple_of": 128}},
                {"max_num_seqs": 64}, {"dtype_pairs": [["bfloat16", "bfloat16"], ["bfloat16", "int8"]]},
                {"num_shards": {"values": [2, 4]}} (devices the KV heads split over, with `head_sharding`)
    """
    dtypes: tuple[str, ...] = ()
    kv_dtypes: tuple[str, ...] = ()
    page_sizes: tuple[int, ...] | None = None
    head_dims: tuple[int, ...] | None = None
    layouts: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    limits: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else (dict(v) if isinstance(v, Mapping) else v))
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "OpClaims":
        """The claims `to_json` wrote (as describe() sends them from the worker)."""
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()})
