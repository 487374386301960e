"""Reach of the recurrent columns: the sizes (`long` column) and values (`range` column) at which real kernels
switch code path or lose range (spec/recurrent.md section 6 "Reach: sizes and values drawn", issue 27).

The short columns draw at most 4 tokens, dims of 1 … 3 and values of magnitude 1/16 … 4, which no kernel
threshold lies within. The thresholds here are each tied to a kernel or a model (the spec section cites
them). Every recurrent strategy takes a `tier` for its `long` column:

    edges     the short chunk / window edges (8, 16, 64 tokens; strategies/recurrent.py), many examples
    rows      decode batches in the hundreds (DECODE_ROWS)
    channels  conv channels past a 256-channel block (CONV_CHANNELS), widths up to 6
    state     SSM state sizes past 128 (STATE_SIZES)
    tokens    a sequence of 129 to a few thousand tokens after a short leader (so it starts mid-chunk of
              the packing), chunk hints 16 … 256 (LONG_TOKENS, LONG_HINTS, LEADERS), with decays near 1
              so that its state grows over the whole sequence
    heads     real head dims of linear attention (LINEAR_HEAD_DIMS, RWKV_HEAD_DIMS)

A threshold tier runs `TIER_BUDGET` of the profile's examples: one in ci and quick, whose draw is the
simplest one (Hypothesis tries it first) and is built to cross the tier's threshold; ten in thorough. Its
other dims are kept at 1 … 2 so that a few thousand tokens stay cheap on an interpreter. Claims narrow
these draws and may widen them (`reach_dim`): a size outside the claimed limit is replaced by the nearest
one the claim admits.

The `range` column draws values at the thresholds, one value regime per case (the simplest regime first):
softplus far into its linear region and far below zero, decays at 0, 1 and near both, gates whose chunk sums
pass float32's exp range, betas 0 and 1, grown states, float16 magnitudes (RANGE_* below). Its shapes are
fixed and small (RANGE_SHAPE: the values vary, not the shapes), so a compiling backend compiles a range
column once per option set.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from .. import constraints
from ...dimensions import dimensions
from ..values import floats, sampled_from

# --- sizes (the `long` column) --------------------------------------------------------------------------

#: tiers of each op's long column, in the order they run (the chunked ops' `crossed` tier, one loop per
#: value regime, follows them: crossed.py)
LONG_TIERS = {
    "causal_conv1d_update": ("rows", "channels", "slots"),
    "selective_state_update": ("state", "rows", "slots", "mamba1_channels", "num_heads", "head_dim"),
    "ssd_chunked_scan": ("edges", "tokens", "state", "slots", "sequences", "num_heads", "head_dim"),
    "rwkv6_wkv": ("edges", "tokens", "heads", "slots", "sequences", "num_heads"),
    "gated_delta_rule_update": ("heads", "rows", "slots", "num_heads"),
    "gated_delta_rule_chunked": ("edges", "tokens", "heads", "slots", "sequences", "num_heads"),
    "recurrent_store_step": ("rows", "state", "slots"),
}
#: the `slots` tier's pool: slot ids past 2^16 (a 16-bit index column wraps them; state_indices are int32,
#: RS-2), on rows of a few elements, so the pool stays small (65540 rows)
FAR_SLOTS = 2 ** 16 + 4
#: pools larger than this declare their canary rows as one poison region (common.py _pool)
SMALL_POOL = 4096
#: share of the profile's examples for one threshold tier: 1 in ci and quick, 10 in thorough
TIER_BUDGET = 0.04

def registry_reach(op: str, name: str, budget: int = 1 << 20) -> tuple[int, ...]:
    """The sizes the registry's dimension `name` of `op` is drawn at in `long` (model.reach_values: each
    power-of-two tile from 16 up to its real maximum and a tail past the last one), the tail first (past
    every tile, a partial last tile: the extreme ci draws), then the tiles from the largest down."""
    dim = next(d for d in dimensions(op) if d.name == name)
    values = dim.reach_values(budget)
    tails = [v for v in values if v & (v - 1)]                  # not a power of two
    return tuple(tails) + tuple(sorted((v for v in values if not v & (v - 1)), reverse=True))


#: the largest size a non-cheap kernel dimension is drawn at in `long` (model.reach_values' budget): past
#: every tile of TILES with a partial last tile, cheap on an interpreter
KERNEL_BUDGET = 1024


def past_last_tile(op: str, name: str) -> int:
    """One past the largest tile T its real range passes (model.thresholds): the smallest size that every
    tile below the real maximum leaves a partial last tile of; a costly dimension's ci draw."""
    dim = next(d for d in dimensions(op) if d.name == name)
    return max(dim.thresholds(), default=dim.real_max - 1) + 1


