"""Every input rule of the recurrent reference raises ValueError/TypeError naming the argument (RS-*)."""
import numpy as np
import pytest

from kvconform import reference as R


def conv(**over):
    args = dict(x=np.zeros((2, 3)), conv_state=np.zeros((4, 3, 2)), weight=np.zeros((3, 3)), bias=None,
                activation=None, state_indices=None)
    args.update(over)
    return lambda: R.causal_conv1d_update(args.pop("x"), args.pop("conv_state"), args.pop("weight"),
                                          args.pop("bias"), **args)


def ssu2(**over):
    args = dict(state=np.zeros((4, 4, 2, 3)), x=np.zeros((2, 4, 2)), dt=np.zeros((2, 4)), A=np.zeros(4),
                B=np.zeros((2, 2, 3)), C=np.zeros((2, 2, 3)))
    args.update(over)
    return lambda: R.selective_state_update(**args)


def ssu1(**over):
    args = dict(state=np.zeros((3, 2, 3)), x=np.zeros((2, 2)), dt=np.zeros((2, 2)), A=np.zeros((2, 3)),
                B=np.zeros((2, 3)), C=np.zeros((2, 3)))
    args.update(over)
    return lambda: R.selective_state_update(**args)


def ssd(**over):
    args = dict(state=np.zeros((3, 4, 2, 3)), x=np.zeros((5, 4, 2)), dt=np.zeros((5, 4)), A=np.zeros(4),
                B=np.zeros((5, 2, 3)), C=np.zeros((5, 2, 3)), cu_seqlens=np.array([0, 2, 5]))
    args.update(over)
    return lambda: R.ssd_chunked_scan(**args)


def wkv(**over):
    args = dict(r=np.zeros((5, 2, 3)), k=np.zeros((5, 2, 3)), v=np.zeros((5, 2, 4)), w=np.zeros((5, 2, 3)),
                u=np.zeros((2, 3)), state=np.zeros((3, 2, 3, 4)), cu_seqlens=np.array([0, 5]))
    args.update(over)
    return lambda: R.rwkv6_wkv(**args)


