"""Shared drawing helpers of the recurrent family's strategies (spec/recurrent.md, clauses RS-n).

Ops: `causal_conv1d_update`, `selective_state_update` (Mamba1 and Mamba2), `ssd_chunked_scan`,
`rwkv6_wkv`. Everything drawn stays inside the backend's claims: activation dtypes, pool dtypes
(float32/float64 only, RS-6), features, size limits and conventions (constraints.py; spec/recurrent.md
RS-36 … RS-41). Feature names (one features-matrix column each):

    state_indices   explicit, shuffled slot indices (RS-2); without it row b uses slot b
    padding_slots   -1 entries in state_indices (RS-3); needs state_indices too
    multi_token     conv1d x of rank 3 [B, T, C] (RS-10)
    bias, silu      conv1d bias / activation="silu" drawn (RS-11)
    mamba2          rank-4 state with G >= 1 groups for selective_state_update (RS-16)
    initial_states  has_initial_state with False rows over NaN/inf-filled slots (RS-5)
    snapshots       num_snapshots > 0 for ssd_chunked_scan (RS-19)

Two columns of every op claim no feature and reach past what the others draw (reach.py, spec
section 6): `long` (sizes where kernels switch path: tiers `edges`, `rows`, `channels`, `state`, `tokens`,
`heads`) and `range` (values at the thresholds the spec pins: softplus's linear region and far below 0,
decays at and near 0 and 1, betas 0 and 1, grown states, float16 magnitudes). The `edges` tier of
ssd_chunked_scan and rwkv6_wkv is the earlier long column: SSD lengths 0 … 20 with chunk_size hints
(8, 16, 1, 3, 4), the first sequence 8 … 20 tokens, often on a chunk end (8, 9, 16, 17, 20, or a multiple
of the hint: T == chunk_size); RWKV6 a first sequence of up to 70 tokens (65 … 70 cross a 64-token window;
8, 9, 16, 17, 64 sit on smaller ones' edges). Kernel tilings it targets: the Pallas SSD kernel's chunks
of max(8, pow2(chunk_size)) <= 64 tokens, the Triton SSD kernel's BLOCK_Q of max(16, pow2(chunk_size))
<= 64, the Pallas RWKV6 kernel's windows of pow2(longest) clamped to [8, 64]. Shapes stay small
(H <= 4, P, N, K, V <= 2) and the tier runs fewer examples (`LONG_BUDGET`).

Poison (every don't-care location): pool rows no call addresses hold random data and whole NaN
"canary" rows that must come back bit for bit (RS-4); the inputs of padding rows / padding sequences
are NaN, since a padding row reads nothing (RS-3); rows of fresh sequences are NaN or +-inf (RS-5).
Tested domain (spec/recurrent.md section 4): A <= 0, dt' >= 0, RWKV w in [0, 1].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import PoisonRegion
from kvconform.reference import dtypes

from .. import constraints
from ..values import SHRINKABLE_SHUFFLE, floats, pick, sampled_from, seeds
from . import crossed, reach
from ..constraints import claimed as _claimed

ACT_DTYPES = ("float32", "bfloat16", "float16", "float64")
POOL_DTYPES = ("float32", "float64")          # RS-6: the only pool dtypes
CHUNK_SIZES = (2, 1, 3, 4, 64)                # 64: one chunk per sequence; 1: token by token
LONG_CHUNK_SIZES = (8, 16, 1, 3, 4)           # hints of the long column (RS-18): kernel chunks 8 / 16
SSD_LONG_MAX = 20                             # crosses 8- and 16-token chunks, twice for Q = 8
SSD_LONG_EDGES = (9, 17, 16, 8, 20)           # one past / exactly at a chunk end
RWKV_LONG_MAX = 70                            # crosses a 64-token window
RWKV_LONG_EDGES = (9, 17, 8, 16, 64)          # smaller windows' edges; 65 … 70 drawn on their own
LONG_REST_MAX = 20                            # the other sequences of a long case
LONG_BUDGET = 0.4                             # share of the profile's examples for the `edges` tier
U_ACC = tolerance.U_ACC                       # NU-3: accumulation in float32 or wider
C_R = 2.0                                     # NU-6: c_R


@dataclass(frozen=True)
class Variant:
    """One column of the features matrix: the options a differential test turns on; `reach` is "long"
    (sizes past kernel thresholds) or "range" (values at the thresholds) for the two reach columns."""
    name: str
    features: tuple[str, ...]
    clauses: tuple[str, ...]
    reach: str = ""

    @property
    def long(self) -> bool:
        return self.reach == "long"

    @property
    def range(self) -> bool:
        return self.reach == "range"

    def __str__(self) -> str:
        return self.name


#: each chunked op's range regimes, which the long column's `crossed` tier draws over several chunks too
#: (crossed.py); registered by the op modules (ssd.py, rwkv6.py, gated_delta.py)
RANGE_REGIMES: dict[str, tuple[str, ...]] = {}


def column_runs(op: str, variant: Variant) -> list[tuple[dict, float]]:
    """(strategy keywords, budget) of each loop a differential test of `variant` runs: one per tier of a
    long column (reach.LONG_TIERS), one for the others."""
    if variant.long:
        return [(dict(tier=t), LONG_BUDGET if t == "edges" else reach.TIER_BUDGET) for t in reach.LONG_TIERS[op]] \
            + crossed.runs(op, RANGE_REGIMES.get(op, ()), reach.TIER_BUDGET)
    return [({}, reach.RANGE_BUDGET if variant.range else 1.0)]


_INDEXED = ("RS-2", "RS-4", "RS-7")
_PADDED = ("RS-3", "RS-4", "RS-36")
_REACH = ("RS-2", "RS-41", "RS-42", "NU-R5")
_RANGE = ("RS-43", "NU-R5")


def _dtypes(draw, claims: OpClaims, variant: Variant) -> tuple[str, str]:
    act = pick(draw, _claimed(ACT_DTYPES, claims.dtypes, "activation dtype", variant), "dtype")
    pool = pick(draw, _claimed(POOL_DTYPES, claims.kv_dtypes, "pool dtype", variant), "pool dtype")
    return act, pool


def conventions(claims: OpClaims) -> dict:
    """The claimed conventions a comparison honours (RS-36), recorded in each case's params."""
    return {"padding_outputs": "unspecified"} if claims.limits.get("padding_outputs") == "unspecified" else {}