def tier_dim(draw, claims: OpClaims, claim: str, op: str, name: str, *, costly: bool = False) -> int:
    """The size of a dimension tier (the registry's dimension `name` of `op`, each other dim small): its
    registry_reach values within the claimed limit `claim` (reach_dim: the first is the simplest draw).
    `costly` (an interpreter runs one program per entry: heads, sequences): past_last_tile first."""
    values = registry_reach(op, name, KERNEL_BUDGET)
    return reach_dim(draw, claims, claim, ((past_last_tile(op, name),) if costly else ()) + values)


#: real head dims of linear attention (the `heads` tier): the registry's key / value dims, tail first:
#: GDN 255, 256, 128, ... (fla's 64-key state blocks, K <= 256); RWKV-6 63, 64, 32, 16 (head size 64)
LINEAR_HEAD_DIMS = registry_reach("gated_delta_rule_chunked", "key_dim", KERNEL_BUDGET)
RWKV_HEAD_DIMS = registry_reach("rwkv6_wkv", "key_dim", KERNEL_BUDGET)
#: decode rows of the `rows` tier: each tile of the registry's `rows` up to ROWS_BUDGET, 300 first (past
#: every tile of TILES, a partial last tile); thorough also draws vLLM's max_num_seqs 1024 and 1023. Not
#: drawn at real scale in ci: an interpreter runs one program per row (1023 Triton rows take minutes)
ROWS_BUDGET = 300
DECODE_ROWS = registry_reach("causal_conv1d_update", "rows", ROWS_BUDGET) + (1023, 1024)
#: the store's assignment batches of the `rows` tier: hundreds of sequences (its metadata moves whole)
STORE_ROWS = (300, 257, 128, 256)
CONV_CHANNELS = (257, 300, 512)        # vLLM causal_conv1d_update tiles channels by BLOCK_N = 256
CONV_WIDTHS = (4, 2, 3, 5, 6)          # Mamba d_conv 4; vLLM's conv kernels take widths 2 … 6
STATE_SIZES = (160, 129, 256)          # past 128: mamba_ssm's SSU launch, ggml CUDA's d_state 256 path
SSM_HEAD_DIMS = (1, 2, 64)             # Mamba-2 headdim 64
#: a long sequence: SSD's closed form is cheap on an interpreter, so its simplest draw is several hundred
#: tokens; the recurrences stepped token by token (RWKV6, and the gated delta rule's 64-row substitutions)
#: start at 129, one token into a second 128-row block of a 256-token chunk, and reach thousands in thorough
LONG_TOKENS = {"ssd_chunked_scan": (300, 129, 1000, 2049), "rwkv6_wkv": (300, 129, 1000, 2049),
               "gated_delta_rule_chunked": (300, 129, 1000, 2049)}
LONG_HINTS = (256, 128, 192, 129, 64, 16)   # a second 128-row block inside a chunk only above 128
LEADERS = (5, 1, 3, 7)                 # a short first sequence: the long one starts mid-chunk
#: the `crossed` tier (crossed.py): a range regime over 150 tokens (two 64-token chunks and a
#: tail; 97 and 200 in thorough) after a short leader
CROSSED_TOKENS = (150, 97, 200)
CROSSED_LEADERS = (5, 3)
#: log decays / log gates of the long `tokens` tier: decays near 1, so the state grows with the sequence
NEAR_ONE_EXP = (-14, -8)


