"""The Pallas ragged paged attention kernel (Pallas TPU interpret mode on CPU) against the reference.

Clauses: PA-18, PA-19, PA-48 (quantized pages and their scales), the kernel's tiling rules and a hand-worked
golden. The drawn differential and poison cases (PA-1 .. PA-25, PA-24) are the suite's own, which the CI
gate runs on this backend (test_attention_differential, test_attention_poison); a copy of them here only
cost time. Results are judged by the suite's own checks (spec/numerics.md NU-PA1, NU-PA2, NU-7) through
`suite_checks.assert_conforms`, never a local bound.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402
from kvconform.backends.pallas.paged_attention import AttentionConfig, check_tpu_shapes  # noqa: E402
from suite_checks import assert_conforms, inputs_of  # noqa: E402

BACKEND = make_backend()


def _check(args, opts, actual, expected):
    """The suite's checks (NU-PA1 / NU-PA2 on the specified rows and tokens, NU-7), never a local bound."""
    assert_conforms("ragged_paged_attention", inputs_of("ragged_paged_attention", *args, **opts), actual, expected)


def _build(c, dtype=np.float32, kv_dtype=np.float32, poison=True):
    rng = np.random.default_rng(c["seed"])
    hq = c["hkv"] * c["group"]
    n = c["num_seqs"]
    q_lens = [ql if i < n else 0 for i, ql in enumerate(c["q_lens"])]
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    T = int(cu[-1]) + 2  # two padding rows
    q = rng.standard_normal((T, hq, c["D"])).astype(dtype)
    shape = (c["P"], c["ps"], c["hkv"], c["D"])
    k = (rng.standard_normal(shape) * 2).astype(kv_dtype)
    v = (rng.standard_normal(shape) * 2).astype(kv_dtype)
    table = rng.permutation(c["P"])[:c["S"] * c["pps"]].reshape(c["S"], c["pps"]).astype(np.int32)
    kv_lens = np.array(c["kv_lens"], np.int32)
    if poison and np.dtype(kv_dtype) != np.int8:  # PA-24: NaN everywhere that must not matter
        q[cu[n]:] = np.nan
        live = np.zeros(shape[:2], bool)  # (page, slot) holding a token some sequence < n owns
        for i in range(n):
            for j in range(int(kv_lens[i])):
                live[table[i, j // c["ps"]], j % c["ps"]] = True
        k[~live] = np.nan
        v[~live] = np.nan
        table[n:] = -7  # unused table rows
    opts = dict(c["opts"])
    if opts.get("sinks") == "draw":
        opts["sinks"] = rng.standard_normal(hq)
    return (q, k, v, kv_lens, table, cu, n), opts


FIXED = dict(hkv=2, group=2, D=16, ps=4, S=3, num_seqs=3, kv_lens=[9, 4, 13], q_lens=[1, 4, 6], pps=4,
             P=14, seed=3, opts={"return_scores": True})


@pytest.mark.parametrize("kv_dtype", ["float8_e4m3fn", "float8_e5m2", "int8"])
def test_quantized_kv(kv_dtype):
    """PA-18, PA-19: stored * scale is the key/value; fp8 and int8 pages dequantized in VMEM."""
    dt = np.dtype(getattr(ml_dtypes, kv_dtype, None) or kv_dtype)
    args, opts = _build(FIXED, kv_dtype=dt, poison=False)
    opts.update(k_scale=0.75, v_scale=0.125, sliding_window=5)
    expected = reference.ragged_paged_attention(*args, **opts)
    actual = BACKEND.ragged_paged_attention(*args, **opts)
    _check(args, opts, actual, expected)


def test_per_token_scales():
    """PA-48: one scale per (page, slot, KV head) beside the pool, DMA'd with its page; every query head of a
    GQA group reads its own KV head's scales, and NaN scales beside hidden slots never reach a row (PA-24)."""
    args, opts = _build(FIXED, kv_dtype=np.dtype(ml_dtypes.float8_e4m3fn), poison=False)
    q, k, v, kv_lens, table, cu, n = args
    rng = np.random.default_rng(5)
    scales = [rng.choice(np.array([0.25, 0.5, 2.0, 4.0], np.float32), size=k.shape[:3]) for _ in range(2)]
    live = np.zeros(k.shape[:2], bool)
    for i in range(n):
        for j in range(int(kv_lens[i])):
            live[table[i, j // k.shape[1]], j % k.shape[1]] = True
    for sc in scales:
        sc[~live] = np.nan
    opts.update(k_scale=scales[0], v_scale=scales[1], soft_cap=5.0)
    expected = reference.ragged_paged_attention(*args, **opts)
    _check(args, opts, BACKEND.ragged_paged_attention(*args, **opts), expected)
    # the CSR form reads the same pages and scales through kv_indices (MD-23)
    csr = reference.block_table_to_csr(table, kv_lens, n, k.shape[1])
    csr_opts = {key: opts[key] for key in ("k_scale", "v_scale", "soft_cap")}
    got = BACKEND.ragged_paged_attention_csr(q, k, v, cu[:n + 1], *csr, **csr_opts)
    assert_conforms("ragged_paged_attention_csr",
                    inputs_of("ragged_paged_attention_csr", q, k, v, cu[:n + 1], *csr, **csr_opts), got)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_inputs(dtype):
    """Claimed activation dtypes bf16/f16 with bf16 pages: exact upcast to float32 inside."""
    args, opts = _build(FIXED, dtype=dtype, kv_dtype=ml_dtypes.bfloat16)
    expected = reference.ragged_paged_attention(*args, **opts)
    actual = BACKEND.ragged_paged_attention(*args, **opts)
    _check(args, opts, actual, expected)


def test_golden_two_keys():
    """Hand-worked: one row, D=1, keys 0 and ln 3 (after scaling by 1), values 1 and 5.
    Weights 1/4 and 3/4 -> out = 1/4 + 15/4 = 4; scores = [0.25, 0.75]. With a sink of ln 4:
    out = (1*1 + 3*5) / (1 + 3 + 4) = 2."""
    q = np.ones((1, 1, 1), np.float32)
    k = np.array([0.0, np.log(3.0)], np.float32).reshape(1, 2, 1, 1)
    v = np.array([1.0, 5.0], np.float32).reshape(1, 2, 1, 1)
    meta = (np.array([2], np.int32), np.zeros((1, 1), np.int32), np.array([0, 1], np.int32), 1)
    res = BACKEND.ragged_paged_attention(q, k, v, *meta, sm_scale=1.0, return_scores=True)
    hand = reference.AttentionOutput(np.array([[[4.0]]]), np.array([[0.25, 0.75]]))
    _check((q, k, v, *meta), dict(sm_scale=1.0, return_scores=True), res, hand)
    sinks = np.array([np.log(4.0)])
    out = BACKEND.ragged_paged_attention(q, k, v, *meta, sm_scale=1.0, sinks=sinks)
    _check((q, k, v, *meta), dict(sm_scale=1.0, sinks=sinks), out, np.array([[[2.0]]]))


def test_inputs_not_modified():
    args, opts = _build(FIXED)
    before = [np.array(a, copy=True) for a in args[:6]]
    BACKEND.ragged_paged_attention(*args, **opts)
    for a, b in zip(args[:6], before):
        np.testing.assert_array_equal(a, b)


def test_errors_name_the_argument():
    args, _ = _build(FIXED, poison=False)
    q, k, v, kv_lens, table, cu, n = args
    with pytest.raises(ValueError, match="Hq"):
        BACKEND.ragged_paged_attention(q[:, :3], k, v, kv_lens, table, cu, n)
    with pytest.raises(ValueError, match="cu_q_lens"):
        BACKEND.ragged_paged_attention(q, k, v, kv_lens, table, cu[::-1].copy(), n)
    big = np.zeros((1, 1, 512), np.float32)
    with pytest.raises(ValueError, match="max_head_dim"):
        BACKEND.ragged_paged_attention(big, np.zeros((1, 1, 1, 512), np.float32),
                                       np.zeros((1, 1, 1, 512), np.float32), np.array([1]),
                                       np.zeros((1, 1), np.int32), np.array([0, 1]), 1)


def test_tpu_tiling_rules():
    """What Mosaic would reject is rejected before the call, naming the rule."""
    cfg = AttentionConfig(8, 1, False)
    check_tpu_shapes((8, 4, 128), (4, 4, 8, 128), np.float32, AttentionConfig(8, 4, False))
    with pytest.raises(ValueError, match="128 lanes"):
        check_tpu_shapes((8, 4, 64), (4, 4, 8, 64), np.float32, cfg)
    with pytest.raises(ValueError, match="block_q"):
        check_tpu_shapes((12, 4, 128), (4, 4, 8, 128), np.float32, AttentionConfig(12, 4, False))
    with pytest.raises(ValueError, match="packing 4"):  # 2 fp8 rows of one head block: not a packed tile
        check_tpu_shapes((8, 4, 128), (4, 4, 8, 128), ml_dtypes.float8_e4m3fn, cfg)


def test_claims_and_availability():
    caps = BACKEND.capabilities()
    assert set(caps) == {"ragged_paged_attention", "write_kv", "rotate_keys", "shift_keys", "causal_conv1d_update",
                         "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv", "gated_delta_rule_update",
                         "gated_delta_rule_chunked", "recurrent_store_step", "ragged_paged_attention_csr",
                         "slot_mapping_from_arena", "append_slot_mapping", "mla_paged_attention",
                         "accumulate_scores", "plan_eviction"}
    assert "int8" in caps["ragged_paged_attention"].kv_dtypes
    avail = BACKEND.availability()
    assert avail.ok and "Pallas TPU interpret mode" in avail.device