def _slots(draw, rows: int, variant: Variant, claims: OpClaims | None = None, *, tier: str = ""
           ) -> tuple[np.ndarray | None, int]:
    """state_indices (None in the base column: row b uses slot b, RS-2) and num_slots.

    Indices are a random injection into the pool (shuffled and shifted, RS-2/RS-7); the padding column
    puts at least one -1 among them (RS-3). Spare slots stay unaddressed, holding canaries (RS-4). Given
    `claims` (the `rows` and `slots` tiers), explicit indices where claimed; the `slots` tier addresses a
    pool of reach.FAR_SLOTS slots at ids past 2^16 (and one small id)."""
    indexed = "state_indices" in variant.features or (claims is not None and "state_indices" in claims.features)
    if not indexed:
        return None, rows + draw(st.integers(0, 1))
    if tier == "slots":
        num_slots = reach.FAR_SLOTS
        far = [num_slots - 1, 2 ** 16, 5][:rows] + [2 ** 16 + 1 + i for i in range(max(0, rows - 3))]
        return np.asarray(draw(st.permutations(far)), dtype=np.int32), num_slots
    pads = draw(st.integers(1, rows)) if "padding_slots" in variant.features else 0
    num_slots = rows - pads + draw(st.integers(1, 2))
    live = list(draw(st.permutations(range(num_slots))))[:rows - pads]
    order = draw(st.permutations(live + [-1] * pads))
    return np.asarray(order, dtype=np.int32).reshape(-1), num_slots


def _live_rows(idx, rows: int) -> np.ndarray:
    return np.arange(rows) if idx is None else np.asarray(idx)


def _pool(rng, shape, pool_dtype, idx, rows, fresh=None) -> tuple[np.ndarray, list[PoisonRegion]]:
    """A clean pool and its don't-care rows: about half the unaddressed rows are whole "canary" rows that
    must come back bit for bit whatever they hold (RS-4), and the rows of fresh sequences hold NaN or
    +-inf in the poisoned run, which a kernel must never read (RS-5)."""
    pool = floats(rng, shape, pool_dtype)
    regions = []
    used = {int(s) for s in _live_rows(idx, rows) if s >= 0}
    if shape[0] > reach.SMALL_POOL:      # the slots tier: one region of canary rows, drawn at once
        canary = (rng.random(shape[0]) < 0.5) & ~np.isin(np.arange(shape[0]), list(used))
        regions.append(PoisonRegion("unaddressed_rows", "state_pool", (np.flatnonzero(canary),), "RS-4",
                                    "pool rows no row of the call addresses"))
    for slot in range(shape[0] if shape[0] <= reach.SMALL_POOL else 0):
        if slot not in used and rng.random() < 0.5:
            regions.append(PoisonRegion("unaddressed_rows", "state_pool", (slot,), "RS-4",
                                        "pool rows no row of the call addresses"))
    if fresh is not None:
        for s, slot in enumerate(_live_rows(idx, rows)):
            if slot >= 0 and fresh[s]:
                regions.append(PoisonRegion("fresh_rows", "state_pool", (int(slot),), "RS-5",
                                            "slots of fresh sequences (has_initial_state False)",
                                            rng.choice([np.nan, np.inf, -np.inf])))
    return pool, regions


