"""Strategies and comparison contract for the gated delta rule ops of the recurrent family
(spec/recurrent.md RS-28 … RS-35): `gated_delta_rule_update` and `gated_delta_rule_chunked`.

Registered in `strategies/recurrent.py` (VARIANTS, STRATEGIES, CHECKS), which is where the engine looks up
an op of the recurrent family. Feature names (one features-matrix column each), besides the shared
`state_indices`, `padding_slots` and `initial_states` of strategies/recurrent.py:

    qk_l2norm   use_qk_l2norm=True drawn (RS-29)

Cases are clean: every input is finite. The don't-care locations are declared as poison regions
(`Case.poison`): `padding_inputs` (q, k, v, g, beta of padding rows / sequences, RS-3), `unaddressed_rows`
(pool rows no entry addresses, which must come back bit for bit, RS-4) and `fresh_rows` (rows of sequences
with has_initial_state False, which must never be read, RS-5, filled with +inf). Differential tests run the
clean case; the `poison` property runs `case.with_poison()`.

Tested domain (RS-35): g in (-2, 0] (decays in (0.13, 1]), beta in [0, 1), and without normalisation keys
scaled to |k| <= 1 so that every transition exp(g) (I - beta k k^T) is contracting; with normalisation
q and k are any finite values. Shapes: Hk in {1, 2} q/k heads, H = Hk * {1, 2} state heads, K, V <= 3
(<= 2 in the long column). Long column (reach.py): tiers `edges` (chunked: as SSD's, a first
sequence of 9 … 20 tokens with hints (8, 16, 1, 3, 4), crossing the Triton kernel's 16-token chunks),
`tokens` (chunked: hundreds to thousands of tokens after a short leader, hints 16 … 256, gates near 0 so
the state grows over the sequence), `heads` (K, V of 64 … 256, fla's 64-key state blocks) and `rows`
(update: a decode batch of hundreds of rows). Range column: log gates exactly 0, near 0 and -50, betas
exactly 0 and 1 (`gates`); per-token gates of -16 … -12 whose chunk sums pass float32's exp range
(chunked `steep`); grown states; float16 q, k whose squares overflow float16 under L2 normalisation.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case, PoisonRegion
from kvconform.reference import dtypes
from kvconform.reference.recurrent.gated_delta import l2_normalize, qk_heads

from .. import constraints
from ..values import floats, sampled_from, seeds
from . import crossed, reach
from .common import (_RANGE, _REACH, CHUNK_SIZES, LONG_CHUNK_SIZES, RANGE_REGIMES, SSD_LONG_EDGES, SSD_LONG_MAX,
                     Variant, _dtypes, _fresh, _heads_over, drawn_on, in_size_tier, _lead_and_long, _lengths, _live_rows, _many_sequences,
                     _positive, _slots, conventions)
from .contract import _output_checks, _pool_checks, _varlen, class_r, largest_sequence_total

_INDEXED = ("RS-2", "RS-4", "RS-7", "RS-31")
_PADDED = ("RS-3", "RS-4", "RS-31", "RS-36")
GDN_UPDATE_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-28", "RS-29", "RS-30", "RS-31", "RS-35", "RS-40", "RS-41")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED),
    Variant("l2norm", ("qk_l2norm",), ("RS-29",)),
    Variant("long", (), ("RS-28", "RS-29", "RS-30") + _REACH, reach="long"),   # RS-29: l2norm in the size tiers
    Variant("range", (), ("RS-30", "RS-35") + _RANGE, reach="range"),
)
GDN_CHUNKED_VARIANTS = (
    Variant("base", (), ("RS-1", "RS-6", "RS-17", "RS-28", "RS-29", "RS-30", "RS-32", "RS-33", "RS-35", "RS-39",
                            "RS-40", "RS-41")),
    Variant("state_indices", ("state_indices",), _INDEXED),
    Variant("padding_slots", ("state_indices", "padding_slots"), _PADDED + ("RS-32",)),
    Variant("initial_states", ("initial_states",), ("RS-5", "RS-32")),
    Variant("l2norm", ("qk_l2norm",), ("RS-29",)),
    Variant("long", (), ("RS-5", "RS-17", "RS-29", "RS-32", "RS-33", "RS-45") + _REACH, reach="long"),
    Variant("range", (), ("RS-32", "RS-33", "RS-35") + _RANGE, reach="range"),
)
TOKEN_INPUTS = ("q", "k", "v", "g", "beta")


def _heads(draw, claims: OpClaims, tier: str = "", op: str = "") -> tuple[int, int]:
    """(H, Hk): shrinks towards H = 2, Hk = 1 (shared q/k head); H = 4, Hk = 2 tells h // 2 from h % 2.
    Within claimed num_qk_heads / num_heads limits (RS-41). The `rows`, `tokens` and `sequences` tiers:
    one head (their cost grows with heads on an interpreter, and heads are not their threshold); the
    `num_heads` tier: the registry's heads of `op` over one q/k head."""
    if tier == "num_heads":
        return reach.tier_dim(draw, claims, "num_heads", op, "heads", costly=True), 1
    if tier == "sequences":
        tier = "rows"
    if tier in ("rows", "tokens", "range") and not {"num_heads", "num_qk_heads"} & set(claims.limits):
        return (reach.RANGE_HEADS, 1) if tier == "range" else (1, 1)   # range: fixed shapes, h // 2 shared
    qk = draw(sampled_from(constraints.allowed(claims, "num_qk_heads", (1, 2), "num_qk_heads")))
    if "num_heads" in claims.limits:
        return _heads_over(draw, claims, qk), qk
    return qk * draw(sampled_from((2, 1))), qk


