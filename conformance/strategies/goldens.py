"""The attention family's hand-worked goldens in other forms, and what each one uses (issue 31).

Goldens are `conformance.goldens.Golden`s (declared as `GOLDENS` by test_paged_attention.py and test_mla.py).
A golden written at head dim 2 and page size 2 runs on no backend that takes only real sizes; restated at a
real head dim and page size (zero dims appended, tokens moved onto bigger pages, `attention_at_size`) and in
each dtype where its inputs stay exact (`in_dtype`), its hand-worked values hold unchanged. `uses` and
`write_uses` read what a case uses off its inputs (the families' `USES` tables):
tests/engine/test_golden_requirements.py checks each restatement of each golden against its declaration.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.golden_cases import Golden

#: the real sizes attention goldens are restated at: head dim 128 with pages of 16 tokens (Llama-3, Qwen3,
#: Mistral; vLLM's default block size), and for MLA DeepSeek-V2/V3's kv_lora_rank 512 and qk_rope_head_dim 64
#: (deepseek-ai/DeepSeek-V3 config.json; mla.REACH_LATENT) on pages of 64 tokens (FlashMLA's only page size:
#: deepseek-ai/FlashMLA README.md, "Paged kvcache with block size of 64")
REAL_HEAD_DIM, REAL_PAGE_SIZE = 128, 16
REAL_MLA_LATENT, REAL_MLA_ROPE, REAL_MLA_PAGE_SIZE = 512, 64, 64
#: the dtypes a real-size restatement is stated in (where every input value stays exact): GPU kernels take
#: bfloat16 / float16 only, TPU kernels float32 or bfloat16
GOLDEN_DTYPES = ("float32", "bfloat16", "float16")
#: the float arrays of each op that a dtype restatement casts (q's dtype; float KV pools and rows)
CAST = {"ragged_paged_attention": ("q", "k_pages", "v_pages"),
        "ragged_paged_attention_csr": ("q", "k_pages", "v_pages"),
        "mla_paged_attention": ("q_nope", "q_pe", "c_kv_pages", "k_pe_pages"),
        "write_kv": ("k", "v", "k_pages", "v_pages")}


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
    """The dimensions of an attention-family case (block table, CSR or MLA) under the names `kvc.require`
    judges (constraints.outside), read off its inputs: dtypes, page size, head dim (MLA: the latent dim
    d_c, ML-1), head counts, per-sequence q_len and kv_len, sequences and pages."""
    x = case.inputs
    q = x.get("q", x.get("q_nope"))
    pools = x.get("k_pages", x.get("c_kv_pages"))
    n = int(x["num_seqs"]) if "num_seqs" in x else len(x["qo_indptr"]) - 1
    cu = np.asarray(x.get("cu_q_lens", x.get("qo_indptr")))
    space = dict(dtype=dtypes.dtype_name(q.dtype), kv_dtype=dtypes.dtype_name(pools.dtype), page_size=pools.shape[1],
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


def uses(case: Case) -> tuple[set, dict]:
    """USES of ragged_paged_attention (block table or CSR) and mla_paged_attention: (features_used,
    golden_space)."""
    return set(features_used(case)), golden_space(case)


def write_uses(case: Case) -> tuple[set, dict]:
    """USES of write_kv: the scale features (features_used) and k's dtype, the pools' dtype and shape."""
    x = case.inputs
    pools = x["k_pages"]
    return set(features_used(case)), dict(
        dtype=dtypes.dtype_name(x["k"].dtype), kv_dtype=dtypes.dtype_name(pools.dtype), page_size=pools.shape[1],
        head_dim=pools.shape[3], num_kv_heads=pools.shape[2], num_pages=pools.shape[0])


def cast_exactly(case: Case, expected, dtype: str):
    """(case, expected) with the float32 arrays of CAST[op] (inputs, and pools of an expected dict) in
    `dtype`; quantized pools stay as stored. Raises ValueError when a value would round: a hand-worked value
    holds only for exact inputs."""
    if dtype == "float32":
        return case, expected
    dt = dtypes.resolve_dtype(dtype)

    def cast(name, arr):
        if arr is None or np.asarray(arr).dtype != np.float32:
            return arr
        out = arr.astype(dt)
        wide = np.asarray(arr, np.float64)
        if not np.all((np.asarray(out, np.float64) == wide) | np.isnan(wide)):
            raise ValueError(f"{name} is not exact in {dtype}")
        return out
    inputs = {k: (cast(k, v) if k in CAST[case.op] else v) for k, v in case.inputs.items()}
    if isinstance(expected, dict):
        expected = {k: cast(k, v) for k, v in expected.items()}
    return Case(case.op, inputs, dict(case.params), case.seed), expected


def in_dtype(golden: Golden, dtype: str) -> Golden | None:
    """`golden` with its float inputs in `dtype` (cast_exactly), named `<name>_<dtype>` (float32 keeps the
    name); None when some restatement (subset of its options) has a value that is not exact there."""
    if dtype == "float32":
        return golden

    def build(options):
        return cast_exactly(*golden.build(options), dtype)
    try:
        for options in golden.restatements():
            build(options)
    except ValueError:
        return None
    return dataclasses.replace(golden, name=f"{golden.name}_{dtype}", build=build)


def at_real_size(golden: Golden, resize: Callable) -> tuple[Golden, ...]:
    """`golden` restated at real sizes, `resize(case, expected) -> (case, expected)`, in every dtype of
    GOLDEN_DTYPES where its inputs stay exact: `<name>_real`, `<name>_real_bfloat16`, `<name>_real_float16`."""
    def build(options):
        return resize(*golden.build(options))
    real = dataclasses.replace(golden, name=f"{golden.name}_real", build=build)
    return tuple(g for g in (in_dtype(real, d) for d in GOLDEN_DTYPES) if g is not None)


def attention_real(case: Case, expected):
    """resize for ragged_paged_attention goldens: attention_at_size at REAL_HEAD_DIM / REAL_PAGE_SIZE, the
    expected rows with zero output columns appended."""
    return (attention_at_size(case, REAL_HEAD_DIM, REAL_PAGE_SIZE),
            padded_dims(np.asarray(expected, np.float64), REAL_HEAD_DIM))
