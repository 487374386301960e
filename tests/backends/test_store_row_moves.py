"""The Triton and Pallas store kernels (spec/recurrent.md RS-21 .. RS-27) against the reference: a command
script over float32 conv and float64 SSM pools, judged by the suite's checks and, beyond them, bit for bit
(NaN payloads, -0.0 and float64 values must travel as bits; a fresh row is +0.0 even over NaN, RS-5)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kvconform import reference
from kvconform.backends.store_moves import as_words, from_words

from suite_checks import assert_conforms, inputs_of

OP = "recurrent_store_step"
I32 = np.int32


def _backends():
    out = [pytest.param("triton", marks=pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                                           reason="triton not installed"))]
    out.append(pytest.param("pallas", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                                               reason="jax not installed")))
    return out


def _make(name: str):
    if name == "triton":
        from kvconform.backends.triton import make_backend
    else:
        from kvconform.backends.pallas import make_backend
    return make_backend()


def _pools():
    """conv f32[4, 2, 3] with a signalling-style NaN payload and -0.0 in slot 0; ssm f64[4, 2, 2] with
    values no float32 holds; slot 3 all NaN (free)."""
    rng = np.random.default_rng(7)
    conv = rng.standard_normal((4, 2, 3)).astype(np.float32)
    conv[0, 0, 0] = np.array(0x7FA00001, np.uint32).view(np.float32)    # NaN with a payload
    conv[0, 1, 2] = -0.0
    ssm = rng.standard_normal((4, 2, 2)) * (1 + 2.0 ** -40)
    conv[3], ssm[3] = np.nan, np.nan
    return conv, ssm


def _script():
    """(command kwargs) in order; metadata starts with seq 0 in slot 0 at position 4 and seq 1 in slot 1."""
    snaps = (np.arange(3 * 6, dtype=np.float32).reshape(3, 2, 3), -np.arange(3 * 4, dtype=np.float64).reshape(3, 2, 2))
    return [
        dict(command="copy", src=0, dst=2),                                        # seq 2 shares slot 0
        dict(command="assign", seq_ids=np.array([2, 3], I32), num_tokens=1),      # CoW into slot 2, fresh 3
        dict(command="checkpoint", seq=0),
        dict(command="restore", seq=1, saved_pos=2, saved_conv=snaps[0][1], saved_ssm=snaps[1][1]),
        dict(command="rollback", seq=0, num_tokens=2, snapshots_conv=snaps[0], snapshots_ssm=snaps[1]),
        dict(command="keep", seq=2),
    ]


def _bits(a: np.ndarray) -> np.ndarray:
    return as_words(np.asarray(a)[None]) if np.ndim(a) else np.asarray(a)


@pytest.mark.parametrize("name", _backends())
def test_store_script_matches_reference_bit_for_bit(name):
    backend = _make(name)
    conv, ssm = _pools()
    state = dict(seq_slot=np.array([0, 1, -1, -1], np.int64), seq_pos=np.array([4, 3, 0, 0], np.int64),
                 conv_pool=conv, ssm_pool=ssm)
    for step in _script():
        inputs = inputs_of(OP, **state, **step)
        got = getattr(backend, OP)(**inputs)
        want = reference.recurrent_store_step(**inputs)
        assert_conforms(OP, inputs, got, want, what=f"reference after {step['command']!r}")
        for field in ("conv_pool", "ssm_pool", "checkpoint_conv", "checkpoint_ssm"):
            g, w = getattr(got, field), getattr(want, field)
            assert g.dtype == w.dtype and g.shape == w.shape, field
            used = np.asarray(want.seq_slot)
            rows = sorted(set(used[used >= 0].tolist())) if field.endswith("pool") else range(g.shape[0])
            for r in rows:   # rows of free slots are unspecified (RS-21); every held row is bit exact
                np.testing.assert_array_equal(_bits(g[r]), _bits(w[r]), err_msg=f"{field} row {r}")
        state = dict(seq_slot=want.seq_slot, seq_pos=want.seq_pos, conv_pool=want.conv_pool, ssm_pool=want.ssm_pool)
    # the script reached the states it is meant to: a fresh row of +0.0 bits written over NaN (RS-5)
    assert (as_words(state["conv_pool"][3:4]) == 0).all() and (as_words(state["ssm_pool"][3:4]) == 0).all()


@pytest.mark.parametrize("name", _backends())
def test_refused_command_launches_nothing_and_names_the_rule(name):
    """RS-27: rollback past the position is refused before any device work, with the reference's message."""
    backend = _make(name)
    conv, ssm = _pools()
    inputs = dict(seq_slot=np.array([0, -1, -1, -1], np.int64), seq_pos=np.array([1, 0, 0, 0], np.int64),
                  conv_pool=conv, ssm_pool=ssm, command="rollback", seq=0, num_tokens=2,
                  snapshots_conv=np.zeros((3, 2, 3), np.float32), snapshots_ssm=np.zeros((3, 2, 2)))
    with pytest.raises(ValueError) as ours:
        getattr(backend, OP)(**inputs)
    with pytest.raises(ValueError) as oracle:
        reference.recurrent_store_step(**inputs)
    assert str(ours.value) == str(oracle.value)


def test_words_round_trip_keeps_bits():
    a = np.array([[np.nan, -0.0, 1 + 2.0 ** -50]], np.float64)
    a.view(np.uint64)[0, 0] = 0x7FF0000000000123
    back = from_words(as_words(a), a)
    assert back.dtype == np.float64 and (back.view(np.uint64) == a.view(np.uint64)).all()
