"""Sizes and values of the attention family's reach columns (spec/paged_attention.md "Reach: sizes and
values drawn", PA-51, PA-52; spec/mla.md ML-11).

The size columns (`long`, `long_pages`, `long_page_size`, `long_heads`, `long_head_dim`, `long_batch`;
write_kv's `long`) draw few examples of large shapes, each crossing one group of thresholds where real
kernels switch code paths; the `range` columns draw inputs at the magnitudes real models produce. The first
option of each tuple below is what the ci profile's single example of a column draws (Hypothesis starts
from the simplest choice), so it crosses every threshold of its column at once; later options vary it.
Every draw stays within the claims, and listed claims widen the candidates (`constraints.reach`).
Used by strategies/paged_attention.py (and through it by the MLA and CSR strategies).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes

from . import constraints
from .values import finite_values, floats, sampled_from, seeds

# --- sizes -------------------------------------------------------------------------------------------

#: long column: keys per sequence when the backend documents no split-KV threshold (OpClaims.limits
#: "split_kv_min_keys"); several 16-token pages per kernel tile and several tiles per sequence, at most 40
#: pages (past 64 is the long_pages column's threshold)
LONG_KEYS = (300, 97, 160, 513)
LONG_MAX_KEYS = 640
LONG_PAGE_SIZES = (16, 32)  # when any page size is claimed: 640 keys stay within 40 pages
#: long_pages: page sizes of page tables longer than one 64-entry tile (kv_len > 64 * page_size, so small
#: pages), non-powers of two first; the powers of two serve claims that admit no other
REACH_PAGE_SIZES = (12, 5, 3, 24, 48, 8, 16)
REACH_TABLE_TILE = 64       # page-table entries per tile: sequences use REACH_TABLE_TILE + 1 and more
REACH_MAX_KEYS = 2100       # past the native Triton split-KV threshold (2048 keys) in thorough runs
#: long_page_size: hybrid models' attention page sizes (vLLM sizes an attention page to hold one Mamba state
#: page: 528 tokens in vllm-project/vllm#37467, 672 for Nemotron-Nano-9B-v2 in #24280; 544 in issue 27)
BIG_PAGE_SIZES = (544, 528, 672)
#: long_head_dim: head dims of vLLM's paged-attention kernels (vllm/attention/ops/paged_attn.py
#: get_supported_head_sizes: 32, 64, 80, 96, 112, 120, 128, 192, 256): not-powers-of-two first
REACH_HEAD_DIMS = (80, 96, 112, 192, 64, 128, 256)
#: long_heads: (Hkv, group) pairs with 128 query heads (DeepSeek-V3's 128 heads) and groups past one
#: 16-row query tile (vLLM's unified attention uses BLOCK_M = 16 up to 16 query heads per KV head and
#: next_power_of_2(group) above): GQA 32 over 4 KV heads, MQA over 128, Llama-3.1-405B's 128/8, ...
REACH_HEADS = ((4, 32), (1, 128), (8, 16), (2, 64), (128, 1), (1, 32))
#: long_batch: decode rows in one call, from just past 128 sequences (a 7-step search, a 128-entry table) to
#: past 256 (8-bit sequence ids); serving engines capture decode batches of up to 256 or 512
REACH_BATCH = (129, 257)


def long_lengths(draw, claims: OpClaims, num_seqs: int, page_size: int, q_len_options, max_kv: int):
    """(q_lens, kv_lens) of the long column: decode rows and short prefills over hundreds of keys,
    on both sides of the backend's split-KV threshold when it documents one."""
    split = claims.limits.get("split_kv_min_keys")
    keys = LONG_KEYS if not split else (int(split), int(split) - 1, int(split) + page_size + 1,
                                        2 * int(split) + 3)
    keys = tuple(k for k in keys if k <= max_kv) or (max_kv,)
    first = tuple(q for q in (1, 17, 2) if constraints.admits(claims.limits.get("q_len"), q)) or q_len_options
    rest = tuple(q for q in (1, 0, 2, 17) if constraints.admits(claims.limits.get("q_len"), q)) or q_len_options
    q_lens, kv_lens = [], []
    for i in range(num_seqs):
        q_len = draw(sampled_from(rest if i else first))
        kv = draw(st.one_of(st.sampled_from(keys), st.integers(min(64, max_kv), min(LONG_MAX_KEYS, max_kv)))) \
            if i == 0 else draw(st.integers(min(q_len, max_kv), min(80, max_kv)))
        assume(q_len <= max_kv)
        q_lens.append(q_len)
        kv_lens.append(max(kv, q_len))
    return q_lens, kv_lens


