"""`causal_conv1d_update` cases and checks (spec/recurrent.md RS-10 .. RS-12)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from .. import constraints
from ..values import floats, seeds
from . import reach
from .common import (_INDEXED, _PADDED, _RANGE, _REACH, Variant, _dtypes, drawn_on, in_size_tier, _live_rows, _named, _padding_rows, _pool,
                     _slots, conventions)
from .contract import _amax, _output_checks, _start_rows, class_r, required_out_precision

CONV_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-8", "RS-9", "RS-10", "RS-11", "RS-12")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("multi_token", ("multi_token",), ("RS-10", "RS-11", "RS-12")),
    Variant("long", (), ("RS-10", "RS-11", "RS-12") + _REACH, reach="long"),
    Variant("range", (), ("RS-9", "RS-11", "RS-12") + _RANGE, reach="range"),
)


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
    # the size tiers (and the range column for silu) draw each claimed option on first: in ci every option
    # meets every large dimension (spec/recurrent.md RS-42)
    use_bias = "bias" in claims.features and drawn_on(draw, in_size_tier(tier))
    if "silu" in claims.features and drawn_on(draw, variant.range or in_size_tier(tier)):
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