def _dims(draw, claims: OpClaims, tier: str) -> tuple[int, int]:
    """(K, V): 1 … 3 (1 … 2 in the long tiers); real head dims (LINEAR_HEAD_DIMS) in the `heads` tier,
    dims that are not powers of two in the `crossed` tier; V = K under the equal_key_value_dims
    convention (RS-40)."""
    if tier == "crossed":
        dk, dv = crossed.odd_dim(draw, claims, "key_dim"), crossed.odd_dim(draw, claims, "value_dim")
    elif tier == "heads":
        dk = reach.reach_dim(draw, claims, "key_dim", reach.LINEAR_HEAD_DIMS)
        dv = reach.reach_dim(draw, claims, "value_dim", reach.LINEAR_HEAD_DIMS)
    elif tier == "range":
        dk = reach.dim(draw, claims, "key_dim", reach.RANGE_DIM, reach.RANGE_DIM)
        dv = reach.dim(draw, claims, "value_dim", reach.RANGE_DIM, reach.RANGE_DIM)
    else:
        top = 2 if tier else 3
        dk, dv = reach.dim(draw, claims, "key_dim", 1, top), reach.dim(draw, claims, "value_dim", 1, top)
    return dk, (dk if claims.limits.get("equal_key_value_dims") is True else dv)


#: value regimes of the GDN range columns (the first is each op's simplest draw)
UPDATE_RANGE_REGIMES = ("gates", "grown", "float16_norm")
CHUNKED_RANGE_REGIMES = ("steep", "gates", "grown", "float16_norm")