def reach_dim(draw, claims: OpClaims, name: str, candidates) -> int:
    """A size past a kernel threshold: one of `candidates` (the first is the simplest draw) within the
    claimed limit `name`, or, when none is claimed, the nearest size the claim admits (its own values,
    its minimum, or its upper bound): a claim narrows the reach and may widen it, never skips it."""
    chosen = constraints.allowed(claims, name, candidates, name, skip=False)
    if not chosen:
        chosen = (constraints.upper(claims, name, max(candidates)),)
    return draw(sampled_from(tuple(chosen)))


def dim(draw, claims: OpClaims, name: str, lo: int, hi: int) -> int:
    """A size in lo … hi (shrinking to lo), within the claimed limit `name` when the backend states one;
    without a claim the draw is exactly `st.integers(lo, hi)`."""
    if name not in claims.limits:
        return draw(st.integers(lo, hi))
    return draw(sampled_from(constraints.allowed(claims, name, tuple(range(lo, hi + 1)), name)))


def length_strategy(claims: OpClaims, strategy):
    """`strategy` of sequence lengths restricted to the claimed `seq_len` limit (e.g. {"min": 1}: no
    empty sequences, RS-39)."""
    constraint = claims.limits.get("seq_len")
    if constraint is None:
        return strategy
    return strategy.filter(lambda n: constraints.admits(constraint, n))


def near_one_log(rng, shape) -> np.ndarray:
    """Negative log decays of magnitude 2^-14 … 2^-8 (decays within 0.4 % of 1), float64."""
    return -np.exp2(rng.uniform(*NEAR_ONE_EXP, size=shape))


# --- values (the `range` column) ------------------------------------------------------------------------

#: share of the profile's examples for a range column: 5 in ci, 2 in quick, 50 in thorough
RANGE_BUDGET = 0.2
#: the fixed shape of a range case: rows (or tokens of its one sequence, one chunk: the hint is the
#: same), heads, and the channel / state / key / value dims
RANGE_ROWS, RANGE_TOKENS, RANGE_HEADS, RANGE_DIM = 2, 8, 2, 2
#: raw dt (before softplus) far into softplus's linear region (threshold 20, RS-9; float32 exp overflows
#: past 88.7, so `log(1 + exp(dt))` becomes inf) and far below zero, where `log(1 + exp(dt))` rounds to 0
RANGE_DT_LINEAR = (100.0, 30.0, 20.5, 89.0, 21.0)
RANGE_DT_NEGATIVE = (-30.0, -20.0, -25.0, -40.0)
RANGE_DT_THRESHOLD = (20.0, 19.5, 20.5, 20.25)
#: log decays: near 1 (-1e-6) and near 0 (-50; RWKV's w = exp(-exp(x)) reaches exp(-54.6) at x = 4)
RANGE_LOG_DECAYS = (-50.0, -1e-6, -1e-3, -54.6, -20.0, -1.0)
#: GDN log gates per token whose chunk sums pass -88.7 (float32 exp(-gam) overflows) within RANGE_TOKENS
#: (8 x -12 = -96) and mostly -103.9 (exp(gam) underflows to 0)
RANGE_GATE_STEEP = (-16.0, -12.0)
RANGE_GATES = (0.0, -1e-6, -50.0, -0.5)         # exactly 0 (decay 1), near 0, steep
RANGE_BETAS = (1.0, 0.0, 0.5)                    # full write, no write
RANGE_GROWN_EXP = (10, 20)                       # state magnitudes after thousands of steps: 2^10 … 2^20
#: float16's largest exponent a value may take while every sum of a range case stays below 65504
FLOAT16_TOP_EXP = 13
#: float16 cases keep every output representable in float16 (NU-3: the required output precision), so
#: their grown states, long-sequence inputs and linear-region steps are smaller
FLOAT16_GROWN_EXP = (5, 9)
FLOAT16_TOKENS_EXP = -4                          # |x|, |k|, |v| < 2^-3 over the `tokens` tier
RANGE_DT_LINEAR_FLOAT16 = (30.0, 20.5, 40.0, 21.0)


