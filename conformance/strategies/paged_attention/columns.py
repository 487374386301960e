"""The paged-attention family's columns (the features matrix, reach and range columns), dtypes, budgets\nand head counts (spec/paged_attention.md)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from kvconform.backends.base import OpClaims

from .. import attention_reach as ar
from .. import constraints
from .. import dimension_reach as dr

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
    regime: str = ""      # a crossed column's value regime (attention_reach.RANGE_REGIMES), past the first tile

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
ATTENTION_VARIANTS += tuple(Variant(f"reach_{d}", (), ("PA-6", "PA-7", "PA-10", "PA-12", "PA-14", "PA-51", "NU-15"),
                                    reach=f"{DIM_REACH}{d}") for d in dr.columns("ragged_paged_attention"))


def crossed_variants(op: str, clauses: tuple[str, ...], regimes=ar.RANGE_REGIMES) -> tuple[Variant, ...]:
    """The crossed columns of `op` (NU-15, dimension_reach.crossed_columns): each dimension the registry
    marks `crossed` drawn large, with one value regime of the range column whose extremes lie only past the
    first tile (attention: attention_reach.range_values late=True; write_kv: its limits past the first
    token tile)."""
    return tuple(Variant(f"reach_{d}{dr.CROSSED}{r}", ar.REGIME_FEATURES[r], clauses, reach=f"{DIM_REACH}{d}",
                         values="range", regime=r) for d, r in dr.crossed_columns(op, regimes))


ATTENTION_VARIANTS += crossed_variants("ragged_paged_attention", ("PA-6", "PA-7", "PA-14", "PA-16", "PA-17", "PA-51",
                                                                  "PA-52", "NU-15"))


# (no reach_pool_slots: slots are the pool_pages column's)
WRITE_VARIANTS += tuple(Variant(f"reach_{d}", (), ("PA-40", "PA-41", "PA-51", "NU-15"), reach=f"{DIM_REACH}{d}")
                       for d in dr.columns("write_kv") if d != "pool_slots") \
    + crossed_variants("write_kv", ("PA-40", "PA-43", "PA-44", "PA-51", "PA-52", "NU-15"), ar.WRITE_RANGE_REGIMES)


#: the long column's share of the profile's examples (ci: 3): each long call costs far more
LONG_BUDGET = 0.12


#: the other size-reach columns: one example each in ci (round(25 * 0.04)), ten in thorough
REACH_BUDGET = 0.04


RANGE_BUDGET = 0.08         # the range column: base-sized calls, 2 examples in ci (the first: 16-bit)


PADDED_BUDGET = 0.2         # write_kv's padded_tokens column: one form of the base column, 5 examples in ci


#: integer poison for metadata PA-24 / PA-5 declare ignored: far out of range of any page pool or length
METADATA_POISON = np.int32(2 ** 30)


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