def head_counts(claims: OpClaims) -> tuple[tuple[int, int], ...]:
    """long_heads: REACH_HEADS, then one KV head with each listed group size and each listed KV-head count
    past 16 with group 1 (a claim widens the column, constraints.reach); within every head-count claim."""
    gqa = "gqa" in claims.features
    listed = [(1, g) for g in constraints.listed(claims, "group_size") if g > 16] + \
             [(h, 1) for h in constraints.listed(claims, "num_kv_heads") if h > 16]
    limits = claims.limits
    pairs = tuple(dict.fromkeys(
        (h, g) for h, g in REACH_HEADS + tuple(listed)
        if (gqa or g == 1) and constraints.admits(limits.get("num_kv_heads"), h)
        and constraints.admits(limits.get("group_size"), g) and constraints.admits(limits.get("num_q_heads"), h * g)))
    if not pairs:
        pytest.skip(f"unsupported: no (Hkv, group) of the long_heads column {REACH_HEADS} within the claimed "
                    f"head-count limits {dict(limits)}")
    return pairs


def q_lens_admitted(claims: OpClaims, options, fallback) -> tuple[int, ...]:
    return tuple(q for q in options if constraints.admits(claims.limits.get("q_len"), q)) or tuple(fallback)


def first_non_pow2(sizes) -> tuple[int, ...]:
    """Claimed sizes, those that are not powers of two first (largest first among each kind)."""
    return tuple(sorted(sizes, key=lambda n: (n & (n - 1) == 0, -n)))


def page_sizes(claims: OpClaims, reach: str) -> tuple[int, ...]:
    """Page sizes a size-reach column draws: its reach sizes within the claims (a listed page_size limit
    widens them), or the claimed set (long_pages: smallest first, long_page_size: not powers of two first)."""
    if reach == "pages":
        if claims.page_sizes:
            return tuple(sorted(claims.page_sizes))
        return constraints.reach(claims, "page_size", REACH_PAGE_SIZES, "page size")
    if reach == "page_size":
        if claims.page_sizes:
            return first_non_pow2(claims.page_sizes)
        return constraints.reach(claims, "page_size", BIG_PAGE_SIZES, "page size")
    if reach == "batch":
        return constraints.allowed(claims, "page_size", claims.page_sizes or (4, 2))
    if reach == "keys":
        sizes = tuple(p for p in (claims.page_sizes or LONG_PAGE_SIZES) if p >= 4) or tuple(claims.page_sizes)
        return constraints.allowed(claims, "page_size", sizes)
    return constraints.allowed(claims, "page_size", claims.page_sizes or (16, 8))


def head_dims(claims: OpClaims, reach: str, column: str, top) -> tuple[int, ...]:
    """Head dims of a size-reach column: REACH_HEAD_DIMS for long_head_dim (claimed dims of 64 and more
    first when the claims list them), small dims for the others (what their thresholds do not need)."""
    if reach == "head_dim":
        dims = first_non_pow2([d for d in claims.head_dims if d >= 64] or claims.head_dims) \
            if claims.head_dims else constraints.reach(claims, "head_dim", REACH_HEAD_DIMS, "head dim")
    else:
        dims = constraints.allowed(claims, "head_dim", claims.head_dims or (8, 4))
    dims = tuple(d for d in dims if top is None or d <= top)
    if not dims:
        pytest.skip(f"unsupported: no head dim of the {column} column within max_head_dim={top}")
    return dims


