"""Attention over the CSR layout (spec/metadata.md MD-23): cases, columns and checks."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import FEATURES, OpClaims
from kvconform.conformance.engine.case import Case

from .tables import I32


#: the attention columns the CSR form draws (per-token scores are not part of MD-23)
def csr_attention_variants():
    """The block-table attention columns whose features MD-23 has (no per-token scores, no head sharding)
    and that hand the cache in the canonical layout. Of the size-reach columns, those that reach the page
    table CSR encodes: hundreds of keys, page lists past one 64-entry tile, pages that are not powers of two
    (heads, head dims and the 129-sequence decode batch run the block-table op's code in both shipped
    backends and cost seconds per call under the interpreters: spec/paged_attention.md PA-51)."""
    from .. import paged_attention as pa
    allowed = set(FEATURES["ragged_paged_attention_csr"])
    return tuple(v for v in pa.ATTENTION_VARIANTS if set(v.features) <= allowed and not v.layout
                 and (v.reach in ("", "keys", "pages", "page_size") or v.reach.startswith(pa.DIM_REACH)))


def block_table_inputs(x: dict) -> dict:
    """The block-table call (spec/paged_attention.md) equal to a CSR attention call (MD-23, MD-5)."""
    indptr = np.asarray(x["kv_indptr"])
    S = indptr.shape[0] - 1
    P = int(np.asarray(x["k_pages"]).shape[1])
    width = max(1, int(np.diff(indptr).max()) if S else 1)
    table = reference.csr_to_block_table(x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"], P, width)
    options = {k: v for k, v in x.items() if k not in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len")}
    return dict(options, kv_lens=table.kv_lens, page_indices=table.page_indices,
                cu_q_lens=np.asarray(x["qo_indptr"], I32), num_seqs=S)


@st.composite
def attention_csr_cases(draw, claims: OpClaims, variant):
    """A drawn block-table attention case (strategies/paged_attention.py) in CSR form (MD-23)."""
    from .. import paged_attention as pa
    case = draw(pa.attention_cases(claims, variant))
    x = dict(case.inputs)
    n = int(x.pop("num_seqs"))
    P = int(x["k_pages"].shape[1])
    csr = reference.block_table_to_csr(x.pop("page_indices"), x.pop("kv_lens"), n, P)
    cu = np.asarray(x.pop("cu_q_lens"))[:n + 1].astype(I32)
    inputs = dict(x, qo_indptr=cu, kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices,
                  kv_last_page_len=csr.kv_last_page_len)
    keep = tuple(r for r in getattr(case, "poison", ()) if r.input in inputs)
    return Case("ragged_paged_attention_csr", inputs, dict(case.params, layout="csr"), case.seed, poison=keep)


def attention_csr_checks(case: Case, expected: dict, actual: dict) -> dict:
    """The block-table call's contract (NU-PA1 on the valid rows), on the equivalent block-table case."""
    from .. import paged_attention as pa
    shadow = Case("ragged_paged_attention", block_table_inputs(case.inputs), case.params, case.seed)
    return pa.attention_checks(shadow, expected, actual)
