"""Strategies and comparison contract for the eviction family (spec/eviction.md).

Ops: `accumulate_scores` (EV-3 .. EV-5) and `plan_eviction` (EV-6 .. EV-16). States are valid per EV-3
(finite acc, counts >= 1). Accumulation cases start from a state built by a few earlier steps (multi-step
history, prefill included). Eviction cases draw a config within EV-1 (block size from the claimed page
sizes), a sequence length around the eviction threshold (EV-9) with or without a partial last block, a
shuffled block table, and block scores that are well conditioned as NU-EV3 requires: a block either
repeats an earlier block's (acc, counts) tokens exactly, in order (a tie in every precision, which EV-10
sends to the lower index), or its score is separated from every other by more than 2^-16 relative on the
reference's float64 scores (other draws are discarded). Scores are non-negative, as attention mass is,
so no block sum cancels.

Two reach columns per op (spec/eviction.md, "Reach: sizes and values drawn"): `long` draws thousands of
tokens and hundreds to a thousand blocks, `range` draws scores over many binades with exact zeros and
ties, float64 subnormal accumulators, narrow step dtypes at their extremes, counts at int32's limit and
physical pages past 2^24. Long and range plans are well conditioned by construction: every token of a
block holds `level * count`, so its tau is the block's level exactly and its score `B * level`, and the
levels differ by at least 2^-12 relative unless two blocks share one (an exact tie).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes
from kvconform.reference.eviction import EvictionConfig

from kvconform.conformance.engine import strided, tolerance
from kvconform.conformance.engine.case import Case
from .values import floats, pick, sampled_from, seeds, shuffled

SCORE_DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT_BLOCK_SIZES = (2, 1, 4, 3)    # used when any page size is claimed; 3 is not a power of two
SEPARATION = 2.0 ** -16               # NU-EV3

# --- reach (spec/eviction.md "Reach: sizes and values drawn"; sources there) ----------------------
REACH = ("long", "range")
#: long: token-granular eviction (H2O, B = 1) and the page sizes of serving stacks (16)
LONG_BLOCK_SIZES = (1, 16, 4)
#: full blocks of a long plan: past one selection tile (128) and one scan tile (1024) of a kernel
LONG_BLOCKS = (1100, 140, 300)
#: tokens of a long accumulation (past 1024 per program) and its new tokens (a decode step, a prefill chunk)
LONG_TOKENS = (1500, 4100, 1025)
LONG_NEW = (1, 2048, 0)
LONG_BUDGET = 0.08            # share of the profile's examples (ci: 2, thorough: 20)
RANGE_BUDGET = 0.12           # ci: 3, thorough: 30
BUDGETS = {"long": LONG_BUDGET, "range": RANGE_BUDGET}
#: binades of the block levels of a range plan: tau and beta stay float32 normals for counts up to
#: 2^31 (NU-EV3: a float32 ranking of scores 2^-16 apart is exact there)
RANGE_LEVEL_EXPONENTS = (-90, 90)
#: binades of a range accumulator: float64 subnormals to 2^1000 (the sum of two stays finite)
RANGE_ACC_EXPONENTS = (-1074, 1000)
INT32_MAX = 2 ** 31 - 1


def _positive(rng, shape, name: str = "float64") -> np.ndarray:
    return np.abs(floats(rng, shape, name))


@st.composite
def score_states(draw, rng: np.random.Generator, *, max_steps: int = 3, max_new: int = 4):
    """A valid state (EV-3) reached by 0 .. max_steps reference accumulation steps from empty."""
    acc, counts = reference.empty_score_state()
    for _ in range(draw(st.integers(0, max_steps))):
        new = draw(st.integers(0, max_new))
        acc, counts = reference.accumulate_scores(acc, counts, _positive(rng, (acc.shape[0] + new,)))
    return acc, counts


@st.composite
def accumulate_cases(draw, claims: OpClaims, reach: str = ""):
    """A valid `accumulate_scores` call: history state plus one step of k >= 0 new tokens (EV-4, EV-5);
    `reach` "long": thousands of tokens, "range": extreme values (module docstring)."""
    chosen = tuple(d for d in SCORE_DTYPES if d in (claims.dtypes or ()))
    if not chosen:
        pytest.skip(f"unsupported: no claimed score dtype (claims: {list(claims.dtypes or [])})")
    dtype = pick(draw, chosen, "score dtype")
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    if reach == "long":
        old, new = pick(draw, LONG_TOKENS, "tokens"), pick(draw, LONG_NEW, "new tokens")
        acc, counts = _positive(rng, (old,)), rng.integers(1, 1 << 20, size=old).astype(np.int32)
        step = _positive(rng, (old + new,), dtype)
    elif reach == "range":
        old, new = draw(st.integers(1, 6)), draw(st.integers(0, 3))
        acc = _extreme(rng, old, "float64", RANGE_ACC_EXPONENTS)
        counts = (INT32_MAX - new - rng.integers(0, 3, size=old)).astype(np.int32)   # counts' reach INT32_MAX
        step = _extreme(rng, old + new, dtype)
    else:
        acc, counts = draw(score_states(rng))
        new = draw(st.integers(0, 4))
        step = _positive(rng, (acc.shape[0] + new,), dtype)
    inputs = dict(acc=acc, counts=counts, step_scores=step)
    params = dict(dtype=dtype, kv_dtype="float64", tokens=int(step.shape[0]), new_tokens=new)
    if reach:
        params.update(variant=reach, reach=reach)
    return Case("accumulate_scores", inputs, params, seed)


def _extreme(rng, n: int, name: str, exponents=None) -> np.ndarray:
    """n non-negative values of dtype `name` over its whole range: a quarter exact zeros, a quarter
    subnormals, the largest finite value now and then, the rest normals over `exponents` (binades; default
    the dtype's normal range, float64 capped at 2^1000 so that sums stay finite)."""
    dt = dtypes.resolve_dtype(name)
    info = ml_dtypes.finfo(dt) if dt != np.float64 else np.finfo(np.float64)
    lo, hi = exponents or (int(info.minexp), min(int(info.maxexp) - 1, 999))
    normal = np.abs(floats(rng, (n,), name, min_exp=max(lo, int(info.minexp)), max_exp=hi)).astype(np.float64)
    subnormal = np.ldexp(rng.integers(1, 1 << int(info.nmant), size=n).astype(np.float64),
                         int(info.minexp) - int(info.nmant))
    kind = rng.integers(0, 8, size=n)
    out = np.where(kind < 2, 0.0, np.where(kind < 4, subnormal, normal))
    if name != "float64":
        out = np.where(kind == 7, float(info.max), out)
    return out.astype(dt)


@st.composite
def eviction_configs(draw, claims: OpClaims):
    """An EvictionConfig within EV-1; sizes are whole blocks, start and recent may be empty."""
    block = pick(draw, claims.page_sizes or DEFAULT_BLOCK_SIZES, "block size")
    start = draw(st.integers(0, 2))
    recent = draw(st.integers(0, 2))
    budget = start + recent + draw(st.integers(1, 3))     # EV-1: max_cache_size > start + recent
    aggregation = draw(sampled_from(("sum", "norm_sum")))
    return EvictionConfig(block, start * block, recent * block, budget * block, aggregation)


@st.composite
def plan_cases(draw, claims: OpClaims):
    """A valid `plan_eviction` call whose decision is well conditioned (NU-EV3)."""
    config = draw(eviction_configs(claims))
    B = config.block_size
    budget = config.max_cache_size // B
    n_full = max(0, budget + draw(st.integers(-1, 3)))     # around the threshold of EV-9
    partial = draw(st.integers(0, B - 1))
    L = n_full * B + partial
    num_blocks = -(-L // B)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    # acc in [1, 2): a block's "sum" score grows with its token count, so the partial last block is the
    # smallest one, the case where its protection (EV-8) decides the outcome.
    acc = np.abs(floats(rng, (L,), "float64", min_exp=0, max_exp=0))
    counts = rng.integers(1, 9, size=L).astype(np.int32)
    # Ties: block b repeats block source[b] token for token; shrinking drives every block to a tie.
    source = [draw(st.integers(0, b)) for b in range(n_full)]
    for b, s in enumerate(source):
        while source[s] != s:
            s = source[s]
        source[b] = s
        acc[b * B:(b + 1) * B] = acc[s * B:(s + 1) * B]
        counts[b * B:(b + 1) * B] = counts[s * B:(s + 1) * B]
    beta = reference.block_scores(acc, counts, config)[:n_full]
    for a in range(n_full):
        for b in range(a):
            if source[a] != source[b]:
                assume(abs(beta[a] - beta[b]) > SEPARATION * max(abs(beta[a]), abs(beta[b])))
    pages = shuffled(draw, num_blocks + 2)
    table = np.asarray(pages[:num_blocks], dtype=np.int32)
    inputs = dict(block_table=table, acc=acc, counts=counts, config=config)
    params = dict(dtype="float64", kv_dtype="int32", tokens=L, block_size=B, start_size=config.start_size,
                  recent_size=config.recent_size, max_cache_size=config.max_cache_size,
                  aggregation=config.aggregation, ties=n_full - len(set(source)))
    return Case("plan_eviction", inputs, params, seed)


@st.composite
def reach_plan_cases(draw, claims: OpClaims, reach: str):
    """A valid, well-conditioned `plan_eviction` call of a reach column (module docstring): "long" has
    hundreds to a thousand full blocks and evicts many of them; "range" is small with levels over many
    binades, exact zeros and ties, counts near int32's limit and pages past 2^24."""
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    aggregation = draw(sampled_from(("sum", "norm_sum")))
    if reach == "long":
        B = pick(draw, claims.page_sizes or LONG_BLOCK_SIZES, "block size")
        n_full = pick(draw, LONG_BLOCKS, "full blocks")
        start, recent = pick(draw, (1, 0, 4), "start blocks"), pick(draw, (2, 0, 8), "recent blocks")
        budget = max(1, int((n_full - start - recent) * draw(sampled_from((0.5, 0.1, 0.9)))))
    else:
        B = pick(draw, claims.page_sizes or DEFAULT_BLOCK_SIZES, "block size")
        start, recent, budget = draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 3))
        n_full = start + recent + budget + draw(st.integers(1, 3))
    config = EvictionConfig(B, start * B, recent * B, (start + recent + budget) * B, aggregation)
    L = n_full * B + draw(st.integers(0, B - 1))
    num_blocks = -(-L // B)
    # Levels 2^e (1 + r 2^-12), r distinct: two levels differ by 2^-12 relative at least; range levels
    # span RANGE_LEVEL_EXPONENTS and a quarter of the blocks sit at 0; one block in ten repeats an earlier
    # block's tokens (a tie in every precision, EV-10).
    exponent = rng.integers(*RANGE_LEVEL_EXPONENTS, size=num_blocks) if reach == "range" else 0
    level = np.ldexp(1.0 + rng.permutation(num_blocks) * 2.0 ** -12, exponent)
    if reach == "range":
        level[rng.random(num_blocks) < 0.25] = 0.0
    source = np.arange(num_blocks)
    for b in np.flatnonzero(rng.random(num_blocks) < 0.1):
        source[b] = source[rng.integers(0, b + 1)]
    low, high = (INT32_MAX - (1 << 10), INT32_MAX) if reach == "range" else (1, 1 << 20)
    counts = rng.integers(low, high, size=(num_blocks, B), endpoint=True)[source].reshape(-1)[:L]
    tau = np.repeat(level[source], B)[:L]
    # norm_sum: acc = level * count exactly (13 and 31 significant bits), so fl64(acc / count) = level
    acc = tau * counts if aggregation == "norm_sum" else tau.copy()
    table = _large_pages(rng, num_blocks) if reach == "range" else \
        rng.permutation(num_blocks + 2)[:num_blocks].astype(np.int32)
    inputs = dict(block_table=table, acc=acc, counts=counts.astype(np.int32), config=config)
    params = dict(dtype="float64", kv_dtype="int32", tokens=L, block_size=B, start_size=config.start_size,
                  recent_size=config.recent_size, max_cache_size=config.max_cache_size,
                  aggregation=aggregation, ties=int(num_blocks - np.unique(source).size), variant=reach,
                  reach=reach)
    return Case("plan_eviction", inputs, params, seed)


def _large_pages(rng, n: int) -> np.ndarray:
    """n distinct physical pages in [2^24, 2^31), INT32_MAX among them: past float32's integers."""
    drawn = np.unique(rng.integers(1 << 24, INT32_MAX, size=2 * n + 2))     # distinct, below INT32_MAX
    pages = np.concatenate([rng.permutation(drawn)[:n - 1], [INT32_MAX]]) if n else drawn[:0]
    return rng.permutation(pages).astype(np.int32)


def well_conditioned(acc: np.ndarray, counts: np.ndarray, config: EvictionConfig) -> bool:
    """NU-EV3 for a state reached by a run (not drawn): no two evictable blocks' scores (EV-6, EV-7, on the
    reference's float64) differ by a nonzero amount within SEPARATION relative. Only such plans are
    compared with the reference."""
    B = config.block_size
    beta = reference.block_scores(acc, counts, config)
    cand = beta[config.start_size // B:np.asarray(acc).shape[0] // B - config.recent_size // B]
    gaps = np.abs(cand[:, None] - cand[None, :])
    close = (gaps <= SEPARATION * np.maximum(cand[:, None], cand[None, :])) & (gaps > 0)
    return not close.any()

def uses(case: Case) -> tuple[set, dict]:
    """What an eviction case's inputs use (conformance/goldens.py): no features; the score dtype
    (`step_scores` of accumulate_scores, `acc` of plan_eviction) and plan_eviction's block size."""
    x = case.inputs
    if case.op == "accumulate_scores":
        return set(), dict(dtype=dtypes.dtype_name(np.asarray(x["step_scores"]).dtype))
    return set(), dict(dtype=dtypes.dtype_name(np.asarray(x["acc"]).dtype), page_size=int(x["config"].block_size))


#: what a case uses, per op (conformance/goldens.py)
USES = {"accumulate_scores": uses, "plan_eviction": uses}


# --- comparison contract (spec/numerics.md, "Eviction") -------------------------------------------

def accumulate_checks(case: Case, expected: dict, actual: dict) -> dict:
    """acc: bitwise when returned in float64 (one correctly rounded addition, NU-EV2), else
    2 u (|acc| + |step|) per element with u of the inputs' precision (the wider of acc and step_scores:
    an acc returned narrower than its inputs fails, NU-3); counts: exact (NU-EV1)."""
    got = actual.get("acc")
    name = dtypes.dtype_name(getattr(got, "dtype", np.float64))
    x = case.inputs
    required = max((dtypes.dtype_name(np.asarray(x[k]).dtype) for k in ("acc", "step_scores")),
                   key=lambda d: -tolerance.eps(d))
    if name == "float64" or not dtypes.is_float_dtype(name):
        acc_tol = tolerance.exact("class E (NU-EV2): float64 acc is one correctly rounded addition")
    else:
        name = required
        old = np.concatenate([np.asarray(x["acc"], np.float64),
                              np.zeros(len(x["step_scores"]) - len(x["acc"]))])
        u = tolerance.eps(name) / 2
        allowed = 2.0 * u * (np.abs(old) + np.abs(dtypes.upcast(np.asarray(x["step_scores"]))))
        acc_tol = tolerance.Tolerance("ulp", atol=allowed, n_ulp=0.0, out_dtype=name,
                                      reason=f"class U (NU-EV2): 2 u (|acc| + |step|), u of the inputs' {name}")
    return {"acc": (acc_tol, None), "counts": (tolerance.exact("class E (NU-EV1): integer counts"), None)}


def plan_checks(case: Case, expected: dict, actual: dict) -> dict:
    """Every field exact (NU-EV1): integer selection and a copy of acc."""
    return {name: (tolerance.exact("class E (NU-EV1): integer outputs and copied acc"), None)
            for name in expected}


CHECKS = {"accumulate_scores": accumulate_checks, "plan_eviction": plan_checks}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
STRIDED = {"accumulate_scores": strided.columns(accumulate_cases), "plan_eviction": strided.columns(plan_cases)}
