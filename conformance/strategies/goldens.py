"""Hand-worked goldens of the attention family in other forms, and what each one requires (issue 31).

A golden written at head dim 2 and page size 2 runs on no backend that takes only real sizes; restated at
the backend's real head dim and page size (zero dims appended, tokens moved onto bigger pages) its
hand-worked values hold unchanged. `features_used` and `golden_space` read a golden's requirements off its
inputs, so its table declares exactly what it uses (tests/engine/test_attention_goldens.py checks it).
Used by conformance/suite/test_paged_attention.py, test_mla.py and test_metadata.py (MD-23).
"""
from __future__ import annotations

import numpy as np
import pytest

from kvconform.backends.base import OpClaims

from ..case import Case
from . import constraints

#: head dims and page sizes a golden is restated at when the backend claims any: common real values
REAL_HEAD_DIMS = (128, 64, 256, 80, 96, 112, 192)
REAL_PAGE_SIZES = (16, 32, 64, 128)


def real_sizes(claims: OpClaims, *, head_dims=REAL_HEAD_DIMS, page_sizes=REAL_PAGE_SIZES) -> tuple[int, int]:
    """(head_dim, page_size) a hand-worked golden is restated at for `claims`: the smallest claimed head
    dim of 64 or more and page size of 16 or more (the first of `head_dims` / `page_sizes` a limit admits
    when any is claimed), within max_head_dim. Skips as `unsupported` when the claims admit none."""
    top = claims.limits.get("max_head_dim")
    dims = sorted(d for d in claims.head_dims if d >= 64) if claims.head_dims else \
        constraints.allowed(claims, "head_dim", head_dims, skip=False)
    dims = [d for d in dims if top is None or d <= top]
    pages = sorted(p for p in claims.page_sizes if p >= 16) if claims.page_sizes else \
        constraints.allowed(claims, "page_size", page_sizes, skip=False)
    if not dims or not pages:
        pytest.skip(f"unsupported: no real head dim {head_dims} or page size {page_sizes} within the claims "
                    f"(head_dims {claims.head_dims}, page_sizes {claims.page_sizes}, limits {dict(claims.limits)})")
    return int(dims[0]), int(pages[0])


