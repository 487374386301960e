"""Strategies and comparison contract for the paged-attention family (spec/paged_attention.md).

Ops: `ragged_paged_attention`, `write_kv`. Everything drawn stays inside what the backend claims
(dtypes, KV dtypes, page sizes, head dims, features); a variant whose claimed space is empty skips as
`unsupported`. Every don't-care location holds poison (NaN, or -128 for int8 pages): padding rows of q
(PA-25), slots past kv_len in the last used page, pages no sequence uses, page-table entries past
cdiv(kv_len, page_size) and rows of sequences >= num_seqs (PA-5, PA-24); for `write_kv`, the k/v rows of
skipped tokens (PA-41). Sizes stay small so interpreters run an example in well under a second.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes
from kvconform.reference.kv_layouts import canonical_kv, to_layout

from kvconform.conformance.engine import strided, tolerance
from kvconform.conformance.engine.case import Case, PoisonRegion
from .variations import narrowed, rows_dropped, widened, without
from . import attention_reach as ar
from . import dimension_reach as dr
from . import constraints
from . import goldens
from .values import dequantized_within, floats, pick, quantization_ties, sampled_from, seeds

Q_DTYPES = ("float32", "bfloat16", "float16", "float64")
FLOAT_KV_DTYPES = ("float32", "bfloat16", "float16", "float64")
QUANT_KV_DTYPES = ("float8_e4m3fn", "float8_e5m2", "int8")
DEFAULT_PAGE_SIZES = (2, 1, 4, 8)      # used when the backend accepts any page size
DEFAULT_HEAD_DIMS = (4, 8, 6, 16)      # idem; 6 is a non-power of two
SCALES = (0.5, 2.0, 0.125, 1.5, 0.0390625)  # float32-exact, never 1 so an ignored scale shows
#: scales whose reciprocal is not a float32: x / s and x * fl32(1/s) differ near rounding ties (PA-44)
BOUNDARY_SCALES = (0.1, 3.0, 0.7, 0.013)


@dataclass(frozen=True)
class Variant:
    """One column of the features matrix: the options a differential test turns on."""
    name: str
    features: tuple[str, ...]
    clauses: tuple[str, ...]
    reach: str = ""       # a size regime of REACH ("keys", "pages", ...): few examples of large shapes
    values: str = ""      # "range": inputs at the magnitudes real models produce (spec: "Reach")
    layout: str = ""      # the cache handed to the op in this layout (PA-39), when claimed

    @property
    def long(self) -> bool:
        """A size-reach column: long sequences, many pages, heads, head dims or rows."""
        return bool(self.reach)

    def __str__(self) -> str:
        return self.name


ATTENTION_VARIANTS = (
    Variant("base", (), ("PA-6", "PA-7", "PA-10", "PA-12", "PA-14")),
    Variant("sliding_window", ("sliding_window",), ("PA-15",)),
    Variant("soft_cap", ("soft_cap",), ("PA-16",)),
    Variant("sinks", ("sinks",), ("PA-17",)),
    Variant("quantized_kv", ("quantized_kv",), ("PA-18", "PA-19")),
    Variant("return_scores", ("return_scores",), ("PA-21", "PA-22", "PA-23")),
    # Features interact in real kernels (the cap before the window mask, the sink in a split-KV
    # combine, scales with a cap): one column turns them all on together.
    # (float KV too: quantized only where claimed, so float-only kernels get the three options together)
    Variant("combined", ("sliding_window", "soft_cap", "sinks"),
            ("PA-15", "PA-16", "PA-17", "PA-18", "PA-19")),
    # Size reach (spec "Reach: sizes and values drawn"): each column crosses one group of thresholds with few
    # examples; `long` is hundreds of keys (multi-block online softmax, split-KV and its combine).
    Variant("long", (), ("PA-6", "PA-7", "PA-14", "PA-51"), reach="keys"),
    Variant("long_pages", (), ("PA-10", "PA-11", "PA-51"), reach="pages"),
    Variant("long_page_size", (), ("PA-10", "PA-51"), reach="page_size"),
    Variant("long_heads", (), ("PA-12", "PA-51"), reach="heads"),
    Variant("long_head_dim", (), ("PA-14", "PA-51"), reach="head_dim"),
    Variant("long_batch", (), ("PA-4", "PA-5", "PA-51"), reach="batch"),
    # Value reach: logits past float16's range, Gemma-2's soft caps, dominating sinks, fp8/int8 caches at
    # their largest values (each option where claimed)
    Variant("range", (), ("PA-14", "PA-16", "PA-17", "PA-19", "PA-52", "NU-PA5"), values="range"),
    # scales per KV head and per token and head beside the pages (PA-48)
    Variant("per_head_scales", ("quantized_kv", "per_head_scales"), ("PA-18", "PA-19", "PA-48")),
    Variant("per_token_scales", ("quantized_kv", "per_token_scales"), ("PA-18", "PA-19", "PA-48")),
    # head counts where TPU-style head blocks split the KV heads (PA-47): 8, 16, 32 KV heads
    Variant("many_kv_heads", (), ("PA-12", "PA-47")),
    Variant("combined_layout", (), ("PA-36", "PA-39"), layout="combined"),
    Variant("flat_layout", (), ("PA-37", "PA-39"), layout="flat"),
    # KV heads split over devices, each shard with its query heads (PA-49); Hkv in {n, 2n}
    Variant("head_sharding", ("head_sharding",), ("PA-12", "PA-49")),
)
#: the generated reach columns (strategies/dimension_reach.py): `reach_<dimension>` for every dimension of the
#: registry that carries a threshold mutant, that dimension past every tile, the claimed features on
DIM_REACH = "dim:"
DIM_REACH_FEATURES = ("sliding_window", "soft_cap", "sinks")
ATTENTION_VARIANTS += tuple(Variant(f"reach_{d}", (), ("PA-6", "PA-7", "PA-10", "PA-12", "PA-14", "PA-51", "NU-15"),
                                    reach=f"{DIM_REACH}{d}") for d in dr.columns("ragged_paged_attention"))
WRITE_VARIANTS = (
    Variant("base", (), ("PA-41", "PA-43", "PA-45")),
    Variant("quantized_kv", ("quantized_kv",), ("PA-44",)),
    Variant("per_head_scales", ("quantized_kv", "per_head_scales"), ("PA-44", "PA-48")),
    Variant("per_token_scales", ("quantized_kv", "per_token_scales"), ("PA-44", "PA-48")),
    # key rows past the slot mapping (serving stacks pad k/v for captured graphs, PA-50)
    Variant("padded_tokens", (), ("PA-41", "PA-50")),
    Variant("long", (), ("PA-40", "PA-51"), reach="tokens"),
    # values at and past the storage format's limits, scales near the smallest normal (quantized pools where
    # claimed)
    Variant("range", (), ("PA-43", "PA-44", "PA-52", "NU-PA5"), values="range"),
)
WRITE_VARIANTS += tuple(Variant(f"reach_{d}", (), ("PA-40", "PA-41", "PA-51", "NU-15"), reach=f"{DIM_REACH}{d}")
                       for d in dr.columns("write_kv") if d != "pool_slots")   # slots: the pool_pages column
#: the long column's share of the profile's examples (ci: 3): each long call costs far more
LONG_BUDGET = 0.12
#: the other size-reach columns: one example each in ci (round(25 * 0.04)), ten in thorough
REACH_BUDGET = 0.04
RANGE_BUDGET = 0.08         # the range column: base-sized calls, 2 examples in ci (the first: 16-bit)
PADDED_BUDGET = 0.2         # write_kv's padded_tokens column: one form of the base column, 5 examples in ci

#: integer poison for metadata PA-24 / PA-5 declare ignored: far out of range of any page pool or length
METADATA_POISON = np.int32(2 ** 30)


def _claimed(options, claimed, what: str, variant: Variant):
    chosen = tuple(o for o in options if o in (claimed or ()))
    if not chosen:
        pytest.skip(f"unsupported: no claimed {what} for variant {variant.name} "
                    f"(claims: {list(claimed or [])})")
    return chosen


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


#: query heads per KV head (PA-12): non-powers of two (3, 6: Qwen's 12/2) and Llama's 32/8 = 4, up to 8
GROUP_SIZES = (1, 2, 3, 4, 6, 8)
#: KV head counts of the many_kv_heads column: blocks of 8 * packing combined rows split them (PA-47)
MANY_KV_HEADS = (8, 16, 32)
MANY_HEADS_BUDGET = 0.3


def example_share(variant: Variant) -> float:
    """The share of the profile's examples a differential test of `variant` runs (the harness budget):
    size-reach columns are few examples of large shapes, the range column base-sized calls."""
    if variant.reach == "keys":
        return LONG_BUDGET
    if variant.long:
        return REACH_BUDGET
    if variant.values:
        return RANGE_BUDGET
    if variant.name == "padded_tokens":
        return PADDED_BUDGET
    if variant.name in ("many_kv_heads", "head_sharding"):
        return MANY_HEADS_BUDGET
    return 1.0


#: shard counts of the head_sharding column when the backend states no `num_shards` limit (2, 4, 8 chips)
DEFAULT_SHARDS = (2, 4, 8)
#: KV heads per shard in the head_sharding column (PA-49): one (8 KV heads on 8 chips), two and four
KV_HEADS_PER_SHARD = (1, 2, 4)
#: features whose inputs are split with the heads (sinks per query head, scales per KV head) or summed
#: over shards (scores): the head_sharding column turns each on at random where claimed (PA-49)
SHARDED_FEATURES = ("sinks", "return_scores", "per_head_scales")


def _head_counts(claims: OpClaims, variant: Variant, shards: int = 1) -> tuple[tuple[int, int], ...]:
    """(Hkv, group) pairs within the head-count claims: Hkv 1..3 (Hkv = 1: one KV head for all), groups
    of GROUP_SIZES where `gqa` is claimed (else 1), Hq = Hkv * group within num_q_heads. Split over
    `shards` > 1 devices (PA-49): Hkv = shards * KV_HEADS_PER_SHARD, one, two or four KV heads per shard. The
    long_heads column draws attention_reach.REACH_HEADS and the head counts a claim lists past them."""
    if variant.reach == "heads":
        return ar.head_counts(claims)
    if shards > 1:
        hkvs = constraints.allowed(claims, "num_kv_heads", tuple(shards * n for n in KV_HEADS_PER_SHARD),
                                   "KV head count")
        hkvs = tuple(h for h in hkvs if h % shards == 0)
        groups = GROUP_SIZES
    elif variant.name == "many_kv_heads":
        hkvs = constraints.allowed(claims, "num_kv_heads", MANY_KV_HEADS, "KV head count")
        groups = (1, 2, 3)
    else:
        hkvs = constraints.allowed(claims, "num_kv_heads", range(1, 3 if variant.long else 4), "KV head count")
        groups = GROUP_SIZES[:3] if variant.long else GROUP_SIZES
    groups = constraints.allowed(claims, "group_size", groups if "gqa" in claims.features else (1,), "group size")
    pairs = tuple((h, g) for h in hkvs for g in groups if constraints.admits(claims.limits.get("num_q_heads"), h * g))
    if not pairs:
        pytest.skip(f"unsupported: no (Hkv, group) within the claimed head-count limits {dict(claims.limits)}")
    return pairs


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
        variant = dataclasses.replace(variant, features=dr.features_on(draw, claims, DIM_REACH_FEATURES))
        page_size, head_dim, hkv, group = shape["page_size"], shape["head_dim"], shape["hkv"], shape["group"]
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
        physical = draw(st.permutations(range(num_pages)))   # shuffled page table (PA-10)
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
    options = ar.range_options(draw, claims) if variant.values == "range" else {}
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
        inputs = ar.range_values(rng, inputs, q_lens, options)
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
        order = draw(st.permutations(list(slots) + [-1] * (n - live)))
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
        boundary = draw(st.integers(0, 2)) > 0   # booleans() came out True in only ~1 draw in 5 here
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
    if variant.values == "range":
        k, v = (ar.past_limits(rng, a, kv_dtype, kwargs.get(s)) for a, s in ((k, "k_scale"), (v, "v_scale")))
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


# --- comparison contract (spec/numerics.md) ------------------------------------------------------

#: NU-PA2: scores feed eviction's float64 accumulation; they are sums of float32 probabilities
SCORES_PRECISION = "float32"


def required_out_precision(x: dict) -> str:
    """NU-3 / NU-PA1: `out` must hold at least the precision of q (a wider dtype is allowed, and is
    judged with the same bound: tolerance never follows the returned dtype)."""
    return dtypes.dtype_name(x["q"].dtype)


def _sequence_bounds(x: dict, i: int):
    """(V_i, S_i, n_i) of spec/numerics.md "Paged attention", over the keys some row of sequence i sees."""
    kv_len = int(x["kv_lens"][i])
    q_len = int(x["cu_q_lens"][i + 1] - x["cu_q_lens"][i])
    window = x.get("sliding_window")
    n_i = kv_len if window is None else min(kv_len, int(window))
    if q_len == 0 or kv_len == 0:
        return 0.0, 0.0, n_i
    page_size = x["k_pages"].shape[1]
    first = kv_len - q_len                       # position of row 0 (PA-6)
    lo = 0 if window is None else max(0, first - int(window) + 1)
    tokens = np.arange(lo, kv_len)
    where = (x["page_indices"][i, tokens // page_size], tokens % page_size)
    k = np.abs(dequantized(x["k_pages"], x.get("k_scale"), where))          # [n, Hkv, D]
    v = dequantized(x["v_pages"], x.get("v_scale"), where)
    q = np.abs(dtypes.upcast(x["q"][x["cu_q_lens"][i]:x["cu_q_lens"][i + 1]]))  # [q_len, Hq, D]
    group = q.shape[1] // k.shape[1]
    # sum_d |q||k| per query head h and the KV head h // group, without repeating k per query head (128
    # copies of every key at MLA's one KV head: gigabytes at thousands of keys)
    dots = np.einsum("tkgd,jkd->tkgj", q.reshape(q.shape[0], k.shape[1], group, q.shape[2]), k,
                     optimize=True).reshape(q.shape[0], q.shape[1], k.shape[0])
    pos = first + np.arange(q_len)[:, None]
    visible = (tokens[None, :] <= pos) & (True if window is None else tokens[None, :] > pos - int(window))
    sm = x.get("sm_scale") or x["q"].shape[2] ** -0.5
    S_i = float(sm * np.max(np.where(visible[:, None, :], dots, 0.0)))
    return float(np.max(np.abs(v))), S_i, n_i


def dequantized(pages: np.ndarray, scale, where) -> np.ndarray:
    """float64 values of the tokens at `where` = (pages, slots), with a scalar, per-head or per-token
    scale (PA-19, PA-48)."""
    values = dtypes.upcast(pages[where])
    if scale is None:
        return values
    if np.ndim(scale) == 0:
        return values * np.float64(np.float32(scale))
    scale = np.asarray(scale, np.float64)
    return values * (scale[None, :, None] if scale.ndim == 1 else scale[where][:, :, None])


def attention_checks(case: Case, expected: dict, actual: dict) -> dict:
    """NU-PA1 for `out` (valid rows only, PA-25), NU-PA2 for `scores` (j < kv_len_i, i < num_seqs), and
    exact zeros elsewhere in `scores` (PA-23)."""
    x = canonical_inputs(case.inputs)
    n = int(x["num_seqs"])
    cu = np.asarray(x["cu_q_lens"])
    q_dtype = dtypes.dtype_name(x["q"].dtype)
    kv_dtype = dtypes.dtype_name(x["k_pages"].dtype)
    u_acc, u_cmp = tolerance.U_ACC, tolerance.u(q_dtype)
    wider = kv_dtype not in QUANT_KV_DTYPES and tolerance.eps(kv_dtype) < tolerance.eps(q_dtype)
    u_kv = u_cmp if kv_dtype in QUANT_KV_DTYPES or wider else 0.0
    D = x["q"].shape[2]
    c = 8.0
    out_dtype = required_out_precision(x)
    u_out = tolerance.u(out_dtype)
    atol = np.zeros(expected["out"].shape[0])
    rows = np.zeros(expected["out"].shape, dtype=bool)
    score_rtol = np.zeros(expected["scores"].shape) if "scores" in expected else None
    score_atol = np.zeros_like(score_rtol) if score_rtol is not None else None
    for i in range(n):
        V, S, n_i = _sequence_bounds(x, i)
        E = S * (2 * u_kv + (c * math.sqrt(D) + 2) * u_acc)
        if x.get("soft_cap"):
            E += 4 * u_acc * float(x["soft_cap"])
        atol[cu[i]:cu[i + 1]] = V * (2 * E + 2 * u_cmp + u_kv + c * math.sqrt(n_i) * u_acc + 4 * u_acc)
        rows[cu[i]:cu[i + 1]] = True
        if score_rtol is not None:
            R = x["q"].shape[1] * int(cu[i + 1] - cu[i])
            u_s = tolerance.u(SCORES_PRECISION)
            score_rtol[i] = 2 * E + 2 * u_cmp + c * (math.sqrt(n_i) + math.sqrt(R)) * u_acc + 2 * u_s
            score_atol[i] = R * 2.0 ** -126
    checks = {"out": (tolerance.reduction(out_dtype, atol[:, None, None], 2 * u_out,
                                          f"NU-PA1: out {out_dtype}, q {q_dtype}, KV {kv_dtype}"), rows)}
    if score_rtol is not None:
        mask = np.zeros(expected["scores"].shape, dtype=bool)
        kv_lens = np.asarray(x["kv_lens"])
        for i in range(n):
            if cu[i + 1] > cu[i]:
                mask[i, :kv_lens[i]] = True
        s_dtype = SCORES_PRECISION
        checks["scores"] = (tolerance.reduction(s_dtype, score_atol, score_rtol, "NU-PA2"), mask)
        checks["scores:zeros"] = (tolerance.ulp_bounded(s_dtype, 0, 0.0, "PA-23: exactly 0"), ~mask)
    return checks


def write_kv_checks(case: Case, expected: dict, actual: dict) -> dict:
    """Both pools exact, bit for bit (class E): stored values (PA-43, PA-44) and untouched rest (PA-45)."""
    return {name: (tolerance.exact(), None) for name in expected}


CHECKS = {"ragged_paged_attention": attention_checks, "write_kv": write_kv_checks}


# --- diagnosis variations (conformance/diagnosis.py) ----------------------------------------------

def _attention_diagnosis(case: Case) -> list:
    """Each optional feature off, narrow inputs widened exactly, quantized KV dequantized."""
    x = case.inputs
    found = [without(case, "sliding_window off", sliding_window=None),
             without(case, "soft_cap off", soft_cap=None),
             without(case, "sinks off", sinks=None),
             without(case, "scores off", return_scores=None),
             without(case, "unsharded (num_shards=1)", num_shards=None),
             widened(case, ("q",), "q widened to float32"),
             widened(case, ("k_pages", "v_pages"), "K/V widened to float32"),
             narrowed(case, ("q",), "q values rounded to bfloat16 (dtype kept)"),
             narrowed(case, ("k_pages", "v_pages"), "K/V values rounded to bfloat16 (dtype kept)"),
             rows_dropped(case, "padding rows off", ("q",),
                          np.arange(len(x["q"])) < int(np.asarray(x["cu_q_lens"])[int(x["num_seqs"])])),
             _without_empty_sequences(case)]
    if x.get("kv_layout", "separate") != "separate":
        found.append(("cache in the separate layout", dict_case(case, canonical_inputs(x))))
        return [v for v in found if v is not None]
    if dtypes.is_quantized_dtype(x["k_pages"].dtype):
        if np.ndim(x.get("k_scale")) == 0:
            plain = dict(k_pages=dtypes.upcast(x["k_pages"], x.get("k_scale")).astype(np.float32),
                         v_pages=dtypes.upcast(x["v_pages"], x.get("v_scale")).astype(np.float32))
            found.append(without(dict_case(case, plain), "KV dequantized to float32", k_scale=None, v_scale=None))
        else:
            found.append(without(case, "one scale per tensor", k_scale=np.float32(np.ravel(x["k_scale"])[0]),
                                 v_scale=np.float32(np.ravel(x["v_scale"])[0])))
    return [v for v in found if v is not None]


def _without_empty_sequences(case: Case) -> tuple[str, Case] | None:
    """A variation without the counted sequences that have no query row (PA-8 allows them): their
    kv_lens and page_indices rows dropped and num_seqs lowered; the q rows stay as they are."""
    x = case.inputs
    n, cu = int(x["num_seqs"]), np.asarray(x["cu_q_lens"])
    keep = np.ones(len(np.asarray(x["kv_lens"])), bool)
    keep[:n] = np.diff(cu[:n + 1]) > 0
    if keep[:n].all() or not keep[:n].any():
        return None
    kept_cu = np.concatenate([cu[:1], cu[1:n + 1][keep[:n]], cu[n + 1:]]).astype(cu.dtype)
    return "sequences without query rows dropped", dict_case(case, dict(
        kv_lens=np.asarray(x["kv_lens"])[keep], page_indices=np.asarray(x["page_indices"])[keep],
        cu_q_lens=kept_cu, num_seqs=int(keep[:n].sum())))


def _write_kv_diagnosis(case: Case) -> list:
    x = case.inputs
    found = [widened(case, ("k", "v"), "k/v widened to float32")]
    if x.get("k_scale") is not None:
        pow2 = {s: (2.0 ** np.round(np.log2(np.asarray(x[s], np.float64)))).astype(np.float32)
                for s in ("k_scale", "v_scale")}
        found.append(without(case, "power-of-two scales", **pow2))
        if np.ndim(x["k_scale"]):
            found.append(without(case, "one scale per tensor", k_scale=np.float32(np.ravel(x["k_scale"])[0]),
                                 v_scale=np.float32(np.ravel(x["v_scale"])[0])))
    return [v for v in found if v is not None]


def dict_case(case: Case, replace: dict) -> Case:
    return Case(case.op, {**case.inputs, **replace}, dict(case.params), case.seed)


DIAGNOSIS = {"ragged_paged_attention": _attention_diagnosis, "write_kv": _write_kv_diagnosis}
#: inputs the history property redraws (same shapes and metadata, other values)
HISTORY_INPUTS = {"ragged_paged_attention": ("q", "k_pages", "v_pages"),
                  "write_kv": ("k", "v", "k_pages", "v_pages")}
#: what a golden's case uses (features, claim space), conformance/goldens.py
USES = {"ragged_paged_attention": goldens.uses, "write_kv": goldens.write_uses}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: per op, the columns its strided cases are drawn from, the first one claimed: the combined options
#: bring a sinks array and quantized pages, per-token scales two [pages, page_size, Hkv] scale arrays
STRIDED = {"ragged_paged_attention": strided.columns(attention_cases,
                                                     *strided.named(ATTENTION_VARIANTS, "combined", "base")),
           "write_kv": strided.columns(write_kv_cases, *strided.named(WRITE_VARIANTS, "per_token_scales", "base"))}
