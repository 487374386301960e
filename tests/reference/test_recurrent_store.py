"""The state store (RS-21 … RS-27): unit rules, copy/advance commutation, rollback, and a state machine."""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from kvconform import reference as R

from ._recurrent_cases import bits

# A tiny Mamba1 layer: conv window [C=2, W-1=2] (float32) and SSM state [D=2, N=2] (float64).
C_CH, W, DM, N = 2, 3, 2, 2
WEIGHT = np.array([[0.5, -0.25, 1.0], [1.5, 0.75, -1.0]])
A = -np.array([[0.5, 1.0], [0.25, 2.0]])


def new_pool(num_slots, fill=0.0):
    return (np.full((num_slots, C_CH, W - 1), fill, dtype=np.float32), np.full((num_slots, DM, N), fill))


def token(value):
    """Deterministic per-token inputs derived from one drawn number."""
    x = np.array([value, 1.0 - value], dtype=np.float32)
    return x, np.array([0.5 + abs(value) % 1.0, 0.25]), np.array([value, 2.0]), np.array([1.0, -value])


def advance(pool, slots, values):
    """One token per addressed row: conv update then selective state update (the layer's kernels)."""
    toks = [token(v) for v in values]
    x = np.stack([t[0] for t in toks])
    conv = R.causal_conv1d_update(x, pool[0], WEIGHT, activation="silu", state_indices=slots)
    ssm = R.selective_state_update(pool[1], conv.out, np.stack([t[1] for t in toks]), A,
                                   np.stack([t[2] for t in toks]), np.stack([t[3] for t in toks]),
                                   dt_softplus=True, state_indices=slots)
    return (conv.conv_state, ssm.state), ssm.out


def run_batch(meta, pool, seqs, values):
    got = R.assign_slots(meta, pool, np.array(seqs), 1)
    pool, out = advance(got.pool, got.state_indices, values)
    return got.meta, pool, out


def rows(meta, pool, seq):
    slot = meta.seq_slot[seq]
    return tuple(p[slot] for p in pool)


def test_rs22_fresh_sequence_gets_zeroed_lowest_free_slot():
    meta, pool = R.new_store(4), new_pool(3, np.nan)
    got = R.assign_slots(meta, pool, np.array([2, 0]), 3)
    assert got.state_indices.tolist() == [0, 1] and got.has_initial_state.tolist() == [False, False]
    assert got.meta.seq_pos.tolist() == [3, 0, 3, 0]
    assert not got.pool[0][:2].any() and not got.pool[1][:2].any()      # exact zeros, selected
    assert np.isnan(got.pool[1][2]).all() and np.isnan(pool[1]).all()    # other rows, inputs untouched


def test_rs22_rs27_no_free_slot_fails_and_changes_nothing():
    meta, pool = R.new_store(4), new_pool(2)
    meta, pool, _ = run_batch(meta, pool, [0, 1], [0.3, 0.7])
    snapshot = (bits(meta.seq_slot), bits(meta.seq_pos), bits(pool[0]), bits(pool[1]))
    with pytest.raises(R.StoreError, match="no free slot"):
        R.assign_slots(meta, pool, np.array([1, 2]), 1)
    assert (bits(meta.seq_slot), bits(meta.seq_pos), bits(pool[0]), bits(pool[1])) == snapshot


def test_rs23_copy_then_advance_equals_advance_then_copy():
    """RS-23: advance(copy(s -> d)) == copy(advance(s)); advancing d afterwards leaves s unchanged."""
    meta, pool = R.new_store(3), new_pool(4, np.nan)
    meta, pool, _ = run_batch(meta, pool, [0], [0.4])
    m1, p1 = R.copy_sequence(meta, pool, 0, 1)
    assert m1.seq_slot[1] == m1.seq_slot[0] and bits(p1[0]) == bits(pool[0])  # shared, no data copied
    m1, p1, _ = run_batch(m1, p1, [0], [0.9])                                  # copy, then advance s
    m2, p2, _ = run_batch(meta, pool, [0], [0.9])                              # advance s, then copy
    m2, p2 = R.copy_sequence(m2, p2, 0, 1)
    for kind in range(2):
        assert bits(rows(m1, p1, 0)[kind]) == bits(rows(m2, p2, 0)[kind])
    # d still holds the state before the advance (copy-on-write moved s to a new slot)
    for kind in range(2):
        assert bits(rows(m1, p1, 1)[kind]) == bits(rows(meta, pool, 0)[kind])
    s_before = tuple(r.copy() for r in rows(m2, p2, 0))
    m3, p3, _ = run_batch(m2, p2, [1], [0.1])
    assert m3.seq_slot[0] != m3.seq_slot[1]
    assert all(bits(a) == bits(b) for a, b in zip(rows(m3, p3, 0), s_before))


