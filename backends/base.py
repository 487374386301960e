"""The backend protocol: what a kernel library implements to be checked by kvconform.

A backend is an object with a name, a version, serialisable capability claims and one method per op.
Every op method has the same name and signature as the reference function in `kvconform.reference`
(see OPS below), takes NumPy arrays in the canonical layout of the spec, and returns arrays in the same
structure as the reference returns: an array, or a tuple of arrays in the reference's field order (a
NamedTuple with any field names, or a plain tuple). An array is a NumPy array or anything the engine
converts exactly (conformance/protocol.py): a torch tensor of any dtype on any device, a jax array, an
object with `__array__`, `__array_interface__` or `__dlpack__`. The backend converts to its own layout and
device internally (`kvconform.adapters`: exact dtype conversion, the serving stacks' cache layouts and
page tables). Ops are pure: a backend must not modify its input arrays nor return one of them or a view of
one (`kvconform.adapters.to_torch` copies, so in-place kernels never touch the caller's arrays).

Floating outputs may be returned in any float dtype at least as precise as the case requires: the
tolerance comes from the case's inputs (spec/numerics.md NU-3), never from the returned dtype, and an
output narrower than that fails. Integer outputs and stored data are compared exactly.

A case outside what a kernel can do is stated up front in the claims (`OpClaims`); a backend may also
decline one call by raising `Unsupported` (also `kvconform.Unsupported`) with its reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

#: op name -> spec family (the spec file and the clause prefix). Method names on a backend.
OPS: dict[str, str] = {
    "ragged_paged_attention": "paged_attention",
    "write_kv": "paged_attention",
    "rotate_keys": "rotation",
    "shift_keys": "rotation",
    "accumulate_scores": "eviction",
    "plan_eviction": "eviction",
    "causal_conv1d_update": "recurrent",
    "selective_state_update": "recurrent",
    "ssd_chunked_scan": "recurrent",
    "rwkv6_wkv": "recurrent",
    "block_table_to_csr": "metadata",
    "csr_to_block_table": "metadata",
    "append_slot_mapping": "metadata",
    "arena_layout": "metadata",
    "slot_mapping_from_arena": "metadata",
    "page_table_step": "metadata",
    "ragged_paged_attention_csr": "metadata",
    "gated_delta_rule_update": "recurrent",
    "gated_delta_rule_chunked": "recurrent",
    "recurrent_store_step": "recurrent",
    "mla_paged_attention": "mla",
}


#: The claims vocabulary: every optional feature and layout name an op's claims may use, each one consulted
#: by the op's strategies (conformance/strategies/<family>.py). A name outside it is an error
#: (`claims_problems`), never a silently "unsupported" column.
FEATURES: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores", "gqa",
                               "per_head_scales", "per_token_scales", "head_sharding"),
    "write_kv": ("quantized_kv", "per_head_scales", "per_token_scales"),
    "rotate_keys": ("per_token_deltas", "per_block_deltas", "partial_rotary"),
    "shift_keys": ("per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas"),
    "accumulate_scores": (),
    "plan_eviction": (),
    "causal_conv1d_update": ("state_indices", "padding_slots", "multi_token", "bias", "silu"),
    "selective_state_update": ("state_indices", "padding_slots", "mamba2", "dt_bias", "dt_softplus", "skip_d",
                               "z_gate", "grouped_bc"),
    "ssd_chunked_scan": ("state_indices", "padding_slots", "initial_states", "snapshots", "dt_bias",
                         "dt_softplus", "skip_d", "z_gate", "grouped_bc"),
    "rwkv6_wkv": ("state_indices", "padding_slots", "initial_states"),
    "gated_delta_rule_update": ("state_indices", "padding_slots", "qk_l2norm"),
    "gated_delta_rule_chunked": ("state_indices", "padding_slots", "initial_states", "qk_l2norm"),
    "recurrent_store_step": (),     # one column: every command is drawn (spec/recurrent.md RS-21 .. RS-27)
    "mla_paged_attention": ("sliding_window", "soft_cap", "sinks"),     # spec/mla.md ML-6
}
# MD-23: attention over CSR metadata draws the block-table attention columns (per-token scores and head
# sharding aside)
FEATURES["ragged_paged_attention_csr"] = tuple(f for f in FEATURES["ragged_paged_attention"]
                                               if f not in ("return_scores", "head_sharding"))

LAYOUTS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("combined", "flat"),    # the cache handed in that layout (PA-39)
    "rotate_keys": ("half", "interleaved"),
    "shift_keys": ("half", "interleaved"),
}
#: `OpClaims.limits` keys the strategies read (constraint claims, conformance/strategies/constraints.py)
_KV_SHAPE = ("num_kv_heads", "head_dim", "page_size", "max_pages")
_SSM_SIZES = ("num_heads", "head_dim", "state_size", "num_groups")       # H, P (Mamba1: D), N, G
_SSM_CONVENTIONS = ("padding_outputs", "dt_softplus", "required_inputs")
_LINEAR_SIZES = ("num_qk_heads", "num_heads", "key_dim", "value_dim")    # Hk (GDN), H, K, V
LIMITS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("split_kv_min_keys", "max_head_dim", "q_len", "num_q_heads", "group_size",
                               "max_kv_len", "max_num_seqs", "dtype_pairs", "num_shards") + _KV_SHAPE,
    "write_kv": _KV_SHAPE + ("dtype_pairs",),
    "ragged_paged_attention_csr": ("split_kv_min_keys", "max_head_dim", "q_len", "num_q_heads", "group_size",
                                   "max_kv_len", "max_num_seqs", "dtype_pairs") + _KV_SHAPE,
    "rotate_keys": _KV_SHAPE,
    "shift_keys": _KV_SHAPE,
    # recurrent sizes (size constraints) and conventions (CONVENTIONS below); spec/recurrent.md section 6
    "causal_conv1d_update": ("min_width", "max_num_seqs", "width", "channels", "padding_outputs"),
    "selective_state_update": ("max_num_seqs",) + _SSM_SIZES + _SSM_CONVENTIONS,
    "ssd_chunked_scan": ("max_num_seqs", "seq_len") + _SSM_SIZES + _SSM_CONVENTIONS,
    "rwkv6_wkv": ("max_num_seqs", "seq_len") + _LINEAR_SIZES[1:] + ("equal_key_value_dims", "padding_outputs",
                                                                     "decays"),
    "gated_delta_rule_update": ("max_num_seqs",) + _LINEAR_SIZES + ("equal_key_value_dims", "padding_outputs"),
    "gated_delta_rule_chunked": ("max_num_seqs", "seq_len") + _LINEAR_SIZES
    + ("equal_key_value_dims", "padding_outputs"),
    # head_dims claims the latent dims d_c (spec/mla.md ML-1); one KV head, so no KV-head limits
    "mla_paged_attention": ("q_len", "num_q_heads", "max_kv_len", "max_num_seqs", "page_size", "max_pages",
                            "dtype_pairs"),
}
# Claims real kernels needed (spec/paged_attention.md PA-54, spec/mla.md ML-12): the windows a kernel takes
# (a minimum sliding window: {"min": W}), MLA's RoPE dim d_r ({"values": [64]})
for _op in ("ragged_paged_attention", "ragged_paged_attention_csr", "mla_paged_attention"):
    LIMITS[_op] += ("sliding_window",)
LIMITS["mla_paged_attention"] += ("rope_dim",)
# no empty sequences for the page-table ops (spec/metadata.md MD-24): {"seq_len": {"min": 1}}
for _op in ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "slot_mapping_from_arena"):
    LIMITS[_op] = LIMITS.get(_op, ()) + ("seq_len",)


#: The `OpClaims` set fields each op's strategies read (dtypes, kv_dtypes, page_sizes, head_dims): a field
#: an op never reads means nothing for it, so `kvconform list` leaves it out (features, layouts and limits
#: are shown where FEATURES, LAYOUTS, LIMITS register names for the op). Found by recording which fields
#: the draws of every suite test read in a quick-profile run of all ops (2026-11-26), then by reading the
#: strategies: rotate_keys' dtypes are its LUT dtype, accumulate_scores' its score dtype, the recurrent
#: ops' kv_dtypes their state pools' dtypes, mla's head_dims its latent dims d_c (spec/mla.md ML-1).
_ATTENTION_FIELDS = ("dtypes", "kv_dtypes", "page_sizes", "head_dims")
_RECURRENT_FIELDS = ("dtypes", "kv_dtypes")
CLAIM_FIELDS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": _ATTENTION_FIELDS,
    "ragged_paged_attention_csr": _ATTENTION_FIELDS,
    "write_kv": _ATTENTION_FIELDS,
    "rotate_keys": _ATTENTION_FIELDS,
    "shift_keys": ("kv_dtypes", "page_sizes", "head_dims"),
    "accumulate_scores": ("dtypes",),
    "plan_eviction": ("page_sizes",),
    "causal_conv1d_update": _RECURRENT_FIELDS,
    "selective_state_update": _RECURRENT_FIELDS,
    "ssd_chunked_scan": _RECURRENT_FIELDS,
    "rwkv6_wkv": _RECURRENT_FIELDS,
    "gated_delta_rule_update": _RECURRENT_FIELDS,
    "gated_delta_rule_chunked": _RECURRENT_FIELDS,
    "recurrent_store_step": ("kv_dtypes",),
    "block_table_to_csr": ("page_sizes",),
    "csr_to_block_table": ("page_sizes",),
    "append_slot_mapping": ("page_sizes",),
    "slot_mapping_from_arena": ("page_sizes",),
    "page_table_step": ("page_sizes",),
    "arena_layout": (),
    "mla_paged_attention": _ATTENTION_FIELDS,
}

#: Convention claims: limits that are not sizes but a choice a real kernel made that the spec leaves open
#: (spec/recurrent.md RS-36 … RS-40), with the values each may take. A convention narrows what is drawn or
#: compared; it never loosens a tolerance.
CONVENTIONS: dict[str, tuple[Any, ...]] = {
    "padding_outputs": ("unspecified",),            # RS-36: padding rows' outputs are not compared
    "dt_softplus": ("always",),                     # RS-37: softplus applied to dt on every call
    "required_inputs": ("D", "dt_bias"),            # RS-38: a list of these, always passed
    "equal_key_value_dims": (True,),                # RS-40: K == V
    "decays": ("positive",),                        # RS-44: decays drawn > 0 (log-space kernels)
}


def convention_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a valid claim of the convention `name` (None: valid, or not a convention)."""
    allowed = CONVENTIONS.get(name)
    if allowed is None:
        return None
    if name == "required_inputs":
        if isinstance(value, (list, tuple)) and value and all(v in allowed for v in value):
            return None
        return f"limit required_inputs must be a non-empty list of {list(allowed)}, got {value!r}"
    if any(value == a and type(value) is type(a) for a in allowed):
        return None
    return f"limit {name} must be one of {list(allowed)}, got {value!r}"


