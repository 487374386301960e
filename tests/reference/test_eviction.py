"""Tests of the eviction reference (spec/eviction.md, EV-*): golden decisions, invariants, errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvconform.reference import (EvictionConfig, accumulate_scores, block_scores, empty_score_state,
                                 plan_eviction)

FAST = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------------------------------------------------
# Golden cases


def test_accumulate_two_steps_golden_EV4_EV5():
    """Prefill of 3 tokens, then one decode step: acc adds, counts grow by the number of new tokens."""
    s = accumulate_scores(*empty_score_state(), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(s.acc, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(s.counts, [3, 2, 1])          # prefill of k=3: [3, 2, 1]
    s = accumulate_scores(*s, np.array([0.5, 0.25, 0.125, 4.0]))
    np.testing.assert_array_equal(s.acc, [1.5, 2.25, 3.125, 4.0])
    np.testing.assert_array_equal(s.counts, [4, 3, 2, 1])       # old + 1, then the new token's 1
    s = accumulate_scores(*s, np.array([1.0, 1.0, 1.0, 1.0]))  # k = 0: counts unchanged
    np.testing.assert_array_equal(s.acc, [2.5, 3.25, 4.125, 5.0])
    np.testing.assert_array_equal(s.counts, [4, 3, 2, 1])
    assert s.acc.dtype == np.float64 and s.counts.dtype == np.int32


def test_eviction_decision_golden_EV8_to_EV15():
    """B=2, start 2, recent 2, max 6 (evictable 2), norm_sum, 9-token prefill then one decode token.

    acc    = [4,4,1,1,2,0,3,1,8] + [1,1,0,0,1,1,0,1,1,2] = [5,5,1,1,3,1,3,2,9,2]
    counts = [10,9,8,7,6,5,4,3,2,1]
    tau    = [1/2, 5/9, 1/8, 1/7, 1/2, 1/5, 3/4, 2/3, 9/2, 2]
    blocks: 0 start; 1: 1/8+1/7 = 15/56 ~ 0.27; 2: 1/2+1/5 = 0.7; 3: 3/4+2/3 = 17/12 ~ 1.42; 4 recent
    L=10: n_full = 5, k = 5 - 6/2 = 2, evictable [2/2, 5 - 2/2) = [1, 4) -> evict blocks 1 and 2.
    """
    config = EvictionConfig(block_size=2, start_size=2, recent_size=2, max_cache_size=6)
    s = accumulate_scores(*empty_score_state(), np.array([4, 4, 1, 1, 2, 0, 3, 1, 8.0]))
    s = accumulate_scores(*s, np.array([1, 1, 0, 0, 1, 1, 0, 1, 1, 2.0]))
    np.testing.assert_allclose(block_scores(*s, config),
                               [1 / 2 + 5 / 9, 15 / 56, 0.7, 17 / 12, 13 / 2], rtol=1e-15)
    table = np.array([7, 3, 9, 0, 5], np.int32)
    plan = plan_eviction(table, *s, config)
    np.testing.assert_array_equal(plan.evicted_blocks, [1, 2])
    np.testing.assert_array_equal(plan.block_table, [7, 0, 5])
    # old block 3 (page 0) and old block 4 (page 5) each have 2 evicted blocks before them
    np.testing.assert_array_equal(plan.rotated_block_indices, [0, 5])
    np.testing.assert_array_equal(plan.rotation_deltas, [[2], [2]])
    np.testing.assert_array_equal(plan.acc, [5, 5, 3, 2, 9, 2])
    np.testing.assert_array_equal(plan.counts, [10, 9, 4, 3, 2, 1])
    for name in ("evicted_blocks", "block_table", "rotated_block_indices", "rotation_deltas", "counts"):
        assert getattr(plan, name).dtype == np.int32, name
    assert plan.rotation_deltas.shape == (2, 1)


@pytest.mark.parametrize("aggregation, evicted, rotated, deltas", [
    # sum: beta = [3, 2, 2, 1] -> smallest is token 3
    ("sum", [3], [0], [[1]]),
    # norm_sum: tau = [3/5, 2/4, 2/3, 1/2] -> 1/2 ties (exactly) between 1 and 3; the lower index goes
    ("norm_sum", [1], [2, 1, 0], [[1], [1], [1]]),
])
def test_aggregation_and_tie_golden_EV6_EV10(aggregation, evicted, rotated, deltas):
    """B=1, no start area, recent 1, max 4: L=5 -> k = 5 - 4 = 1 from evictable [0, 4)."""
    config = EvictionConfig(1, 0, 1, 4, aggregation=aggregation)
    s = accumulate_scores(*empty_score_state(), np.array([3.0, 2.0, 2.0, 1.0, 7.0]))  # counts 5..1
    plan = plan_eviction(np.array([4, 3, 2, 1, 0], np.int32), *s, config)
    np.testing.assert_array_equal(plan.evicted_blocks, evicted)
    np.testing.assert_array_equal(plan.rotated_block_indices, rotated)
    np.testing.assert_array_equal(plan.rotation_deltas, deltas)


def test_below_threshold_nothing_happens_EV9():
    """L = max + B - 1 = 7 tokens with B=2, max 6: n_full = 3 = max/B, so k = 0; shapes [0] and [0, 1]."""
    config = EvictionConfig(2, 2, 2, 6)
    s = accumulate_scores(*empty_score_state(), np.zeros(7))
    plan = plan_eviction(np.arange(4, dtype=np.int32), *s, config)
    assert plan.evicted_blocks.shape == (0,) and plan.rotated_block_indices.shape == (0,)
    assert plan.rotation_deltas.shape == (0, 1) and plan.rotation_deltas.dtype == np.int32
    np.testing.assert_array_equal(plan.block_table, np.arange(4))


# ---------------------------------------------------------------------------------------------------------
# Invariants over generated sequences


@st.composite
def eviction_cases(draw):
    block = draw(st.integers(1, 4))
    start, recent, spare = (block * draw(st.integers(0, 2)), block * draw(st.integers(0, 2)),
                            block * draw(st.integers(1, 3)))
    config = EvictionConfig(block, start, recent, start + recent + spare,
                            aggregation=draw(st.sampled_from(["sum", "norm_sum"])))
    lengths = sorted(draw(st.lists(st.integers(0, config.max_cache_size + 4 * block), min_size=1, max_size=3)))
    # small integer scores make exact ties common, so the tie rule is exercised
    values = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.0])
    state = empty_score_state()
    for length in lengths:
        state = accumulate_scores(*state, np.array(draw(st.lists(values, min_size=length, max_size=length))))
    num_blocks = -(-lengths[-1] // block)
    table = np.array(draw(st.permutations(range(num_blocks + 3)))[:num_blocks], np.int32)
    return config, table, state


def independent_block_scores(acc, counts, config):
    """EV-6, EV-7 written out token by token."""
    B = config.block_size
    out = []
    for b in range(-(-len(acc) // B)):
        total = 0.0
        for t in range(b * B, min((b + 1) * B, len(acc))):
            total += acc[t] / counts[t] if config.aggregation == "norm_sum" else acc[t]
        out.append(total)
    return out


@FAST
@given(eviction_cases())
def test_eviction_invariants_EV8_to_EV15(case):
    config, table, (acc, counts) = case
    before = (table.copy(), acc.copy(), counts.copy())
    plan = plan_eviction(table, acc, counts, config)
    B, L = config.block_size, len(acc)
    n_full = L // B
    b0, b1 = config.start_size // B, n_full - config.recent_size // B
    evicted = [int(e) for e in plan.evicted_blocks]

    assert len(evicted) == max(0, n_full - config.max_cache_size // B)              # EV-9
    assert evicted == sorted(evicted) and all(b0 <= e < b1 for e in evicted)         # EV-8, EV-12
    beta = independent_block_scores(acc, counts, config)
    kept_in_range = [b for b in range(b0, b1) if b not in evicted]
    for e in evicted:                                                                # EV-10
        for k in kept_in_range:
            assert (beta[e], e) < (beta[k], k)

    survivors = [b for b in range(len(table)) if b not in evicted]                    # EV-13
    np.testing.assert_array_equal(plan.block_table, table[survivors])
    new_index = {int(p): i for i, p in enumerate(plan.block_table)}
    old_index = {int(p): i for i, p in enumerate(table)}
    listed = [int(p) for p in plan.rotated_block_indices]                             # EV-14
    assert listed == [int(table[b]) for b in survivors if new_index[int(table[b])] != b]
    deltas = plan.rotation_deltas[:, 0]
    assert plan.rotation_deltas.shape == (len(listed), 1)
    for p, d in zip(listed, deltas):
        assert new_index[p] + d == old_index[p] and d > 0
    assert (np.diff(deltas) >= 0).all()

    token_kept = np.repeat(np.array([b not in evicted for b in range(len(table))], bool), B)[:L]       # EV-15
    np.testing.assert_array_equal(plan.acc, acc[token_kept])
    np.testing.assert_array_equal(plan.counts, counts[token_kept])
    for name in ("evicted_blocks", "block_table", "rotated_block_indices", "rotation_deltas", "counts"):
        assert getattr(plan, name).dtype == np.int32
    for x, y in zip(before, (table, acc, counts)):                                   # EV-16
        assert x.tobytes() == y.tobytes()

    again = plan_eviction(plan.block_table, plan.acc, plan.counts, config)            # EV-11
    assert again.evicted_blocks.size == 0 and again.rotated_block_indices.size == 0
    np.testing.assert_array_equal(again.block_table, plan.block_table)


@FAST
@given(eviction_cases(), st.integers(-20, 20))
def test_positive_rescaling_changes_nothing_EV10(case, power):
    """Scaling every score by 2**power: every operation of EV-4 .. EV-7 scales exactly (powers of two), so
    the decision must not change. (Any other constant can move float64 near-ties: spec/numerics.md.)"""
    config, table, (acc, counts) = case
    a = plan_eviction(table, acc, counts, config)
    b = plan_eviction(table, acc * 2.0 ** power, counts, config)
    for name in ("evicted_blocks", "block_table", "rotated_block_indices", "rotation_deltas", "counts"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@FAST
@given(st.lists(st.lists(st.floats(0, 4), max_size=4), min_size=1, max_size=4))
def test_counts_are_visible_query_rows_EV5(steps):
    """Each step appends len(step) tokens; the final count of token i is L - i (rows that could see it)."""
    state, total = empty_score_state(), 0
    acc = []
    for new in steps:
        scores = np.concatenate([np.full(total, 1.0), new])
        total += len(new)
        state = accumulate_scores(*state, scores)
    np.testing.assert_array_equal(state.counts, total - np.arange(total))
    # token i first appears at the step that appends it, then gets 1.0 from every later step
    for new in steps:
        acc += list(new)
    expected = np.array(acc, dtype=np.float64)
    starts = np.cumsum([0] + [len(s) for s in steps])
    for i in range(total):
        for later in starts[1:-1]:
            if later > i:
                expected[i] += 1.0  # one float64 addition per step, in step order (EV-4)
    np.testing.assert_array_equal(state.acc, expected)


# ---------------------------------------------------------------------------------------------------------
# Errors (EV-1, EV-17)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(block_size=0), ValueError, r"block_size must be >= 1"),
    (dict(start_size=3), ValueError, r"start_size must be a multiple of block_size=2"),
    (dict(recent_size=1), ValueError, r"recent_size must be a multiple"),
    (dict(max_cache_size=7), ValueError, r"max_cache_size must be a multiple"),
    (dict(max_cache_size=4), ValueError, r"max_cache_size must be > start_size \+ recent_size = 4"),
    (dict(start_size=-2), ValueError, r"start_size must be >= 0"),
    (dict(recent_size=2.0), TypeError, r"recent_size must be an integer"),
    (dict(aggregation="max"), ValueError, r"aggregation must be one of"),
])
def test_config_errors_EV1(kwargs, error, match):
    args = dict(block_size=2, start_size=2, recent_size=2, max_cache_size=8)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        EvictionConfig(**args)


CONFIG = EvictionConfig(2, 2, 2, 6)
ACC = np.ones(5)
COUNTS = np.array([5, 4, 3, 2, 1], np.int32)
TABLE = np.array([0, 1, 2], np.int32)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(config=dict(block_size=2)), TypeError, r"config must be an EvictionConfig"),
    (dict(block_table=np.array([0, 1], np.int32)), ValueError, r"block_table must have cdiv\(L, block_size\)"),
    (dict(block_table=np.array([0, 1, 1], np.int32)), ValueError, r"block_table must not contain duplicates"),
    (dict(block_table=np.array([0, -1, 2], np.int32)), ValueError, r"block_table\[1\]=-1 is out of range"),
    (dict(block_table=np.array([0.0, 1.0, 2.0])), TypeError, r"block_table must have an integer dtype"),
    (dict(counts=np.array([5, 4, 3, 2], np.int32)), ValueError, r"counts must have the shape of acc"),
    (dict(counts=np.array([5, 4, 0, 2, 1], np.int32)), ValueError, r"counts\[2\]=0 is out of range"),
    (dict(acc=np.array([1.0, np.nan, 1.0, 1.0, 1.0])), ValueError, r"acc must be finite"),
    (dict(acc=np.ones((5, 1))), ValueError, r"acc must have rank 1"),
    (dict(acc=np.ones(5, np.int64)), TypeError, r"acc must have a floating dtype"),
])
def test_plan_eviction_errors_EV17(kwargs, error, match):
    args = dict(block_table=TABLE, acc=ACC, counts=COUNTS, config=CONFIG)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        plan_eviction(**args)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(step_scores=np.ones(4)), ValueError, r"step_scores must cover every tracked token"),
    (dict(step_scores=np.array([1.0, 1.0, np.inf, 1.0, 1.0, 1.0])), ValueError, r"step_scores must be finite"),
    (dict(step_scores=np.ones((6, 1))), ValueError, r"step_scores must have rank 1"),
    (dict(counts=np.array([5, 4, 3, 2, -1], np.int32)), ValueError, r"counts\[4\]=-1 is out of range"),
    (dict(counts=np.full(5, 2 ** 31 - 1, np.int64)), ValueError, r"counts would overflow int32"),
    (dict(acc=np.array([1.0, 1.0, 1.0, 1.0, np.inf])), ValueError, r"acc must be finite"),
    (dict(counts=np.ones(5)), TypeError, r"counts must have an integer dtype"),
])
def test_accumulate_scores_errors_EV17(kwargs, error, match):
    args = dict(acc=ACC, counts=COUNTS, step_scores=np.ones(6))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        accumulate_scores(**args)
