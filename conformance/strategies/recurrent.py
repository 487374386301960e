"""Strategies and comparison contract for the recurrent family (spec/recurrent.md, clauses RS-n).

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

Two columns of every op claim no feature and reach past what the others draw (recurrent_reach.py, spec
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
from kvconform.reference import dtypes
from kvconform.reference.recurrent.activations import silu
from kvconform.reference.recurrent.selective_state import effective_dt

from .. import strided, tolerance
from ..case import Case, PoisonRegion
from ..diagnosis import rows_dropped, widened, without
from . import constraints
from . import recurrent_crossed as crossed
from . import recurrent_reach as reach
from .values import floats, pick, sampled_from, seeds

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


def column(op: str, name: str) -> Variant:
    """The column `name` of `op` (VARIANTS[op])."""
    return next(v for v in VARIANTS[op] if v.name == name)


def column_runs(op: str, variant: Variant) -> list[tuple[dict, float]]:
    """(strategy keywords, budget) of each loop a differential test of `variant` runs: one per tier of a
    long column (recurrent_reach.LONG_TIERS), one for the others."""
    if variant.long:
        return [(dict(tier=t), LONG_BUDGET if t == "edges" else reach.TIER_BUDGET) for t in reach.LONG_TIERS[op]] \
            + crossed.runs(op, RANGE_REGIMES.get(op, ()), reach.TIER_BUDGET)
    return [({}, reach.RANGE_BUDGET if variant.range else 1.0)]


_INDEXED = ("RS-2", "RS-4", "RS-7")
_PADDED = ("RS-3", "RS-4", "RS-36")
_REACH = ("RS-2", "RS-41", "RS-42", "NU-R5")
_RANGE = ("RS-43", "NU-R5")
CONV_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-9", "RS-10", "RS-11", "RS-12")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("multi_token", ("multi_token",), ("RS-10", "RS-11", "RS-12")),
    Variant("long", (), ("RS-10", "RS-11", "RS-12") + _REACH, reach="long"),
    Variant("range", (), ("RS-9", "RS-11", "RS-12") + _RANGE, reach="range"),
)
SSU_VARIANTS = (
    Variant("mamba1", (), ("RS-1", "RS-6", "RS-8", "RS-9", "RS-14", "RS-15", "RS-37", "RS-38")),
    Variant("mamba2", ("mamba2",), ("RS-16", "RS-41")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("long", (), ("RS-15", "RS-16") + _REACH, reach="long"),
    Variant("range", (), ("RS-9", "RS-14", "RS-15") + _RANGE, reach="range"),
)
SSD_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-14", "RS-16", "RS-17", "RS-18", "RS-37", "RS-38", "RS-39")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("initial_states", ("initial_states",), ("RS-5",)),
    Variant("snapshots", ("snapshots",), ("RS-19",)),
    Variant("long", (), ("RS-17", "RS-18", "RS-44") + _REACH, reach="long"),
    Variant("range", (), ("RS-9", "RS-14", "RS-18") + _RANGE, reach="range"),
)
RWKV_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-17", "RS-20", "RS-39", "RS-40")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("initial_states", ("initial_states",), ("RS-5",)),
    Variant("long", (), ("RS-17", "RS-20", "RS-44") + _REACH, reach="long"),
    Variant("range", (), ("RS-20",) + _RANGE, reach="range"),
)
VARIANTS = {"causal_conv1d_update": CONV_VARIANTS, "selective_state_update": SSU_VARIANTS,
            "ssd_chunked_scan": SSD_VARIANTS, "rwkv6_wkv": RWKV_VARIANTS}


def _claimed(options, claimed, what: str, variant: Variant):
    chosen = tuple(o for o in options if o in (claimed or ()))
    if not chosen:
        pytest.skip(f"unsupported: no claimed {what} for variant {variant.name} "
                    f"(claims: {list(claimed or [])})")
    return chosen


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
    pool of recurrent_reach.FAR_SLOTS slots at ids past 2^16 (and one small id)."""
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


