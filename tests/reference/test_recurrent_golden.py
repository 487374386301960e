"""Hand-worked golden cases for the recurrent kernels; expected values are arithmetic written here."""
import math

import numpy as np
import pytest

from kvconform import reference as R


def test_rs11_conv_single_token_golden():
    # window [1, 2 | 3], taps [0.5, -1, 2], bias 0.25: 0.5*1 - 1*2 + 2*3 + 0.25 = 4.75
    res = R.causal_conv1d_update(np.array([[3.0]]), np.array([[[1.0, 2.0]]]), np.array([[0.5, -1.0, 2.0]]),
                                 np.array([0.25]))
    assert res.out.tolist() == [[4.75]]
    assert res.conv_state.tolist() == [[[2.0, 3.0]]]  # RS-12: last W-1 pre-conv inputs


def test_rs9_rs11_conv_silu_golden():
    res = R.causal_conv1d_update(np.array([[3.0]]), np.array([[[1.0, 2.0]]]), np.array([[0.5, -1.0, 2.0]]),
                                 np.array([0.25]), activation="silu")
    assert res.out[0, 0] == pytest.approx(4.75 / (1 + math.exp(-4.75)), rel=1e-15)


def test_rs12_conv_fewer_tokens_than_window_is_a_shift():
    # W = 4: state [1, 2, 3], two tokens 4, 5 -> state [3, 4, 5]; outputs 1+2+3+4=10 and 2+3+4+5=14
    res = R.causal_conv1d_update(np.array([[[4.0], [5.0]]]), np.array([[[1.0, 2.0, 3.0]]]), np.ones((1, 4)))
    assert res.conv_state.tolist() == [[[3.0, 4.0, 5.0]]]
    assert res.out.tolist() == [[[10.0], [14.0]]]


def test_rs3_conv_padding_row_outputs_zero_and_writes_nothing():
    pool = np.array([[[7.0, 8.0]]], dtype=np.float32)
    res = R.causal_conv1d_update(np.array([[3.0], [1.0]]), np.concatenate([pool, pool + 1]),
                                 np.ones((1, 3)), state_indices=np.array([-1, 1]))
    assert res.out[0, 0] == 0.0 and res.out[1, 0] == 8 + 9 + 1
    assert res.conv_state.tolist() == [[[7.0, 8.0]], [[9.0, 1.0]]]


def test_rs15_mamba1_golden():
    # S = [1, 2], x = 2, dt = 0.5, A = [-1, -2], B = [1, 3], C = [2, -1], D = 0.5
    res = R.selective_state_update(np.array([[[1.0, 2.0]]]), np.array([[2.0]]), np.array([[0.5]]),
                                   np.array([[-1.0, -2.0]]), np.array([[1.0, 3.0]]), np.array([[2.0, -1.0]]),
                                   D=np.array([0.5]))
    s0 = 1 * math.exp(-0.5) + 0.5 * 2 * 1
    s1 = 2 * math.exp(-1.0) + 0.5 * 2 * 3
    assert res.state[0, 0].tolist() == pytest.approx([s0, s1], rel=1e-15)
    assert res.out[0, 0] == pytest.approx(2 * s0 - s1 + 0.5 * 2, rel=1e-14)


def test_rs15_gate_and_dt_bias_golden():
    # dt' = 0.25 + 0.25 = 0.5, A = 0 so the decay is 1: S = 0 + 0.5*2*1 = 1; y = (1*1 + 0) * silu(1)
    res = R.selective_state_update(np.zeros((1, 1, 1)), np.array([[2.0]]), np.array([[0.25]]),
                                   np.zeros((1, 1)), np.ones((1, 1)), np.ones((1, 1)),
                                   z=np.array([[1.0]]), dt_bias=np.array([0.25]))
    assert res.out[0, 0] == pytest.approx(1.0 / (1 + math.exp(-1.0)), rel=1e-15)


@pytest.mark.parametrize("dt, expected", [(0.0, math.log(2.0)), (20.0, math.log1p(math.exp(20.0))),
                                          (20.5, 20.5), (-30.0, math.log1p(math.exp(-30.0)))])
def test_rs9_softplus_threshold_pinned(dt, expected):
    assert R.softplus(np.array(dt)) == expected
    # through the kernel: A = 0, x = 1, B = C = 1, zero state -> y = dt'
    res = R.selective_state_update(np.zeros((1, 1, 1)), np.ones((1, 1)), np.array([[dt]]), np.zeros((1, 1)),
                                   np.ones((1, 1)), np.ones((1, 1)), dt_softplus=True)
    assert res.out[0, 0] == expected


