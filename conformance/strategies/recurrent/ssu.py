"""`selective_state_update` (Mamba1 and Mamba2) cases and checks (spec/recurrent.md RS-14 .. RS-16)."""
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
from . import reach
from .common import (_INDEXED, _PADDED, _RANGE, _REACH, Variant, _dtypes, in_size_tier, _heads_groups, _heads_over, _live_rows,
                     _named, _padding_rows, _pool, _positive, _slots, _ssm_options, _ssm_params, _zero_live_rows,
                     conventions)
from .contract import (_amax, _output_checks, _pool_checks, _start_rows, class_r, required_out_precision,
                       softplus_conditioning)

SSU_VARIANTS = (
    Variant("mamba1", (), ("RS-1", "RS-6", "RS-8", "RS-9", "RS-14", "RS-15", "RS-37", "RS-38")),
    Variant("mamba2", ("mamba2",), ("RS-16", "RS-41")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("long", (), ("RS-15", "RS-16") + _REACH, reach="long"),
    Variant("range", (), ("RS-9", "RS-14", "RS-15") + _RANGE, reach="range"),
)


SSM_RANGE_REGIMES = ("softplus_linear", "softplus_negative", "softplus_threshold", "decays", "grown")


def _ssm_range_values(rng, regime: str, dt_shape, a_shape, act: str, softplus: bool):
    """dt (raw, before dt_bias and softplus) and A of one SSM range regime (reach.RANGE_*):
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
    fixed = variant.range                      # range cases: fixed small shapes (reach.RANGE_*)
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
                heads = reach.tier_dim(draw, claims, "num_heads", "selective_state_update", "heads", costly=True)
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
    kw = _ssm_options(draw, rng, hs, tok, act, claims, softplus_first=variant.range, features_first=in_size_tier(tier))
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



def ssu_checks(case: Case, expected: dict, actual: dict) -> dict:
    """out: class R, n = (N + 1)(1 + kappa), live rows; padding rows 0. state: written rows class R
    (n = 2 (1 + kappa)), the rest exact (NU-R1, NU-R2; kappa: the softplus input's rounding)."""
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
    cond = 1.0 + softplus_conditioning(x, live)
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[live] = True
    out_dtype = required_out_precision(x, "x")
    checks = _output_checks(case, expected, actual, "out", mask,
                            class_r(out_dtype, np.ceil((n_state + 1) * cond), M_out, "SSU output"), out_dtype)
    pool_dtype = dtypes.dtype_name(x["state"].dtype)
    checks.update(_pool_checks(expected, actual, "state", slots,
                               class_r(pool_dtype, np.ceil(2 * cond), M_state, "SSU state")))
    return checks


