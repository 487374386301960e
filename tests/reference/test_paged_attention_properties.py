"""Hypothesis properties of the reference ragged paged attention (spec/paged_attention.md)."""
from __future__ import annotations

import numpy as np
import ml_dtypes
from hypothesis import given, settings, strategies as st

from kvconform.reference import dtypes, ragged_paged_attention, write_kv

from .pa_inputs import Batch, batches, dense_attention, paged

SETTINGS = settings(max_examples=60, deadline=None)
TIGHT = dict(rtol=1e-12, atol=1e-12)  # float64 vs float64 on identical inputs: only summation order differs


def _rng(batch: Batch) -> np.random.Generator:
    return np.random.default_rng(len(batch.q) * 7919 + sum(batch.kv_lens))


def _valid(batch: Batch, out: np.ndarray) -> np.ndarray:
    return out[:batch.cu_q_lens[batch.num_seqs]]


@SETTINGS
@given(batches(), st.booleans())
def test_equals_dense_oracle_PA_6_to_PA_17(batch, contiguous):
    """PA-6 .. PA-17: causal positions, GQA, scale, window, soft cap and sinks match the dense oracle,
    with contiguous pages (the issue's dense-causal property) and with scattered pages."""
    args = paged(batch, _rng(batch), contiguous=contiguous)
    out = ragged_paged_attention(**args, **batch.options)
    expected, _, _ = dense_attention(batch, **batch.options)
    np.testing.assert_allclose(_valid(batch, out), expected, **TIGHT)


@SETTINGS
@given(batches(), st.data())
def test_page_permutation_invariance_PA_10(batch, data):
    """PA-10: relabelling physical pages (table permuted to match) changes nothing, bit for bit."""
    rng = _rng(batch)
    args = paged(batch, rng)
    P = args["k_pages"].shape[0]
    perm = np.asarray(data.draw(st.permutations(range(P))), dtype=np.int64)  # new page p holds old perm[p]
    inverse = np.argsort(perm)
    moved = dict(args, k_pages=args["k_pages"][perm], v_pages=args["v_pages"][perm],
                 page_indices=inverse[args["page_indices"]].astype(np.int32))
    a = ragged_paged_attention(**args, **batch.options, return_scores=True)
    b = ragged_paged_attention(**moved, **batch.options, return_scores=True)
    np.testing.assert_array_equal(_valid(batch, a.out), _valid(batch, b.out))
    np.testing.assert_array_equal(a.scores, b.scores)


@SETTINGS
@given(batches())
def test_poison_in_dont_care_locations_PA_24(batch):
    """PA-24: NaN/Inf in slots past kv_len, unused pages, unused table entries, metadata of sequences
    >= num_seqs, padding rows of q and keys no row can see leave every counted row bit-identical."""
    clean = paged(batch, _rng(batch))
    dirty = paged(batch, _rng(batch), poison=True)
    a = ragged_paged_attention(**clean, **batch.options, return_scores=True)
    b = ragged_paged_attention(**dirty, **batch.options, return_scores=True)
    np.testing.assert_array_equal(_valid(batch, a.out), _valid(batch, b.out))
    assert np.isfinite(_valid(batch, b.out)).all()
    np.testing.assert_array_equal(a.scores[:batch.num_seqs], b.scores[:batch.num_seqs])


@SETTINGS
@given(batches(options=False))
def test_gqa_equals_repeated_kv_heads_PA_12(batch):
    """PA-12: query head h reads KV head h // (Hq // Hkv); repeating each KV head per query head
    (Hkv' = Hq) gives the same output."""
    Hq, Hkv, D = batch.heads
    group = Hq // Hkv
    args = paged(batch, _rng(batch))
    repeated = dict(args, k_pages=np.repeat(args["k_pages"], group, axis=2),
                    v_pages=np.repeat(args["v_pages"], group, axis=2))
    np.testing.assert_allclose(_valid(batch, ragged_paged_attention(**repeated)),
                               _valid(batch, ragged_paged_attention(**args)), **TIGHT)


@SETTINGS
@given(batches(options=False), st.integers(0, 3))
def test_window_at_least_kv_len_is_no_window_PA_15(batch, extra):
    """PA-15: W >= kv_len of every sequence excludes no key."""
    args = paged(batch, _rng(batch))
    W = max(batch.kv_lens) + extra if max(batch.kv_lens) + extra >= 1 else 1
    np.testing.assert_allclose(_valid(batch, ragged_paged_attention(**args, sliding_window=W)),
                               _valid(batch, ragged_paged_attention(**args)), **TIGHT)