def lengths(draw, claims: OpClaims, reach: str, page_size: int, q_len_options, max_kv: int):
    """(q_lens, kv_lens) of a size-reach column other than `long` (which `long_lengths` draws)."""
    max_seqs = constraints.upper(claims, "max_num_seqs", REACH_BATCH[1])
    fits = lambda lo, hi: (min(lo, max_kv), max(min(lo, max_kv), min(hi, max_kv)))   # noqa: E731
    if reach == "batch":
        # Decode rows: one query row per sequence over a few pages each (the lengths from a seed: 256 draws
        # would make shrinking crawl)
        num_seqs = draw(st.integers(min(REACH_BATCH[0], max_seqs), max_seqs))
        q_len = draw(sampled_from(q_lens_admitted(claims, (1,), q_len_options)))
        rng = np.random.default_rng(draw(seeds))
        lo, hi = fits(max(1, q_len), 3 * page_size)
        kv_lens = [int(n) for n in rng.integers(lo, hi + 1, size=num_seqs)]
        return [q_len] * num_seqs, [max(n, q_len) for n in kv_lens]
    if reach == "pages":
        split = claims.limits.get("split_kv_min_keys")
        lo = max(REACH_TABLE_TILE * page_size + 1, int(split) + 1 if split else 0)
        q_len = draw(sampled_from(q_lens_admitted(claims, (1, 2, 4), q_len_options)))
        kv = draw(st.integers(*fits(max(lo, q_len), max(lo, REACH_MAX_KEYS))))
    elif reach == "page_size":
        q_len = draw(sampled_from(q_lens_admitted(claims, (1, 3), q_len_options)))
        kv = draw(st.integers(*fits(max(page_size + 1, q_len), 2 * page_size + page_size // 2)))
    elif reach == "heads":
        q_len = draw(sampled_from(q_lens_admitted(claims, (1, 2, 3), q_len_options)))
        kv = draw(st.integers(*fits(q_len + 32, q_len + 48)))
    else:   # head_dim
        q_len = draw(sampled_from(q_lens_admitted(claims, (2, 1, 3), q_len_options)))
        kv = draw(st.integers(*fits(max(q_len, 40), 100)))
    assume(q_len <= kv)
    q_lens, kv_lens = [q_len], [kv]
    if max_seqs > 1 and draw(st.integers(0, 1)):   # a short second sequence after the long one
        q2 = draw(sampled_from(q_lens_admitted(claims, (1, 0, 2), q_len_options)))
        assume(q2 <= max_kv)
        q_lens.append(q2)
        kv_lens.append(draw(st.integers(q2, max(q2, min(40, max_kv)))))
    return q_lens, kv_lens


# --- values: the range columns (PA-52) -----------------------------------------------------------

#: the range column's dtypes, 16-bit first (Hypothesis's first example takes the first pair)
RANGE_Q_DTYPES = ("float16", "bfloat16", "float32", "float64")
RANGE_KV_ORDER = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "int8")
#: raw |q . k| the range column reaches: past float16's largest finite value (65504) in one visible pair
#: of every row, from |q| in [64, 256) and one key of 256 aligned with it (sums of D >= 4 terms)
RANGE_Q_EXP = (6, 7)
RANGE_KEY = 256.0
#: sm_scale of the range column: logits of 10^3 .. 10^4 from raw dots of 10^5 .. 10^6 (Gemma-2 and
#: similar models reach |s| of 10^3 before their cap)
RANGE_SM_SCALES = (1 / 64, 1 / 32, 1 / 128)
#: Gemma-2's attention logit soft cap (attn_logit_softcapping 50.0) and final-logit cap (30.0)
RANGE_SOFT_CAPS = (50.0, 30.0)
#: how far a dominating sink lies above every logit of its row: exp(-margin) of the mass is left to keys
RANGE_SINK_MARGINS = (30.0, 10.0, 80.0)


#: the range column's value regimes, each the whole of one crossed column (dimension_reach.crossed_columns):
#: logits of 10^3 .. 10^4 uncapped, under Gemma-2's soft cap, and under sinks that dominate them
RANGE_REGIMES = ("logits", "soft_cap", "sinks")
#: the claimed feature each regime needs (its column's features: unsupported, or run with --run-unclaimed)
REGIME_FEATURES = {"logits": (), "soft_cap": ("soft_cap",), "sinks": ("sinks",), "limits": ()}


def range_options(draw, claims: OpClaims, regime: str = "") -> dict:
    """Which claimed options the range column turns on for one example: soft cap, dominating sinks; a
    crossed column's `regime` (RANGE_REGIMES) turns on its own option and no other (unsupported where the
    option is not claimed)."""
    options = {"sm_scale": draw(sampled_from(RANGE_SM_SCALES))}
    for name, key, choices in (("soft_cap", "soft_cap", RANGE_SOFT_CAPS), ("sinks", "sink_margin", RANGE_SINK_MARGINS)):
        if regime == name and name not in claims.features:
            pytest.skip(f"unsupported: the {regime} regime of a crossed column needs the {name} feature")
        if regime == name or (not regime and name in claims.features and draw(st.booleans())):
            options[key] = draw(sampled_from(choices))
    return options


def _aligned(row: np.ndarray, sign: float, kv_dtype: str, k_scale) -> np.ndarray:
    """A key of magnitude RANGE_KEY whose every element has `sign` times the sign of `row` (one query row
    and head), stored in `kv_dtype` (as close to RANGE_KEY as a quantized format and its scale allow)."""
    aligned = sign * np.where(row >= 0, RANGE_KEY, -RANGE_KEY)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype)):
        top = np.max(np.abs(finite_values(kv_dtype).astype(np.float64)))
        aligned = np.clip(np.round(aligned / float(np.float32(k_scale))), -top, top)
    return aligned


