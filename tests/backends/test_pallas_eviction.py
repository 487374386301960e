"""Pallas eviction planning (backends/pallas/eviction.py, float64_words.py) against the reference (EV-*).

Everything is compared bit for bit (NU-EV1, NU-EV2): the kernels carry float64 as 32-bit word pairs and
compute with integer operations, so the word arithmetic itself is checked against NumPy's float64 first,
on random bit patterns (subnormals, signed zeros, cancellation, overflow, huge and tiny counts), then the
kernels on states with exact ties, near ties that only the pinned left-to-right order separates, and more
blocks than one 128-lane comparison chunk (every plan here has 129 .. 256 blocks: one compiled kernel).
Pallas TPU interpret mode on CPU.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
import jax  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

from kvconform.backends.pallas import float64_words as f64  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402
from kvconform.reference import eviction as ref  # noqa: E402

BACKEND = make_backend()


def _bits(x) -> bytes:
    x = np.asarray(x)
    return x.dtype.str.encode() + str(x.shape).encode() + x.tobytes()


def _random_float64(rng, n: int) -> np.ndarray:
    """Any bit pattern, ordinary magnitudes, subnormals, signed zeros and values near the overflow bound."""
    x = rng.integers(0, 2 ** 64 - 1, n, dtype=np.uint64, endpoint=True).view(np.float64).copy()
    kind = rng.integers(0, 5, n)
    x[kind == 1] = rng.standard_normal((kind == 1).sum())
    x[kind == 2] = rng.standard_normal((kind == 2).sum()) * 2.0 ** rng.integers(-1074, -1000, (kind == 2).sum())
    x[kind == 3] = np.where(rng.integers(0, 2, (kind == 3).sum()) > 0, 0.0, -0.0)
    x[kind == 4] = rng.uniform(-1, 1, (kind == 4).sum()) * np.finfo(np.float64).max
    return np.where(np.isfinite(x), x, 1.5)


def test_float64_words_are_ieee_float64():
    """add: fl64(a + b), with exact cancellation to +0, overflow to inf, inf/NaN operands; div_count:
    fl64(a / c) for counts up to 2**31 - 1; order_key: the numeric order, -0 == +0."""
    rng = np.random.default_rng(11)
    n = 20000
    a, b = _random_float64(rng, n), _random_float64(rng, n)
    b[: n // 4] = -a[: n // 4] * (1 + rng.integers(-3, 4, n // 4) * 2.0 ** -52)    # (near) cancellation
    special = np.array([np.inf, -np.inf, np.nan, 1.0, -0.0, 5e-324])
    a = np.concatenate([a, np.repeat(special, special.size)])
    b = np.concatenate([b, np.tile(special, special.size)])
    with np.errstate(all="ignore"):
        want = a + b
    got = f64.join(*(np.asarray(w) for w in jax.jit(f64.add)(*f64.split(a), *f64.split(b))))
    same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (a[~same][:3], b[~same][:3], got[~same][:3])

    a, b = a[:n], b[:n]
    c = np.where(rng.integers(0, 2, n) > 0, rng.integers(1, 2 ** 31, n), rng.integers(1, 40, n)).astype(np.int32)
    got = f64.join(*(np.asarray(w) for w in jax.jit(f64.div_count)(*f64.split(a), c)))
    assert _bits(got) == _bits(a / c.astype(np.float64))

    less = np.asarray(jax.jit(f64.less)(*f64.order_key(*f64.split(a)), *f64.order_key(*f64.split(b))))
    assert (less == (a < b)).all()
    assert not np.asarray(f64.less(*f64.order_key(*f64.split(np.array([-0.0]))),
                                   *f64.order_key(*f64.split(np.array([0.0])))))[0]


@pytest.mark.parametrize("step_dtype", [np.float64, np.float32, bfloat16])
def test_accumulate_scores_bit_exact(step_dtype):
    """EV-3 .. EV-5: from the empty state, k = 0 steps, -0.0 and subnormal new scores, huge values;
    EV-16: inputs untouched."""
    rng = np.random.default_rng(3)
    state = ref.empty_score_state()
    for new in (5, 0, 1, 9):
        L = state.acc.shape[0] + new
        step = (rng.standard_normal(L) * 10.0 ** rng.integers(-3, 4, L)).astype(step_dtype)
        step[rng.random(L) < 0.2] = -0.0
        step[rng.random(L) < 0.1] = 5e-324 if step_dtype == np.float64 else 1e30
        before = [np.copy(x) for x in (*state, step)]
        got = BACKEND.accumulate_scores(state.acc, state.counts, step)
        want = ref.accumulate_scores(state.acc, state.counts, step)
        assert _bits(got.acc) == _bits(want.acc) and _bits(got.counts) == _bits(want.counts)
        assert all(_bits(x) == _bits(y) for x, y in zip((*state, step), before))
        state = want


def _check_plan(table, acc, counts, config):
    before = [np.copy(x) for x in (table, acc, counts)]
    got = BACKEND.plan_eviction(table, acc, counts, config)
    want = ref.plan_eviction(table, acc, counts, config)
    for name in ref.EvictionPlan._fields:
        assert _bits(getattr(got, name)) == _bits(getattr(want, name)), name
    assert all(_bits(x) == _bits(y) for x, y in zip((table, acc, counts), before))      # EV-16
    return got


@pytest.mark.parametrize("aggregation", ref.AGGREGATIONS)
def test_plan_ties_and_near_ties(aggregation):
    """EV-6, EV-7, EV-10: blocks holding the same tokens in permuted order, whose scores differ only in
    the last bits of the pinned left-to-right sum, beside exact ties (identical blocks) that go to the lower
    logical index; counts make every norm_sum division inexact; the table is shuffled (EV-12 .. EV-15)."""
    rng = np.random.default_rng(7)
    B, n = 4, 150
    base = rng.standard_normal(B) * 10.0 ** rng.integers(-3, 4, size=B)
    blocks = [rng.permutation(base) for _ in range(n)]
    for b in (5, 9, 140):
        blocks[b] = blocks[2].copy()                               # exact ties
    acc = np.abs(np.concatenate(blocks))
    counts = np.tile(rng.integers(1, 2 ** 20, size=B), n).astype(np.int32)
    config = ref.EvictionConfig(B, B, B, 100 * B, aggregation)
    assert len(set(ref.block_scores(acc, counts, config).tolist())) > 1     # the order really matters here
    table = rng.permutation(3 * n)[:n].astype(np.int32)
    plan = _check_plan(table, acc, counts, config)
    assert len(plan.evicted_blocks) == n - 100


def test_plan_more_blocks_than_one_chunk():
    """EV-10, EV-14 over 200 blocks: the ranks and the evicted-before counts carry across 128-lane chunks;
    every score tied, so exactly the lowest evictable indices go."""
    config = ref.EvictionConfig(1, 3, 2, 40, "norm_sum")
    L = 200
    rng = np.random.default_rng(1)
    acc = np.where(rng.random(L) < 0.5, 1.0, 2.0)
    counts = np.where(acc == 1.0, 1, 2).astype(np.int32)          # tau = 0.5 for every token
    plan = _check_plan(rng.permutation(400)[:L].astype(np.int32), acc, counts, config)
    np.testing.assert_array_equal(plan.evicted_blocks, np.arange(3, 3 + 160))
