"""`ragged_paged_attention` cases (spec/paged_attention.md PA-1 .. PA-25, PA-47 .. PA-54)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from .. import attention_reach as ar
from .. import constraints
from .. import dimension_reach as dr
from ..values import dequantized_within, floats, pick, sampled_from, seeds, shuffled
from .columns import (DEFAULT_HEAD_DIMS, DEFAULT_PAGE_SIZES, DEFAULT_SHARDS, DIM_REACH, DIM_REACH_FEATURES,
                      FLOAT_KV_DTYPES, Q_DTYPES, QUANT_KV_DTYPES, SCALES, SHARDED_FEATURES, Variant,
                      _cdiv, _head_counts)
from .inputs import _scale_shape, attention_poison_regions, in_layout


@st.composite
def attention_cases(draw, claims: OpClaims, variant: Variant, *, max_seqs: int = 3, max_q_len: int = 4,
                    max_context: int = 9, reach_op: str = "ragged_paged_attention"):
    """A valid, clean `ragged_paged_attention` call within `claims`, with the options of `variant` on.

    Every don't-care location is declared as a poison region (PA-24, PA-25, PA-5); the inputs hold
    finite values there. Regions: q_padding, k_tail, v_tail, unused_pages, hidden_kv (keys no row of
    the call can see), table_tail (page-table entries past the used pages), spare_metadata (rows of
    sequences >= num_seqs). A layout column hands the same (clean) cache in that layout (PA-39). Size-reach
    columns (variant.reach) draw the shapes of attention_reach within the claims; the range column its
    values (attention_reach.range_values)."""
    if variant.layout and variant.layout not in (claims.layouts or ()):
        pytest.skip(f"unsupported: layout {variant.layout!r} is not claimed (layouts: {list(claims.layouts)})")
    shards = 1
    if "head_sharding" in variant.features:
        shards = pick(draw, constraints.allowed(claims, "num_shards", DEFAULT_SHARDS, "shard count"), "shard count")
        variant = _with_sharded_features(draw, claims, variant)
    q_dtypes, kv_pool = Q_DTYPES, QUANT_KV_DTYPES if "quantized_kv" in variant.features else FLOAT_KV_DTYPES
    if variant.name in ("many_kv_heads", "combined", "range") and "quantized_kv" in claims.features:
        kv_pool = FLOAT_KV_DTYPES + QUANT_KV_DTYPES     # head blocks of 8-bit caches tile 32 rows (PA-47)
    if variant.values == "range":   # 16-bit activations first: their range is the one real logits pass
        q_dtypes, kv_pool = ar.RANGE_Q_DTYPES, tuple(sorted(kv_pool, key=ar.RANGE_KV_ORDER.index))
    q_dtype, kv_dtype = pick(draw, constraints.dtype_pairs(claims, q_dtypes, kv_pool, f"variant {variant.name}"),
                             "(q, KV) dtypes")
    top = claims.limits.get("max_head_dim")
    if variant.long:
        sizes, head_dims = ar.page_sizes(claims, variant.reach), ar.head_dims(claims, variant.reach, variant.name, top)
    else:
        sizes = constraints.allowed(claims, "page_size", claims.page_sizes or DEFAULT_PAGE_SIZES)
        head_dims = claims.head_dims or (DEFAULT_HEAD_DIMS[:1] if variant.name == "many_kv_heads"
                                         else DEFAULT_HEAD_DIMS)
        head_dims = constraints.allowed(claims, "head_dim", [d for d in head_dims if top is None or d <= top])
    dim = variant.reach[len(DIM_REACH):] if variant.reach.startswith(DIM_REACH) else ""
    if dim:    # a generated reach column: one dimension large, the others small, claimed features on
        shape = dr.attention_shape(draw, claims, reach_op, dim)
        # a crossed column's options are its regime's (range_options), the others' the claimed features
        features = () if variant.regime else dr.features_on(draw, claims, DIM_REACH_FEATURES)
        variant = dataclasses.replace(variant, features=features)
        page_size, head_dim, hkv, group = shape["page_size"], shape["head_dim"], shape["hkv"], shape["group"]
        if variant.regime:    # crossed (NU-15): a head dim that is not a power of two (padded and masked) first
            ordinary = [d for d in claims.head_dims or DEFAULT_HEAD_DIMS if top is None or d <= top]
            head_dim = ar.first_non_pow2(constraints.allowed(claims, "head_dim", ordinary))[0]
    else:
        page_size = pick(draw, sizes, "page size")
        head_dim = pick(draw, head_dims, "head dim")
        hkv, group = pick(draw, _head_counts(claims, variant, shards), "(Hkv, group)")
    hq = hkv * group

    # Ragged batch (PA-4, PA-5): empty, decode (q_len 1) and prefill (no context) sequences all occur.
    if variant.name in ("many_kv_heads", "head_sharding"):
        max_seqs, max_q_len, max_context = 2, 2, 5    # many heads already make each call costly
    max_kv = constraints.upper(claims, "max_kv_len", 1 << 30)
    q_len_options = constraints.allowed(claims, "q_len", range(0, max_q_len + 1), "query rows per sequence")
    if dim:
        q_lens, kv_lens = list(shape["q_lens"]), list(shape["kv_lens"])
        num_seqs = len(q_lens)
    elif variant.reach == "keys":
        num_seqs = draw(st.integers(1, constraints.upper(claims, "max_num_seqs", 2)))
        q_lens, kv_lens = ar.long_lengths(draw, claims, num_seqs, page_size, q_len_options, max_kv)
    elif variant.long:
        q_lens, kv_lens = ar.lengths(draw, claims, variant.reach, page_size, q_len_options, max_kv)
        num_seqs = len(q_lens)
    else:
        num_seqs = draw(st.integers(1, constraints.upper(claims, "max_num_seqs", max_seqs)))
        if variant.values == "range":   # every sequence has rows: the column's values are in its logits
            q_len_options = ar.q_lens_admitted(claims, (1, 2, 3), q_len_options)
        q_lens = [draw(sampled_from(q_len_options)) for _ in range(num_seqs)]
        assume(max(q_lens) <= max_kv)
        kv_lens = [q + draw(st.integers(0, max(0, min(max_context, max_kv - q)))) for q in q_lens]
    spare_rows = draw(st.integers(0, 1))       # kv_lens / page_indices rows past num_seqs
    used = [_cdiv(n, page_size) for n in kv_lens]
    pages_per_seq = max(used + [1]) + draw(st.integers(0, 1))
    spare_pages = draw(st.integers(1, 2))
    num_pages = sum(used) + spare_pages
    if dim and shape["pool"] > num_pages:
        # a pool at real scale: the sequences' pages take its highest ids, the spare ones below them
        num_pages = shape["pool"]
        physical = list(range(num_pages - 1, num_pages - 1 - sum(used), -1)) + list(range(spare_pages))
    else:
        physical = shuffled(draw, num_pages)   # shuffled page table (PA-10)
    assume(num_pages <= constraints.upper(claims, "max_pages", num_pages))
    pad_rows = draw(st.integers(0, 2))

    S = num_seqs + spare_rows
    spare_page = physical[sum(used)]
    page_indices = np.full((S, pages_per_seq), spare_page, dtype=np.int32)
    cursor = 0
    for i, n in enumerate(used):
        page_indices[i, :n] = physical[cursor:cursor + n]
        cursor += n
    cu = np.zeros(S + 1, dtype=np.int32)
    cu[1:num_seqs + 1] = np.cumsum(q_lens)
    cu[num_seqs + 1:] = cu[num_seqs]
    kv = np.full(S, pages_per_seq * page_size, dtype=np.int32)  # rows past num_seqs: ignored (PA-5)
    kv[:num_seqs] = kv_lens
    T = int(cu[num_seqs]) + pad_rows

    kwargs = {}
    if variant.values != "range" and draw(st.booleans()):
        kwargs["sm_scale"] = draw(sampled_from((0.5, 1.0, 0.125, 2.0)))
    q_max_exp = 1
    if dim and shape["window"]:
        kwargs["sliding_window"] = shape["window"]
    elif dim and "sliding_window" in variant.features:   # on, masking the oldest key, not the large part
        window = max(1, max(kv_lens + [2]) - 1)
        if constraints.admits(claims.limits.get("sliding_window"), window):   # else off: below a claimed minimum (PA-54)
            kwargs["sliding_window"] = window
    elif "sliding_window" in variant.features:
        longest = max(kv_lens + [1])
        near = sorted({max(1, n + d) for n in kv_lens for d in (-1, 0, 1)})
        window = draw(st.one_of(st.integers(1, 3), st.sampled_from(near), st.integers(1, longest + 1)))
        if not constraints.admits(claims.limits.get("sliding_window"), window):   # a minimum window claimed
            window = pick(draw, constraints.allowed(claims, "sliding_window", (1, 2, 3, *near, longest + 1),
                                                    "sliding window"), "sliding window")
        kwargs["sliding_window"] = window
    if "soft_cap" in variant.features:
        kwargs["soft_cap"] = draw(sampled_from((5.0, 1.0, 30.0)))
        if draw(st.booleans()):
            q_max_exp = 9   # huge logits: |s| far beyond the cap, tanh must saturate (PA-16)
    quantized = dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype))
    if quantized:
        kwargs["k_scale"] = draw(sampled_from(SCALES))
        kwargs["v_scale"] = draw(sampled_from(SCALES))
    scale_shape = _scale_shape(variant, num_pages, page_size, hkv)
    sink_mode = draw(sampled_from(("finite", "one_minus_inf"))) if "sinks" in variant.features else None
    options = ar.range_options(draw, claims, variant.regime) if variant.values == "range" else {}
    if "return_scores" in variant.features:
        kwargs["return_scores"] = True
    if shards > 1:
        kwargs["num_shards"] = shards

    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    q = floats(rng, (T, hq, head_dim), q_dtype, max_exp=q_max_exp)
    k_pages = floats(rng, (num_pages, page_size, hkv, head_dim), kv_dtype)
    v_pages = floats(rng, (num_pages, page_size, hkv, head_dim), kv_dtype)
    if scale_shape is not None:   # PA-48: one scale per KV head, or per token slot and KV head
        kwargs["k_scale"] = rng.choice(np.array(SCALES, np.float32), size=scale_shape)
        kwargs["v_scale"] = rng.choice(np.array(SCALES, np.float32), size=scale_shape)
    if sink_mode is not None:
        sinks = (rng.standard_normal(hq) * 2).astype(np.float32)
        if sink_mode == "one_minus_inf":
            sinks[rng.integers(0, hq)] = -np.inf
        kwargs["sinks"] = sinks

    inputs = dict(q=q, k_pages=k_pages, v_pages=v_pages, kv_lens=kv, page_indices=page_indices,
                  cu_q_lens=cu, num_seqs=num_seqs, **kwargs)
    if variant.values == "range":
        inputs = ar.range_values(rng, inputs, q_lens, options, late=bool(variant.regime))
    if quantized:   # NU-PA6: dequantized K/V within q's range (a kernel may hold them in q's dtype, PA-19)
        limit = float(dtypes.max_finite(dtypes.resolve_dtype(q_dtype)))
        for pages, scale in (("k_pages", "k_scale"), ("v_pages", "v_scale")):
            inputs[pages] = dequantized_within(inputs[pages], inputs[scale], limit)
    params = dict(dtype=q_dtype, kv_dtype=kv_dtype, page_size=page_size, head_dim=head_dim, hq=hq, hkv=hkv,
                  num_seqs=num_seqs, q_lens=q_lens, kv_lens=kv_lens, variant=variant.name)
    if options:
        params["range"] = sorted(options)
    if shards > 1:
        params["num_shards"] = shards
    case = Case("ragged_paged_attention", inputs, params, seed,
                poison=attention_poison_regions(inputs, used, physical[sum(used):]))
    return in_layout(case, variant.layout) if variant.layout else case


def _with_sharded_features(draw, claims: OpClaims, variant: Variant) -> Variant:
    """`variant` with each claimed feature of SHARDED_FEATURES turned on or off by a draw (per-head
    scales bring quantized KV with them): what the shards split or sum must be split and summed right."""
    extra = []
    for name in SHARDED_FEATURES:
        needs = ("quantized_kv", name) if name == "per_head_scales" else (name,)
        if all(f in claims.features for f in needs) and draw(st.booleans()):
            extra += [f for f in needs if f not in extra]
    return dataclasses.replace(variant, features=variant.features + tuple(extra))