#: Limits whose value is not a size constraint (strategies/constraints.py): "count", a plain integer >= 1
#: (a threshold or a bound the strategies read as is); "dtype_pairs", a list of [activation, KV] dtype-name
#: pairs. Every other registered limit is a size constraint: an int >= 1 (upper bound) or a dict with the
#: keys of SIZE_CONSTRAINT_KEYS. Conventions (CONVENTIONS) are judged by convention_problem. A new limit of
#: another kind must be added here, or its values are judged as a size constraint.
LIMIT_KINDS: dict[str, str] = {"split_kv_min_keys": "count", "max_head_dim": "count", "min_width": "count",
                               "dtype_pairs": "dtype_pairs"}
#: the keys of a dict size constraint: {"values": [int, ...]}, {"multiple_of": int}, {"min": int, "max": int}
SIZE_CONSTRAINT_KEYS = ("values", "multiple_of", "min", "max")
#: OpClaims fields holding names, and those holding sizes (None = any)
_NAME_FIELDS = ("dtypes", "kv_dtypes", "layouts", "features")
_SIZE_FIELDS = ("page_sizes", "head_dims")


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


class Unsupported(Exception):
    """Raised by a backend op for a case outside its kernel ("head_dim 96: tiles need D % 128 == 0").

    For a case outside the backend's claims (e.g. with `--run-unclaimed`) the test is reported
    `unsupported` with this reason, never as a pass. For a case inside its claims it is a failure: the
    backend claims more than it supports (state the limit in `OpClaims.limits` instead)."""


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


