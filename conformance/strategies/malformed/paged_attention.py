"""Malformed inputs for spec/paged_attention.md: the preconditions PA-26 .. PA-29, PA-39, PA-48 and PA-49
of `ragged_paged_attention` (write_kv's: kv_write.py).

Each rule breaks one precondition of a valid case drawn by `strategies.paged_attention`. Breaking one rule
sometimes needs a companion edit so that no second rule breaks too (a token moved to an out-of-range slot
gets finite values, since NaN in a written int8 token is a rule of its own; both pools change dtype
together when the pool dtype is broken). PA-30 (ignored entries are not validated) is the other side of
these rules and is checked in the suite with valid cases (test_attention_ignores_unused_metadata).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes

from .. import paged_attention as pa
from ..values import sampled_from
from . import OMIT, as_float, as_int, copied, grown, index, need, rule, set_at

VARIANTS = {"ragged_paged_attention": pa.ATTENTION_VARIANTS}
_ATT = {v.name: v for v in pa.ATTENTION_VARIANTS}
BAD_POSITIVE = (0.0, -0.5, float("nan"), float("inf"))       # "finite and > 0" broken (PA-29)
BAD_SCALES = BAD_POSITIVE + (1e-46,)                           # 1e-46 > 0, but 0 as a float32 (PA-18)


def valid(op: str, claims: OpClaims, variant):
    return pa.attention_cases(claims, variant)


def _counted(x: dict):
    """(num_seqs, cu_q_lens, kv_lens) of a valid case, as int64 copies."""
    return int(x["num_seqs"]), np.asarray(x["cu_q_lens"], np.int64), np.asarray(x["kv_lens"], np.int64)


# --- ragged_paged_attention: types (PA-26) --------------------------------------------------------

def _q_not_float(draw, x, claims):
    return {"q": as_int(x["q"])}


def _pages_not_float(draw, x, claims):
    # both pools: a k/v dtype mismatch is a rule of its own (PA-27)
    return {"k_pages": as_int(x["k_pages"]), "v_pages": as_int(x["v_pages"])}


def _metadata_float(name: str):
    def corrupt(draw, x, claims):
        return {name: as_float(x[name])}
    return corrupt


def _num_seqs_not_int(draw, x, claims):
    return {"num_seqs": draw(sampled_from((True, float(x["num_seqs"]))))}


def _return_scores_not_bool(draw, x, claims):
    return {"return_scores": draw(sampled_from((1, 0)))}


# --- shapes and heads (PA-27) ---------------------------------------------------------------------

def _q_rank(draw, x, claims):
    q = x["q"]
    return {"q": q[..., None] if draw(st.booleans()) else np.ascontiguousarray(q[:, 0])}


def _pages_rank(draw, x, claims):
    # the flattened-hidden layout (PA-37) is a storage layout, never an op argument (PA-35)
    k, v = x["k_pages"], x["v_pages"]
    flat = k.shape[:2] + (k.shape[2] * k.shape[3],)
    return {"k_pages": k.reshape(flat), "v_pages": v.reshape(flat)}


def _v_pages_shape(draw, x, claims):
    return {"v_pages": grown(x["v_pages"], draw(sampled_from((0, 2))))}


def _other_float_kv(claims: OpClaims):
    return [d for d in pa.FLOAT_KV_DTYPES if d in (claims.kv_dtypes or ())]


def _needs_two_float_kv(claims: OpClaims):
    if len(_other_float_kv(claims)) < 2:
        return "a k/v dtype mismatch needs two claimed float KV dtypes"
    return None


def _v_pages_dtype(draw, x, claims):
    current = dtypes.dtype_name(x["k_pages"].dtype)
    other = draw(sampled_from([d for d in _other_float_kv(claims) if d != current]))
    return {"v_pages": x["v_pages"].astype(dtypes.resolve_dtype(other))}


def _head_dim_mismatch(draw, x, claims):
    return {"q": grown(x["q"], 2)}


def _heads_not_divisible(draw, x, claims):
    q, k, v = x["q"], x["k_pages"], x["v_pages"]
    if k.shape[2] == 1:             # Hkv = 1 divides every Hq: take two KV heads
        k, v = np.concatenate([k, k], axis=2), np.concatenate([v, v], axis=2)
    hkv = k.shape[2]
    hq = hkv * draw(st.integers(1, 2)) + draw(st.integers(1, hkv - 1))
    return {"q": np.ascontiguousarray(q[:, np.arange(hq) % q.shape[1]]), "k_pages": k, "v_pages": v}


def _kv_lens_rank(draw, x, claims):
    return {"kv_lens": copied(x, "kv_lens")[:, None]}


def _page_indices_rows(draw, x, claims):
    pi = x["page_indices"]
    return {"page_indices": np.concatenate([pi, pi[:1]]) if draw(st.booleans()) else pi[:-1]}


def _cu_q_lens_length(draw, x, claims):
    cu = x["cu_q_lens"]
    return {"cu_q_lens": np.concatenate([cu, cu[-1:]]) if draw(st.booleans()) else cu[:-1]}


# --- metadata of counted sequences (PA-28) --------------------------------------------------------

def _cu_q_lens_start(draw, x, claims):
    _, cu, _ = _counted(x)
    # in [1, cu[1]]: the offsets stay non-decreasing when sequence 0 has rows
    return set_at(x, "cu_q_lens", 0, draw(st.integers(1, max(1, int(cu[1])))))


def _cu_q_lens_decreasing(draw, x, claims):
    n, cu, _ = _counted(x)
    # the last counted offset drops below its predecessor; it stays <= T, every kv_len stays >= q_len
    return set_at(x, "cu_q_lens", n, int(cu[n - 1]) - draw(st.integers(1, 2)))


def _cu_q_lens_past_t(draw, x, claims):
    n, cu, _ = _counted(x)
    end = int(cu[n])
    need(end >= 1)
    return {"q": x["q"][:end - draw(st.integers(1, end))]}


def _kv_lens_negative(draw, x, claims):
    n, _, _ = _counted(x)
    return set_at(x, "kv_lens", index(draw, n), -draw(st.integers(1, 3)))


def _q_len_exceeds_kv_len(draw, x, claims):
    n, cu, _ = _counted(x)
    q_lens = np.diff(cu[:n + 1])
    rows = np.flatnonzero(q_lens >= 1)
    need(rows.size)
    i = int(draw(sampled_from(rows)))
    return set_at(x, "kv_lens", i, draw(st.integers(0, int(q_lens[i]) - 1)))


def _kv_lens_exceed_table(draw, x, claims):
    n, _, _ = _counted(x)
    page_size = x["k_pages"].shape[1]
    capacity = x["page_indices"].shape[1] * page_size
    return set_at(x, "kv_lens", index(draw, n), capacity + draw(st.integers(1, page_size)))


def _page_index_out_of_range(draw, x, claims):
    n, _, kv = _counted(x)
    page_size, num_pages = x["k_pages"].shape[1], x["k_pages"].shape[0]
    used = [(i, j) for i in range(n) for j in range(-(-int(kv[i]) // page_size))]
    need(used)
    where = draw(sampled_from(used))
    return set_at(x, "page_indices", where, draw(sampled_from((num_pages, num_pages + 5, -1))))


def _num_seqs_out_of_range(draw, x, claims):
    S = x["kv_lens"].shape[0]
    return {"num_seqs": draw(sampled_from((S + 1, S + 4, -1)))}


# --- options (PA-29, PA-18) -----------------------------------------------------------------------

def _option(name: str, values):
    def corrupt(draw, x, claims):
        return {name: draw(sampled_from(values))}
    return corrupt


def _shards_not_dividing(draw, x, claims):
    # Hkv + 1 never divides Hkv; 0 and -2 break n >= 1
    return {"num_shards": draw(sampled_from((x["k_pages"].shape[2] + 1, 0, -2)))}


def _sinks_shape(draw, x, claims):
    s = x["sinks"]
    return {"sinks": np.concatenate([s, s[:1]]) if draw(st.booleans()) else s[:-1]}


def _sinks_nan(draw, x, claims):
    return set_at(x, "sinks", index(draw, x["sinks"].shape[0]), draw(sampled_from((np.nan, np.inf))))


def _scale_missing(draw, x, claims):
    name = draw(sampled_from(("k_scale", "v_scale")))
    return {name: OMIT}, name


def _scale_on_float_pages(draw, x, claims):
    name = draw(sampled_from(("k_scale", "v_scale")))
    return {name: draw(sampled_from((1.0, 0.5)))}, name


def _scale_invalid(draw, x, claims):
    name = draw(sampled_from(("k_scale", "v_scale")))
    return {name: draw(sampled_from(BAD_SCALES))}, name


def _layout_unknown(draw, x, claims):
    return {"kv_layout": draw(sampled_from(("hybrid", "Combined", "")))}


def _combined_with_v_pages(draw, x, claims):
    return {"v_pages": np.array(x["k_pages"], copy=True)}


def _combined_odd_heads(draw, x, claims):
    return {"k_pages": np.array(x["k_pages"][:, :, :-1], copy=True)}


def _flat_hidden_not_divisible(draw, x, claims):
    return {"k_pages": np.array(x["k_pages"][:, :, :-1], copy=True)}


def _scale_shape_wrong(draw, x, claims):
    arr = np.asarray(x["k_scale"])
    return {"k_scale": np.concatenate([arr.ravel(), arr.ravel()[:1]]).astype(np.float32)}


def _head_scale_not_positive(draw, x, claims):
    arr = np.array(x["k_scale"], copy=True)
    arr[index(draw, arr.shape[0])] = draw(sampled_from((0.0, -1.0, float("nan"), float("inf"))))
    return {"k_scale": arr}


def _needs_quantized(claims: OpClaims):
    if not any(d in (claims.kv_dtypes or ()) for d in pa.QUANT_KV_DTYPES):
        return "no quantized KV dtype claimed"
    return None


ATTENTION_RULES = (
    rule("q_not_float", ("PA-26",), "q", "q must have a floating dtype", _q_not_float),
    rule("pages_not_float", ("PA-26",), "k_pages", "k_pages must have a floating dtype or int8",
         _pages_not_float),
    rule("kv_lens_not_integer", ("PA-26",), "kv_lens", "kv_lens must have an integer dtype",
         _metadata_float("kv_lens")),
    rule("page_indices_not_integer", ("PA-26",), "page_indices", "page_indices must have an integer dtype",
         _metadata_float("page_indices")),
    rule("cu_q_lens_not_integer", ("PA-26",), "cu_q_lens", "cu_q_lens must have an integer dtype",
         _metadata_float("cu_q_lens")),
    rule("num_seqs_not_integer", ("PA-26",), "num_seqs", "num_seqs must be an integer (bool rejected)",
         _num_seqs_not_int),
    rule("return_scores_not_bool", ("PA-26",), "return_scores", "return_scores must be a bool",
         _return_scores_not_bool, variant=_ATT["return_scores"]),
    rule("q_rank", ("PA-27", "PA-2"), "q", "q must have rank 3 [T, Hq, D]", _q_rank),
    rule("pages_rank", ("PA-27", "PA-2", "PA-35"), "k_pages", "k_pages must have rank 4 [P, page_size, Hkv, D]",
         _pages_rank),
    rule("v_pages_shape", ("PA-27", "PA-2"), "v_pages", "v_pages must have the shape of k_pages",
         _v_pages_shape),
    rule("v_pages_dtype", ("PA-27", "PA-2"), "v_pages", "v_pages must have the dtype of k_pages",
         _v_pages_dtype, requires=_needs_two_float_kv),
    rule("head_dim_mismatch", ("PA-27", "PA-2"), ("k_pages", "q"), "k_pages head dim must equal q head dim",
         _head_dim_mismatch),
    rule("heads_not_divisible", ("PA-27", "PA-12"), ("q", "k_pages"),
         "q heads Hq must be a multiple of the KV heads Hkv", _heads_not_divisible),
    rule("kv_lens_rank", ("PA-27",), "kv_lens", "kv_lens must have rank 1 [S]", _kv_lens_rank),
    rule("page_indices_rows", ("PA-27",), ("page_indices", "kv_lens"),
         "page_indices must have S rows, one per kv_lens entry", _page_indices_rows),
    rule("cu_q_lens_length", ("PA-27",), "cu_q_lens", "cu_q_lens must have shape [S+1]", _cu_q_lens_length),
    rule("cu_q_lens_start", ("PA-28", "PA-4"), "cu_q_lens", "cu_q_lens[0] must be 0", _cu_q_lens_start),
    rule("cu_q_lens_decreasing", ("PA-28", "PA-4"), "cu_q_lens", "cu_q_lens must be non-decreasing",
         _cu_q_lens_decreasing),
    rule("cu_q_lens_past_rows", ("PA-28", "PA-4"), ("cu_q_lens", "q"), "cu_q_lens[num_seqs] must be <= T",
         _cu_q_lens_past_t),
    rule("kv_lens_negative", ("PA-28", "PA-3"), "kv_lens", "kv_lens must be >= 0", _kv_lens_negative),
    rule("q_len_exceeds_kv_len", ("PA-28", "PA-6"), ("kv_lens", "cu_q_lens"), "q_len <= kv_len must hold",
         _q_len_exceeds_kv_len),
    rule("kv_lens_exceed_table", ("PA-28", "PA-11"), ("kv_lens", "page_indices"),
         "kv_lens must fit the page table (kv_len <= pages_per_seq * page_size)", _kv_lens_exceed_table),
    rule("page_index_out_of_range", ("PA-28", "PA-11"), "page_indices",
         "used page indices must lie in [0, P)", _page_index_out_of_range),
    rule("num_seqs_out_of_range", ("PA-28", "PA-5"), "num_seqs", "0 <= num_seqs <= S must hold",
         _num_seqs_out_of_range),
    rule("sm_scale_invalid", ("PA-29", "PA-14"), "sm_scale", "sm_scale must be finite and > 0",
         _option("sm_scale", BAD_POSITIVE)),
    rule("sliding_window_invalid", ("PA-29", "PA-15"), "sliding_window", "sliding_window must be an integer >= 1",
         _option("sliding_window", (0, -1, 2.5)), variant=_ATT["sliding_window"]),
    rule("soft_cap_invalid", ("PA-29", "PA-16"), "soft_cap", "soft_cap must be finite and > 0",
         _option("soft_cap", (0.0, -5.0, float("nan"), float("inf"))), variant=_ATT["soft_cap"]),
    rule("sinks_shape", ("PA-29", "PA-17"), "sinks", "sinks must have shape [Hq]", _sinks_shape,
         variant=_ATT["sinks"]),
    rule("sinks_nan_or_plus_inf", ("PA-29", "PA-17"), "sinks", "sinks must be finite or -inf", _sinks_nan,
         variant=_ATT["sinks"]),
    rule("scale_missing", ("PA-29", "PA-18"), ("k_scale", "v_scale"),
         "k_scale and v_scale are required for quantized pages", _scale_missing, variant=_ATT["quantized_kv"]),
    rule("scale_on_float_pages", ("PA-29", "PA-18"), ("k_scale", "v_scale"),
         "k_scale and v_scale must be None for unquantized pages", _scale_on_float_pages,
         features=("quantized_kv",), requires=_needs_quantized),
    rule("scale_invalid", ("PA-29", "PA-18"), ("k_scale", "v_scale"),
         "k_scale and v_scale must be finite and > 0 as float32", _scale_invalid, variant=_ATT["quantized_kv"]),
    rule("scale_shape_wrong", ("PA-48",), "k_scale", "k_scale is a scalar, [Hkv] or [P, page_size, Hkv]",
         _scale_shape_wrong, variant=_ATT["per_head_scales"]),
    rule("head_scale_not_positive", ("PA-48",), "k_scale", "per-head scales are finite and > 0",
         _head_scale_not_positive, variant=_ATT["per_head_scales"]),
    rule("kv_layout_unknown", ("PA-39",), "kv_layout", "kv_layout must be separate, combined or flat",
         _layout_unknown, variant=_ATT["combined_layout"]),
    rule("combined_with_v_pages", ("PA-39", "PA-36"), "v_pages",
         "v_pages must be None with kv_layout='combined'", _combined_with_v_pages, variant=_ATT["combined_layout"]),
    rule("combined_odd_heads", ("PA-39", "PA-36"), "k_pages",
         "a combined cache has an even number of heads (2*Hkv)", _combined_odd_heads,
         variant=_ATT["combined_layout"]),
    rule("flat_hidden_not_divisible", ("PA-39", "PA-37"), "k_pages",
         "a flat cache's hidden size is a multiple of D", _flat_hidden_not_divisible, variant=_ATT["flat_layout"]),
    rule("num_shards_invalid", ("PA-49",), "num_shards", "num_shards must be an integer >= 1 dividing Hkv",
         _shards_not_dividing, variant=_ATT["head_sharding"]),
)


RULES = {"ragged_paged_attention": ATTENTION_RULES}
