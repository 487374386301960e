"""Inputs of paged-attention cases: the KV layouts (PA-35 .. PA-39), per-head / per-token scales (PA-48) and\nthe poison regions of every don't-care location (PA-5, PA-24, PA-25)."""
from __future__ import annotations

import dataclasses

import numpy as np

from kvconform.conformance.engine.case import Case, PoisonRegion
from kvconform.reference.kv_layouts import canonical_kv, to_layout

from .columns import METADATA_POISON, Variant


def in_layout(case: Case, kv_layout: str) -> Case:
    """The same call with its cache handed in `kv_layout` (PA-39); poison regions, which index the
    canonical pools, are dropped (the poison property runs on the canonical layout)."""
    x = case.inputs
    k, v = to_layout(x["k_pages"], x["v_pages"], kv_layout)
    inputs = dict(x, k_pages=k, v_pages=v, kv_layout=kv_layout)
    return Case(case.op, inputs, dict(case.params, kv_layout=kv_layout), case.seed)


def canonical_inputs(x: dict) -> dict:
    """The inputs with the cache in the separate layout (what the bounds of numerics.md read)."""
    layout = x.get("kv_layout", "separate")
    if layout == "separate":
        return x
    k, v = canonical_kv(x["k_pages"], x["v_pages"], layout, x["q"].shape[2])
    return dict(x, k_pages=k, v_pages=v, kv_layout="separate")


def token_scales(scale, slot_mapping: np.ndarray, page_size: int, padding: int = 0):
    """The scale each token of a write_kv call is stored with, broadcastable to k [N + padding, Hkv, D]
    (PA-48); skipped tokens (slot < 0) and padding rows (PA-50) get the scale of slot 0 (never stored)."""
    if np.ndim(scale) == 0:
        return scale
    scale = np.asarray(scale, np.float32)
    if scale.ndim == 1:
        return scale[None, :, None]
    slots = np.maximum(np.concatenate([slot_mapping, np.zeros(padding, slot_mapping.dtype)]), 0)
    return scale[slots // page_size, slots % page_size][:, :, None]


def _scale_shape(variant: Variant, num_pages: int, page_size: int, hkv: int):
    if "per_head_scales" in variant.features:
        return (hkv,)
    if "per_token_scales" in variant.features:
        return (num_pages, page_size, hkv)
    return None


def with_scale_regions(regions: list, x: dict) -> tuple[PoisonRegion, ...]:
    """Per-token scales beside a don't-care slot are don't-care too (PA-48): each K/V page region gets its
    twin in k_scale / v_scale (same name, same page and slot index)."""
    out = list(regions)
    for pages, scale in (("k_pages", "k_scale"), ("v_pages", "v_scale")):
        arr = x.get(scale)
        if not (isinstance(arr, np.ndarray) and arr.ndim == 3):
            continue
        for r in regions:
            if r.input == pages:
                index = r.index if not isinstance(r.index, np.ndarray) else r.index
                if isinstance(index, tuple):
                    index = index[:2]
                out.append(dataclasses.replace(r, input=scale, index=index, what=r.what + " (and its scale)"))
    return tuple(out)


def attention_poison_regions(x: dict, used: list[int], unused_pages) -> tuple[PoisonRegion, ...]:
    """The don't-care locations of a `ragged_paged_attention` call (PA-5, PA-24, PA-25)."""
    n = int(x["num_seqs"])
    cu, kv_lens, table = x["cu_q_lens"], x["kv_lens"], x["page_indices"]
    page_size = x["k_pages"].shape[1]
    window = x.get("sliding_window")
    regions = [PoisonRegion("q_padding", "q", (slice(int(cu[n]), None),), "PA-25",
                            "padding rows of q past cu_q_lens[num_seqs]")]
    for i in range(n):
        kv_len, q_len = int(kv_lens[i]), int(cu[i + 1] - cu[i])
        tail = kv_len % page_size
        if tail:
            last = int(table[i, used[i] - 1])
            regions.append(PoisonRegion("k_tail", "k_pages", (last, slice(tail, None)), "PA-24",
                                        "K slots past kv_len in the last used page"))
            regions.append(PoisonRegion("v_tail", "v_pages", (last, slice(tail, None)), "PA-24",
                                        "V slots past kv_len in the last used page"))
        # keys no row of this call sees: all of them without rows, those left of every window
        hidden = kv_len if q_len == 0 else (0 if window is None else max(0, kv_len - q_len - int(window) + 1))
        for j in range(min(hidden, kv_len)):
            where = (int(table[i, j // page_size]), j % page_size)
            for name in ("k_pages", "v_pages"):
                regions.append(PoisonRegion("hidden_kv", name, where, "PA-24",
                                            "keys/values no row of the call can see"))
        if table.shape[1] > used[i]:
            regions.append(PoisonRegion("table_tail", "page_indices", (i, slice(used[i], None)), "PA-24",
                                        "page-table entries past cdiv(kv_len, page_size)", METADATA_POISON))
    for p in unused_pages:
        for name in ("k_pages", "v_pages"):
            regions.append(PoisonRegion("unused_pages", name, (int(p),), "PA-24", "pages no sequence uses"))
    if table.shape[0] > n:
        for name in ("kv_lens", "page_indices"):
            regions.append(PoisonRegion("spare_metadata", name, (slice(n, None),), "PA-5",
                                        "metadata rows of sequences >= num_seqs", METADATA_POISON))
        regions.append(PoisonRegion("spare_metadata", "cu_q_lens", (slice(n + 1, None),), "PA-5",
                                    "cu_q_lens entries past num_seqs + 1", METADATA_POISON))
    return with_scale_regions(regions, x)
