"""Constraint claims: what a real kernel cannot do, stated in `OpClaims.limits`, honoured by every draw.

A kernel library rarely takes every shape: a decode kernel takes one query row per sequence, a kernel
tiles only some KV-head counts, needs `head_dim % 128 == 0`, a fixed page size, or pairs bfloat16
activations only with a bfloat16 or fp8 cache. Such limits are claims (`backends/base.py:LIMITS`), and
every strategy draws inside them, so an outside backend gets no failure for a case its kernel never
promised to take (and no padding trick in its adapter is needed).

A size constraint is one of
    3                              an upper bound (max_*: max_kv_len, max_num_seqs, max_pages)
    {"values": [1, 2, 4]}          a set of allowed values
    {"multiple_of": 128}           multiples (with an optional "max")
    {"min": 2, "max": 8}           a range

Claims are checked as data when a backend is loaded (backends/base.py: `claims_problems`, with
`size_constraint_problem` for this grammar and `LIMIT_KINDS` for the limits that are not size constraints):
a malformed constraint (`"sixteen"`, `{"values": 1}`, a misspelled key `{"value": [1]}`) is a claims error
of the backend, reported before any test runs, never an engine error charged to its kernel.

Names (per op where they make sense; LIMITS lists which op reads which):
    q_len           query rows of a counted sequence ({"values": [1]}: decode-only; {"max": k}: speculative)
    sliding_window  the windows drawn ({"min": 128}: a kernel with a minimum window; {"values": [4096]})
    rope_dim        MLA's RoPE dim d_r ({"values": [64]}: DeepSeek's qk_rope_head_dim)
    num_q_heads     Hq;  num_kv_heads: Hkv;  group_size: Hq // Hkv
    head_dim        D (with `head_dims` as the plain set);  page_size: likewise with `page_sizes`
    max_kv_len      keys of one sequence;  max_num_seqs: sequences of a call;  max_pages: pool size
    dtype_pairs     [[activation dtype, KV/pool dtype], ...]: the pairs a kernel takes together
    num_shards      devices the KV heads are split over with `head_sharding` (PA-49)
    recurrent       channels, width (conv); num_heads, head_dim (P, Mamba1: D), state_size (N), num_groups
                    (G); num_qk_heads (Hk), key_dim (K), value_dim (V); seq_len (each packed sequence's
                    length: {"min": 1} = no empty sequences)
    page tables     seq_len (each counted sequence's kv_len, spec/metadata.md MD-24: {"min": 1} = no empty
                    sequences) for block_table_to_csr, csr_to_block_table and the slot mappings

A claim may widen the draws as well as narrow them: when no size a column would draw satisfies the
constraint, its own values (or its smallest multiples, or its minimum) are drawn instead, so a kernel
that takes only state_size 128 gets every column at N = 128.

Convention claims (backends/vocabulary.py CONVENTIONS, spec/recurrent.md RS-36 … RS-40, RS-44) are limits too,
with fixed values: padding_outputs "unspecified" (compare-only: padding rows' outputs are not compared),
dt_softplus "always", required_inputs ["D", "dt_bias"], equal_key_value_dims true, decays "positive"
(RWKV6's decays drawn > 0, strategies/recurrent.py `positive_decays`). `outside` judges a
case against them through its params (dt_softplus, optional_inputs, key_dim / value_dim).
"""
from __future__ import annotations

import pytest

from kvconform.backends.base import CONVENTIONS, OpClaims


def admits(constraint, value: int) -> bool:
    """Does `value` satisfy one size constraint (None: anything)?"""
    if constraint is None:
        return True
    if isinstance(constraint, bool) or not isinstance(constraint, (int, dict)):
        raise ValueError(f"a size constraint is an int (upper bound) or a dict with values / multiple_of / "
                         f"min / max, got {constraint!r}")
    if isinstance(constraint, int):
        return value <= constraint
    if "values" in constraint and value not in constraint["values"]:
        return False
    if "multiple_of" in constraint and value % int(constraint["multiple_of"]):
        return False
    if "min" in constraint and value < int(constraint["min"]):
        return False
    return not ("max" in constraint and value > int(constraint["max"]))