@SETTINGS
@given(batches(options=False))
def test_window_one_attends_to_self_only_PA_15(batch):
    """PA-15: with W = 1 row t of sequence i outputs exactly the value at its own position."""
    Hq, Hkv, D = batch.heads
    out = ragged_paged_attention(**paged(batch, _rng(batch)), sliding_window=1)
    cu = batch.cu_q_lens
    for i in range(batch.num_seqs):
        for t in range(batch.q_lens[i]):
            pos = batch.kv_lens[i] - batch.q_lens[i] + t
            expected = np.repeat(batch.values[i][pos], Hq // Hkv, axis=0)  # [Hq, D]
            np.testing.assert_array_equal(out[cu[i] + t], expected)


@SETTINGS
@given(batches(options=False))
def test_sink_minus_inf_is_no_sink_PA_17(batch):
    """PA-17: a sink logit of -inf adds exp(-inf) = 0 to the denominator."""
    Hq = batch.heads[0]
    args = paged(batch, _rng(batch))
    a = ragged_paged_attention(**args, return_scores=True)
    b = ragged_paged_attention(**args, sinks=np.full(Hq, -np.inf), return_scores=True)
    np.testing.assert_array_equal(_valid(batch, a.out), _valid(batch, b.out))
    np.testing.assert_array_equal(a.scores, b.scores)


@SETTINGS
@given(batches())
def test_scores_sum_to_rows_times_heads_less_sink_mass_PA_21_PA_22(batch):
    """PA-21, PA-22: each sequence's scores sum to Hq * q_len minus the mass the sinks took; tokens
    past kv_len and sequences >= num_seqs score 0; scores match the oracle token by token."""
    Hq = batch.heads[0]
    res = ragged_paged_attention(**paged(batch, _rng(batch)), **batch.options, return_scores=True)
    _, oracle_scores, sink_mass = dense_attention(batch, **batch.options)
    for i in range(len(batch.kv_lens)):
        row = res.scores[i]
        if i >= batch.num_seqs:
            assert not row.any()
            continue
        n = batch.kv_lens[i]
        assert not row[n:].any()
        np.testing.assert_allclose(row[:n], oracle_scores[i], **TIGHT)
        np.testing.assert_allclose(row.sum(), Hq * batch.q_lens[i] - sink_mass[i], rtol=1e-12, atol=1e-9)
        if "sinks" not in batch.options:
            np.testing.assert_allclose(row.sum(), Hq * batch.q_lens[i], rtol=1e-12)


@SETTINGS
@given(batches(), st.sampled_from(["float8_e4m3fn", "float8_e5m2", "int8"]),
       st.sampled_from([0.03125, 0.37, 1.0, 2.5]), st.sampled_from([0.0625, 0.8, 1.0]))
def test_quantized_equals_dequantized_float_cache_PA_18_PA_19(batch, kv_dtype, k_scale, v_scale):
    """PA-18, PA-19: attention over quantized pages with scales equals attention over float64 pages
    holding stored * fl32(scale), bit for bit (both are the same float64 values)."""
    args = paged(batch, _rng(batch))
    dt = dtypes.resolve_dtype(kv_dtype)
    k_q = dtypes.quantize(np.nan_to_num(args["k_pages"]), k_scale, dt)
    v_q = dtypes.quantize(np.nan_to_num(args["v_pages"]), v_scale, dt)
    k_f = k_q.astype(np.float64) * np.float64(np.float32(k_scale))
    v_f = v_q.astype(np.float64) * np.float64(np.float32(v_scale))
    quant = ragged_paged_attention(**dict(args, k_pages=k_q, v_pages=v_q), **batch.options,
                                   k_scale=k_scale, v_scale=v_scale)
    float_ = ragged_paged_attention(**dict(args, k_pages=k_f, v_pages=v_f), **batch.options)
    np.testing.assert_array_equal(_valid(batch, quant), _valid(batch, float_))


@SETTINGS
@given(batches(), st.sampled_from([np.float32, ml_dtypes.bfloat16]))
def test_write_then_attend_equals_concatenated_cache_PA_40(batch, page_dtype):
    """PA-40 .. PA-45 with PA-6: writing each sequence's q_len new tokens with write_kv into a cache
    holding its first kv_len - q_len tokens, then attending, equals attending over the whole cache."""
    rng = _rng(batch)
    # Values already representable in the page dtype, so the write is exact and the comparison strict.
    exact = Batch(batch.q_lens, batch.kv_lens,
                  [k.astype(page_dtype).astype(np.float64) for k in batch.keys],
                  [v.astype(page_dtype).astype(np.float64) for v in batch.values],
                  batch.q, batch.num_seqs, batch.page_size, batch.options)
    full = paged(exact, rng, dtype=page_dtype)
    ps = batch.page_size
    k_pages, v_pages = full["k_pages"].copy(), full["v_pages"].copy()
    new_k, new_v, slots = [], [], []
    for i in range(batch.num_seqs):
        n, q_len = batch.kv_lens[i], batch.q_lens[i]
        for j in range(n - q_len, n):
            page, off = full["page_indices"][i, j // ps], j % ps
            k_pages[page, off] = np.nan  # stale content the write must replace
            v_pages[page, off] = np.nan
            new_k.append(exact.keys[i][j])
            new_v.append(exact.values[i][j])
            slots.append(page * ps + off)
    Hq, Hkv, D = batch.heads
    slots.append(-1)  # a padding token: skipped
    new_k.append(np.full((Hkv, D), np.nan))
    new_v.append(np.full((Hkv, D), np.nan))
    written = write_kv(k_pages, v_pages, np.asarray(new_k, dtype=np.float32), np.asarray(new_v, dtype=np.float32),
                       np.asarray(slots, dtype=np.int32))
    after = ragged_paged_attention(**dict(full, k_pages=written.k_pages, v_pages=written.v_pages),
                                   **batch.options)
    np.testing.assert_array_equal(_valid(batch, after),
                                  _valid(batch, ragged_paged_attention(**full, **batch.options)))


@settings(max_examples=20, deadline=None)
@given(batches())
def test_row_blocking_changes_nothing_PA_13(batch):
    """The reference splits long row ranges into blocks to bound memory; rows are independent (PA-13),
    so a block of one row must give the same result as one block of all rows."""
    from kvconform.reference import paged_attention as module

    args = paged(batch, _rng(batch))
    whole = ragged_paged_attention(**args, **batch.options, return_scores=True)
    saved = module._BLOCK_ELEMENTS
    module._BLOCK_ELEMENTS = 1
    try:
        blocked = ragged_paged_attention(**args, **batch.options, return_scores=True)
    finally:
        module._BLOCK_ELEMENTS = saved
    np.testing.assert_allclose(_valid(batch, blocked.out), _valid(batch, whole.out), **TIGHT)
    np.testing.assert_allclose(blocked.scores, whole.scores, **TIGHT)


@settings(max_examples=20, deadline=None)
@given(batches())
def test_kv_heads_in_parallel_change_nothing_PA_12(batch):
    """Large calls spread the KV heads over a thread pool (reference/head_workers.py); KV heads are
    independent (PA-12) and score mass is added in head order, so the pool must give the inline result."""
    from kvconform.reference import head_workers

    args = paged(batch, _rng(batch))
    inline = ragged_paged_attention(**args, **batch.options, return_scores=True)
    saved = head_workers._MIN_WORK, head_workers._usable_cpus
    head_workers._MIN_WORK, head_workers._usable_cpus = 0, lambda: 2  # a pool of 2 even on one CPU
    try:
        pooled = ragged_paged_attention(**args, **batch.options, return_scores=True)
    finally:
        head_workers._MIN_WORK, head_workers._usable_cpus = saved
    np.testing.assert_allclose(_valid(batch, pooled.out), _valid(batch, inline.out), **TIGHT)
    np.testing.assert_allclose(pooled.scores, inline.scores, **TIGHT)


@settings(max_examples=20, deadline=None)
@given(batches(), st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]),
       st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]))
def test_narrow_inputs_are_upcast_exactly_PA_20(batch, q_dtype, kv_dtype):
    """PA-20: any float input dtype means its exact value: same result as the float64 upcast, bit for bit."""
    args = paged(batch, _rng(batch))
    narrow = dict(args, q=args["q"].astype(q_dtype), k_pages=args["k_pages"].astype(kv_dtype),
                  v_pages=args["v_pages"].astype(kv_dtype))
    wide = {name: (a.astype(np.float64) if name in ("q", "k_pages", "v_pages") else a)
            for name, a in narrow.items()}
    np.testing.assert_array_equal(_valid(batch, ragged_paged_attention(**narrow, **batch.options)),
                                  _valid(batch, ragged_paged_attention(**wide, **batch.options)))