def _token_arrays(rng, rows: int, heads: int, qk: int, dk: int, dv: int, act: str, norm: bool,
                  regime: str = "", tier: str = "") -> dict:
    q = floats(rng, (rows, qk, dk), act)
    k = floats(rng, (rows, qk, dk), act)
    if regime == "float16_norm":
        # |q|^2 and |k|^2 past 65504: a norm summed in float16 overflows (NU-3: sums in float32 or wider)
        q = floats(rng, (rows, qk, dk), act, min_exp=8, max_exp=reach.top_exponent(act) - 1)
        k = floats(rng, (rows, qk, dk), act, min_exp=8, max_exp=reach.top_exponent(act) - 1)
    if not norm:
        # RS-35: |k| <= 1 keeps beta |k|^2 <= 1 (rounded back to the activation dtype, then re-capped).
        norms = np.sqrt((k.astype(np.float64) ** 2).sum(-1, keepdims=True))
        scale = 0.99 / norms if regime == "gates" else 0.99 / np.maximum(1.0, norms)   # gates: |k| = 0.99
        k = (k.astype(np.float64) * scale).astype(k.dtype)
    v = floats(rng, (rows, heads, dv), act, max_exp=reach.tokens_exponent(act) if tier in ("tokens", "crossed") else 1)
    g = -_positive(rng, (rows, heads), act, max_exp=0)
    beta = _positive(rng, (rows, heads), act, min_exp=-4, max_exp=-1)
    if tier in ("tokens", "heads"):
        g = reach.near_one_log(rng, (rows, heads)).astype(g.dtype)   # the state grows; chunk sums stay small
    elif regime == "steep":
        g = rng.uniform(*reach.RANGE_GATE_STEEP, size=(rows, heads)).astype(g.dtype)
    elif regime == "gates":
        g = reach.choice(rng, (rows, heads), reach.RANGE_GATES, act)
        beta = reach.choice(rng, (rows, heads), reach.RANGE_BETAS, act)
    elif regime == "grown":
        g = reach.choice(rng, (rows, heads), (0.0, -1e-6, -2.0 ** -10), act)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def _state_exponents(act: str, regime: str) -> dict:
    lo, hi = reach.grown_exponents(act)
    return dict(min_exp=lo, max_exp=hi) if regime == "grown" else {}


def _regime(draw, claims: OpClaims, variant: Variant, regimes: tuple[str, ...], given: str = "") -> str:
    """The value regime of a range case (or `given`, the crossed tier's): float16_norm only where float16
    and qk_l2norm are claimed (elsewhere a crossed float16_norm run draws the first regime instead)."""
    usable = tuple(r for r in regimes if r != "float16_norm"
                   or ("qk_l2norm" in claims.features and "float16" in claims.dtypes))
    if given:
        return given if given in usable else usable[0]
    if not variant.range:
        return ""
    return draw(sampled_from(usable))


def _pool_regions(pool: np.ndarray, idx, rows: int, fresh=None) -> list[PoisonRegion]:
    used = [int(s) for s in _live_rows(idx, rows) if s >= 0]
    spare = np.flatnonzero(~np.isin(np.arange(pool.shape[0]), used))
    regions = [PoisonRegion("unaddressed_rows", "state", (np.asarray(spare, dtype=np.int64),), clause="RS-4",
                            what="pool rows no entry addresses (returned bit for bit)")]
    if fresh is not None:
        rows_fresh = [int(s) for i, s in enumerate(_live_rows(idx, rows)) if s >= 0 and fresh[i]]
        regions.append(PoisonRegion("fresh_rows", "state", (np.asarray(rows_fresh, dtype=np.int64),),
                                    clause="RS-5", what="rows of sequences with has_initial_state False",
                                    value=np.inf))
    return regions


def _padding_regions(mask: np.ndarray) -> list[PoisonRegion]:
    rows = np.flatnonzero(mask)
    return [PoisonRegion("padding_inputs", name, (rows,), clause="RS-3",
                         what="inputs of padding rows (never read)") for name in TOKEN_INPUTS]


def _options(draw, variant: Variant, regime: str = "", claims: OpClaims | None = None, tier: str = "") -> dict:
    """use_qk_l2norm (the qk_l2norm column, the float16_norm regime, and on in the simplest draw of a size
    tier where claimed: RS-42) and scale."""
    kw = {}
    tiered = claims is not None and in_size_tier(tier) and "qk_l2norm" in claims.features
    if "qk_l2norm" in variant.features or regime == "float16_norm" or (tiered and drawn_on(draw, True)):
        kw["use_qk_l2norm"] = True
    scale = draw(sampled_from((None, 0.5, 2.0)))
    if scale is not None:
        kw["scale"] = scale
    return kw