def _ssm_options(draw, rng, heads_shape, token_shape, act, claims: OpClaims, *, softplus_first: bool = False):
    """D, z, dt_bias, dt_softplus of RS-14 … RS-16, each drawn on or off where claimed (features skip_d,
    z_gate, dt_bias, dt_softplus), within the conventions dt_softplus "always" (RS-37) and required_inputs
    (RS-38: D / dt_bias always given, zeros where the feature is not claimed: exactly neutral).
    `softplus_first`: the simplest draw has softplus on (the range column)."""
    required = set(claims.limits.get("required_inputs") or ())
    kw = {}
    if "skip_d" in claims.features and ("D" in required or draw(st.booleans())):
        kw["D"] = floats(rng, heads_shape, act)
    elif "D" in required:
        kw["D"] = np.zeros(heads_shape, dtypes.resolve_dtype(act))
    if "z_gate" in claims.features and draw(st.booleans()):
        kw["z"] = floats(rng, token_shape, act)
    if "dt_bias" in claims.features and ("dt_bias" in required or draw(st.booleans())):
        kw["dt_bias"] = _positive(rng, heads_shape, act, max_exp=-1)
    elif "dt_bias" in required:
        kw["dt_bias"] = np.zeros(heads_shape, dtypes.resolve_dtype(act))
    if claims.limits.get("dt_softplus") == "always":
        kw["dt_softplus"] = True
    elif "dt_softplus" in claims.features:
        kw["dt_softplus"] = draw(sampled_from((True, False))) if softplus_first else draw(st.booleans())
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
    sequence of 129 to a few thousand tokens (recurrent_reach.LONG_TOKENS[op])."""
    lead = draw(reach.length_strategy(claims, sampled_from(reach.LEADERS)))
    long_len = draw(reach.length_strategy(claims, sampled_from(reach.LONG_TOKENS[op])))
    lengths = [lead, long_len]
    cu = np.zeros(3, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    return lengths, cu


def _many_sequences(draw, claims: OpClaims, op: str) -> tuple[list[int], np.ndarray]:
    """The `sequences` tier: as many sequences as a step holds (the registry's `sequences`, 1023 first),
    one token each (claims may narrow the count, max_num_seqs)."""
    # cu_seqlens holds count + 1 entries, which the registry's real maximum bounds too
    counts = reach.registry_reach(op, "sequences", reach.KERNEL_BUDGET)
    count = reach.reach_dim(draw, claims, "max_num_seqs", tuple(c for c in counts if c < max(counts)))
    lengths = [1] * count
    cu = np.arange(count + 1, dtype=np.int32)
    return lengths, cu


def _fresh(draw, seqs: int, variant: Variant):
    if "initial_states" not in variant.features:
        return None
    flags = draw(st.lists(st.booleans(), min_size=seqs, max_size=seqs))
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


# --- strategies ------------------------------------------------------------------------------------

@st.composite
def conv_cases(draw, claims: OpClaims, variant: Variant, *, tier: str = ""):
    """A `causal_conv1d_update` call (RS-10 … RS-12) within `claims`; long tiers `rows` (a decode batch of
    hundreds of rows) and `channels` (past a 256-channel block, widths 2 … 6); range: magnitudes up to
    2^40 (float16: 2^13, all sums below 65504) with taps of total weight <= 1, silu far into saturation."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    max_rows = constraints.upper(claims, "max_num_seqs", 3)
    min_width = max(1, int(claims.limits.get("min_width", 1)))
    if tier in ("rows", "slots"):      # slots: a few rows at slot ids past 2^16 (a window of >= 1 column)
        rows = reach.reach_dim(draw, claims, "max_num_seqs", reach.DECODE_ROWS) if tier == "rows" else \
            draw(st.integers(1, max_rows))
        channels = reach.dim(draw, claims, "channels", 1, 2)
        width = reach.dim(draw, claims, "width", max(min_width, 2), 4)
    elif tier == "channels":
        rows = draw(st.integers(1, min(2, max_rows)))
        channels = reach.reach_dim(draw, claims, "channels", reach.CONV_CHANNELS)
        width = reach.reach_dim(draw, claims, "width", tuple(w for w in reach.CONV_WIDTHS if w >= min_width))
    elif variant.range:
        rows = min(reach.RANGE_ROWS, max_rows)
        channels = reach.dim(draw, claims, "channels", reach.RANGE_DIM, reach.RANGE_DIM)
        width = reach.dim(draw, claims, "width", max(min_width, 4), max(min_width, 4))
    else:
        rows = draw(st.integers(1, max_rows))
        channels = reach.dim(draw, claims, "channels", 1, 3)
        width = reach.dim(draw, claims, "width", min_width, 4)
    multi = "multi_token" in variant.features or (variant.reach and "multi_token" in claims.features)
    steps = (2 if variant.range else draw(st.integers(1, 3))) if multi else None
    idx, num_slots = _slots(draw, rows, variant, claims if tier in ("rows", "slots") else None, tier=tier)
    kw = {}
    use_bias = "bias" in claims.features and draw(st.booleans())
    if "silu" in claims.features and draw(sampled_from((True, False)) if variant.range else st.booleans()):
        kw["activation"] = "silu"
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    shape = (rows, channels) if steps is None else (rows, steps, channels)
    if variant.range:
        # |out| <= max |x| + |bias| (taps sum to <= 1 in magnitude): representable in the activation dtype
        x = reach.wide(rng, shape, act)
        weight = floats(rng, (channels, width), act, max_exp=-4) / np.asarray(width, dtypes.resolve_dtype(act))
        weight = weight.astype(dtypes.resolve_dtype(act))
    else:
        x = floats(rng, shape, act)
        weight = floats(rng, (channels, width), act)
    if use_bias:
        kw["bias"] = reach.wide(rng, (channels,), act) if variant.range else floats(rng, (channels,), act)
    conv_state, regions = _pool(rng, (num_slots, channels, width - 1), pool_dtype, idx, rows)
    if variant.range:
        conv_state = reach.wide(rng, conv_state.shape, pool_dtype, act=act)
    regions += _padding_rows(idx, ("x",), {"x": x})
    if idx is not None:
        kw["state_indices"] = idx
    inputs = dict(x=x, conv_state=conv_state, weight=weight, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows * (steps or 1), width=width,
                  channels=channels, num_slots=num_slots, variant=variant.name, **conventions(claims))
    if tier:
        params["tier"] = tier
    return Case("causal_conv1d_update", inputs, params, seed, poison=_named(regions, "conv_state"))


#: value regimes of the SSM range columns (the first is the simplest draw)
SSM_RANGE_REGIMES = ("softplus_linear", "softplus_negative", "softplus_threshold", "decays", "grown")


def _ssm_range_values(rng, regime: str, dt_shape, a_shape, act: str, softplus: bool):
    """dt (raw, before dt_bias and softplus) and A of one SSM range regime (recurrent_reach RANGE_*):
    dt' far into softplus's linear region (decays that underflow), tiny dt' (log1p, not log(1 + exp)),
    around the threshold, decays at exactly 1 (A = 0) and near 0 (A = -16, Mamba's largest -exp(A_log)),
    or ordinary steps on grown states. Without softplus dt' = dt: the negative regime draws tiny dt
    instead (dt' >= 0 is the tested domain, section 4)."""
    A = -_positive(rng, a_shape, act, max_exp=0)
    if regime == "softplus_linear":
        dt = reach.choice(rng, dt_shape, reach.dt_linear(act), act)
    elif regime == "softplus_negative":
        dt = reach.choice(rng, dt_shape, reach.RANGE_DT_NEGATIVE if softplus else (2.0 ** -30, 2.0 ** -40, 0.0), act)
    elif regime == "softplus_threshold":
        dt = reach.choice(rng, dt_shape, reach.RANGE_DT_THRESHOLD, act)
    elif regime == "decays":
        dt = _positive(rng, dt_shape, act, max_exp=0)
        A = reach.choice(rng, a_shape, (0.0, -16.0, -2.0 ** -20, -1.0), act)
    else:   # grown: small steps with decays near 1 on states of 2^10 … 2^20 (drawn by the caller)
        dt = _positive(rng, dt_shape, act, min_exp=-10, max_exp=-6)
        A = reach.choice(rng, a_shape, (-2.0 ** -10, -2.0 ** -6, 0.0), act)
    return dt, A


def _defining_dt(regime: str, act: str, softplus: bool) -> float:
    """The raw dt that defines a dt regime of _ssm_range_values (its first option)."""
    if regime == "softplus_linear":
        return reach.dt_linear(act)[0]
    if regime == "softplus_negative":
        return reach.RANGE_DT_NEGATIVE[0] if softplus else 2.0 ** -30
    return reach.RANGE_DT_THRESHOLD[0]


@st.composite
def ssu_cases(draw, claims: OpClaims, variant: Variant, *, tier: str = ""):
    """A `selective_state_update` call (RS-14 … RS-16): Mamba1, or Mamba2 in the mamba2 column (and in
    the indexed and reach columns when claimed). Long tiers: `state` (N past 128), `rows` (a decode batch
    of hundreds of rows); range: SSM_RANGE_REGIMES."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    mamba2 = "mamba2" in variant.features or (
        variant.features and "mamba2" in claims.features and draw(st.booleans())) or (
        variant.reach and "mamba2" in claims.features and draw(st.booleans()))
    if tier == "mamba1_channels" or (tier in ("num_heads", "head_dim") and "mamba2" in claims.features):
        mamba2 = tier != "mamba1_channels"     # the dimension tiers: Mamba1's channels, Mamba2's H and P
    max_rows = constraints.upper(claims, "max_num_seqs", 3)
    fixed = variant.range                      # range cases: fixed small shapes (recurrent_reach.RANGE_*)
    if tier == "rows":
        rows = reach.reach_dim(draw, claims, "max_num_seqs", reach.DECODE_ROWS)
    elif fixed:
        rows = min(reach.RANGE_ROWS, max_rows)
    else:
        rows = draw(st.integers(1, min(2, max_rows) if tier else max_rows))
    if tier == "state":
        n = reach.reach_dim(draw, claims, "state_size", reach.STATE_SIZES)
    elif fixed:
        n = reach.dim(draw, claims, "state_size", reach.RANGE_DIM, reach.RANGE_DIM)
    else:
        n = reach.dim(draw, claims, "state_size", 1, 3 if not tier else 2)
    idx, num_slots = _slots(draw, rows, variant, claims if tier in ("rows", "slots") else None, tier=tier)
    regime = draw(sampled_from(SSM_RANGE_REGIMES)) if variant.range else ""
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    if mamba2:
        if tier or fixed:
            groups = 1
            if tier == "num_heads":
                heads = reach.tier_dim(draw, claims, "num_heads", "selective_state_update", "heads")
            else:
                heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else (
                    reach.RANGE_HEADS if fixed else 1 if tier == "rows" else draw(st.integers(1, 2)))
        else:
            heads, groups = _heads_groups(draw, claims)
        p = reach.tier_dim(draw, claims, "head_dim", "selective_state_update", "head_dim") if tier == "head_dim" \
            else reach.dim(draw, claims, "head_dim", *((reach.RANGE_DIM,) * 2 if fixed else (1, 2)))
        state_shape, tok, hs, bc = (num_slots, heads, p, n), (rows, heads, p), (heads,), (rows, groups, n)
        dt_shape = (rows, heads)
    else:
        if tier in ("mamba1_channels", "head_dim"):
            dim = reach.tier_dim(draw, claims, "head_dim", "selective_state_update",
                                 "channels" if tier == "mamba1_channels" else "head_dim")
        else:
            dim = reach.dim(draw, claims, "head_dim", *((reach.RANGE_DIM,) * 2 if fixed else (1, 2 if tier else 4)))
        heads, groups, p = 1, 1, dim
        state_shape, tok, hs, bc = (num_slots, dim, n), (rows, dim), (dim,), (rows, n)
        dt_shape = (rows, dim)
    kw = _ssm_options(draw, rng, hs, tok, act, claims, softplus_first=variant.range)
    x = floats(rng, tok, act)
    a_shape = hs if mamba2 else (heads * p, n)
    if variant.range:
        dt, A = _ssm_range_values(rng, regime, dt_shape, a_shape, act, kw["dt_softplus"])
    else:
        dt = _positive(rng, dt_shape, act, max_exp=0)
        A = -_positive(rng, a_shape, act, max_exp=0)
    B = floats(rng, bc, act)
    C = floats(rng, bc, act)
    state, regions = _pool(rng, state_shape, pool_dtype, idx, rows)
    if regime == "softplus_negative":
        _zero_live_rows(state, idx, rows)
    elif regime == "grown":
        lo, hi = reach.grown_exponents(act)
        state = floats(rng, state_shape, pool_dtype, min_exp=lo, max_exp=hi)
    regions += _padding_rows(idx, ("x", "dt", "B", "C", "z"), dict(x=x, dt=dt, B=B, C=C, z=kw.get("z")))
    if idx is not None:
        kw["state_indices"] = idx
    inputs = dict(state=state, x=x, dt=dt, A=A, B=B, C=C, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows, mamba2=bool(mamba2),
                  num_heads=heads, num_groups=groups, head_dim=p, state_size=n, num_slots=num_slots,
                  variant=variant.name, **_ssm_params(kw), **conventions(claims))
    if tier or regime:
        params["tier" if tier else "regime"] = tier or regime
    return Case("selective_state_update", inputs, params, seed, poison=_named(regions, "state"))


@st.composite
def ssd_cases(draw, claims: OpClaims, variant: Variant, *, max_seqs: int = 3, max_len: int = 4,
              chunk_size: int | None = None, tier: str = "", regime: str = ""):
    """An `ssd_chunked_scan` call (RS-17 … RS-19): varlen with empty sequences, chunk sizes 1 … 64. Long
    tiers: `edges` (the default of a long column), `tokens` (hundreds to thousands of tokens after a short
    leader, hints 16 … 256, decays near 1), `state` (N past 128); range: SSM_RANGE_REGIMES over one
    sequence of RANGE_TOKENS tokens (one chunk)."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    max_seqs = constraints.upper(claims, "max_num_seqs", max_seqs)
    tier = tier or ("edges" if variant.long else "")
    if tier == "crossed":   # a range regime over several chunks, dims not powers of two (recurrent_crossed)
        lengths, cu = crossed.lengths(draw, claims)
        chunk = crossed.hint(draw, chunk_size)
        groups = 1
        heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else reach.RANGE_HEADS
        p, n = crossed.odd_dim(draw, claims, "head_dim"), crossed.odd_dim(draw, claims, "state_size")
    elif tier == "edges":
        # The hint first, so that the first length may be a multiple of it ("T == chunk_size").
        chunk = chunk_size or draw(sampled_from(LONG_CHUNK_SIZES))
        # The first sequence crosses at least one 8-token chunk end; shrinks towards 9 tokens.
        multiples = tuple(chunk * i for i in range(1, SSD_LONG_MAX // chunk + 1) if chunk * i >= 8)
        edges = SSD_LONG_EDGES + tuple(m for m in multiples if m not in SSD_LONG_EDGES)
        lengths, cu = _lengths(draw, min(max_seqs, 2), SSD_LONG_MAX,
                               st.one_of(st.sampled_from(edges), st.integers(9, SSD_LONG_MAX)), claims)
        groups = draw(sampled_from(constraints.allowed(claims, "num_groups", (1, 2), "num_groups"))) \
            if "grouped_bc" in claims.features else 1
        heads = _heads_over(draw, claims, groups) if "num_heads" in claims.limits \
            else groups * draw(sampled_from((1, 2)))
        p, n = reach.dim(draw, claims, "head_dim", 1, 2), reach.dim(draw, claims, "state_size", 1, 2)
    elif tier in ("tokens", "state", "sequences", "num_heads", "head_dim"):
        if tier == "tokens":
            lengths, cu = _lead_and_long(draw, claims, "ssd_chunked_scan")
            chunk = chunk_size or draw(sampled_from(reach.LONG_HINTS))
        elif tier == "sequences":
            lengths, cu = _many_sequences(draw, claims, "ssd_chunked_scan")
            chunk = chunk_size or draw(sampled_from((16, 8, 64)))
        else:
            lengths, cu = _lengths(draw, 1, 20, st.integers(9, 20), claims)
            chunk = chunk_size or draw(sampled_from((16, 8, 64)))
        n = reach.reach_dim(draw, claims, "state_size", reach.STATE_SIZES) if tier == "state" \
            else reach.dim(draw, claims, "state_size", 1, 2)
        groups = 1
        if tier == "num_heads":
            heads = reach.tier_dim(draw, claims, "num_heads", "ssd_chunked_scan", "heads")
        else:
            heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else 1
        p = reach.tier_dim(draw, claims, "head_dim", "ssd_chunked_scan", "head_dim") if tier == "head_dim" \
            else reach.dim(draw, claims, "head_dim", 1, 2)
    elif variant.range:     # fixed small shapes: one sequence, one chunk (recurrent_reach.RANGE_*)
        lengths, cu = _lengths(draw, 1, reach.RANGE_TOKENS, st.just(reach.RANGE_TOKENS), claims)
        regime = regime or draw(sampled_from(SSM_RANGE_REGIMES))
        groups = 1
        heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else reach.RANGE_HEADS
        p = reach.dim(draw, claims, "head_dim", reach.RANGE_DIM, reach.RANGE_DIM)
        n = reach.dim(draw, claims, "state_size", reach.RANGE_DIM, reach.RANGE_DIM)
        chunk = chunk_size or reach.RANGE_TOKENS
    else:
        lengths, cu = _lengths(draw, max_seqs, max_len, claims=claims)
        heads, groups = _heads_groups(draw, claims)
        p = reach.dim(draw, claims, "head_dim", 1, 2)
        n = reach.dim(draw, claims, "state_size", 1, 3)
        chunk = chunk_size or draw(sampled_from(CHUNK_SIZES))
    seqs, tokens = len(lengths), int(cu[-1])
    idx, num_slots = _slots(draw, seqs, variant, claims if tier == "slots" else None, tier=tier)
    has_initial = _fresh(draw, seqs, variant)
    snaps = draw(st.integers(1, 3)) if "snapshots" in variant.features else 0
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    kw = _ssm_options(draw, rng, (heads,), (tokens, heads, p), act, claims, softplus_first=variant.range)
    if regime:
        dt, A = _ssm_range_values(rng, regime, (tokens, heads), (heads,), act, kw["dt_softplus"])
        if tier == "crossed" and regime not in ("decays", "grown"):   # its dt in every chunk past the first
            dt = crossed.spread(rng, dt, cu, _defining_dt(regime, act, kw["dt_softplus"]))
    elif tier == "tokens":
        # decays near 1 (|dt' A| <= 2.6 * 2^-8 per token): the state grows over hundreds of tokens
        dt = _positive(rng, (tokens, heads), act, min_exp=-4, max_exp=0)
        A = (-np.exp2(rng.uniform(-10, -8, size=(heads,)))).astype(dtypes.resolve_dtype(act))
    else:
        dt = _positive(rng, (tokens, heads), act, max_exp=0)
        A = -_positive(rng, (heads,), act, max_exp=0)
    small = reach.tokens_exponent(act) if tier in ("tokens", "crossed") else 1   # float16 outputs stay finite
    arrays = dict(x=floats(rng, (tokens, heads, p), act, max_exp=small), dt=dt,
                  B=floats(rng, (tokens, groups, n), act, max_exp=small if tier == "crossed" else 1),
                  C=floats(rng, (tokens, groups, n), act))
    if "z" in kw:
        arrays["z"] = kw.pop("z")
    state, regions = _pool(rng, (num_slots, heads, p, n), pool_dtype, idx, seqs,
                           None if has_initial is None else ~has_initial)
    if regime == "softplus_negative":
        _zero_live_rows(state, idx, seqs)
    elif regime == "grown":
        lo, hi = reach.grown_exponents(act)
        state[...] = floats(rng, state.shape, pool_dtype, min_exp=lo, max_exp=hi)
    regions += _padding_tokens(arrays, cu, idx, ("x", "dt", "B", "C", "z"))
    if idx is not None:
        kw["state_indices"] = idx
    if has_initial is not None:
        kw["has_initial_state"] = has_initial
    if snaps:
        kw["num_snapshots"] = snaps
    inputs = dict(state=state, A=A, cu_seqlens=cu, chunk_size=chunk, **arrays, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=seqs, tokens=tokens, lengths=lengths,
                  num_heads=heads, num_groups=groups, head_dim=p, state_size=n, chunk_size=chunk,
                  num_slots=num_slots, num_snapshots=snaps, variant=variant.name,
                  **_ssm_params(dict(kw, z=arrays.get("z"))), **conventions(claims))
    params.update({k: v for k, v in (("tier", tier), ("regime", regime)) if v})
    return Case("ssd_chunked_scan", inputs, params, seed, poison=_named(regions, "state"))


#: value regimes of the RWKV6 range column (the first is the simplest draw)
RWKV_RANGE_REGIMES = ("strong_decays", "weak_decays", "reset_and_keep")
#: each op's range regimes, which the long column's `crossed` tier draws over several chunks too
#: (recurrent_crossed.py; the gated delta rule's are added by recurrent_gated_delta.py)
#: the decay multiplier that defines each RWKV6 regime (its first option)
_DEFINING_DECAY = {"strong_decays": float(np.exp(reach.RANGE_LOG_DECAYS[0])), "weak_decays": float(np.exp(-1e-6)),
                   "reset_and_keep": 0.0}
RANGE_REGIMES = {"selective_state_update": SSM_RANGE_REGIMES, "ssd_chunked_scan": SSM_RANGE_REGIMES,
                 "rwkv6_wkv": RWKV_RANGE_REGIMES}


@st.composite
def rwkv_cases(draw, claims: OpClaims, variant: Variant, *, max_seqs: int = 3, max_len: int = 4, tier: str = "",
               regime: str = ""):
    """A `rwkv6_wkv` call (RS-20): varlen with empty sequences, w in (0, 1). Long tiers: `edges` (the
    default of a long column), `tokens` (hundreds to thousands of tokens after a short leader, decays near
    1), `heads` (K, V of real RWKV-6 heads, 64, and past it); range: RWKV_RANGE_REGIMES (log decays
    -50 … -1e-6, decays exactly 0 and 1)."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    max_seqs = constraints.upper(claims, "max_num_seqs", max_seqs)
    tier = tier or ("edges" if variant.long else "")
    regime = regime or (draw(sampled_from(RWKV_RANGE_REGIMES)) if variant.range else "")
    if tier == "crossed":   # a range regime over several windows, dims not powers of two (recurrent_crossed)
        lengths, cu = crossed.lengths(draw, claims)
    elif tier == "edges":
        # A third of the first sequences cross the 64-token window; shrinks towards 9 tokens.
        lengths, cu = _lengths(draw, min(max_seqs, 2), RWKV_LONG_MAX,
                               st.one_of(st.sampled_from(RWKV_LONG_EDGES), st.integers(65, RWKV_LONG_MAX),
                                         st.integers(0, RWKV_LONG_MAX)), claims)
    elif tier == "tokens":
        lengths, cu = _lead_and_long(draw, claims, "rwkv6_wkv")
    elif tier == "sequences":
        lengths, cu = _many_sequences(draw, claims, "rwkv6_wkv")
    elif tier in ("heads", "num_heads"):
        lengths, cu = _lengths(draw, 1, 20, st.integers(1, 20), claims)
    elif variant.range:     # fixed small shapes (recurrent_reach.RANGE_*)
        lengths, cu = _lengths(draw, 1, reach.RANGE_TOKENS, st.just(reach.RANGE_TOKENS), claims)
    else:
        lengths, cu = _lengths(draw, max_seqs, max_len, claims=claims)
    seqs, tokens = len(lengths), int(cu[-1])
    if tier == "num_heads":
        heads = reach.tier_dim(draw, claims, "num_heads", "rwkv6_wkv", "heads")
    elif "num_heads" in claims.limits:
        heads = _heads_over(draw, claims, 1)
    elif tier in ("heads", "tokens", "crossed", "sequences") or variant.range:
        heads = 1
    else:
        heads = draw(st.integers(1, 2))
    if variant.range:
        dk = reach.dim(draw, claims, "key_dim", reach.RANGE_DIM, reach.RANGE_DIM)
        dv = reach.dim(draw, claims, "value_dim", reach.RANGE_DIM, reach.RANGE_DIM)
    elif tier == "crossed":
        dk, dv = crossed.odd_dim(draw, claims, "key_dim"), crossed.odd_dim(draw, claims, "value_dim")
    elif tier == "heads":
        dk = reach.reach_dim(draw, claims, "key_dim", reach.RWKV_HEAD_DIMS)
        dv = reach.reach_dim(draw, claims, "value_dim", reach.RWKV_HEAD_DIMS)
    else:
        small = 2 if tier else 3
        dk, dv = reach.dim(draw, claims, "key_dim", 1, small), reach.dim(draw, claims, "value_dim", 1, small)
    if claims.limits.get("equal_key_value_dims") is True:
        dv = dk
    idx, num_slots = _slots(draw, seqs, variant, claims if tier == "slots" else None, tier=tier)
    has_initial = _fresh(draw, seqs, variant)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    if tier == "tokens":
        w = np.exp(reach.near_one_log(rng, (tokens, heads, dk))).astype(dtypes.resolve_dtype(act))
    elif regime == "strong_decays":
        w = np.exp(reach.choice(rng, (tokens, heads, dk), reach.RANGE_LOG_DECAYS, "float64")).astype(
            dtypes.resolve_dtype(act))
    elif regime == "weak_decays":
        w = np.exp(reach.choice(rng, (tokens, heads, dk), (-1e-6, -1e-4, -1e-8), "float64")).astype(
            dtypes.resolve_dtype(act))
    elif regime == "reset_and_keep":
        w = reach.choice(rng, (tokens, heads, dk), (0.0, 1.0, 0.5), act)
    else:
        w = _positive(rng, (tokens, heads, dk), act, min_exp=-3, max_exp=-1)
    if tier == "crossed":       # the regime's defining decay in every window past the first
        w = crossed.spread(rng, w, cu, _DEFINING_DECAY[regime])
    arrays = dict(r=floats(rng, (tokens, heads, dk), act),
                  k=floats(rng, (tokens, heads, dk), act,
                           max_exp=reach.tokens_exponent(act) if tier in ("tokens", "crossed") else 1),
                  v=floats(rng, (tokens, heads, dv), act), w=w)
    regions = _padding_tokens(arrays, cu, idx, ("r", "k", "v", "w"))
    kw = {}
    if idx is not None:
        kw["state_indices"] = idx
    if has_initial is not None:
        kw["has_initial_state"] = has_initial
    state, pool_regions = _pool(rng, (num_slots, heads, dk, dv), pool_dtype, idx, seqs,
                                None if has_initial is None else ~has_initial)
    regions = pool_regions + regions
    inputs = dict(**arrays, u=floats(rng, (heads, dk), act), state=state, cu_seqlens=cu, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=seqs, tokens=tokens, lengths=lengths,
                  num_heads=heads, key_dim=dk, value_dim=dv, num_slots=num_slots, variant=variant.name,
                  **conventions(claims))
    params.update({k: v for k, v in (("tier", tier), ("regime", regime)) if v})
    return Case("rwkv6_wkv", inputs, params, seed, poison=_named(regions, "state"))


STRATEGIES = {"causal_conv1d_update": conv_cases, "selective_state_update": ssu_cases,
              "ssd_chunked_scan": ssd_cases, "rwkv6_wkv": rwkv_cases}


# --- comparison contract (spec/numerics.md, Recurrent) ---------------------------------------------

def required_out_precision(x: dict, activation: str) -> str:
    """NU-3: kernel outputs hold at least the precision of the activations (`x`, or `r` for RWKV6);
    a wider output is judged by the same bound (tolerance never follows the returned dtype)."""
    return dtypes.dtype_name(x[activation].dtype)


def class_r(out_dtype: str, n, magnitude: float, what: str) -> tolerance.Tolerance:
    """NU-R2: the general class-R bound of NU-6 with the family's reduction length n: atol = c_R * n *
    u_acc * M (gamma_n of a sum of n terms in any order, M the largest term), rtol = 2 * u_out (one
    rounding of the output plus one intermediate); the engine adds the NU-6 aggregate check.
    `n` may be an array broadcastable to the output (per-sequence lengths L_s)."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    atol = C_R * n * U_ACC * float(magnitude)
    return tolerance.reduction(out_dtype, atol if atol.ndim else float(atol), 2.0 * tolerance.u(out_dtype),
                               reason=f"NU-R2 class R ({what}): n<={int(n.max(initial=1.0))}, M={magnitude:.3g}, c_R=2, "
                                      f"u_acc=2^-24, rtol=2u({out_dtype})")


def _per_sequence(n_of_seq: np.ndarray, owner: np.ndarray, ndim: int) -> np.ndarray:
    """n of each row's sequence (owner[row] = sequence index, -1 = none), shaped to broadcast over `ndim`
    trailing-axis output rows."""
    n = np.where(owner >= 0, n_of_seq[np.maximum(owner, 0)], 1.0)
    return n.reshape((-1,) + (1,) * (ndim - 1))


def _zero(out_dtype: str, what: str) -> tolerance.Tolerance:
    # A 0-ULP, 0-atol bound: only the value 0.0 passes, whatever dtype the backend returns (RS-3).
    return tolerance.ulp_bounded(out_dtype, 0, 0.0, reason=f"NU-R1 class E: {what} are exactly 0.0 (RS-3)")


def _untouched() -> tolerance.Tolerance:
    return tolerance.exact("NU-R1 class E: rows not addressed and padding rows stay bitwise (RS-4)")


def _amax(*arrays) -> float:
    vals = [np.abs(np.asarray(a, dtype=np.float64)) for a in arrays if a is not None]
    vals = [v[np.isfinite(v)] for v in vals]
    return max((float(v.max()) for v in vals if v.size), default=0.0)


def _split(expected: dict, actual: dict, name: str, part: str, mask, live, rest) -> dict:
    """One field compared two ways: `live` over `mask`, `rest` elsewhere.

    The engine takes one (tolerance, mask) per field name, so the second region is registered as a
    derived field `name[part]` (the same arrays) in the field dicts it passes in."""
    derived = f"{name}[{part}]"
    expected[derived] = expected[name]
    if name in actual:
        actual[derived] = actual[name]
    return {name: (live, mask), derived: (rest, ~mask)}


def _output_checks(case: Case, expected: dict, actual: dict, name: str, mask, live: tolerance.Tolerance,
                   out_dtype: str) -> dict:
    """`name` within `live` on the rows of live rows / sequences (`mask`); padding rows exactly 0.0 (RS-3),
    or not compared at all under the claimed convention padding_outputs "unspecified" (RS-36: the pool
    is still checked untouched for them, `_pool_checks`)."""
    if case.params.get("padding_outputs") == "unspecified":
        return {name: (live, mask)}
    return _split(expected, actual, name, "padding", mask, live, _zero(out_dtype, "padding outputs"))


def _pool_checks(expected, actual, name, slots, written: tolerance.Tolerance) -> dict:
    """Written rows (the non-negative `slots`) within `written`; every other row exact (RS-4)."""
    mask = np.zeros(np.shape(expected[name]), dtype=bool)
    live = np.asarray(slots)
    mask[live[live >= 0]] = True
    return _split(expected, actual, name, "untouched", mask, written, _untouched())


def _start_rows(x: dict, slots, pool_name: str, flags=None) -> np.ndarray:
    """Starting state rows of live rows/sequences that read their slot (magnitudes for M)."""
    pool = x[pool_name]
    keep = [int(s) for i, s in enumerate(slots) if s >= 0 and (flags is None or flags[i])]
    return pool[keep] if keep else np.zeros((0,) + pool.shape[1:], dtype=pool.dtype)


def conv_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = W (+1 with bias), on live rows; padding rows exactly 0 (RS-3).
    conv_state: exact everywhere (NU-R1: windows are copies of inputs rounded once, RS-12)."""
    x = case.inputs
    rows = x["x"].shape[0]
    slots = _live_rows(x.get("state_indices"), rows)
    live = np.asarray(slots) >= 0
    weight = x["weight"]
    win = _amax(x["x"][live], _start_rows(x, slots, "conv_state"))
    M = max(_amax(weight) * win, _amax(x.get("bias")))
    n = weight.shape[1] + (x.get("bias") is not None)
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[live] = True
    out_dtype = required_out_precision(x, "x")
    checks = _output_checks(case, expected, actual, "out", mask, class_r(out_dtype, n, M, "conv output"),
                            out_dtype)
    checks["conv_state"] = (tolerance.exact("NU-R1 class E: conv windows are copies of inputs (RS-12)"), None)
    return checks


def ssu_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = N + 1, live rows; padding rows 0. state: written rows class R (n = 2),
    the rest exact (NU-R1, NU-R2)."""
    x = case.inputs
    rows = x["x"].shape[0]
    slots = _live_rows(x.get("state_indices"), rows)
    live = np.asarray(slots) >= 0
    dtp = effective_dt(np.asarray(x["dt"], np.float64)[live],
                       None if x.get("dt_bias") is None else np.asarray(x["dt_bias"], np.float64),
                       bool(x.get("dt_softplus", False)))
    if np.ndim(x["state"]) == 4:
        dtp = dtp[..., None]
    xs = np.asarray(x["x"], np.float64)[live]
    M_state = max(_amax(_start_rows(x, slots, "state")), _amax(dtp * xs) * _amax(x["B"][live]))
    gate = max(1.0, _amax(silu(x["z"][live]))) if x.get("z") is not None else 1.0
    dx = 0.0 if x.get("D") is None else _amax(x["D"]) * _amax(xs)
    M_out = max(M_state * _amax(x["C"][live]), dx) * gate
    n_state = x["state"].shape[-1]
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[live] = True
    out_dtype = required_out_precision(x, "x")
    checks = _output_checks(case, expected, actual, "out", mask,
                            class_r(out_dtype, n_state + 1, M_out, "SSU output"), out_dtype)
    pool_dtype = dtypes.dtype_name(x["state"].dtype)
    checks.update(_pool_checks(expected, actual, "state", slots,
                               class_r(pool_dtype, 2, M_state, "SSU state")))
    return checks


def _slot_n(n_seq: np.ndarray, slots, pool: np.ndarray) -> np.ndarray:
    """n of the sequence writing each pool row (1 for rows no sequence writes: compared exactly anyway)."""
    owner = np.full(pool.shape[0], -1)
    for s, slot in enumerate(slots):
        if slot >= 0:
            owner[int(slot)] = s
    return _per_sequence(np.asarray(n_seq, dtype=np.float64), owner, pool.ndim)


def _varlen(x: dict):
    cu = np.asarray(x["cu_seqlens"])
    seqs = cu.shape[0] - 1
    slots = _live_rows(x.get("state_indices"), seqs)
    flags = x.get("has_initial_state")
    flags = np.ones(seqs, dtype=bool) if flags is None else np.asarray(flags)
    token_live = np.zeros(int(cu[-1]), dtype=bool)
    for s in range(seqs):
        if slots[s] >= 0:
            token_live[cu[s]:cu[s + 1]] = True
    lengths = np.diff(cu)
    longest = int(max((lengths[s] for s in range(seqs) if slots[s] >= 0), default=0))
    return cu, seqs, slots, flags, token_live, lengths, longest


def ssd_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = L * N * (1 + Lambda) (+1 for D x), live tokens; padding tokens 0. state: written
    rows class R (same n), the rest exact. snapshots: r <= L_s class R like states (NU-R4), padding sequences
    0, r > L_s never compared (RS-19)."""
    x = case.inputs
    cu, seqs, slots, flags, token_live, lengths, longest = _varlen(x)
    dtp = effective_dt(np.asarray(x["dt"], np.float64)[token_live],
                       None if x.get("dt_bias") is None else np.asarray(x["dt_bias"], np.float64),
                       bool(x.get("dt_softplus", False)))
    xs = np.asarray(x["x"], np.float64)[token_live]
    S0 = _amax(_start_rows(x, slots, "state", flags))
    M_state = max(S0, _amax(dtp[..., None] * xs) * _amax(x["B"][token_live]))
    gate = max(1.0, _amax(silu(x["z"][token_live]))) if x.get("z") is not None else 1.0
    dx = 0.0 if x.get("D") is None else _amax(x["D"]) * _amax(xs)
    M_out = max(M_state * _amax(x["C"][token_live]), dx) * gate
    n_state = x["state"].shape[-1]
    # NU-R2: n = L * N, times (1 + Lambda) for the closed form's decays exp(cs_i - cs_j) (RS-18), whose
    # exponent differences of prefix sums carry an absolute error growing with Lambda, the largest total
    # log-decay sum_t |dt'_t A_h| of a live sequence.
    log_decay = np.abs(dtp * np.asarray(x["A"], np.float64))               # [live tokens, H]
    seq_of = np.repeat(np.arange(seqs), lengths)[token_live]
    Lambda = max((float(log_decay[seq_of == s].sum(axis=0).max(initial=0.0)) for s in range(seqs)),
                 default=0.0)
    n_seq = np.ceil(lengths * n_state * (1.0 + Lambda))          # per sequence: L_s * N * (1 + Lambda)
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[token_live] = True
    out_dtype = required_out_precision(x, "x")
    token_seq = np.repeat(np.arange(seqs), lengths)
    checks = _output_checks(case, expected, actual, "out", mask,
                            class_r(out_dtype, _per_sequence(n_seq + 1, token_seq, np.ndim(expected["out"])), M_out,
                                    "SSD output"), out_dtype)
    pool_dtype = dtypes.dtype_name(x["state"].dtype)
    checks.update(_pool_checks(expected, actual, "state", slots,
                               class_r(pool_dtype, _slot_n(n_seq, slots, x["state"]), M_state, "SSD state")))
    snaps = np.shape(expected["snapshots"])
    if snaps[1]:
        live = np.zeros(snaps, dtype=bool)
        pad = np.zeros(snaps, dtype=bool)
        for s in range(seqs):
            if slots[s] >= 0:
                live[s, :lengths[s] + 1] = True
            else:
                pad[s] = True
        checks["snapshots"] = (class_r(pool_dtype, _per_sequence(n_seq, np.arange(seqs), len(snaps)), M_state,
                                       "SSD snapshots"), live)
        if case.params.get("padding_outputs") != "unspecified":      # RS-36: snapshots are outputs too
            expected["snapshots[padding]"] = expected["snapshots"]
            if "snapshots" in actual:
                actual["snapshots[padding]"] = actual["snapshots"]
            checks["snapshots[padding]"] = (_zero(pool_dtype, "padding snapshots"), pad)
    return checks


def rwkv_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = L * K, live tokens; padding tokens 0. state: written rows class R (n = L * K),
    the rest exact (NU-R2: terms r S0, r k v and the bonus r u k v; decays in (0, 1) only shrink them)."""
    x = case.inputs
    cu, seqs, slots, flags, token_live, lengths, longest = _varlen(x)
    S0 = _amax(_start_rows(x, slots, "state", flags))
    kv = _amax(x["k"][token_live]) * _amax(x["v"][token_live])
    M_state = max(S0, kv)
    M_out = _amax(x["r"][token_live]) * max(S0, kv * max(1.0, _amax(x["u"])))
    n_seq = (lengths * x["state"].shape[2]).astype(np.float64)      # per sequence: L_s * K
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[token_live] = True
    out_dtype = required_out_precision(x, "r")
    token_seq = np.repeat(np.arange(seqs), lengths)
    checks = _output_checks(case, expected, actual, "out", mask,
                            class_r(out_dtype, _per_sequence(n_seq, token_seq, np.ndim(expected["out"])), M_out,
                                    "RWKV6 output"), out_dtype)
    pool_dtype = dtypes.dtype_name(x["state"].dtype)
    checks.update(_pool_checks(expected, actual, "state", slots,
                               class_r(pool_dtype, _slot_n(n_seq, slots, x["state"]), M_state, "RWKV6 state")))
    return checks


CHECKS = {"causal_conv1d_update": conv_checks, "selective_state_update": ssu_checks,
          "ssd_chunked_scan": ssd_checks, "rwkv6_wkv": rwkv_checks}


# --- what a case uses (conformance/goldens.py) ------------------------------------------------------

_OPTIONAL_FEATURES = (("D", "skip_d"), ("z", "z_gate"), ("dt_bias", "dt_bias"))


def uses(case: Case) -> tuple[set, dict]:
    """The features a recurrent case uses (FEATURES names of backends/base.py) and its claim space: the
    dtypes, sizes (claim names of constraints.py) and conventions `outside` judges, read off its inputs."""
    x, op = case.inputs, case.op
    features, space = set(), {}
    idx = x.get("state_indices")
    if idx is not None:
        features.add("state_indices")
        if (np.asarray(idx) < 0).any():
            features.add("padding_slots")
    if x.get("has_initial_state") is not None:
        features.add("initial_states")
    if "cu_seqlens" in x:
        space["seq_len"] = [int(n) for n in np.diff(np.asarray(x["cu_seqlens"]))]
    name = dtypes.dtype_name
    if op == "causal_conv1d_update":
        features |= {f for f, on in (("multi_token", np.ndim(x["x"]) == 3), ("bias", x.get("bias") is not None),
                                     ("silu", x.get("activation") == "silu")) if on}
        space.update(dtype=name(x["x"].dtype), kv_dtype=name(x["conv_state"].dtype), num_seqs=np.shape(x["x"])[0],
                     channels=np.shape(x["x"])[-1], width=np.shape(x["weight"])[1])
    elif op in ("selective_state_update", "ssd_chunked_scan"):
        state = x["state"]
        mamba2 = np.ndim(state) == 4
        groups = np.shape(x["B"])[-2] if mamba2 else 1
        features |= {f for arg, f in _OPTIONAL_FEATURES if x.get(arg) is not None}
        features |= {f for f, on in (("mamba2", mamba2 and op == "selective_state_update"),
                                     ("grouped_bc", groups > 1), ("dt_softplus", bool(x.get("dt_softplus"))),
                                     ("snapshots", bool(x.get("num_snapshots")))) if on}
        space.update(dtype=name(x["x"].dtype), kv_dtype=name(state.dtype),
                     num_seqs=len(space["seq_len"]) if "seq_len" in space else np.shape(x["x"])[0],
                     num_heads=np.shape(state)[1] if mamba2 else 1, head_dim=np.shape(state)[-2],
                     state_size=np.shape(state)[-1], num_groups=groups, dt_softplus=bool(x.get("dt_softplus")),
                     optional_inputs=sorted(a for a, _ in _OPTIONAL_FEATURES if x.get(a) is not None))
    elif op in ("rwkv6_wkv", "gated_delta_rule_update", "gated_delta_rule_chunked"):
        state = x["state"]
        if x.get("use_qk_l2norm"):
            features.add("qk_l2norm")
        lead = x["r"] if op == "rwkv6_wkv" else x["q"]
        space.update(dtype=name(lead.dtype), kv_dtype=name(state.dtype), num_heads=np.shape(state)[1],
                     key_dim=np.shape(state)[2], value_dim=np.shape(state)[3],
                     num_seqs=len(space["seq_len"]) if "seq_len" in space else np.shape(lead)[0])
        if op != "rwkv6_wkv":
            space["num_qk_heads"] = np.shape(x["q"])[1]
    elif op == "recurrent_store_step":
        space.update(dtype=name(x["conv_pool"].dtype), kv_dtype=name(x["ssm_pool"].dtype))
    return features, {k: (int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v)
                      for k, v in space.items()}


# --- diagnosis variations (conformance/diagnosis.py) ----------------------------------------------

_ACTIVATIONS = ("x", "weight", "bias", "dt", "A", "B", "C", "z", "D", "dt_bias", "r", "k", "v", "w", "u")


#: the per-row inputs of the one-token ops, whose padding rows (state index -1, RS-3) "padding rows off" drops
_ROW_INPUTS = {"causal_conv1d_update": ("x", "state_indices"),
               "selective_state_update": ("x", "dt", "z", "B", "C", "state_indices"),
               "gated_delta_rule_update": ("q", "k", "v", "g", "beta", "state_indices")}


def _recurrent_diagnosis(case: Case) -> list:
    """Each optional term off, activations widened exactly to float32, padding rows dropped, the chunking
    hint at its ends."""
    idx = case.inputs.get("state_indices")
    found = [rows_dropped(case, "padding rows off", _ROW_INPUTS[case.op], np.asarray(idx) != -1)
             if case.op in _ROW_INPUTS and isinstance(idx, np.ndarray) else None,
             without(case, "bias off", bias=None), without(case, "silu off", activation=None),
             without(case, "z gate off", z=None), without(case, "D skip off", D=None),
             without(case, "dt_bias off", dt_bias=None), without(case, "dt_softplus off", dt_softplus=False),
             without(case, "snapshots off", num_snapshots=None),
             widened(case, _ACTIVATIONS, "activations widened to float32")]
    if case.op in ("ssd_chunked_scan", "gated_delta_rule_chunked"):   # the chunking hint (RS-18, RS-33)
        found += [without(case, "one chunk per sequence (chunk_size 64)", chunk_size=64),
                  without(case, "token by token (chunk_size 1)", chunk_size=1)]
    return [v for v in found if v is not None and not (v[0] == "dt_softplus off" and
                                                       not case.inputs.get("dt_softplus"))]


DIAGNOSIS = {op: _recurrent_diagnosis for op in STRATEGIES}
#: inputs the history property redraws (same shapes and slots, other values; signs free)
HISTORY_INPUTS = {"causal_conv1d_update": ("x", "weight", "conv_state"),
                  "selective_state_update": ("x", "B", "C", "state"),
                  "ssd_chunked_scan": ("x", "B", "C", "state"),
                  "rwkv6_wkv": ("r", "k", "v", "u", "state")}


# --- gated delta rule ops (RS-28 … RS-35): strategies and checks live in recurrent_gated_delta.py, which
# adds its VARIANTS, STRATEGIES and CHECKS entries to the dicts above when it is loaded (here).
from . import recurrent_gated_delta  # noqa: E402,F401

DIAGNOSIS.update({op: _recurrent_diagnosis for op in STRATEGIES if op not in DIAGNOSIS})
#: what a case uses, per op (conformance/goldens.py)
USES = {op: uses for op in ("causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv",
                            "gated_delta_rule_update", "gated_delta_rule_chunked", "recurrent_store_step")}
HISTORY_INPUTS.update({"gated_delta_rule_update": ("q", "v", "state"),       # k keeps |k| <= 1 (RS-35)
                       "gated_delta_rule_chunked": ("q", "v", "state")})

# --- the store op (RS-21 … RS-27): recurrent_store.py adds its VARIANTS, STRATEGIES, CHECKS and
# HISTORY_INPUTS entries here when it is loaded (no diagnosis variations: its checks are exact).
from . import recurrent_store  # noqa: E402,F401


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: per op, the columns its strided cases are drawn from, the first one claimed: state indices (a slot
#: column of the engine's wider table) where claimed, else the base column
def _strided_columns(op: str) -> tuple:
    indexed = [v for v in VARIANTS[op] if v.name == "state_indices"]
    return strided.columns(STRATEGIES[op], *indexed, VARIANTS[op][0])


STRIDED = {op: _strided_columns(op) for op in STRATEGIES}
