"""End to end: append RoPE'd keys, attend with scores, accumulate, evict, re-rotate (RO-13; EV-*, RO-*, PA-*).

The model of the cache is the list of pre-RoPE keys and values of the kept tokens. After any sequence of
appends and evictions, the paged cache must hold those keys RoPE'd at their compacted positions
0 .. L-1 (RO-6 + EV-14: a survivor moved back by delta*B is re-encoded delta*B positions earlier), and
paged attention over it must equal dense attention over the kept tokens at those positions (RoPE is
relative, so the new query at position L sees the same logits as in an uncompacted cache with the
evicted tokens removed). New tokens take compacted positions (spec/eviction.md, "Unspecified").
"""
from __future__ import annotations

import numpy as np
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvconform.reference import (EvictionConfig, accumulate_scores, empty_score_state, plan_eviction,
                                 ragged_paged_attention, rerotation_lut, rope, rotate_keys)

THETA = 10000.0
# Float64 all along; the cache drifts by a few roundings per re-rotation of angles below ~100 rad
# (identity_tol in test_rotation.py), far below this bound.
ATOL = 1e-9


def dense_attention(q, keys, values, first_pos):
    """Causal softmax attention written out: q [n, Hq, D] at positions first_pos.., keys/values [L, Hkv, D].

    Returns (out [n, Hq, D], mass per key [L] summed over heads and rows) as PA-21 defines the scores.
    """
    n, hq, d = q.shape
    group = hq // keys.shape[1]
    out = np.zeros_like(q)
    mass = np.zeros(keys.shape[0])
    for t in range(n):
        visible = first_pos + t + 1
        for h in range(hq):
            k, v = keys[:visible, h // group], values[:visible, h // group]
            logits = k @ q[t, h] / np.sqrt(d)
            p = np.exp(logits - logits.max())
            p /= p.sum()
            out[t, h] = p @ v
            mass[:visible] += p
    return out, mass


class EvictRotateAttend(RuleBasedStateMachine):
    @initialize(block=st.sampled_from([1, 2, 4]), start=st.integers(0, 2), recent=st.integers(0, 2),
                spare=st.integers(1, 2), aggregation=st.sampled_from(["sum", "norm_sum"]),
                hkv=st.integers(1, 2), group=st.integers(1, 2), head_dim=st.sampled_from([4, 6, 8]),
                partial_rotary=st.booleans(), layout=st.sampled_from(["half", "interleaved"]),
                seed=st.integers(0, 2 ** 32 - 1))
    def setup(self, block, start, recent, spare, aggregation, hkv, group, head_dim, partial_rotary, layout,
              seed):
        self.config = EvictionConfig(block, block * start, block * recent, block * (start + recent + spare),
                                     aggregation=aggregation)
        self.hkv, self.hq, self.d = hkv, hkv * group, head_dim
        self.rotary_dim = head_dim - 2 if partial_rotary else head_dim
        self.layout = layout
        self.rng = np.random.default_rng(seed)
        self.capacity = self.config.max_cache_size + 3 * block
        self.num_pages = self.capacity // block + 2
        # Unused slots hold NaN: attention must never read them (PA-24), rotation keeps them NaN.
        self.k_pages = np.full((self.num_pages, block, hkv, head_dim), np.nan)
        self.v_pages = np.full_like(self.k_pages, np.nan)
        self.free = list(self.rng.permutation(self.num_pages))
        self.table: list[int] = []
        self.raw_k = np.zeros((0, hkv, head_dim))
        self.raw_v = np.zeros((0, hkv, head_dim))
        self.scores = empty_score_state()
        self.evictions = 0

    def _rope(self, x, positions):
        return rope(x, positions, theta=THETA, layout=self.layout, rotary_dim=self.rotary_dim)

    @property
    def length(self) -> int:
        return self.raw_k.shape[0]

    @precondition(lambda self: self.length < self.capacity)
    @rule(data=st.data())
    def append_and_attend(self, data):
        """Write n new tokens at compacted positions, attend with their queries, register the scores."""
        B, L = self.config.block_size, self.length
        n = data.draw(st.integers(1, min(2 * B + 1, self.capacity - L)), label="new tokens")
        k_new = self.rng.standard_normal((n, self.hkv, self.d))
        v_new = self.rng.standard_normal((n, self.hkv, self.d))
        q_new = self.rng.standard_normal((n, self.hq, self.d))
        positions = np.arange(L, L + n)
        encoded = self._rope(k_new, positions)
        for i, pos in enumerate(positions):
            if pos // B == len(self.table):
                self.table.append(int(self.free.pop()))
            page, slot = self.table[pos // B], pos % B
            self.k_pages[page, slot] = encoded[i]
            self.v_pages[page, slot] = v_new[i]
        self.raw_k = np.concatenate([self.raw_k, k_new])
        self.raw_v = np.concatenate([self.raw_v, v_new])

        q = self._rope(q_new, positions)
        page_indices = np.full((1, self.num_pages), -1, np.int32)
        page_indices[0, :len(self.table)] = self.table
        result = ragged_paged_attention(q, self.k_pages, self.v_pages, np.array([L + n], np.int32),
                                        page_indices, np.array([0, n], np.int32), 1, return_scores=True)
        want_out, want_mass = dense_attention(q, self._rope(self.raw_k, np.arange(L + n)), self.raw_v, L)
        np.testing.assert_allclose(result.out, want_out, rtol=0, atol=ATOL)
        np.testing.assert_allclose(result.scores[0, :L + n], want_mass, rtol=0, atol=ATOL)
        self.scores = accumulate_scores(*self.scores, result.scores[0, :L + n])

    @rule()
    def evict_and_rotate(self):
        """Plan an eviction, free the evicted pages (poisoned again), re-rotate the blocks that moved."""
        B = self.config.block_size
        plan = plan_eviction(np.array(self.table, np.int32), *self.scores, self.config)
        for block in plan.evicted_blocks:
            page = self.table[block]
            self.k_pages[page] = np.nan
            self.v_pages[page] = np.nan
            self.free.append(page)
        lut = rerotation_lut(len(plan.evicted_blocks) + 1, self.rotary_dim, theta=THETA, block_size=B)
        self.k_pages = rotate_keys(self.k_pages, plan.rotated_block_indices, plan.rotation_deltas, lut,
                                   layout=self.layout, rotary_dim=self.rotary_dim)
        kept = np.ones(len(self.table), bool)
        kept[plan.evicted_blocks] = False
        token_kept = np.repeat(kept, B)[:self.length]
        self.raw_k, self.raw_v = self.raw_k[token_kept], self.raw_v[token_kept]
        self.table = [int(p) for p in plan.block_table]
        self.scores = (plan.acc, plan.counts)
        self.evictions += len(plan.evicted_blocks)
        assert self.length <= self.config.max_cache_size + B - 1  # EV-9

    @invariant()
    def cache_holds_keys_at_compacted_positions(self):
        if not hasattr(self, "config"):
            return
        B, L = self.config.block_size, self.length
        assert len(self.table) == -(-L // B) and len(self.scores[0]) == L
        if L == 0:
            return
        slots = np.arange(L)
        cached_k = self.k_pages[np.array(self.table)[slots // B], slots % B]
        cached_v = self.v_pages[np.array(self.table)[slots // B], slots % B]
        np.testing.assert_allclose(cached_k, self._rope(self.raw_k, slots), rtol=0, atol=ATOL)
        np.testing.assert_array_equal(cached_v, self.raw_v)  # V is never rotated (RO-1)


EvictRotateAttend.TestCase.settings = settings(max_examples=25, stateful_step_count=14, deadline=None)
TestEvictRotateAttend = EvictRotateAttend.TestCase
