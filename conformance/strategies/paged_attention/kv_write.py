"""`write_kv` cases (spec/paged_attention.md PA-40 .. PA-50)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case, PoisonRegion
from kvconform.reference import dtypes

from .. import attention_reach as ar
from .. import constraints
from .. import dimension_reach as dr
from ..values import floats, pick, quantization_ties, sampled_from, seeds, shuffled
from .columns import (BOUNDARY_SCALES, DEFAULT_HEAD_DIMS, DEFAULT_PAGE_SIZES, DIM_REACH, FLOAT_KV_DTYPES, Q_DTYPES,
                      QUANT_KV_DTYPES, SCALES, Variant, _cdiv)
from .inputs import _scale_shape, token_scales, with_scale_regions


@st.composite
def write_kv_cases(draw, claims: OpClaims, variant: Variant, *, max_tokens: int = 6):
    """A valid `write_kv` call: distinct slots, some skipped (-1), pools holding poison that must stay.
    The padded_tokens column hands k/v with more rows than slot_mapping entries (PA-50); the long column
    hundreds of tokens of wide rows (Hkv * D past one 1024-element block) into pages that are not powers
    of two; the range column values at and past the storage format's limits (PA-52)."""
    pool = QUANT_KV_DTYPES if "quantized_kv" in variant.features else FLOAT_KV_DTYPES
    x_dtypes = Q_DTYPES
    if variant.values == "range":   # quantized pools first (their limits), float32 activations (the widest)
        pool = tuple(sorted(FLOAT_KV_DTYPES + (QUANT_KV_DTYPES if "quantized_kv" in claims.features else ()),
                            key=ar.RANGE_WRITE_POOLS.index))
    x_dtype, kv_dtype = pick(draw, constraints.dtype_pairs(claims, x_dtypes, pool, f"variant {variant.name}"),
                             "(k/v, KV) dtypes")
    if variant.long:
        sizes = ar.first_non_pow2(claims.page_sizes) if claims.page_sizes else \
            constraints.reach(claims, "page_size", ar.BIG_PAGE_SIZES + (12,), "page size")
        dims = ar.first_non_pow2(claims.head_dims) if claims.head_dims else \
            constraints.reach(claims, "head_dim", ar.REACH_WRITE_HEAD_DIMS, "head dim")
        heads = constraints.reach(claims, "num_kv_heads", ar.REACH_WRITE_KV_HEADS, "KV head count")
    else:
        sizes = constraints.allowed(claims, "page_size", claims.page_sizes or DEFAULT_PAGE_SIZES)
        dims = constraints.allowed(claims, "head_dim", claims.head_dims or DEFAULT_HEAD_DIMS)
        heads = constraints.allowed(claims, "num_kv_heads", range(1, 4), "KV head count")
    page_size = pick(draw, sizes, "page size")
    head_dim = pick(draw, dims, "head dim")
    hkv = pick(draw, heads, "Hkv")
    if variant.reach.startswith(DIM_REACH):
        # a generated reach column: one dimension large; every token written, into the pool's highest pages
        shape = dr.write_shape(draw, claims, "write_kv", variant.reach[len(DIM_REACH):])
        page_size, head_dim, hkv, n, num_pages = (shape[k] for k in ("page_size", "head_dim", "hkv", "tokens",
                                                                     "num_pages"))
        capacity = num_pages * page_size
        slot_rng = np.random.default_rng(draw(seeds))
        last = min(capacity, max(n, 4 * page_size))
        slot_mapping = (capacity - 1 - slot_rng.permutation(last)[:n]).astype(np.int32)
    elif variant.long:
        # Hundreds of tokens (attention_reach.REACH_WRITE_TOKENS), most written, slots from a seed (a drawn
        # list of hundreds of unique slots would make shrinking crawl); pools of one page and more
        n = draw(st.integers(*ar.REACH_WRITE_TOKENS))
        num_pages = min(_cdiv(n, page_size) + draw(st.integers(0, 1)), constraints.upper(claims, "max_pages", 1 << 20))
        capacity = num_pages * page_size
        live = min(n - draw(st.integers(0, 8)), capacity)
        slot_rng = np.random.default_rng(draw(seeds))
        slot_mapping = np.full(n, -1, np.int32)
        slot_mapping[slot_rng.permutation(n)[:live]] = slot_rng.choice(capacity, live, replace=False)
    else:
        num_pages = draw(st.integers(1, constraints.upper(claims, "max_pages", 3)))
        capacity = num_pages * page_size
        # A list of unique slots drawn freely is empty in ~60% of Hypothesis's draws, so most calls would
        # write nothing: the token count and the written count are drawn instead, a call writing nothing
        # (no tokens, or only skipped ones) stays about one draw in 16.
        n = 0 if draw(st.integers(0, 15)) == 15 else draw(st.integers(1, min(max_tokens, capacity + 2)))
        live = draw(st.integers(min(n, 1), min(n, capacity)))
        if n and draw(st.integers(0, 15)) == 15:
            live = 0
        slots = draw(st.lists(st.integers(0, capacity - 1), min_size=live, max_size=live, unique=True))
        order = shuffled(draw, list(slots) + [-1] * (n - live))
        slot_mapping = np.asarray(order, dtype=np.int32).reshape(-1)
    padding = draw(st.integers(1, 8)) if variant.name == "padded_tokens" else 0   # key rows past N (PA-50)
    kwargs = {}
    big = 1
    boundary = False
    quantized = dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype))
    if quantized:
        scales = ar.RANGE_WRITE_SCALES if variant.values == "range" else SCALES + BOUNDARY_SCALES
        kwargs["k_scale"] = draw(sampled_from(scales))
        kwargs["v_scale"] = draw(sampled_from(scales))
        big = 9   # reach saturation of the storage format (PA-44)
        # values within an ulp of the format's rounding ties and saturation edges (PA-44)
        # (booleans() came out True in only ~1 draw in 5 here); a crossed column keeps its first tiles tame
        boundary = draw(st.integers(0, 2)) > 0 and not variant.regime
    scale_shape = _scale_shape(variant, num_pages, page_size, hkv)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    k_pages = floats(rng, (num_pages, page_size, hkv, head_dim), kv_dtype)
    v_pages = floats(rng, (num_pages, page_size, hkv, head_dim), kv_dtype)
    rows = len(slot_mapping) + padding
    k = floats(rng, (rows, hkv, head_dim), x_dtype, max_exp=big)
    v = floats(rng, (rows, hkv, head_dim), x_dtype, max_exp=big)
    if scale_shape is not None:   # PA-48: per KV head, or per slot and KV head beside the pages
        kwargs["k_scale"] = rng.choice(np.array(SCALES + BOUNDARY_SCALES, np.float32), size=scale_shape)
        kwargs["v_scale"] = rng.choice(np.array(SCALES + BOUNDARY_SCALES, np.float32), size=scale_shape)
    if boundary:
        k, v = (quantization_ties(rng, a, kv_dtype, token_scales(kwargs[s], slot_mapping, page_size, padding))
                for a, s in ((k, "k_scale"), (v, "v_scale")))
    if variant.values == "range":   # crossed (NU-15): the limits only on the tokens past the first tile
        late = dr.past_first_tiles(len(slot_mapping)) if variant.regime else 0
        for a, s in ((k, "k_scale"), (v, "v_scale")):
            a[late:] = ar.past_limits(rng, a[late:], kv_dtype, kwargs.get(s))
    inputs = dict(k_pages=k_pages, v_pages=v_pages, k=k, v=v, slot_mapping=slot_mapping, **kwargs)
    params = dict(dtype=x_dtype, kv_dtype=kv_dtype, page_size=page_size, head_dim=head_dim, hkv=hkv,
                  num_pages=num_pages, tokens=len(slot_mapping), variant=variant.name)
    if padding:
        params["padding_rows"] = padding
    # Skipped tokens and padding rows are never read (PA-41, PA-50); unwritten slots keep whatever they hold,
    # poison included, bit for bit (PA-45).
    skipped = np.flatnonzero(slot_mapping < 0)
    unwritten = np.ones(num_pages * page_size, dtype=bool)
    unwritten[slot_mapping[slot_mapping >= 0]] = False
    keep = (unwritten & (rng.random(unwritten.size) < 0.5)).reshape(num_pages, page_size)
    poison = tuple(PoisonRegion("skipped_tokens", name, (skipped,), "PA-41", "k/v rows of skipped tokens")
                   for name in ("k", "v")) + \
        tuple(PoisonRegion("padding_rows", name, (slice(len(slot_mapping), None),), "PA-50",
                           "k/v rows past the slot mapping") for name in ("k", "v") if padding) + \
        tuple(PoisonRegion("unwritten_slots", name, keep, "PA-45", "pool slots no token writes")
              for name in ("k_pages", "v_pages"))
    poison = with_scale_regions(list(poison), inputs)
    return Case("write_kv", inputs, params, seed, poison=poison)