def allowed(claims: OpClaims, name: str, candidates, what: str = "", *, skip: bool = True) -> tuple[int, ...]:
    """The candidates a constraint admits, in order, plus the constraint's own values and the smallest
    multiples it names when none of the candidates qualifies (so a D % 128 == 0 kernel still gets cases).
    Skips the test as `unsupported` when nothing is left (and `skip`)."""
    constraint = claims.limits.get(name)
    chosen = [c for c in candidates if admits(constraint, c)]
    if not chosen and isinstance(constraint, dict):
        extra = list(constraint.get("values", ()))
        if "multiple_of" in constraint:
            m = int(constraint["multiple_of"])
            extra += [m, 2 * m]
        if "min" in constraint:
            extra += [int(constraint["min"]), int(constraint["min"]) + 1]
        chosen = [c for c in extra if admits(constraint, c)]
    if not chosen and skip:
        pytest.skip(f"unsupported: no {what or name} within the claimed limit {name}={constraint!r}")
    return tuple(dict.fromkeys(chosen))


def listed(claims: OpClaims, name: str) -> tuple[int, ...]:
    """The values a `{"values": [...]}` constraint lists (empty for any other form)."""
    constraint = claims.limits.get(name)
    return tuple(constraint.get("values", ())) if isinstance(constraint, dict) else ()


def reach(claims: OpClaims, name: str, candidates, what: str = "") -> tuple[int, ...]:
    """What a size-reach column draws for `name`: its candidates the constraint admits, then the values the
    constraint lists beyond them. So claims widen the reach as well as narrow it: a kernel that lists
    `{"page_size": {"values": [16, 544]}}` or `{"group_size": {"values": [1, 2, 4, 8, 32]}}` gets 544 and
    32 drawn there, a `{"multiple_of": 16}` kernel the candidates that are multiples of 16, and a claimed
    set (OpClaims.page_sizes, head_dims) is drawn as listed, large values included. Skips as `unsupported`
    when nothing is left (as `allowed`)."""
    chosen = allowed(claims, name, candidates, what, skip=False)
    chosen = tuple(dict.fromkeys(chosen + tuple(v for v in listed(claims, name) if admits(claims.limits.get(name), v))))
    if not chosen:
        pytest.skip(f"unsupported: no {what or name} within the claimed limit {name}={claims.limits.get(name)!r}")
    return chosen


def claimed(options, claimed_options, what: str, variant) -> tuple:
    """The `options` a features-matrix column (`variant`, any family's Variant) may draw that the backend
    claims (`claimed_options`: a claims list, or None); none claimed: the column is `unsupported` (skip)."""
    chosen = tuple(o for o in options if o in (claimed_options or ()))
    if not chosen:
        pytest.skip(f"unsupported: no claimed {what} for variant {variant.name} "
                    f"(claims: {list(claimed_options or [])})")
    return chosen


def upper(claims: OpClaims, name: str, default: int) -> int:
    """min(default, the claimed upper bound of `name`)."""
    constraint = claims.limits.get(name)
    if constraint is None:
        return default
    bound = constraint if isinstance(constraint, int) else constraint.get("max", default)
    return min(default, int(bound))


def dtype_pairs(claims: OpClaims, acts, kvs, what: str) -> list[tuple[str, str]]:
    """(activation, KV) dtype pairs within the claims, the `dtype_pairs` limit included."""
    pairs = [(a, k) for a in acts if a in (claims.dtypes or ()) for k in kvs if k in (claims.kv_dtypes or ())]
    limit = claims.limits.get("dtype_pairs")
    if limit is not None:
        ok = {tuple(p) for p in limit}
        pairs = [p for p in pairs if p in ok]
    if not pairs:
        pytest.skip(f"unsupported: no claimed (activation, KV) dtype pair for {what} "
                    f"(dtypes {list(claims.dtypes or ())}, kv_dtypes {list(claims.kv_dtypes or ())}, "
                    f"dtype_pairs {limit!r})")
    return pairs