def _named(regions: list[PoisonRegion], pool_name: str) -> tuple[PoisonRegion, ...]:
    return tuple(dataclasses.replace(r, input=pool_name) if r.input == "state_pool" else r for r in regions)


def _padding_rows(idx, names, arrays: dict) -> list[PoisonRegion]:
    """Inputs of padding rows (state index -1) are never read (RS-3)."""
    if idx is None or not (np.asarray(idx) < 0).any():
        return []
    rows = np.flatnonzero(np.asarray(idx) < 0)
    return [PoisonRegion("padding_inputs", name, (rows,), "RS-3", "inputs of padding rows (slot -1)")
            for name in names if arrays.get(name) is not None]


def _positive(rng, shape, dtype, **kw):
    return np.abs(floats(rng, shape, dtype, **kw))


def _heads_over(draw, claims: OpClaims, groups: int, name: str = "num_heads") -> int:
    """A head count that is a multiple of `groups` (groups * {2, 1, 3}, shrinking to 2 per group), within
    the claimed `name` limit: a claim's own values that `groups` divides when none of those qualifies."""
    candidates = tuple(groups * m for m in (2, 1, 3))
    if name not in claims.limits:
        return draw(sampled_from(candidates))
    chosen = [h for h in constraints.allowed(claims, name, candidates, name, skip=False) if h % groups == 0]
    if not chosen:
        values = claims.limits[name].get("values", ()) if isinstance(claims.limits[name], dict) else ()
        chosen = [h for h in values if h % groups == 0]
    if not chosen:
        pytest.skip(f"unsupported: no claimed {name} is a multiple of {groups}")
    return draw(sampled_from(tuple(chosen)))


def _heads_groups(draw, claims: OpClaims) -> tuple[int, int]:
    # Shrinks towards G = 2, H = 4: the smallest shape where h // (H/G) and h % G differ (RS-16);
    # G > 1 only where claimed (grouped_bc), and within a claimed num_groups limit (RS-41).
    if "grouped_bc" in claims.features:
        groups = draw(sampled_from(constraints.allowed(claims, "num_groups", (2, 1, 3), "num_groups")))
    else:
        groups = 1
    return _heads_over(draw, claims, groups), groups


def _ssm_options(draw, rng, heads_shape, token_shape, act, claims: OpClaims, *, softplus_first: bool = False,
                 features_first: bool = False):
    """D, z, dt_bias, dt_softplus of RS-14 … RS-16, each drawn on or off where claimed (features skip_d,
    z_gate, dt_bias, dt_softplus), within the conventions dt_softplus "always" (RS-37) and required_inputs
    (RS-38: D / dt_bias always given, zeros where the feature is not claimed: exactly neutral).
    `softplus_first`: the simplest draw has softplus on (the range column). `features_first`: the simplest
    draw has every claimed option on (a size tier of the long column: each feature meets each large
    dimension in ci, spec/recurrent.md RS-42)."""
    required = set(claims.limits.get("required_inputs") or ())
    kw = {}
    if "skip_d" in claims.features and ("D" in required or drawn_on(draw, features_first)):
        kw["D"] = floats(rng, heads_shape, act)
    elif "D" in required:
        kw["D"] = np.zeros(heads_shape, dtypes.resolve_dtype(act))
    if "z_gate" in claims.features and drawn_on(draw, features_first):
        kw["z"] = floats(rng, token_shape, act)
    if "dt_bias" in claims.features and ("dt_bias" in required or drawn_on(draw, features_first)):
        kw["dt_bias"] = _positive(rng, heads_shape, act, max_exp=-1)
    elif "dt_bias" in required:
        kw["dt_bias"] = np.zeros(heads_shape, dtypes.resolve_dtype(act))
    if claims.limits.get("dt_softplus") == "always":
        kw["dt_softplus"] = True
    elif "dt_softplus" in claims.features:
        kw["dt_softplus"] = drawn_on(draw, softplus_first or features_first)
    else:
        kw["dt_softplus"] = False
    return kw


def _ssm_params(kw: dict) -> dict:
    """The options of a case as params `outside` judges (RS-37, RS-38)."""
    return dict(dt_softplus=bool(kw.get("dt_softplus")),
                optional_inputs=sorted(n for n in ("D", "z", "dt_bias") if kw.get(n) is not None))