CASES = [
    # slot pool (RS-2 … RS-6)
    (conv(state_indices=np.array([0, 4])), ValueError, r"state_indices\[1\]=4 is out of range"),
    (conv(state_indices=np.array([0, -2])), ValueError, r"state_indices\[1\]=-2 is out of range"),
    (conv(state_indices=np.array([1, 1])), ValueError, "state_indices must not contain duplicates"),
    (conv(state_indices=np.array([0])), ValueError, "state_indices must have shape"),
    (conv(state_indices=np.array([0.0, 1.0])), TypeError, "state_indices must have an integer dtype"),
    (conv(x=np.zeros((5, 3))), ValueError, r"state_indices is None.*batch \(5\) <= num_slots \(4\)"),
    (conv(conv_state=np.zeros((4, 3, 2), np.float16)), TypeError, "conv_state must have dtype float32 or float64"),
    (ssu2(state=np.zeros((4, 4, 2, 3), np.int32)), TypeError, "state must have dtype float32 or float64"),
    # conv (RS-10)
    (conv(x=np.zeros(3)), ValueError, "x must have rank 2"),
    (conv(x=np.zeros((2, 3), np.int64)), TypeError, "x must have a floating dtype"),
    (conv(weight=np.zeros((2, 3))), ValueError, "weight must have shape"),
    (conv(weight=np.zeros((3, 0)), conv_state=np.zeros((4, 3, 0))), ValueError, "weight must have at least one tap"),
    (conv(conv_state=np.zeros((4, 3, 3))), ValueError, "conv_state must have shape"),
    (conv(bias=np.zeros(2)), ValueError, "bias must have shape"),
    (conv(activation="relu"), ValueError, "activation must be None or 'silu'"),
    # selective state update (RS-14 … RS-16)
    (ssu2(state=np.zeros((4, 2))), ValueError, "state must have rank 3"),
    (ssu2(x=np.zeros((2, 4, 3))), ValueError, "x must have shape"),
    (ssu2(dt=np.zeros((2, 4, 2))), ValueError, "dt must have rank 2"),
    (ssu2(A=np.zeros((4, 2, 3))), ValueError, "A must have rank 1"),
    (ssu2(B=np.zeros((2, 3, 3)), C=np.zeros((2, 3, 3))), ValueError, "G that divides H = 4, got G = 3"),
    (ssu2(C=np.zeros((2, 1, 3))), ValueError, "C must have shape"),
    (ssu2(D=np.zeros(3)), ValueError, "D must have shape"),
    (ssu2(z=np.zeros((2, 4))), ValueError, "z must have rank 3"),
    (ssu2(dt_bias=np.zeros(5)), ValueError, "dt_bias must have shape"),
    (ssu2(dt_softplus=1), TypeError, "dt_softplus must be a bool"),
    (ssu1(A=np.zeros((2, 2))), ValueError, "A must have shape"),
    (ssu1(B=np.zeros((2, 1, 3))), ValueError, "B must have rank 2"),
    (ssu1(x=np.zeros((2, 2), np.int32)), TypeError, "x must have a floating dtype"),
    # SSD (RS-17 … RS-19)
    (ssd(cu_seqlens=np.array([1, 2, 5])), ValueError, r"cu_seqlens\[0\] must be 0"),
    (ssd(cu_seqlens=np.array([0, 3, 2, 5])), ValueError, "cu_seqlens must be non-decreasing"),
    (ssd(cu_seqlens=np.array([0, 2, 4])), ValueError, r"cu_seqlens\[-1\] must equal .* T = 5"),
    (ssd(cu_seqlens=np.array([0.0, 5.0])), TypeError, "cu_seqlens must have an integer dtype"),
    (ssd(chunk_size=0), ValueError, "chunk_size must be >= 1"),
    (ssd(chunk_size=2.0), TypeError, "chunk_size must be an integer"),
    (ssd(num_snapshots=-1), ValueError, "num_snapshots must be >= 0"),
    (ssd(has_initial_state=np.array([1, 0])), TypeError, "has_initial_state must have dtype bool"),
    (ssd(has_initial_state=np.array([True])), ValueError, "has_initial_state must have shape"),
    (ssd(state_indices=np.array([2, 2])), ValueError, "state_indices must not contain duplicates"),
    (ssd(B=np.zeros((5, 3, 3)), C=np.zeros((5, 3, 3))), ValueError, "G that divides H"),
    (ssd(dt=np.zeros((4, 4))), ValueError, "dt must have shape"),
    (ssd(z=np.zeros((5, 4, 3))), ValueError, "z must have shape"),
    # RWKV6 (RS-20)
    (wkv(v=np.zeros((5, 2, 3))), ValueError, "v must have shape"),
    (wkv(w=np.zeros((5, 2, 2))), ValueError, "w must have shape"),
    (wkv(u=np.zeros((2, 4))), ValueError, "u must have shape"),
    (wkv(k=np.zeros((5, 3))), ValueError, "k must have rank 3"),
    (wkv(cu_seqlens=np.array([0, 6])), ValueError, "cu_seqlens"),
    (wkv(state_indices=np.array([3])), ValueError, r"state_indices\[0\]=3 is out of range"),
    (wkv(state=np.zeros((3, 2, 3, 4), np.float16)), TypeError, "state must have dtype float32 or float64"),
]


@pytest.mark.parametrize("call, exc, pattern", CASES, ids=[c[2][:40] for c in CASES])
def test_rs_validation_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def store():
    meta = R.new_store(3)
    pool = (np.zeros((2, 2)), np.zeros((2, 1, 3), np.float32))
    return R.assign_slots(meta, pool, np.array([0]), 2)[:2]