#: case.params keys -> the claim each is judged by (the space `outside` takes)
_PARAM_CLAIMS = {"dtype": "dtype", "kv_dtype": "kv_dtype", "page_size": "page_size", "head_dim": "head_dim",
                 "hq": "num_q_heads", "hkv": "num_kv_heads", "q_lens": "q_len", "kv_lens": "kv_len",
                 "num_seqs": "num_seqs", "num_pages": "num_pages"}
# recurrent params are named as their claims (strategies/recurrent.py); `lengths` are the sequence lengths
_PARAM_CLAIMS.update({k: k for k in ("channels", "width", "num_heads", "state_size", "num_groups", "num_qk_heads",
                                     "key_dim", "value_dim", "dt_softplus", "optional_inputs")})
_PARAM_CLAIMS.update(lengths="seq_len", seq_len="seq_len")
_PARAM_CLAIMS.update(sliding_window="sliding_window", rope_dim="rope_dim")
#: space names of the size limits spelled differently in LIMITS
_LIMIT_NAMES = {"kv_len": "max_kv_len", "num_seqs": "max_num_seqs", "num_pages": "max_pages"}


def case_space(params: dict) -> dict:
    """The dimensions of a drawn case (its `params`) under the names `outside` judges them by."""
    space = {_PARAM_CLAIMS[k]: v for k, v in params.items() if k in _PARAM_CLAIMS}
    if isinstance(params.get("hq"), int) and isinstance(params.get("hkv"), int) and params["hkv"]:
        space["group_size"] = params["hq"] // params["hkv"]
    return space


def outside(claims: OpClaims, space: dict) -> list[str]:
    """Why the dimensions `space` lie outside `claims`, in words (empty: inside).

    space: dtype, kv_dtype, page_size, head_dim (judged against the claimed sets, None = any), layout
    (one of the claimed layouts) and any size constraint of the module docstring (q_len, num_q_heads,
    num_kv_heads, group_size, kv_len, num_seqs, num_pages); a list value must satisfy it element by element."""
    sets = {"dtype": claims.dtypes, "kv_dtype": claims.kv_dtypes, "page_size": claims.page_sizes,
            "head_dim": claims.head_dims, "layout": claims.layouts}
    reasons = _convention_reasons(claims, space)
    for key, value in space.items():
        if key in CONVENTIONS:
            continue
        allowed_values = sets.get(key)
        if allowed_values is not None and value not in allowed_values:
            reasons.append(f"does not claim {key}={value}")
            continue
        limit = _LIMIT_NAMES.get(key, key)
        constraint = claims.limits.get(limit)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if constraint is not None and values and isinstance(values[0], int) \
                and not all(admits(constraint, v) for v in values):
            reasons.append(f"{key}={value} is outside the claimed limit {limit}={constraint!r}")
    pairs = claims.limits.get("dtype_pairs")
    if pairs is not None and "dtype" in space and "kv_dtype" in space \
            and [space["dtype"], space["kv_dtype"]] not in [list(p) for p in pairs]:
        reasons.append(f"({space['dtype']}, {space['kv_dtype']}) is not a claimed dtype pair")
    return reasons



def _convention_reasons(claims: OpClaims, space: dict) -> list[str]:
    """Why `space` lies outside the claimed conventions (RS-37, RS-38, RS-40; padding_outputs only narrows
    the comparison, never the cases)."""
    limits = claims.limits
    reasons = []
    if limits.get("dt_softplus") == "always" and space.get("dt_softplus") is False:
        reasons.append("dt_softplus=False is outside the claimed convention dt_softplus='always'")
    required = set(limits.get("required_inputs") or ())
    if required and "optional_inputs" in space and not required <= set(space["optional_inputs"]):
        missing = sorted(required - set(space["optional_inputs"]))
        reasons.append(f"optional inputs {missing} not given, outside the claimed required_inputs")
    if limits.get("equal_key_value_dims") is True and "key_dim" in space and "value_dim" in space \
            and space["key_dim"] != space["value_dim"]:
        reasons.append(f"key_dim {space['key_dim']} != value_dim {space['value_dim']}, outside the claimed "
                       f"equal_key_value_dims")
    return reasons
