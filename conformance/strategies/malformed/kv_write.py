"""Malformed inputs of `write_kv` (spec/paged_attention.md PA-42, PA-44, PA-46): each rule breaks one
precondition of a valid case drawn by `strategies.paged_attention.write_kv_cases` (a token moved to an
out-of-range slot gets finite values, since NaN in a written int8 token is a rule of its own)."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from .. import paged_attention as pa
from ..values import sampled_from
from . import as_int, copied, grown, index, need, rule, set_at
from .paged_attention import (_metadata_float, _needs_quantized, _pages_not_float, _pages_rank, _scale_invalid,
                              _scale_missing, _scale_on_float_pages, _v_pages_shape)

VARIANTS = {"write_kv": pa.WRITE_VARIANTS}
_WRITE = {v.name: v for v in pa.WRITE_VARIANTS}


def valid(op: str, claims: OpClaims, variant):
    return pa.write_kv_cases(claims, variant)


# --- the rules ---------------------------------------------------------------

def _finite_tokens(x: dict, rows) -> dict:
    """k and v with the given token rows set to 0.5 (a skipped token's rows hold NaN poison, and NaN in
    a written int8 token is a rule of its own)."""
    out = {}
    for name in ("k", "v"):
        arr = copied(x, name)
        arr[list(rows)] = 0.5
        out[name] = arr
    return out


def _appended(x: dict, slots) -> dict:
    """`len(slots)` more tokens written at `slots`, with finite values."""
    extra = len(slots)
    out = {"slot_mapping": np.concatenate([x["slot_mapping"], np.asarray(slots, x["slot_mapping"].dtype)])}
    for name in ("k", "v"):
        arr = x[name]
        out[name] = np.concatenate([arr, np.full((extra,) + arr.shape[1:], 0.5, arr.dtype)])
    return out


def _slot_out_of_range(draw, x, claims):
    n = x["slot_mapping"].shape[0]
    need(n >= 1)
    t = index(draw, n)
    capacity = x["k_pages"].shape[0] * x["k_pages"].shape[1]
    return dict(set_at(x, "slot_mapping", t, capacity + draw(st.integers(0, 3))), **_finite_tokens(x, [t]))


def _duplicate_slot(draw, x, claims):
    slots = x["slot_mapping"]
    written = np.flatnonzero(slots >= 0)
    if written.size:      # one more token on a slot already written
        return _appended(x, [int(slots[draw(sampled_from(written))])])
    capacity = x["k_pages"].shape[0] * x["k_pages"].shape[1]
    s = draw(st.integers(0, capacity - 1))
    return _appended(x, [s, s])


def _k_not_float(draw, x, claims):
    return {"k": as_int(x["k"])}


def _slot_mapping_rank(draw, x, claims):
    return {"slot_mapping": copied(x, "slot_mapping")[:, None]}


def _token_shape(name: str):
    """k (or v) off by one on an axis: fewer rows than slot_mapping entries (more rows are padding and
    valid, PA-50; for v, more rows than k also breaks PA-50's "padded together"), or a head or dim axis
    grown."""
    def corrupt(draw, x, claims):
        axis = draw(sampled_from((0, 1, 2)))
        if axis:
            return {name: grown(x[name], axis)}
        need(x["slot_mapping"].shape[0] >= 1)
        return {name: x[name][:x["slot_mapping"].shape[0] - 1]}
    return corrupt


def _v_rows_not_k_rows(draw, x, claims):
    """k padded by 1..3 rows past slot_mapping, v by one more or one fewer: N_k differs (PA-50)."""
    extra = draw(st.integers(1, 3))
    k = grown(x["k"], 0, extra)
    v = grown(x["v"], 0, extra + draw(sampled_from((1, -1))))
    return {"k": k, "v": v}


def _write_pages_rank(draw, x, claims):
    return _pages_rank(draw, x, claims)


def _nan_into_int8(draw, x, claims):
    written = np.flatnonzero(x["slot_mapping"] >= 0)
    need(written.size)
    name = draw(sampled_from(("k", "v")))
    arr = copied(x, name)
    arr[int(draw(sampled_from(written))), index(draw, arr.shape[1]), index(draw, arr.shape[2])] = np.nan
    return {name: arr}, name


def _needs_int8(claims: OpClaims):
    return None if "int8" in (claims.kv_dtypes or ()) else "int8 pages are not claimed"


def _int8_only(claims: OpClaims) -> OpClaims:
    return dataclasses.replace(claims, kv_dtypes=("int8",))


WRITE_RULES = (
    rule("k_not_float", ("PA-46", "PA-26"), "k", "k must have a floating dtype", _k_not_float),
    rule("pages_not_float", ("PA-46", "PA-26"), "k_pages", "k_pages must have a floating dtype or int8",
         _pages_not_float),
    rule("slot_mapping_not_integer", ("PA-46",), "slot_mapping", "slot_mapping must have an integer dtype",
         _metadata_float("slot_mapping")),
    rule("pages_rank", ("PA-46", "PA-40"), "k_pages", "k_pages must have rank 4 [P, page_size, Hkv, D]",
         _write_pages_rank),
    rule("v_pages_shape", ("PA-46", "PA-40"), "v_pages", "v_pages must have the shape of k_pages",
         _v_pages_shape),
    rule("slot_mapping_rank", ("PA-46", "PA-40"), "slot_mapping", "slot_mapping must have rank 1 [N]",
         _slot_mapping_rank),
    rule("k_shape", ("PA-46", "PA-40", "PA-50"), "k",
         "k must have shape [N_k, Hkv, D], N_k >= N, matching the pools and slot_mapping", _token_shape("k")),
    rule("v_shape", ("PA-46", "PA-40", "PA-50"), "v",
         "v must have shape [N_k, Hkv, D], N_k >= N, matching the pools and slot_mapping", _token_shape("v")),
    rule("v_rows_not_k_rows", ("PA-50",), "v", "k and v carry the same padding rows (the same N_k)",
         _v_rows_not_k_rows),
    rule("slot_out_of_range", ("PA-42", "PA-46"), "slot_mapping", "non-negative slots must be < P * page_size",
         _slot_out_of_range),
    rule("duplicate_slot", ("PA-42", "PA-46"), "slot_mapping", "non-negative slots must be pairwise distinct",
         _duplicate_slot),
    rule("scale_missing", ("PA-44", "PA-46"), ("k_scale", "v_scale"),
         "k_scale and v_scale are required for quantized pages", _scale_missing, variant=_WRITE["quantized_kv"]),
    rule("scale_on_float_pages", ("PA-44", "PA-46"), ("k_scale", "v_scale"),
         "k_scale and v_scale must be None for unquantized pages", _scale_on_float_pages,
         features=("quantized_kv",), requires=_needs_quantized),
    rule("scale_invalid", ("PA-44", "PA-46"), ("k_scale", "v_scale"),
         "k_scale and v_scale must be finite and > 0 as float32", _scale_invalid, variant=_WRITE["quantized_kv"]),
    rule("nan_into_int8", ("PA-44",), ("k", "v"), "a written token of an int8 pool must not hold NaN",
         _nan_into_int8, variant=_WRITE["quantized_kv"], requires=_needs_int8, narrow=_int8_only),
)

RULES = {"write_kv": WRITE_RULES}