STORE_CASES = [
    (lambda m, p: R.new_store(0), ValueError, "max_seqs must be >= 1"),
    (lambda m, p: R.assign_slots(m, p, np.array([0, 0]), 1), ValueError, "seq_ids must not contain duplicates"),
    (lambda m, p: R.assign_slots(m, p, np.array([3]), 1), ValueError, r"seq_ids\[0\]=3 is out of range"),
    (lambda m, p: R.assign_slots(m, p, np.array([1]), -1), ValueError, "num_tokens must be >= 0"),
    (lambda m, p: R.assign_slots(m, p, np.array([1]), np.array([1, 2])), ValueError, "num_tokens must be an int or"),
    (lambda m, p: R.assign_slots(m, p, np.array([1, 2]), 1), R.StoreError, "no free slot"),
    (lambda m, p: R.assign_slots(m._asdict(), p, np.array([1]), 1), TypeError, "meta must be a StoreMeta"),
    (lambda m, p: R.assign_slots(m, p[0], np.array([1]), 1), TypeError, "pool must be a non-empty tuple"),
    (lambda m, p: R.assign_slots(m, (p[0], np.zeros((3, 1))), np.array([1]), 1), ValueError,
     r"pool\[1\] must have the same leading num_slots"),
    (lambda m, p: R.assign_slots(m, (p[0].astype(np.float16),), np.array([1]), 1), TypeError,
     r"pool\[0\] must have dtype float32 or float64"),
    (lambda m, p: R.copy_sequence(m, p, 1, 2), R.StoreError, "src sequence 1 has no state"),
    (lambda m, p: R.copy_sequence(m, p, 0, 3), ValueError, "dst must be <= 2"),
    (lambda m, p: R.remove_sequence(m, p, -1), ValueError, "seq must be >= 0"),
    (lambda m, p: R.keep_sequence(m, p, True), TypeError, "seq must be an integer"),
    (lambda m, p: R.checkpoint(m, p, 2), R.StoreError, r"checkpoint: seq \(sequence 2\) has no state"),
    (lambda m, p: R.restore(m, p, 0, (1, p)), TypeError, "saved must be a Checkpoint"),
    (lambda m, p: R.restore(m, p, 0, R.Checkpoint(1, (p[0][0], p[1][0].astype(np.float64)))), TypeError,
     r"saved.rows\[1\] must have the pool's dtype float32"),
    (lambda m, p: R.restore(m, p, 0, R.Checkpoint(1, (p[0][0], p[1][0, 0]))), ValueError,
     r"saved.rows\[1\] must have shape"),
    (lambda m, p: R.rollback(m, p, 0, 1, (p[0][:1],)), TypeError, "snapshots must be a tuple with one array"),
    (lambda m, p: R.rollback(m, p, 0, 1, (p[0], p[1][:1])), ValueError, "same count K"),
    (lambda m, p: R.rollback(m, p, 1, 0, (p[0], p[1])), R.StoreError, r"rollback: seq \(sequence 1\) has no state"),
    (lambda m, p: R.rollback(m, p, 0, 3, (p[0][[0] * 4], p[1][[0] * 4])), R.StoreError, "exceeds"),
    (lambda m, p: R.rollback(m, p, 0, 2, (p[0], p[1])), R.StoreError, "only K = 2"),
    (lambda m, p: R.rollback(m, p, 0, -1, (p[0], p[1])), ValueError, "num_tokens must be >= 0"),
]


@pytest.mark.parametrize("call, exc, pattern", STORE_CASES, ids=[c[2][:40] for c in STORE_CASES])
def test_rs27_store_errors_name_the_argument_and_change_nothing(call, exc, pattern):
    meta, pool = store()
    before = [a.copy() for a in (*meta, *pool)]
    with pytest.raises(exc, match=pattern):
        call(meta, pool)
    assert all(np.array_equal(a, b) for a, b in zip(before, (*meta, *pool)))


def test_rs4_inputs_are_never_modified_by_kernels():
    rng = np.random.default_rng(1)
    pool = rng.standard_normal((3, 2, 2, 3))
    args = [rng.standard_normal((4, 2, 2)), rng.standard_normal((4, 2)), -rng.random(2),
            rng.standard_normal((4, 1, 3)), rng.standard_normal((4, 1, 3)), np.array([0, 4])]
    before = [a.copy() for a in (pool, *args)]
    R.ssd_chunked_scan(pool, *args, state_indices=np.array([2]), num_snapshots=2)
    assert all(np.array_equal(a, b) for a, b in zip(before, (pool, *args)))
