"""`ssd_chunked_scan` cases and checks (spec/recurrent.md RS-17 .. RS-19)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes
from kvconform.reference.recurrent.activations import silu
from kvconform.reference.recurrent.selective_state import effective_dt

from .. import constraints
from ..values import floats, sampled_from, seeds
from . import crossed, reach
from .common import (_INDEXED, _PADDED, _RANGE, _REACH, CHUNK_SIZES, LONG_CHUNK_SIZES, RANGE_REGIMES, SSD_LONG_EDGES,
                     SSD_LONG_MAX, Variant, _dtypes, _fresh, _heads_groups, in_size_tier, _heads_over, _lead_and_long, _lengths,
                     _many_sequences, _named, _padding_tokens, _pool, _positive, _slots, _ssm_options, _ssm_params,
                     _zero_live_rows, conventions)
from .contract import (_amax, _output_checks, _per_sequence, _pool_checks, _slot_n, _start_rows, _varlen, _zero,
                       class_r, largest_sequence_total, required_out_precision, softplus_conditioning)
from .ssu import SSM_RANGE_REGIMES, _defining_dt, _ssm_range_values

SSD_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-14", "RS-16", "RS-17", "RS-18", "RS-37", "RS-38", "RS-39")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("initial_states", ("initial_states",), ("RS-5",)),
    Variant("snapshots", ("snapshots",), ("RS-19",)),
    Variant("long", (), ("RS-5", "RS-17", "RS-18", "RS-45") + _REACH, reach="long"),   # RS-5: initial states in the size tiers
    Variant("range", (), ("RS-9", "RS-14", "RS-18") + _RANGE, reach="range"),
)
RANGE_REGIMES["ssd_chunked_scan"] = SSM_RANGE_REGIMES


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
    if tier == "crossed":   # a range regime over several chunks, dims not powers of two (crossed.py)
        lengths, cu = crossed.lengths(draw, claims)
        chunk = crossed.hint(draw, chunk_size)
        groups = 1
        heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else 1   # one head: its cost is per head
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
            heads = reach.tier_dim(draw, claims, "num_heads", "ssd_chunked_scan", "heads", costly=True)
        else:
            heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else 1
        p = reach.tier_dim(draw, claims, "head_dim", "ssd_chunked_scan", "head_dim") if tier == "head_dim" \
            else reach.dim(draw, claims, "head_dim", 1, 2)
    elif variant.range:     # fixed small shapes: one sequence, one chunk (reach.RANGE_*)
        lengths, cu = _lengths(draw, 1, reach.RANGE_TOKENS, st.just(reach.RANGE_TOKENS), claims)
        regime = regime or draw(sampled_from(SSM_RANGE_REGIMES))
        groups = 1
        heads = _heads_over(draw, claims, 1) if "num_heads" in claims.limits else reach.RANGE_HEADS
        p = reach.dim(draw, claims, "head_dim", reach.RANGE_DIM, reach.RANGE_DIM)
        n = reach.dim(draw, claims, "state_size", reach.RANGE_DIM, reach.RANGE_DIM)
        chunk = chunk_size or reach.RANGE_TOKENS
    else:
        # the slots tier: a first sequence of at least one token (a sequence of none moves no row)
        lengths, cu = _lengths(draw, max_seqs, max_len, st.integers(1, max_len) if tier == "slots" else None, claims)
        heads, groups = _heads_groups(draw, claims)
        p = reach.dim(draw, claims, "head_dim", 1, 2)
        n = reach.dim(draw, claims, "state_size", 1, 3)
        chunk = chunk_size or draw(sampled_from(CHUNK_SIZES))
    seqs, tokens = len(lengths), int(cu[-1])
    idx, num_slots = _slots(draw, seqs, variant, claims if tier == "slots" else None, tier=tier)
    has_initial = _fresh(draw, seqs, variant, claims, tier)
    snaps = draw(st.integers(1, 3)) if "snapshots" in variant.features else 0
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    kw = _ssm_options(draw, rng, (heads,), (tokens, heads, p), act, claims, softplus_first=variant.range,
                      features_first=in_size_tier(tier))
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

def ssd_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = L * N * (1 + Lambda) (1 + kappa) (+1 for D x), live tokens; padding tokens 0.
    state: written rows class R (same n), the rest exact. snapshots: r <= L_s class R like states (NU-R4),
    padding sequences 0, r > L_s never compared (RS-19)."""
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
    Lambda = largest_sequence_total(log_decay, seq_of)
    # and times (1 + kappa) for a softplus input rounded before the exponential (contract.py)
    cond = 1.0 + softplus_conditioning(x, token_live)
    n_seq = np.ceil(lengths * n_state * (1.0 + Lambda) * cond)   # per sequence: L_s * N * (1 + Lambda) (1 + kappa)
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


