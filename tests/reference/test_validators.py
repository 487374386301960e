"""The public validate_* functions: one per op, exported by the reference, returning the normalised call.

Backends call these instead of re-stating the reference's rules, so each test checks what a backend relies
on: the validator raises exactly what the op raises, and its fields have the documented dtypes/shapes.
"""
import ast
import pathlib

import numpy as np
import pytest

from kvconform import reference as R

VALIDATORS = {
    "ragged_paged_attention": "validate_ragged_paged_attention",
    "write_kv": "validate_write_kv",
    "rotate_keys": "validate_rotate_keys",
    "shift_keys": "validate_shift_keys",
    "accumulate_scores": "validate_accumulate_scores",
    "plan_eviction": "validate_plan_eviction",
    "causal_conv1d_update": "validate_causal_conv1d_update",
    "selective_state_update": "validate_selective_state_update",
    "ssd_chunked_scan": "validate_ssd_chunked_scan",
    "rwkv6_wkv": "validate_rwkv6_wkv",
    "block_table_to_csr": "validate_block_table_to_csr",
    "csr_to_block_table": "validate_csr_to_block_table",
    "append_slot_mapping": "validate_append_slot_mapping",
    "arena_layout": "validate_arena_layout",
    "slot_mapping_from_arena": "validate_slot_mapping_from_arena",
    "page_table_step": "validate_page_table_step",
    "ragged_paged_attention_csr": "validate_ragged_paged_attention_csr",
    "gated_delta_rule_update": "validate_gated_delta_rule_update",
    "gated_delta_rule_chunked": "validate_gated_delta_rule_chunked",
    "recurrent_store_step": "validate_recurrent_store_step",
    "mla_paged_attention": "validate_mla_paged_attention",
}


def test_every_op_has_an_exported_validator():
    from kvconform.backends.base import OPS
    assert set(VALIDATORS) == set(OPS)
    for name in VALIDATORS.values():
        assert name in R.__all__ and callable(getattr(R, name))
    assert len(R.__all__) == len(set(R.__all__))


def _same_error(op, validator, *args, **kwargs):
    """The op and its validator reject the call with the same type and message."""
    with pytest.raises((ValueError, TypeError)) as from_op:
        op(*args, **kwargs)
    with pytest.raises(type(from_op.value)) as from_validator:
        validator(*args, **kwargs)
    assert str(from_validator.value) == str(from_op.value)
    return str(from_op.value)


def _attention_args():
    q = np.zeros((3, 4, 8), np.float32)
    pages = np.zeros((4, 2, 2, 8), np.float16)
    return q, pages, pages, np.array([3, 0]), np.array([[1, 2], [0, 0]]), np.array([0, 3, 3]), 1


def test_attention_call_fields_PA_26():
    call = R.validate_ragged_paged_attention(*_attention_args(), return_scores=True)
    assert isinstance(call, R.AttentionCall)
    assert call.q.dtype == np.float64 and call.q.shape == (3, 4, 8)
    assert call.k_pages.dtype == np.float16                      # storage dtype, not upcast
    assert call.kv_lens.dtype == call.page_indices.dtype == call.cu_q_lens.dtype == np.int64
    assert call.num_seqs == 1 and call.sm_scale == 8 ** -0.5 and call.return_scores is True
    assert call.k_scale is None and call.sliding_window is None and call.sinks is None


def test_attention_errors_match_the_op_PA_27():
    q, k, v, *meta = _attention_args()
    msg = _same_error(R.ragged_paged_attention, R.validate_ragged_paged_attention, q[:, :3], k, v, *meta)
    assert "Hq % Hkv" in msg
    msg = _same_error(R.ragged_paged_attention, R.validate_ragged_paged_attention, q, k, v, *meta,
                      k_scale=1.0)
    assert msg.endswith("scales apply to float8_e4m3fn, float8_e5m2 and int8 pages only")


def test_write_kv_call_and_int8_nan_rule_PA_44():
    pages = np.zeros((2, 2, 1, 4), np.int8)
    k = np.zeros((3, 1, 4), np.float32)
    v = k.copy()
    v[1, 0, 2] = np.nan                                           # token 1 is written: an error
    k[0] = np.nan                                                 # token 0 is skipped: never read
    slots = np.array([-1, 3, 0])
    msg = _same_error(R.write_kv, R.validate_write_kv, pages, pages, k, v, slots, k_scale=0.5, v_scale=0.5)
    assert msg == "v must not hold NaN in a written token when the pages are int8 (v[1] has NaN)"
    call = R.validate_write_kv(pages, pages, np.zeros_like(k), k * 0 + 1, slots, k_scale=0.5, v_scale=0.5)
    assert isinstance(call, R.WriteKVCall)
    assert call.written.tolist() == [1, 2] and call.slot_mapping.dtype == np.int64
    assert call.k.dtype == np.float64 and call.k_scale.dtype == np.float32


def test_rotate_keys_call_includes_the_lut_checks_RO_12():
    pages = np.zeros((3, 2, 1, 4))
    lut = np.ones((2, 4))
    call = R.validate_rotate_keys(pages, np.array([2]), np.array([[1]]), lut, rotary_dim=None)
    assert isinstance(call, R.RotateKeysCall)
    assert call.rotary_dim == 4 and call.layout == "half" and call.trig_lut.shape == (2, 4)
    for bad_lut, words in ((np.ones((0, 4)), "at least one row"), (np.ones((2, 2)), "width rotary_dim"),
                           (np.ones((1, 4)), "trig_lut has 1 rows")):
        msg = _same_error(R.rotate_keys, R.validate_rotate_keys, pages, np.array([2]), np.array([[1]]),
                          bad_lut)
        assert words in msg