@dataclass(frozen=True)
class Availability:
    """Whether the backend can run on this machine, and on what (shown by `kvconform list`)."""
    ok: bool
    reason: str = ""     # why not, e.g. "torch is not installed"
    device: str = ""     # e.g. "cpu (Triton interpreter)", "NVIDIA H100", "cpu (Pallas TPU interpret mode)"
    native: bool = False  # runs natively on an accelerator (GPU/TPU), not in an interpreter or on the CPU:
                          # the `scale` profile (conformance/profiles.py) runs only such backends


class Backend:
    """Base class for backends. Subclasses set `name`/`version`, override `capabilities` and
    `availability`, and define a method for each op they claim (same signature as the reference)."""

    name: str = "unnamed"
    version: str = "0"

    def availability(self) -> Availability:
        return Availability(ok=True, device="cpu")

    def capabilities(self) -> dict[str, OpClaims]:
        """op name -> claims; ops not listed are unsupported."""
        return {}

    def describe(self) -> dict:
        """Serialisable summary for reports and `kvconform list` (checked by `description_problems`).
        Raises TypeError, in words, for an availability() or capabilities() of the wrong type."""
        avail = self.availability()
        if not isinstance(avail, Availability):
            raise TypeError(f"availability() must return kvconform.backends.base.Availability, got "
                            f"{type(avail).__name__}")
        capabilities = self.capabilities()
        if not isinstance(capabilities, Mapping):
            raise TypeError(f"capabilities() must return a dict of op name -> OpClaims, got "
                            f"{type(capabilities).__name__}")
        wrong = [f"{op!r} -> {type(c).__name__}" for op, c in capabilities.items() if not isinstance(c, OpClaims)]
        if wrong:
            raise TypeError(f"capabilities() must map op names to OpClaims, got {', '.join(wrong)}")
        return {
            "name": self.name,
            "version": self.version,
            "available": avail.ok,
            "reason": avail.reason,
            "device": avail.device,
            "native": avail.native,
            "capabilities": {op: claims.to_json() for op, claims in capabilities.items()},
        }