def padded_dims(x: np.ndarray, size: int, axis: int = -1) -> np.ndarray:
    """`x` with zero entries appended along `axis` up to `size` (zero terms of every dot product)."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return np.pad(x, pad)


def repaged(pools: list[np.ndarray], kv_lens, page_indices, num_seqs: int, page_size: int):
    """The tokens of `num_seqs` sequences moved from `pools` ([P, page_size0, ...] each) onto pages of
    `page_size`: sequence i's tokens on fresh pages in reverse physical order, a spare page first, every
    slot no token fills holding poison (NaN; -128 in int8 pools: PA-24 don't-care). Returns (pools,
    page_indices int32[num_seqs, max(1, pages)])."""
    old = pools[0].shape[1]
    used = [-(-int(kv_lens[i]) // page_size) for i in range(num_seqs)]
    total = 1 + sum(used)
    out = []
    for pool in pools:
        fill = np.int8(-128) if pool.dtype == np.int8 else np.array(np.nan, np.float32).astype(pool.dtype)
        out.append(np.full((total, page_size) + pool.shape[2:], fill, dtype=pool.dtype))
    table = np.zeros((max(1, num_seqs), max(used + [1])), np.int32)
    first = 1
    for i in range(num_seqs):
        pages = list(range(first + used[i] - 1, first - 1, -1))   # reversed physical order (PA-10)
        first += used[i]
        table[i, :used[i]] = pages
        for j in range(int(kv_lens[i])):
            src = (int(page_indices[i, j // old]), j % old)
            for new, pool in zip(out, pools):
                new[pages[j // page_size], j % page_size] = pool[src]
    return out, table[:num_seqs]


def attention_at_size(case: Case, head_dim: int, page_size: int) -> Case:
    """A golden `ragged_paged_attention` case restated at `head_dim` and `page_size`: q, K and V padded
    with zero dims (the hand-worked logits and outputs are unchanged, the new output columns 0) and the
    tokens re-paged (`repaged`); options, metadata and the explicit sm_scale kept (a golden that relies
    on the default scale has zero logits)."""
    x = dict(case.inputs)
    n = int(x["num_seqs"])
    pools, table = repaged([padded_dims(x["k_pages"], head_dim), padded_dims(x["v_pages"], head_dim)],
                           x["kv_lens"][:n], x["page_indices"], n, page_size)
    x.update(q=padded_dims(x["q"], head_dim), k_pages=pools[0], v_pages=pools[1], page_indices=table,
             kv_lens=np.asarray(x["kv_lens"][:n], np.int32), cu_q_lens=np.asarray(x["cu_q_lens"][:n + 1], np.int32))
    if np.ndim(x.get("k_scale")) == 3:
        raise ValueError("goldens with per-token scales are not restated")
    return Case(case.op, x, dict(case.params, page_size=page_size, head_dim=head_dim), case.seed)


def features_used(case: Case) -> tuple[str, ...]:
    """The optional features (backends/base.py FEATURES) the inputs of an attention-family case use: what a
    golden must require, or a backend that does not claim them is failed for not supporting them."""
    x = case.inputs
    used = [f for f in ("sliding_window", "soft_cap", "sinks") if x.get(f) is not None]
    scale = x.get("k_scale")
    if scale is not None:
        used.append("quantized_kv")
        if np.ndim(scale) == 1:
            used.append("per_head_scales")
        elif np.ndim(scale) == 3:
            used.append("per_token_scales")
    if x.get("return_scores"):
        used.append("return_scores")
    if int(x.get("num_shards", 1)) > 1:
        used.append("head_sharding")
    q = x.get("q", x.get("q_nope"))
    pools = x.get("k_pages", x.get("c_kv_pages"))
    if q is not None and pools is not None and case.op in ("ragged_paged_attention", "ragged_paged_attention_csr"):
        hkv = pools.shape[2] if x.get("kv_layout", "separate") != "combined" else pools.shape[2] // 2
        if q.shape[1] != hkv:
            used.append("gqa")
    return tuple(used)


def golden_space(case: Case) -> dict:
    """The dimensions of a golden case under the names `kvc.require` judges (constraints.outside): dtypes,
    page size, head dim, head counts, per-sequence q_len and kv_len, sequences and pages."""
    x = case.inputs
    q = x.get("q", x.get("q_nope"))
    pools = x.get("k_pages", x.get("c_kv_pages"))
    n = int(x["num_seqs"]) if "num_seqs" in x else len(x["qo_indptr"]) - 1
    cu = np.asarray(x.get("cu_q_lens", x.get("qo_indptr")))
    space = dict(dtype=case.params["dtype"], kv_dtype=case.params["kv_dtype"], page_size=pools.shape[1],
                 head_dim=q.shape[2], num_q_heads=q.shape[1], q_len=[int(v) for v in np.diff(cu[:n + 1])],
                 num_seqs=n, num_pages=pools.shape[0])
    if "kv_lens" in x:
        space["kv_len"] = [int(v) for v in x["kv_lens"][:n]]
    elif "kv_indptr" in x:    # CSR (spec/metadata.md MD-3, MD-4): full pages then the last page's length
        pages = np.diff(np.asarray(x["kv_indptr"], np.int64))
        last = np.asarray(x["kv_last_page_len"], np.int64)
        space["kv_len"] = [int(max(p - 1, 0) * pools.shape[1] + (l if p else 0)) for p, l in zip(pages, last)]
    if pools.ndim == 4:
        space.update(num_kv_heads=pools.shape[2], group_size=q.shape[1] // pools.shape[2])
    return space


def expected_rows(case: Case, rows) -> np.ndarray:
    """The hand-worked `rows` [q_len, H, d] in an output of q's shape: zero columns past d (a restated
    golden's zero dims), zero padding rows (unspecified, PA-25: never compared)."""
    q = case.inputs.get("q", case.inputs.get("q_nope"))
    expected = np.zeros(q.shape)
    rows = np.asarray(rows, np.float64)
    expected[:rows.shape[0], :, :rows.shape[2]] = rows
    return expected
