"""Malformed inputs for spec/mla.md (ML-9): the MLA-specific shape and dtype rules, plus the metadata and
option rules of spec/paged_attention.md (PA-26 .. PA-29), which the MLA op states by reference and which
are broken here by the paged-attention family's own edits (malformed/paged_attention.py)."""
from __future__ import annotations

import dataclasses

import numpy as np

from kvconform.backends.base import OpClaims

from .. import mla
from . import as_int, grown, rule
from . import paged_attention as pa_bad

OP = mla.OP
VARIANTS = {OP: mla.VARIANTS}
_BY_NAME = {v.name: v for v in mla.VARIANTS}


def valid(op: str, claims: OpClaims, variant):
    return mla.mla_cases(claims, variant)


def _not_float(name: str):
    def corrupt(draw, x, claims):
        return {name: as_int(x[name])}
    return corrupt


def _grow(name: str, axis: int):
    def corrupt(draw, x, claims):
        return {name: grown(np.asarray(x[name]), axis)}
    return corrupt


def _rank4(name: str):
    def corrupt(draw, x, claims):
        return {name: np.asarray(x[name])[..., None]}
    return corrupt


MLA_RULES = (
    rule("q_nope_not_float", ("ML-9", "ML-1"), "q_nope", "q_nope must have a floating dtype", _not_float("q_nope")),
    rule("q_pe_not_float", ("ML-9", "ML-1"), "q_pe", "q_pe must have a floating dtype", _not_float("q_pe")),
    rule("c_kv_pages_not_float", ("ML-9", "ML-1"), "c_kv_pages", "c_kv_pages must have a floating dtype",
         _not_float("c_kv_pages")),
    rule("k_pe_pages_not_float", ("ML-9", "ML-1"), "k_pe_pages", "k_pe_pages must have a floating dtype",
         _not_float("k_pe_pages")),
    rule("q_nope_rank", ("ML-9", "ML-1"), "q_nope", "q_nope must have rank 3 [T, H, d_c]", _rank4("q_nope")),
    rule("c_kv_pages_rank", ("ML-9", "ML-1"), "c_kv_pages", "c_kv_pages must have rank 3 [P, page_size, d_c]",
         _rank4("c_kv_pages")),
    rule("q_pe_heads", ("ML-9", "ML-1"), ("q_pe", "q_nope"), "q_pe must have the rows and heads of q_nope",
         _grow("q_pe", 1)),
    rule("latent_dim_mismatch", ("ML-9", "ML-1"), ("c_kv_pages", "q_nope"),
         "c_kv_pages latent dim must equal q_nope's d_c", _grow("c_kv_pages", 2)),
    rule("rope_dim_mismatch", ("ML-9", "ML-1"), ("k_pe_pages", "q_pe"), "k_pe_pages RoPE dim must equal q_pe's d_r",
         _grow("k_pe_pages", 2)),
    rule("k_pe_pages_pages", ("ML-9", "ML-1"), ("k_pe_pages", "c_kv_pages"),
         "k_pe_pages must have the pages and page_size of c_kv_pages", _grow("k_pe_pages", 0)),
)

#: paged-attention rules on the metadata and options, which name the same arguments in an MLA call
_SHARED = ("kv_lens_not_integer", "page_indices_not_integer", "cu_q_lens_not_integer", "num_seqs_not_integer",
           "kv_lens_rank", "page_indices_rows", "cu_q_lens_length", "cu_q_lens_start", "cu_q_lens_decreasing",
           "kv_lens_negative", "q_len_exceeds_kv_len", "kv_lens_exceed_table", "page_index_out_of_range",
           "num_seqs_out_of_range", "sm_scale_invalid", "sliding_window_invalid", "soft_cap_invalid",
           "sinks_shape", "sinks_nan_or_plus_inf")


def _on_mla(corrupt):
    """A paged-attention edit applied to an MLA case: it reads the pool shape (P, page_size) from a
    `k_pages` view of the latent pool and returns only the arguments it changes."""
    def edit(draw, x, claims):
        view = dict(x, k_pages=np.asarray(x["c_kv_pages"])[:, :, None, :])
        return corrupt(draw, view, claims)
    return edit


def _shared(r):
    variant = _BY_NAME[r.variant.name] if r.variant is not None else None
    return dataclasses.replace(r, clauses=("ML-9",) + r.clauses, corrupt=_on_mla(r.corrupt), variant=variant)


_PA = {r.name: r for r in pa_bad.ATTENTION_RULES}
RULES = {OP: MLA_RULES + tuple(_shared(_PA[name]) for name in _SHARED)}
