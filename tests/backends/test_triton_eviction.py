"""Triton eviction planning (accumulate_scores, plan_eviction) against the reference (EV-* clauses).

Everything is compared exactly: NU-EV1 (integer outputs and the copied acc of plan_eviction, bit for
bit) and NU-EV2 (float64 accumulation, bit for bit). The kernels compute tau and beta in float64 in
the spec's order, so even near-tied block scores must rank as in the reference; generated states
therefore include exact ties (identical blocks, in both aggregations) as well as arbitrary values.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

from kvconform.reference import eviction as ref  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _on_device(x: np.ndarray):
    """x as a tensor on the device the kernels run on (CUDA natively, CPU under the interpreter)."""
    import torch
    from kvconform.backends.triton import _runtime
    return torch.from_numpy(x).to(_runtime.configure().device)


@pytest.fixture(scope="module")
def backend():
    return make_backend()


@pytest.fixture(scope="module")
def kern(backend):
    backend._rt()
    from kvconform.backends.triton import eviction
    return eviction


def _bits_equal(got, expected):
    """Same dtype, shape and bytes (float64: -0.0 and +0.0 differ; NU-EV1/NU-EV2 are bit for bit)."""
    got, expected = np.asarray(got), np.asarray(expected)
    return got.dtype == expected.dtype and got.shape == expected.shape and got.tobytes() == expected.tobytes()


def _strided(x):
    """The same values as a view at an offset with stride 2 inside a larger buffer (metadata views)."""
    buf = np.zeros(2 * x.shape[0] + 3, dtype=x.dtype)
    if x.shape[0]:
        buf[:] = x[0]
    view = buf[3::2]
    view[:] = x
    return view


# --- accumulate_scores ------------------------------------------------------------------------------
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), step_dtype=st.sampled_from(["float64", "float32", "bfloat16"]),
       strided=st.booleans())
def test_accumulate_scores_bit_exact(backend, seed, step_dtype, strided):
    """EV-3 (start empty), EV-4 (one float64 addition; k = 0 steps; -0.0 new scores), EV-5 counts."""
    rng = np.random.default_rng(seed)
    dtype = bfloat16 if step_dtype == "bfloat16" else np.dtype(step_dtype)
    state = got = ref.empty_score_state()
    length = 0
    for _ in range(int(rng.integers(1, 5))):
        length += int(rng.choice([0, 1, int(rng.integers(1, 40))]))
        step = (rng.standard_normal(length) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
        step[rng.random(length) < 0.2] = -0.0
        acc, counts = got
        if strided:
            acc, counts = _strided(acc), _strided(counts)
        before = (acc.copy(), counts.copy(), step.copy())
        state = ref.accumulate_scores(state.acc, state.counts, step)
        got = backend.accumulate_scores(acc, counts, step)
        assert _bits_equal(got.acc, state.acc) and _bits_equal(got.counts, state.counts)
        assert all(_bits_equal(a, b) for a, b in zip((acc, counts, step), before))   # EV-16 purity


# --- plan_eviction ----------------------------------------------------------------------------------
@st.composite
def eviction_cases(draw):
    B = draw(st.sampled_from([1, 2, 3, 4]))
    start, recent = B * draw(st.integers(0, 2)), B * draw(st.integers(0, 2))
    max_cache = start + recent + B * draw(st.integers(1, 4))
    aggregation = draw(st.sampled_from(ref.AGGREGATIONS))
    L = draw(st.integers(0, max_cache + B * 12))
    ties = draw(st.booleans())
    return ref.EvictionConfig(B, start, recent, max_cache, aggregation), L, ties, draw(st.integers(0, 2**31 - 1))


def _state(config, L, ties, rng):
    """counts >= 1 (EV-3). With `ties`, every block repeats one of three token templates with dyadic
    tau values (acc = tau * count for norm_sum, so the division is exact): many exact beta ties."""
    counts = rng.integers(1, 60, size=L).astype(np.int32)
    if not ties:
        return rng.standard_normal(L) * 10.0 ** rng.integers(-2, 3), counts
    B = config.block_size
    templates = rng.integers(-4, 5, size=(3, B)) / 4.0
    tau = templates[rng.integers(0, 3, size=-(-L // B))].reshape(-1)[:L]
    return (tau * counts if config.aggregation == "norm_sum" else tau), counts


def _check_plan(got, expected):
    assert isinstance(got, ref.EvictionPlan)
    for name in ref.EvictionPlan._fields:
        assert _bits_equal(getattr(got, name), getattr(expected, name)), name


@SETTINGS
@given(case=eviction_cases(), strided=st.booleans(), small_tiles=st.booleans())
def test_plan_eviction_matches_reference(backend, kern, case, strided, small_tiles):
    """EV-8 range, EV-9 count, EV-10 (beta, index) order with ties to the lower index, EV-12 .. EV-15
    outputs, EV-16 purity. small_tiles shrinks the kernels' tiles so several programs / scan steps /
    comparison tiles are used even at these sizes (the cross-tile carries are where bugs hide)."""
    config, L, ties, seed = case
    rng = np.random.default_rng(seed)
    acc, counts = _state(config, L, ties, rng)
    table = rng.permutation(4 * (L + 1))[:-(-L // config.block_size)].astype(np.int32)
    if strided:
        table, counts = _strided(table), _strided(counts)
    before = (table.copy(), acc.copy(), counts.copy())
    expected = ref.plan_eviction(table, acc, counts, config)
    with pytest.MonkeyPatch.context() as patch:   # per example: the defaults must be exercised too
        if small_tiles:
            for name, value in (("_TOKENS", 4), ("_BLOCKS", 2), ("_BLOCKS_J", 2), ("_SCAN", 2)):
                patch.setattr(kern, name, value)
        got = backend.plan_eviction(table, acc, counts, config)
    _check_plan(got, expected)
    assert all(_bits_equal(a, b) for a, b in zip((table, acc, counts), before))


def test_plan_eviction_all_tied_picks_lowest_indices(backend):
    """EV-10: all scores equal -> the k lowest evictable indices; EV-14 rotation of every later block."""
    config = ref.EvictionConfig(2, 2, 2, 6, "sum")
    L = 2 * 9 + 1                                         # 9 full blocks + a partial one
    table = np.arange(10, 0, -1, dtype=np.int32)
    got = backend.plan_eviction(table, np.ones(L), np.ones(L, np.int32), config)
    _check_plan(got, ref.plan_eviction(table, np.ones(L), np.ones(L, np.int32), config))
    assert got.evicted_blocks.tolist() == [1, 2, 3, 4, 5, 6]
    assert got.rotation_deltas.shape == (3, 1)


def test_plan_eviction_nothing_to_evict_shapes(backend):
    """EV-9 k = 0 and EV-14 m = 0: shapes [0] and [0, 1], int32; empty state too."""
    config = ref.EvictionConfig(4, 0, 4, 8, "norm_sum")
    for L in (0, 3, 11):
        table = np.arange(-(-L // 4), dtype=np.int64)
        acc, counts = np.linspace(1, 2, L), np.arange(L, 0, -1).astype(np.int32)
        got = backend.plan_eviction(table, acc, counts, config)
        _check_plan(got, ref.plan_eviction(table, acc, counts, config))
        assert got.rotated_block_indices.shape == (0,) and got.rotation_deltas.shape == (0, 1)


@SETTINGS
@given(case=eviction_cases())
def test_block_scores_kernel_bit_exact(kern, case):
    """EV-6 / EV-7: the device block scores equal reference.block_scores bit for bit (order pinned)."""
    config, L, ties, seed = case
    acc, counts = _state(config, L, ties, np.random.default_rng(seed))
    got = kern.block_scores(_on_device(np.asarray(acc, np.float64)), _on_device(counts),
                            config.block_size, config.aggregation == "norm_sum")
    assert _bits_equal(got.cpu().numpy(), ref.block_scores(acc, counts, config))


@pytest.mark.parametrize("aggregation", ref.AGGREGATIONS)
def test_block_score_order_and_near_ties(backend, kern, aggregation):
    """EV-7 left-to-right order matters: blocks holding the same tokens permuted have betas that differ
    in the last bits; both the scores and the resulting ranking (EV-10) must follow the reference."""
    rng = np.random.default_rng(7)
    B, n = 8, 24
    base = rng.standard_normal(B) * 10.0 ** rng.integers(-3, 4, size=B)
    acc = np.concatenate([rng.permutation(base) for _ in range(n)])
    counts = rng.integers(1, 9, size=B * n).astype(np.int32)
    config = ref.EvictionConfig(B, 0, 0, B * 8, aggregation)
    expected = ref.block_scores(acc, counts, config)
    assert len(set(expected.tolist())) > 1                      # the order really matters here
    got = kern.block_scores(_on_device(acc), _on_device(counts), B, aggregation == "norm_sum")
    assert _bits_equal(got.cpu().numpy(), expected)
    table = rng.permutation(n).astype(np.int32)
    _check_plan(backend.plan_eviction(table, acc, counts, config), ref.plan_eviction(table, acc, counts, config))


# --- validation (EV-17) -----------------------------------------------------------------------------
_CFG = ref.EvictionConfig(2, 0, 2, 4, "sum")
_ACC, _CNT = np.ones(6), np.ones(6, np.int32)
_TABLE = np.arange(3, dtype=np.int32)

PLAN_ERRORS = {
    "config type": (_TABLE, _ACC, _CNT, object()),
    "acc rank": (_TABLE, _ACC.reshape(2, 3), _CNT, _CFG),
    "counts shape": (_TABLE, _ACC, _CNT[:5], _CFG),
    "acc dtype": (_TABLE, _CNT, _CNT, _CFG),
    "acc nan": (_TABLE, np.array([1, 2, np.nan, 1, 1, 1.0]), _CNT, _CFG),
    "count zero": (_TABLE, _ACC, np.array([1, 1, 0, 1, 1, 1]), _CFG),
    "table length": (_TABLE[:2], _ACC, _CNT, _CFG),
    "table negative": (np.array([0, -1, 2]), _ACC, _CNT, _CFG),
    "table duplicate": (np.array([0, 2, 2]), _ACC, _CNT, _CFG),
    "table dtype": (_TABLE.astype(np.float32), _ACC, _CNT, _CFG),
}
ACC_ERRORS = {
    "short step": (_ACC, _CNT, np.ones(5)),
    "step inf": (_ACC, _CNT, np.array([1, 1, np.inf, 1, 1, 1.0])),
    "step dtype": (_ACC, _CNT, np.ones(6, np.int32)),
    "count overflow": (_ACC, np.full(6, 2**31 - 1, np.int64), np.ones(7)),
    "counts shape": (_ACC, _CNT[:3], np.ones(6)),
}


def _same_error(call_ref, call_backend):
    with pytest.raises((ValueError, TypeError)) as want:
        call_ref()
    with pytest.raises(want.type) as got:
        call_backend()
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("name", sorted(PLAN_ERRORS))
def test_plan_eviction_rejects_like_reference(backend, name):
    args = PLAN_ERRORS[name]
    _same_error(lambda: ref.plan_eviction(*args), lambda: backend.plan_eviction(*args))


@pytest.mark.parametrize("name", sorted(ACC_ERRORS))
def test_accumulate_scores_rejects_like_reference(backend, name):
    args = ACC_ERRORS[name]
    _same_error(lambda: ref.accumulate_scores(*args), lambda: backend.accumulate_scores(*args))


def test_claims(backend):
    caps = backend.capabilities()
    assert {"accumulate_scores", "plan_eviction"} <= set(caps)