def test_rs24_remove_and_keep():
    meta, pool = R.new_store(4), new_pool(4)
    meta, pool, _ = run_batch(meta, pool, [0, 1, 2], [0.1, 0.2, 0.3])
    m, p = R.remove_sequence(meta, pool, 1)
    assert m.seq_slot.tolist() == [0, -1, 2, -1] and m.seq_pos.tolist() == [1, 0, 1, 0] and p is not None
    m, _ = R.remove_sequence(m, p, 1)  # no-op
    assert m.seq_slot.tolist() == [0, -1, 2, -1]
    m, _ = R.keep_sequence(meta, pool, 2)
    assert m.seq_slot.tolist() == [-1, -1, 2, -1] and R.slot_refcounts(m, 4).tolist() == [0, 0, 1, 0]


def test_rs25_checkpoint_advance_restore_is_bit_exact_for_conv_and_ssm():
    meta, pool = R.new_store(2), new_pool(3, np.nan)
    meta, pool, _ = run_batch(meta, pool, [0, 1], [0.25, -0.5])
    saved = R.checkpoint(meta, pool, 0)
    other = tuple(r.copy() for r in rows(meta, pool, 1))
    m, p = meta, pool
    for v in (0.5, 1.5, -2.0):
        m, p, _ = run_batch(m, p, [0, 1], [v, v])
    assert bits(rows(m, p, 0)[0]) != bits(saved.rows[0])  # the conv window moved on
    m, p = R.restore(m, p, 0, saved)
    assert m.seq_pos[0] == 1 and all(bits(a) == bits(b) for a, b in zip(rows(m, p, 0), saved.rows))
    assert bits(rows(m, p, 1)[1]) != bits(other[1])           # sequence 1 kept its own progress


def test_rs26_rollback_from_snapshots_equals_fresh_run_over_fewer_tokens():
    """RS-26 with RS-19: rolling back r tokens (conv window and SSM state) equals running only T - r."""
    values = [0.3, -0.6, 1.2, 0.05, -1.1]
    meta, pool = R.new_store(1), new_pool(2, np.nan)
    history = []
    for v in values:
        meta, pool, _ = run_batch(meta, pool, [0], [v])
        history.append(tuple(r.copy() for r in rows(meta, pool, 0)))
    snaps = tuple(np.stack([h[kind] for h in history[::-1]]) for kind in range(2))  # snapshot r = r back
    for r in range(len(values)):
        m, p = R.rollback(meta, pool, 0, r, snaps)
        fm, fp = R.new_store(1), new_pool(2, np.nan)
        for v in values[:len(values) - r]:
            fm, fp, _ = run_batch(fm, fp, [0], [v])
        assert m.seq_pos[0] == len(values) - r
        assert all(bits(a) == bits(b) for a, b in zip(rows(m, p, 0), rows(fm, fp, 0)))
    with pytest.raises(R.StoreError, match="only K = 5"):
        R.rollback(meta, pool, 0, 5, snaps)
    with pytest.raises(R.StoreError, match="exceeds"):
        R.rollback(meta, pool, 0, 6, tuple(np.concatenate([s, s]) for s in snaps))


def test_rs26_ssd_snapshots_feed_store_rollback():
    """RS-19 snapshots of ssd_chunked_scan restore the state of a shorter prefill bit for bit."""
    rng = np.random.default_rng(5)
    H, P, Nn, L = 2, 2, 3, 6
    args = (rng.standard_normal((L, H, P)), rng.random((L, H)), -rng.random(H), rng.standard_normal((L, 1, Nn)),
            rng.standard_normal((L, 1, Nn)))
    meta = R.assign_slots(R.new_store(1), (np.zeros((1, H, P, Nn)),), np.array([0]), L).meta
    full = R.ssd_chunked_scan(np.zeros((1, H, P, Nn)), *args, np.array([0, L]), chunk_size=4, num_snapshots=3)
    m, p = R.rollback(meta, (full.state,), 0, 2, (full.snapshots[0],))
    short = R.ssd_chunked_scan(np.zeros((1, H, P, Nn)), *[a[:L - 2] for a in args], np.array([0, L - 2]),
                               chunk_size=4)
    assert m.seq_pos[0] == L - 2
    assert np.allclose(p[0], short.state, rtol=1e-12, atol=1e-12)  # chunk boundaries differ: class R