def choice(rng, shape, options, dtype: str) -> np.ndarray:
    """Values drawn uniformly from `options`, rounded to `dtype` (a case holds what the backend gets); the
    first option, the one that defines the regime, is always among them (at the first element)."""
    from kvconform.reference import dtypes
    vals = np.asarray(options, dtype=np.float64)[rng.integers(0, len(options), size=shape)]
    if vals.size:
        vals.flat[0] = options[0]
    return vals.astype(dtypes.resolve_dtype(dtype))


def top_exponent(dtype: str) -> int:
    """The largest binary exponent a range case draws for activations of `dtype` (float16 stays clear of
    65504 through every sum; wider dtypes go far past float16's range)."""
    return FLOAT16_TOP_EXP if dtype == "float16" else 40


def wide(rng, shape, dtype: str, *, low: int = -12, act: str | None = None) -> np.ndarray:
    """Values of `dtype` with magnitudes 2^low … 2^top_exponent(act or dtype) (bit patterns, as `floats`):
    `act` the activations' dtype, whose precision the outputs these values reach must be representable in."""
    return floats(rng, shape, dtype, min_exp=low, max_exp=top_exponent(act or dtype))


def grown_exponents(act: str) -> tuple[int, int]:
    """Exponent range of a grown state (RANGE_GROWN_EXP; smaller under float16 activations)."""
    return FLOAT16_GROWN_EXP if act == "float16" else RANGE_GROWN_EXP


def tokens_exponent(act: str) -> int:
    """The largest exponent of token inputs in the `tokens` tier (FLOAT16_TOKENS_EXP under float16)."""
    return FLOAT16_TOKENS_EXP if act == "float16" else 1


def dt_linear(act: str) -> tuple[float, ...]:
    """Raw dt of the softplus linear regime in `act` (RANGE_DT_LINEAR; float16 outputs stay below 65504)."""
    return RANGE_DT_LINEAR_FLOAT16 if act == "float16" else RANGE_DT_LINEAR


def special_values(rng, shape, dtype: str) -> np.ndarray:
    """Stored data at the edges of its format, for exact copies: +-0.0, the smallest subnormal and normal,
    the largest finite, +-inf, NaN (two payloads), and ordinary values, in `dtype`."""
    from kvconform.reference import dtypes
    dt = dtypes.resolve_dtype(dtype)
    info = np.finfo(dt)
    edges = np.array([0.0, -0.0, info.smallest_subnormal, -info.smallest_subnormal, info.tiny, info.max,
                      -info.max, np.inf, -np.inf, 3 * info.smallest_subnormal], dtype=dt)
    quiet = np.array([np.nan], dtype=dt)
    payload = quiet.copy()
    payload.view({4: np.uint32, 8: np.uint64}[dt.itemsize])[0] |= 1     # a NaN with another payload
    pool = np.concatenate([edges, quiet, payload, floats(rng, (4,), dtype)])
    return pool[rng.integers(0, pool.size, size=tuple(shape))]


def smallest_size(op: str, params: dict) -> int:
    """The largest size (tokens + sequences, as tests/engine/test_mutants.py measures a counterexample)
    of the smallest draw of the reach tier or regime `params` come from: a failure shrinks no further than
    its tier's threshold (a decode batch of DECODE_ROWS[0] rows, a long sequence of LONG_TOKENS[op][0]
    tokens after a leader) or the fixed shape of a range case."""
    tier = params.get("tier")
    if tier == "rows":
        return 4 * DECODE_ROWS[0] + 8                      # rows + rows * (up to 3 tokens), store: + slots
    if tier == "tokens":
        return LONG_TOKENS[op][0] + max(LEADERS) + 2
    if tier == "crossed":
        return CROSSED_TOKENS[0] + max(CROSSED_LEADERS) + 2
    if tier in ("channels", "state", "heads", "slots", "mamba1_channels", "num_heads", "head_dim"):
        return 48
    if tier == "sequences":
        return 2 * DECODE_ROWS[0] + 2                      # sequences of one token each                                          # <= 40 tokens, <= 2 rows of <= 3 tokens
    if params.get("regime"):
        return 4 * max(RANGE_ROWS, RANGE_TOKENS) + 4 if op != "recurrent_store_step" else 24
    return 0
