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
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes
from kvconform.reference.eviction import EvictionConfig

from .. import strided, tolerance
from ..case import Case
from .values import floats, pick, sampled_from, seeds

SCORE_DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT_BLOCK_SIZES = (2, 1, 4, 3)    # used when any page size is claimed; 3 is not a power of two
SEPARATION = 2.0 ** -16               # NU-EV3


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
def accumulate_cases(draw, claims: OpClaims):
    """A valid `accumulate_scores` call: history state plus one step of k >= 0 new tokens (EV-4, EV-5)."""
    chosen = tuple(d for d in SCORE_DTYPES if d in (claims.dtypes or ()))
    if not chosen:
        pytest.skip(f"unsupported: no claimed score dtype (claims: {list(claims.dtypes or [])})")
    dtype = pick(draw, chosen, "score dtype")
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    acc, counts = draw(score_states(rng))
    new = draw(st.integers(0, 4))
    step = _positive(rng, (acc.shape[0] + new,), dtype)
    inputs = dict(acc=acc, counts=counts, step_scores=step)
    params = dict(dtype=dtype, kv_dtype="float64", tokens=int(step.shape[0]), new_tokens=new)
    return Case("accumulate_scores", inputs, params, seed)


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
    pages = draw(st.permutations(range(num_blocks + 2)))
    table = np.asarray(pages[:num_blocks], dtype=np.int32)
    inputs = dict(block_table=table, acc=acc, counts=counts, config=config)
    params = dict(dtype="float64", kv_dtype="int32", tokens=L, block_size=B, start_size=config.start_size,
                  recent_size=config.recent_size, max_cache_size=config.max_cache_size,
                  aggregation=config.aggregation, ties=n_full - len(set(source)))
    return Case("plan_eviction", inputs, params, seed)


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
