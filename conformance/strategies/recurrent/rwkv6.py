"""`rwkv6_wkv` cases and checks (spec/recurrent.md RS-20)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from .. import constraints
from ..values import floats, sampled_from, seeds
from . import crossed, reach
from .common import (_INDEXED, _PADDED, _RANGE, _REACH, RANGE_REGIMES, RWKV_LONG_EDGES, RWKV_LONG_MAX, Variant,
                     _dtypes, _fresh, _heads_over, _lead_and_long, _lengths, _many_sequences, _named, _padding_tokens,
                     _pool, _positive, _slots, conventions)
from .contract import (_amax, _output_checks, _per_sequence, _pool_checks, _slot_n, _start_rows, _varlen, class_r,
                       largest_sequence_total, required_out_precision)

RWKV_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-17", "RS-20", "RS-39", "RS-40")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("initial_states", ("initial_states",), ("RS-5",)),
    Variant("long", (), ("RS-5", "RS-17", "RS-20", "RS-45") + _REACH, reach="long"),   # RS-5: initial states in the size tiers
    Variant("range", (), ("RS-20",) + _RANGE, reach="range"),
)


#: float32's smallest normal: the smallest decay whose log a float32 log-space kernel takes (RS-44)
_LOG_FLOOR = float(np.finfo(np.float32).tiny)


def positive_decays(w: np.ndarray) -> np.ndarray:
    """RS-44 (`decays: "positive"`): every decay of 0 (drawn, or a strong decay that rounds to 0 in the
    activations' dtype) raised to the smallest decay a log-space kernel takes in float32: the smallest
    normal of the dtype, and of float32 (log of it is -87.3; a float64 2^-1022 is 0 in float32)."""
    floor = max(_LOG_FLOOR, float(ml_dtypes.finfo(w.dtype).tiny))
    return np.where(w > 0, w, np.asarray(floor).astype(w.dtype))


RWKV_RANGE_REGIMES = ("strong_decays", "weak_decays", "reset_and_keep")
RANGE_REGIMES["rwkv6_wkv"] = RWKV_RANGE_REGIMES
#: the decay multiplier that defines each RWKV6 regime (its first option)
_DEFINING_DECAY = {"strong_decays": float(np.exp(reach.RANGE_LOG_DECAYS[0])), "weak_decays": float(np.exp(-1e-6)),
                   "reset_and_keep": 0.0}


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
    if tier == "crossed":   # a range regime over several windows, dims not powers of two (crossed.py)
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
    elif variant.range:     # fixed small shapes (reach.RANGE_*)
        lengths, cu = _lengths(draw, 1, reach.RANGE_TOKENS, st.just(reach.RANGE_TOKENS), claims)
    else:
        # the slots tier: a first sequence of at least one token (a sequence of none moves no row)
        lengths, cu = _lengths(draw, max_seqs, max_len, st.integers(1, max_len) if tier == "slots" else None, claims)
    seqs, tokens = len(lengths), int(cu[-1])
    if tier == "num_heads":
        heads = reach.tier_dim(draw, claims, "num_heads", "rwkv6_wkv", "heads", costly=True)
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
    has_initial = _fresh(draw, seqs, variant, claims, tier)
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
    if claims.limits.get("decays") == "positive":   # RS-44, after every decay is placed (the crossed tier's 0 too)
        w = positive_decays(w)
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



def rwkv_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = L * K * (1 + Lambda), live tokens; padding tokens 0. state: written rows class R
    (same n), the rest exact (NU-R2: terms r S0, r k v and the bonus r u k v; decays in (0, 1) only shrink
    them)."""
    x = case.inputs
    cu, seqs, slots, flags, token_live, lengths, longest = _varlen(x)
    S0 = _amax(_start_rows(x, slots, "state", flags))
    kv = _amax(x["k"][token_live]) * _amax(x["v"][token_live])
    M_state = max(S0, kv)
    M_out = _amax(x["r"][token_live]) * max(S0, kv * max(1.0, _amax(x["u"])))
    # NU-R2: times (1 + Lambda) for the log-space chunks RS-20 allows, whose decays exp(L_t - L_s) are
    # differences of prefix sums of log w: Lambda is the largest total log-decay of a live sequence, head
    # and key channel, each token's log w floored at float32's log of its smallest normal (RS-44's floor).
    log_decay = -np.log(np.maximum(np.asarray(x["w"], np.float64)[token_live], _LOG_FLOOR))     # [live, H, K]
    seq_of = np.repeat(np.arange(seqs), lengths)[token_live]
    Lambda = largest_sequence_total(log_decay, seq_of)
    n_seq = np.ceil(lengths * x["state"].shape[2] * (1.0 + Lambda))  # per sequence: L_s * K * (1 + Lambda)
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