def test_rs16_group_mapping_golden():
    # H = 4, G = 2: heads 0,1 read group 0 (B = 1), heads 2,3 read group 1 (B = 10); a `repeat` (tile)
    # mapping would give heads 1 and 3 the wrong group.
    B = np.array([[[1.0], [10.0]]])
    C = np.array([[[1.0], [-1.0]]])
    res = R.selective_state_update(np.zeros((1, 4, 1, 1)), np.ones((1, 4, 1)), np.ones((1, 4)), np.zeros(4),
                                   B, C)
    assert res.state[0, :, 0, 0].tolist() == [1.0, 1.0, 10.0, 10.0]
    assert res.out[0, :, 0].tolist() == [1.0, 1.0, -10.0, -10.0]


def test_rs18_rs19_ssd_golden_with_snapshots():
    # One head, P = N = 1, A = -ln 2 and dt' = 1: each token halves the state, then adds x.
    # S0 = 4 -> S1 = 2+1 = 3 -> S2 = 1.5+2 = 3.5 -> S3 = 1.75+3 = 4.75; B = C = 1 so y_t = S_t.
    res = R.ssd_chunked_scan(np.array([[[[4.0]]]]), np.array([[[1.0]], [[2.0]], [[3.0]]]), np.ones((3, 1)),
                             np.array([-math.log(2.0)]), np.ones((3, 1, 1)), np.ones((3, 1, 1)),
                             np.array([0, 3]), chunk_size=2, num_snapshots=5)
    assert res.out[:, 0, 0] == pytest.approx([3.0, 3.5, 4.75], rel=1e-14)
    assert res.state[0, 0, 0, 0] == pytest.approx(4.75, rel=1e-14)
    snaps = res.snapshots[0, :, 0, 0, 0]
    assert snaps[:4] == pytest.approx([4.75, 3.5, 3.0, 4.0], rel=1e-14)  # r = 3 = L: the start state
    assert np.isnan(snaps[4])  # r > L: unspecified, NaN in the reference


def test_rs5_ssd_fresh_sequence_ignores_nan_row():
    res = R.ssd_chunked_scan(np.full((1, 1, 1, 1), np.nan), np.array([[[2.0]]]), np.ones((1, 1)),
                             np.array([-1.0]), np.ones((1, 1, 1)), np.ones((1, 1, 1)), np.array([0, 1]),
                             has_initial_state=np.array([False]))
    assert res.out[0, 0, 0] == 2.0 and res.state[0, 0, 0, 0] == 2.0  # 0*decay + 1*2*1, no NaN


def test_rs20_rwkv6_golden_two_tokens():
    # H = 1, K = 2, V = 1. S0 = [1, 2]; token 1: r = [1, 1], k = [1, 2], v = 3, w = [0.5, 0.25], u = [0.5, 0]
    # kv = [3, 6]; y1 = 1*(1 + 0.5*3) + 1*(2 + 0*6) = 4.5; S1 = [0.5*1 + 3, 0.25*2 + 6] = [3.5, 6.5]
    # token 2: r = [2, 0], k = [1, 0], v = 1, w = [1, 1]: kv = [1, 0]; y2 = 2*(3.5 + 0.5*1) = 8; S2 = [4.5, 6.5]
    res = R.rwkv6_wkv(np.array([[[1.0, 1.0]], [[2.0, 0.0]]]), np.array([[[1.0, 2.0]], [[1.0, 0.0]]]),
                      np.array([[[3.0]], [[1.0]]]), np.array([[[0.5, 0.25]], [[1.0, 1.0]]]),
                      np.array([[0.5, 0.0]]), np.array([[[[1.0], [2.0]]]]), np.array([0, 2]))
    assert res.out[:, 0, 0].tolist() == [4.5, 8.0]
    assert res.state[0, 0, :, 0].tolist() == [4.5, 6.5]


def test_rs6_pool_dtype_kept_and_rows_rounded_once():
    """RS-1/RS-6: the pool keeps its dtype and shape [num_slots, ...]; written rows are rounded once."""
    pool = np.zeros((2, 1, 1), dtype=np.float32)
    res = R.selective_state_update(pool, np.array([[1.0]]), np.array([[0.1]]), np.zeros((1, 1)),
                                   np.ones((1, 1)), np.ones((1, 1)))
    assert res.state.dtype == np.float32 and res.out.dtype == np.float64
    assert res.state[0, 0, 0] == np.float32(0.1) and res.out[0, 0] == 0.1  # output is not rounded