def test_shift_keys_call_includes_int32_and_theta_RO_12():
    pages = np.zeros((3, 2, 1, 4))
    call = R.validate_shift_keys(pages, np.array([0, 1]), np.array([[-5], [7]]), theta=10000.0)
    assert isinstance(call, R.ShiftKeysCall)
    np.testing.assert_array_equal(call.inv_freq, R.inverse_frequencies(4, theta=10000.0))
    msg = _same_error(R.shift_keys, R.validate_shift_keys, pages, np.array([0]), np.array([[2 ** 31]]),
                      theta=10000.0)
    assert "(int32)" in msg
    msg = _same_error(R.shift_keys, R.validate_shift_keys, pages, np.array([0]), np.array([[1]]), theta=0.0)
    assert msg.startswith("theta")


def test_eviction_calls_EV_17():
    acc, counts = np.array([0.5, 0.25]), np.array([2, 1], np.int32)
    call = R.validate_accumulate_scores(acc, counts, np.array([0.1, 0.2, 0.3], np.float32))
    assert isinstance(call, R.AccumulateScoresCall) and call.step_scores.dtype == np.float64
    _same_error(R.accumulate_scores, R.validate_accumulate_scores, acc, counts, np.array([0.1]))
    config = R.EvictionConfig(block_size=1, start_size=0, recent_size=0, max_cache_size=1)
    call = R.validate_plan_eviction(np.array([5, 3]), acc, counts, config)
    assert isinstance(call, R.PlanEvictionCall) and call.config is config
    _same_error(R.plan_eviction, R.validate_plan_eviction, np.array([5, 5]), acc, counts, config)


def test_recurrent_calls_RS_10_RS_20():
    call = R.validate_causal_conv1d_update(np.zeros((2, 3), np.float16), np.zeros((4, 3, 2), np.float32),
                                           np.zeros((3, 3)))
    assert isinstance(call, R.ConvUpdateCall)
    assert call.single and call.x.shape == (2, 1, 3) and call.conv_state.dtype == np.float32
    assert call.state_indices.tolist() == [0, 1]

    mamba2 = dict(state=np.zeros((4, 4, 2, 3)), x=np.zeros((2, 4, 2)), dt=np.zeros((2, 4)), A=np.zeros(4),
                  B=np.zeros((2, 2, 3)), C=np.zeros((2, 2, 3)))
    call = R.validate_selective_state_update(**mamba2)
    assert isinstance(call, R.SelectiveStateCall) and call.dt_softplus is False and call.D is None
    msg = _same_error(R.selective_state_update, R.validate_selective_state_update,
                      **{**mamba2, "B": np.zeros((2, 3, 3)), "C": np.zeros((2, 3, 3))})
    assert msg == "B must have a group count G that divides H = 4, got G = 3"

    scan = dict(state=np.zeros((3, 4, 2, 3)), x=np.zeros((5, 4, 2)), dt=np.zeros((5, 4)), A=np.zeros(4),
                B=np.zeros((5, 2, 3)), C=np.zeros((5, 2, 3)), cu_seqlens=np.array([0, 2, 5]))
    call = R.validate_ssd_chunked_scan(**scan, num_snapshots=2)
    assert isinstance(call, R.SSDScanCall) and call.num_snapshots == 2 and call.chunk_size == 64
    assert call.has_initial_state.tolist() == [True, True]
    msg = _same_error(R.ssd_chunked_scan, R.validate_ssd_chunked_scan, **{**scan, "z": np.zeros((5, 4, 3))})
    assert msg.startswith("z must have shape [T, H, P]")

    wkv = dict(r=np.zeros((5, 2, 3)), k=np.zeros((5, 2, 3)), v=np.zeros((5, 2, 4)), w=np.zeros((5, 2, 3)),
               u=np.zeros((2, 3)), state=np.zeros((3, 2, 3, 4)), cu_seqlens=np.array([0, 5]))
    call = R.validate_rwkv6_wkv(**wkv)
    assert isinstance(call, R.WKV6Call) and call.cu_seqlens.dtype == np.int64
    # upcast=False (what rwkv6_wkv and ssd_chunked_scan use: they convert chunk by chunk) checks the same
    # and leaves the large inputs in their own dtype, uncopied
    half = {**wkv, "r": np.zeros((5, 2, 3), np.float16)}
    assert R.validate_rwkv6_wkv(**half).r.dtype == np.float64
    assert R.validate_rwkv6_wkv(**half, upcast=False).r is half["r"]
    assert R.validate_ssd_chunked_scan(**{**scan, "x": np.zeros((5, 4, 2), np.float32)}, upcast=False
                                       ).x.dtype == np.float32
    with pytest.raises(TypeError, match="r must have a floating dtype"):
        R.validate_rwkv6_wkv(**{**wkv, "r": np.zeros((5, 2, 3), np.int32)}, upcast=False)
    _same_error(R.rwkv6_wkv, R.validate_rwkv6_wkv, **{**wkv, "u": np.zeros((2, 4))})


def test_backends_use_no_private_reference_names():
    """Our backends validate through the public functions only (no `ref._x`, no `import _x`)."""
    root = pathlib.Path(__file__).resolve().parents[2] / "backends"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and "reference" in (node.module or ""):
                assert not any(a.name.startswith("_") for a in node.names), path
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id.startswith("ref"):
                assert not node.attr.startswith("_"), f"{path}: ref.{node.attr}"