def range_values(rng: np.random.Generator, x: dict, q_lens, options: dict, *, late: bool = False) -> dict:
    """The drawn inputs `x` at the magnitudes of PA-52: |q| in [64, 256), the first visible key of every
    sequence set to RANGE_KEY aligned with its first row's first head (raw q . k past 65504 there, the
    float16 limit), sm_scale RANGE_SM_SCALES (logits of 10^3 .. 10^4), quantized pages with half their
    values at the format's largest magnitude, optionally Gemma-2's soft cap and sinks that dominate.

    late=True (a crossed column, NU-15): the aligned key is the first row's own position (kv_len - q_len:
    the last tile of a long sequence, past every tile) and every key before it is anti-aligned (logits of
    -10^3 .. -10^4, or -cap): that row's largest logit lies only in a later tile than its first, by far
    more than float32's exp range (88.7), so a running max that stops growing or an accumulator that is
    not rescaled when it grows shows."""
    x = dict(x)
    q_dtype = dtypes.dtype_name(x["q"].dtype)
    q = floats(rng, x["q"].shape, q_dtype, min_exp=RANGE_Q_EXP[0], max_exp=RANGE_Q_EXP[1]).astype(np.float64)
    kv_dtype = dtypes.dtype_name(x["k_pages"].dtype)
    k_pages, v_pages = np.array(x["k_pages"], copy=True), np.array(x["v_pages"], copy=True)
    quantized = dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype))
    if quantized:      # half the stored values at the format's largest magnitude
        top = np.max(np.abs(finite_values(kv_dtype).astype(np.float64)))
        for pages in (k_pages, v_pages):
            at_max = rng.random(pages.shape) < 0.5
            signs = np.where(rng.random(pages.shape) < 0.5, -top, min(top, 127.0) if kv_dtype == "int8" else top)
            pages[at_max] = signs[at_max].astype(pages.dtype)
    cu = x["cu_q_lens"]
    k_scale = x.get("k_scale")
    page_size = k_pages.shape[1]
    for i, q_len in enumerate(q_lens):
        if q_len == 0:
            continue
        # key 0 is visible to every row (no window in this column): aligned with row 0, head 0 of KV head 0;
        # late: the key at row 0's own position is (every row sees it), the keys before it anti-aligned
        row = q[int(cu[i]), 0]
        at = int(x["kv_lens"][i]) - q_len if late else 0
        for j in range(at + 1 if late else 1):
            page = int(x["page_indices"][i, j // page_size])
            sign = 1.0 if j == at else -1.0
            k_pages[page, j % page_size, 0] = _aligned(row, sign, kv_dtype, k_scale).astype(k_pages.dtype)
    x["q"] = q.astype(x["q"].dtype)
    x["k_pages"], x["v_pages"] = k_pages, v_pages
    x["sm_scale"] = options["sm_scale"]
    if "soft_cap" in options:
        x["soft_cap"] = options["soft_cap"]
    if "sink_margin" in options:
        x["sinks"] = (logit_bound(x) + options["sink_margin"] + rng.random(q.shape[1])).astype(np.float32)
    return x


def logit_bound(x: dict) -> float:
    """The largest |logit| a row of the call can reach: the cap, or sm_scale * max sum_d |q| |k| (float64)."""
    if x.get("soft_cap"):
        return float(x["soft_cap"])
    q = np.abs(dtypes.upcast(x["q"])).sum(axis=2).max(initial=0.0)
    k = np.abs(dtypes.upcast(x["k_pages"], x.get("k_scale"))).max(initial=0.0)   # one scale per pool here
    return float(x["sm_scale"]) * float(q) * float(k)


# --- write_kv ------------------------------------------------------------------------------------

#: write_kv's long column: tokens of one call, from past two 64-token blocks (the largest token block of our
#: Triton write kernel) to a prefill chunk of 512
REACH_WRITE_TOKENS = (130, 512)
#: write_kv's long column: KV heads x head dims past one 1024-element block of a row (8 x 160 = 1280; the
#: Triton write kernel's row block is min(next_power_of_2(Hkv * D), 1024)), not powers of two first
REACH_WRITE_HEAD_DIMS = (160, 192, 576, 128)
REACH_WRITE_KV_HEADS = (8, 4, 1)
#: the range column's pools, quantized first (their saturation), then float pools (overflow to +-inf, PA-43)
RANGE_WRITE_POOLS = ("int8", "float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float32", "float64")
#: the range column's quantization scales: the smallest float32 normal and just above it (x / scale passes
#: the float32 range: +-inf, saturated by PA-44), one, and a power of two that keeps quotients in range
RANGE_WRITE_SCALES = (2.0 ** -126, 1.5 * 2.0 ** -125, 1.0, 2.0 ** -10)


#: write_kv's range regime crossed with its token reach: the values at and past the pool format's limits
#: (past_limits) only on the tokens past the first tile of the write loop
WRITE_RANGE_REGIMES = ("limits",)


def past_limits(rng: np.random.Generator, x: np.ndarray, pool: str, scale) -> np.ndarray:
    """`x` with every other value moved to the limits of the pool's format (PA-52), of alternating sign (a
    limit a kernel gets wrong on one side only, e.g. a quotient wrapped through int32 to -2^31 that the
    negative saturation hides, shows on the other): for a quantized pool at scale s, values whose quotient
    lies at the largest finite value, just past it, far past it, past int32 (1.5 * 2^31: a conversion through
    int32 before saturating wraps) and past the float32 range (x's largest finite value: the quotient is
    +-inf, saturated by PA-44); for a float pool, values around its largest finite value, half of them past
    it (overflow to +-inf, PA-43). Values stay finite in x's dtype, and normal or zero as float32 (NU-9: no
    subnormal inputs; at a scale of 2^-126 the rounding ties below 1 that `quantization_ties` aims at would
    need subnormal values of x, which TPUs and XLA on CPU flush)."""
    x_dtype = x.dtype
    x_max = float(dtypes.max_finite(x_dtype))
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(pool)):
        top = float(np.max(np.abs(finite_values(pool).astype(np.float64))))
        s = 1.0 if scale is None else float(np.float32(scale))
        targets = np.array([top, top + 0.5, 1.5 * top, 1e6 * top, 1.5 * 2.0 ** 31, x_max / s])
    else:
        s = 1.0
        top = float(dtypes.max_finite(dtypes.resolve_dtype(pool)))
        targets = np.array([top, 0.999 * top, 1.001 * top, 1.5 * top])
    index = np.arange(x.size).reshape(x.shape)
    moved_at = index % 2 == 0
    signs = np.where(index % 4 == 0, 1.0, -1.0)      # the moved values: +, -, +, - ...
    with np.errstate(over="ignore"):
        values = targets[rng.integers(0, targets.size, size=x.shape)] * s * signs
        moved = np.clip(values, -x_max, x_max).astype(x_dtype)
    out = np.where(moved_at, moved, x)
    with np.errstate(over="ignore"):    # float64 values past float32's range: inf, not subnormal, as float32
        tiny = np.abs(out.astype(np.float32)) < np.finfo(np.float32).tiny
    return np.where(tiny, np.zeros((), x_dtype), out)