def _lengths(draw, max_seqs: int, max_len: int, first=None, claims: OpClaims | None = None
             ) -> tuple[list[int], np.ndarray]:
    """Sequence lengths in 0 … max_len, within a claimed seq_len limit (RS-39). With a `first` strategy
    (the long and range columns) the first sequence's length is drawn from it and the others are at most
    LONG_REST_MAX."""
    def lengths_in(lo, hi):
        return st.integers(lo, hi) if claims is None else reach.length_strategy(claims, st.integers(lo, hi))
    if first is None:
        lengths = draw(st.lists(lengths_in(0, max_len), min_size=1, max_size=max_seqs))
    else:
        first = first if claims is None else reach.length_strategy(claims, first)
        lengths = [draw(first)] + draw(st.lists(lengths_in(0, min(max_len, LONG_REST_MAX)), max_size=max_seqs - 1))
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    return lengths, cu


def _lead_and_long(draw, claims: OpClaims, op: str) -> tuple[list[int], np.ndarray]:
    """The `tokens` tier: a short leader (so the long sequence starts mid-chunk of the packing) and a
    sequence of 129 to a few thousand tokens (reach.LONG_TOKENS[op])."""
    lead = draw(reach.length_strategy(claims, sampled_from(reach.LEADERS)))
    long_len = draw(reach.length_strategy(claims, sampled_from(reach.LONG_TOKENS[op])))
    lengths = [lead, long_len]
    cu = np.zeros(3, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    return lengths, cu


def _many_sequences(draw, claims: OpClaims, op: str) -> tuple[list[int], np.ndarray]:
    """The `sequences` tier: the registry's `sequences` past its last tile (257 first; 1023 and the tiles
    in thorough). An interpreter runs a program per sequence, so only every 64th sequence and the last
    hold a token and the others none, where the claims allow empty sequences (RS-39: else one token
    each); claims may narrow the count (max_num_seqs)."""
    # cu_seqlens holds count + 1 entries, which the registry's real maximum bounds too
    counts = (reach.past_last_tile(op, "sequences"),) + reach.registry_reach(op, "sequences", reach.KERNEL_BUDGET)
    count = reach.reach_dim(draw, claims, "max_num_seqs", tuple(c for c in counts if c < max(counts)))
    empty_ok = constraints.admits(claims.limits.get("seq_len"), 0)
    lengths = [1 if not empty_ok or i % 64 == 63 or i == count - 1 else 0 for i in range(count)]
    cu = np.zeros(count + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    return lengths, cu


def drawn_on(draw, first: bool) -> bool:
    """An option drawn on or off: on in the simplest draw when `first` (a size tier's options, RS-42: in ci
    each one meets each large dimension), else Hypothesis's booleans (off first)."""
    return draw(sampled_from((True, False)) if first else st.booleans())


def in_size_tier(tier: str) -> bool:
    """A size tier of a long column (not its `edges` or `crossed` tier, not an ordinary column): its
    simplest draw has every claimed option on, so each feature meets each large dimension in ci (RS-42)."""
    return tier not in ("", "edges", "crossed")


def _fresh(draw, seqs: int, variant: Variant, claims: OpClaims | None = None, tier: str = ""):
    """has_initial_state (None: the argument left out), with at least one fresh sequence (RS-5): in the
    initial_states column, and in a size tier where the feature is claimed, on in its simplest draw
    (RS-42). Past SHRINKABLE_SHUFFLE sequences the flags come from one drawn seed (a flag per element
    would be hundreds of draws for the shrinker to try)."""
    tiered = claims is not None and in_size_tier(tier) and "initial_states" in claims.features
    if "initial_states" not in variant.features and not (tiered and drawn_on(draw, True)):
        return None
    if seqs <= SHRINKABLE_SHUFFLE:
        flags = draw(st.lists(st.booleans(), min_size=seqs, max_size=seqs))
    else:
        flags = np.random.default_rng(draw(seeds)).integers(0, 2, seqs).astype(bool).tolist()
    flags[draw(st.integers(0, seqs - 1))] = True      # at least one fresh sequence
    return np.asarray([not f for f in flags], dtype=bool)  # has_initial_state


def _padding_tokens(arrays: dict, cu, idx, names) -> list[PoisonRegion]:
    """Padding sequences read nothing (RS-3): their tokens are don't-care."""
    if idx is None:
        return []
    return [PoisonRegion("padding_inputs", name, (slice(int(cu[s]), int(cu[s + 1])),), "RS-3",
                         "tokens of padding sequences (slot -1)")
            for s in np.flatnonzero(np.asarray(idx) < 0) for name in names
            if name in arrays and cu[s + 1] > cu[s]]


def _zero_live_rows(pool: np.ndarray, idx, rows: int) -> None:
    """Sets the rows the call reads to exact zeros (the state of a sequence the store just placed, RS-22):
    then a tiny dt' is the whole state, and its relative error shows."""
    for slot in _live_rows(idx, rows):
        if slot >= 0:
            pool[int(slot)] = 0