@st.composite
def gdn_update_cases(draw, claims: OpClaims, variant: Variant, *, tier: str = ""):
    """A `gated_delta_rule_update` call (RS-28 … RS-31) within `claims`. Long tiers: `heads` (K, V of
    64 … 256), `rows` (a decode batch of hundreds of rows); range: UPDATE_RANGE_REGIMES."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    if tier == "rows":
        rows = reach.reach_dim(draw, claims, "max_num_seqs", reach.DECODE_ROWS)
    elif variant.range:     # fixed small shapes (reach.RANGE_*)
        rows = min(reach.RANGE_ROWS, constraints.upper(claims, "max_num_seqs", reach.RANGE_ROWS))
    else:
        rows = draw(st.integers(1, constraints.upper(claims, "max_num_seqs", 2 if tier else 3)))
    heads, qk = _heads(draw, claims, "range" if variant.range else tier, "gated_delta_rule_update")
    dk, dv = _dims(draw, claims, "range" if variant.range else tier)
    idx, num_slots = _slots(draw, rows, variant, claims if tier in ("rows", "slots") else None, tier=tier)
    regime = _regime(draw, claims, variant, UPDATE_RANGE_REGIMES)
    kw = _options(draw, variant, regime, claims, tier)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    arrays = _token_arrays(rng, rows, heads, qk, dk, dv, act, kw.get("use_qk_l2norm", False), regime, tier)
    state = floats(rng, (num_slots, heads, dk, dv), pool_dtype, **_state_exponents(act, regime))
    poison = _pool_regions(state, idx, rows)
    if idx is not None:
        kw["state_indices"] = idx
        poison += _padding_regions(np.asarray(idx) < 0)
    inputs = dict(**arrays, state=state, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows, num_heads=heads,
                  num_qk_heads=qk, key_dim=dk, value_dim=dv, num_slots=num_slots, variant=variant.name,
                  **conventions(claims))
    if tier or regime:
        params["tier" if tier else "regime"] = tier or regime
    return Case("gated_delta_rule_update", inputs, params, seed, poison=tuple(poison))


@st.composite
def gdn_chunked_cases(draw, claims: OpClaims, variant: Variant, *, max_seqs: int = 3, max_len: int = 4,
                      chunk_size: int | None = None, tier: str = "", regime: str = ""):
    """A `gated_delta_rule_chunked` call (RS-32, RS-33): varlen with empty sequences, chunk hints 1 … 64.
    Long tiers: `edges` (the default of a long column), `tokens` (hundreds to thousands of tokens after a
    short leader, hints 16 … 256), `heads` (K, V of 64 … 256); range: CHUNKED_RANGE_REGIMES over one
    sequence of RANGE_TOKENS tokens in one chunk (a steep chunk's gate sum is below -96)."""
    act, pool_dtype = _dtypes(draw, claims, variant)
    max_seqs = constraints.upper(claims, "max_num_seqs", max_seqs)
    tier = tier or ("edges" if variant.long else "")
    if tier == "crossed":   # a range regime over several chunks, dims not powers of two (crossed.py)
        lengths, cu = crossed.lengths(draw, claims)
        chunk = crossed.hint(draw, chunk_size)
    elif tier == "edges":
        chunk = chunk_size or draw(sampled_from(LONG_CHUNK_SIZES))
        multiples = tuple(chunk * i for i in range(1, SSD_LONG_MAX // chunk + 1) if chunk * i >= 8)
        edges = SSD_LONG_EDGES + tuple(m for m in multiples if m not in SSD_LONG_EDGES)
        lengths, cu = _lengths(draw, min(max_seqs, 2), SSD_LONG_MAX,
                                  st.one_of(st.sampled_from(edges), st.integers(9, SSD_LONG_MAX)), claims)
    elif tier == "tokens":
        lengths, cu = _lead_and_long(draw, claims, "gated_delta_rule_chunked")
        chunk = chunk_size or draw(sampled_from(reach.LONG_HINTS))
    elif tier == "sequences":
        lengths, cu = _many_sequences(draw, claims, "gated_delta_rule_chunked")
        chunk = chunk_size or draw(sampled_from((16, 64)))
    elif tier in ("heads", "num_heads"):
        lengths, cu = _lengths(draw, 1, 40, st.integers(9, 40), claims)
        chunk = chunk_size or draw(sampled_from((16, 64)))
    elif variant.range:     # fixed small shapes: one sequence, one chunk (reach.RANGE_*)
        lengths, cu = _lengths(draw, 1, reach.RANGE_TOKENS, st.just(reach.RANGE_TOKENS), claims)
        chunk = chunk_size or reach.RANGE_TOKENS
    else:
        # the slots tier: a first sequence of at least one token (a sequence of none moves no row)
        lengths, cu = _lengths(draw, max_seqs, max_len, st.integers(1, max_len) if tier == "slots" else None, claims)
        chunk = chunk_size or draw(sampled_from(CHUNK_SIZES))
    dk, dv = _dims(draw, claims, "range" if variant.range else tier)
    heads, qk = _heads(draw, claims, "range" if variant.range else "tokens" if tier == "crossed" else tier,
                       "gated_delta_rule_chunked")
    seqs, tokens = len(lengths), int(cu[-1])
    idx, num_slots = _slots(draw, seqs, variant, claims if tier == "slots" else None, tier=tier)
    has_initial = _fresh(draw, seqs, variant, claims, tier)
    regime = _regime(draw, claims, variant, CHUNKED_RANGE_REGIMES, regime)
    kw = _options(draw, variant, regime, claims, tier)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    arrays = _token_arrays(rng, tokens, heads, qk, dk, dv, act, kw.get("use_qk_l2norm", False), regime, tier)
    if tier == "crossed" and regime == "gates":     # a gate of exactly 0 and a beta of 1 in every chunk
        arrays["g"] = crossed.spread(rng, arrays["g"], cu, reach.RANGE_GATES[0])
        arrays["beta"] = crossed.spread(rng, arrays["beta"], cu, reach.RANGE_BETAS[0])
    state = floats(rng, (num_slots, heads, dk, dv), pool_dtype, **_state_exponents(act, regime))
    poison = _pool_regions(state, idx, seqs, None if has_initial is None else ~has_initial)
    if idx is not None:
        kw["state_indices"] = idx
        pad_tokens = np.zeros(tokens, dtype=bool)
        for s in np.flatnonzero(np.asarray(idx) < 0):
            pad_tokens[cu[s]:cu[s + 1]] = True
        poison += _padding_regions(pad_tokens)
    if has_initial is not None:
        kw["has_initial_state"] = has_initial
    inputs = dict(**arrays, state=state, cu_seqlens=cu, chunk_size=chunk, **kw)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=seqs, tokens=tokens, lengths=lengths,
                  num_heads=heads, num_qk_heads=qk, key_dim=dk, value_dim=dv, chunk_size=chunk,
                  num_slots=num_slots, variant=variant.name, **conventions(claims))
    params.update({k: v for k, v in (("tier", tier), ("regime", regime)) if v})
    return Case("gated_delta_rule_chunked", inputs, params, seed, poison=tuple(poison))


# --- comparison contract (spec/numerics.md NU-R2g) -------------------------------------------------

def _per_head(x: dict, live: np.ndarray):
    """q^, k^ per state head [R, H, K] and v, beta, g of the live rows / tokens, float64."""
    q = np.asarray(x["q"], np.float64)[live]
    k = np.asarray(x["k"], np.float64)[live]
    if x.get("use_qk_l2norm", False):
        q, k = l2_normalize(q), l2_normalize(k)
    heads = qk_heads(np.shape(x["v"])[1], q.shape[1])
    return (q[:, heads], k[:, heads], np.asarray(x["v"], np.float64)[live],
            np.asarray(x["beta"], np.float64)[live], np.asarray(x["g"], np.float64)[live])


def _finite_rows(pool: np.ndarray, slots, flags=None) -> np.ndarray:
    keep = [int(s) for i, s in enumerate(slots) if s >= 0 and (flags is None or flags[i])]
    rows = np.asarray(pool[keep], np.float64) if keep else np.zeros((0,) + pool.shape[1:])
    return np.where(np.isfinite(rows), rows, 0.0)


def _gdn_checks(case: Case, expected: dict, actual: dict, seq_of: np.ndarray, live: np.ndarray, slots,
                flags, longest: int) -> dict:
    """NU-R2g: out and written state rows class R with n = L (K + 1) (1 + Lambda); padding rows 0;
    every other pool row exact (NU-R1). Precision from the inputs: out in v's dtype, states in the pool's."""
    x = case.inputs
    q, k, v, beta, g = _per_head(x, live)
    seq_live = seq_of[live]
    S0 = _finite_rows(x["state"], slots, flags)
    start = float(np.sqrt((S0 ** 2).sum(axis=(2, 3))).max(initial=0.0))          # max_{s,h} ||S0||_F
    writes = beta * np.linalg.norm(k, axis=-1) * np.linalg.norm(v, axis=-1)          # [R, H]
    growth = largest_sequence_total(writes, seq_live)
    Lambda = largest_sequence_total(np.abs(g), seq_live)
    M_state = start + growth
    scale = float(x["scale"]) if x.get("scale") is not None else np.shape(x["state"])[2] ** -0.5
    M_out = scale * float(np.linalg.norm(q, axis=-1).max(initial=0.0)) * M_state
    dk = np.shape(x["state"])[2]
    n = int(np.ceil(max(longest, 1) * (dk + 1) * (1.0 + Lambda)))
    out_dtype = dtypes.dtype_name(np.asarray(x["v"]).dtype)
    mask = np.zeros(np.shape(expected["out"]), dtype=bool)
    mask[live] = True
    checks = _output_checks(case, expected, actual, "out", mask, class_r(out_dtype, n, M_out, "GDN output"),
                               out_dtype)
    pool_dtype = dtypes.dtype_name(x["state"].dtype)
    checks.update(_pool_checks(expected, actual, "state", slots,
                                  class_r(pool_dtype, n, M_state, "GDN state")))
    return checks


def gdn_update_checks(case: Case, expected: dict, actual: dict) -> dict:
    """`gated_delta_rule_update`: NU-R2g with L = 1."""
    x = case.inputs
    rows = np.shape(x["v"])[0]
    slots = _live_rows(x.get("state_indices"), rows)
    live = np.asarray(slots) >= 0
    return _gdn_checks(case, expected, actual, np.arange(rows), live, slots, None, 1)


def gdn_chunked_checks(case: Case, expected: dict, actual: dict) -> dict:
    """`gated_delta_rule_chunked`: NU-R2g with L the longest live sequence."""
    cu, seqs, slots, flags, token_live, lengths, longest = _varlen(case.inputs)
    seq_of = np.repeat(np.arange(seqs), lengths)
    return _gdn_checks(case, expected, actual, seq_of, token_live, slots, flags, longest)


VARIANTS = {"gated_delta_rule_update": GDN_UPDATE_VARIANTS, "gated_delta_rule_chunked": GDN_CHUNKED_VARIANTS}
STRATEGIES = {"gated_delta_rule_update": gdn_update_cases, "gated_delta_rule_chunked": gdn_chunked_cases}
CHECKS = {"gated_delta_rule_update": gdn_update_checks, "gated_delta_rule_chunked": gdn_chunked_checks}

RANGE_REGIMES.update({"gated_delta_rule_update": UPDATE_RANGE_REGIMES,
                      "gated_delta_rule_chunked": CHUNKED_RANGE_REGIMES})