class StoreMachine(RuleBasedStateMachine):
    """RS-21 … RS-27 under random operation sequences. The model keeps each sequence's expected rows,
    computed by running its tokens alone in a one-slot pool (RS-7: bitwise for the reference)."""

    MAX_SEQS, NUM_SLOTS = 5, 4
    checkpoints = Bundle("checkpoints")

    @initialize()
    def setup(self):
        self.meta, self.pool = R.new_store(self.MAX_SEQS), new_pool(self.NUM_SLOTS, np.nan)
        self.expected = {}  # seq -> (pos, rows)

    def _same_inputs_after_failure(self, call):
        before = (bits(self.meta.seq_slot), bits(self.meta.seq_pos), *map(bits, self.pool))
        with pytest.raises(R.StoreError):
            call()
        assert (bits(self.meta.seq_slot), bits(self.meta.seq_pos), *map(bits, self.pool)) == before

    @rule(seqs=st.lists(st.integers(0, MAX_SEQS - 1), min_size=1, max_size=3, unique=True),
          values=st.lists(st.floats(-2, 2, allow_nan=False), min_size=3, max_size=3))
    def advance(self, seqs, values):
        values = values[:len(seqs)]
        refs = R.slot_refcounts(self.meta, self.NUM_SLOTS)
        movers = [s for s in seqs if self.meta.seq_slot[s] < 0 or refs[self.meta.seq_slot[s]] > 1]
        try:
            self.meta, self.pool, _ = run_batch(self.meta, self.pool, seqs, values)
        except R.StoreError:
            assert len(movers) > int((refs == 0).sum())  # refused only when slots really run out
            self._same_inputs_after_failure(lambda: run_batch(self.meta, self.pool, seqs, values))
            return
        for s, v in zip(seqs, values):
            pos, start = self.expected.get(s, (0, None))
            alone = new_pool(1) if start is None else tuple(r[None].copy() for r in start)
            alone, _ = advance(alone, np.array([0]), [v])
            self.expected[s] = (pos + 1, tuple(r[0] for r in alone))

    @rule(src=st.integers(0, MAX_SEQS - 1), dst=st.integers(0, MAX_SEQS - 1))
    def copy(self, src, dst):
        if src not in self.expected:
            self._same_inputs_after_failure(lambda: R.copy_sequence(self.meta, self.pool, src, dst))
            return
        self.meta, self.pool = R.copy_sequence(self.meta, self.pool, src, dst)
        self.expected[dst] = self.expected[src]

    @rule(seq=st.integers(0, MAX_SEQS - 1))
    def remove(self, seq):
        self.meta, self.pool = R.remove_sequence(self.meta, self.pool, seq)
        self.expected.pop(seq, None)

    @rule(seq=st.integers(0, MAX_SEQS - 1))
    def keep(self, seq):
        self.meta, self.pool = R.keep_sequence(self.meta, self.pool, seq)
        self.expected = {s: e for s, e in self.expected.items() if s == seq}

    @rule()
    def poison_free_rows(self):
        """Stale bytes in free slots must never reach a fresh sequence (RS-5)."""
        free = R.slot_refcounts(self.meta, self.NUM_SLOTS) == 0
        pool = tuple(p.copy() for p in self.pool)
        for p in pool:
            p[free] = np.nan
        self.pool = pool

    @rule(target=checkpoints, seq=st.integers(0, MAX_SEQS - 1))
    def take_checkpoint(self, seq):
        if seq not in self.expected:
            self._same_inputs_after_failure(lambda: R.checkpoint(self.meta, self.pool, seq))
            return None
        return (R.checkpoint(self.meta, self.pool, seq), self.expected[seq])

    @rule(saved=checkpoints, seq=st.integers(0, MAX_SEQS - 1))
    def restore(self, saved, seq):
        if saved is None:
            return
        ckpt, expected = saved
        try:
            self.meta, self.pool = R.restore(self.meta, self.pool, seq, ckpt)
        except R.StoreError:
            self._same_inputs_after_failure(lambda: R.restore(self.meta, self.pool, seq, ckpt))
            assert (R.slot_refcounts(self.meta, self.NUM_SLOTS) == 0).sum() == 0
            return
        self.expected[seq] = expected

    @invariant()
    def rows_match_model(self):
        if not hasattr(self, "meta"):
            return
        refs = R.slot_refcounts(self.meta, self.NUM_SLOTS)
        assert refs.sum() == len(self.expected)
        for s in range(self.MAX_SEQS):
            if s not in self.expected:
                assert self.meta.seq_slot[s] == -1 and self.meta.seq_pos[s] == 0
                continue
            pos, want = self.expected[s]
            assert self.meta.seq_pos[s] == pos
            assert all(bits(a) == bits(b) for a, b in zip(rows(self.meta, self.pool, s), want))


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
