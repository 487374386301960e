"""Conformance suite: the evict -> re-rotate -> attend invariant through a backend (spec/rotation.md RO-13).

One stateful machine spans three families: a sequence's keys are written RoPE-encoded at the positions
they had when written, the backend attends over the paged cache (returning scores), the backend
accumulates those scores and plans an eviction, the backend re-rotates the surviving blocks (rotate_keys
with re-rotation LUT rows, or shift_keys by -delta * block_size tokens), and the backend attends again.
Each call is compared with the reference on the same inputs; every attention is also compared with the
reference's attention over the kept pre-RoPE keys encoded directly at their compacted positions (the
invariant, tolerance NU-RO6). A backend that does not claim accumulate_scores / plan_eviction gets them
from the reference (host-side planning, as OpenVINO GenAI does): rotation and attention are what the
invariant is about.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvconform import reference
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import constraints
from kvconform.conformance.strategies import eviction as ev
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies import rerotated_attention as rra
from kvconform.conformance.strategies.values import floats
from kvconform.reference.eviction import EvictionConfig

SUITE_OPS = ('rotate_keys',)

I32 = np.int32
THETA = 10000.0
FLOATS = ("float32", "bfloat16", "float16")      # float64 caches: NU-RO4's float64 noise would dominate
CLAUSES = ("RO-13", "RO-6", "RO-7", "RO-9", "RO-10", "EV-4", "EV-5", "EV-12", "EV-13", "EV-14", "EV-15",
           "PA-7", "PA-10", "PA-21", "PA-24", "NU-RO2", "NU-RO3", "NU-RO6", "NU-PA1", "NU-PA2", "NU-EV1",
           "NU-EV3")


def _first(options, *claimed_sets):
    return next((o for o in options if all(s is None or o in s for s in claimed_sets)), None)


@conformance_test(op="rotate_keys", layer="stateful", clauses=CLAUSES)
def test_evict_rotate_attend_state_machine(kvc):
    """Append -> attend -> accumulate -> plan -> re-rotate -> attend on one sequence, every call through
    the backend and compared with the reference, and every attention equal to attention over the keys
    encoded directly at their compacted positions (RO-13, NU-RO6). Shapes: page size 1 or 2, head dim 4,
    at most 11 cached tokens; deltas reach 4+ blocks (LUT rows 0 .. 5)."""
    caps = kvc.description.get("capabilities", {})
    use_shift = "per_block_deltas" not in (caps.get("rotate_keys") or {}).get("features", ()) \
        and "shift_keys" in caps
    planned = "plan_eviction" in caps and "accumulate_scores" in caps
    att = kvc.claims("ragged_paged_attention", features=("return_scores",))
    plan_claims = kvc.claims("plan_eviction") if planned else None
    if planned and "float64" not in kvc.claims("accumulate_scores").dtypes:
        pytest.skip("unsupported: accumulate_scores without float64 state (EV-3)")
    rot_op = "shift_keys" if use_shift else "rotate_keys"
    rot = kvc.claims(rot_op, features=("per_block_deltas",) + (("negative_deltas",) if use_shift else ()))
    sizes = [b for b in (1, 2) if constraints.admits(att.limits.get("page_size"), b)
             and all(c is None or c.page_sizes is None or b in c.page_sizes for c in (att, rot, plan_claims))]
    dims = [d for d in (4, 8) if constraints.admits(att.limits.get("head_dim"), d)
            and constraints.admits(rot.limits.get("head_dim"), d)
            and all(c.head_dims is None or d in c.head_dims for c in (att, rot))]
    kv = _first(FLOATS, rot.kv_dtypes, att.kv_dtypes, att.dtypes)
    lut_dtype = None if use_shift else _first(("float32", "float64", "bfloat16"), rot.dtypes)
    layouts = [lay for lay in ("half", "interleaved") if lay in (rot.layouts or ())]
    if not sizes or not dims or kv is None or (lut_dtype is None and not use_shift) or not layouts:
        pytest.skip("unsupported: no page size, head dim, float cache dtype and layout claimed by both the "
                    "rotation op and ragged_paged_attention")
    hkv, group = next((p for p in pa._head_counts(att, pa.ATTENTION_VARIANTS[0]) if p[1] > 1),
                      pa._head_counts(att, pa.ATTENTION_VARIANTS[0])[0])
    hq, D = hkv * group, dims[0]

    class EvictRotateAttend(RuleBasedStateMachine):
        @initialize(seed=st.integers(0, 255), B=st.sampled_from(sizes), start=st.integers(0, 1),
                    recent=st.integers(0, 1), spare=st.integers(1, 2), layout=st.sampled_from(layouts),
                    aggregation=st.sampled_from(("sum", "norm_sum")))
        def start(self, seed, B, start, recent, spare, layout, aggregation):
            self.rng = np.random.default_rng(seed)
            self.layout = layout
            self.config = EvictionConfig(B, start * B, recent * B, (start + recent + spare) * B, aggregation)
            # room for 5 blocks over the budget: one plan can then move a block back by 4+ (LUT row >= 4)
            self.capacity = self.config.max_cache_size + 5 * B
            pages = -(-self.capacity // B) + 1
            # unused slots and freed pages hold NaN: attention must not read them (PA-24)
            self.k_pages = np.full((pages, B, hkv, D), np.nan, np.float32).astype(kv)
            self.v_pages = self.k_pages.copy()
            self.free = [int(p) for p in self.rng.permutation(pages)]
            self.table: list[int] = []
            self.raw_k = np.zeros((0, hkv, D))     # pre-RoPE keys of the kept tokens, float64
            self.key_eps = np.zeros(0)             # eps_j of NU-RO6
            self.acc, self.counts = reference.empty_score_state()

        @property
        def length(self) -> int:
            return self.raw_k.shape[0]

        def _rope(self, x, positions):
            return reference.rope(x, np.asarray(positions, I32), theta=THETA, layout=self.layout)

        def _attend(self, q_len: int):
            """The last q_len tokens' queries (compacted positions) attend through the backend: compared with
            the reference on the backend's cache, then with the directly encoded cache (RO-13)."""
            L, B = self.length, self.config.block_size
            q = self._rope(floats(self.rng, (q_len, hq, D), "float64"), np.arange(L - q_len, L)).astype(kv)
            table = np.full((1, self.k_pages.shape[0]), self.free[0] if self.free else 0, I32)
            table[0, :len(self.table)] = self.table
            inputs = dict(q=q, v_pages=self.v_pages, kv_lens=np.array([L], I32), page_indices=table,
                          cu_q_lens=np.array([0, q_len], I32), num_seqs=1, return_scores=True)
            case = Case("ragged_paged_attention", dict(inputs, k_pages=self.k_pages),
                        {"dtype": kv, "kv_dtype": kv, "page_size": B, "head_dim": D, "q_lens": [q_len],
                         "num_seqs": 1, "hq": hq, "hkv": hkv, "tokens": L})
            out, scores = kvc.check(case)
            direct = self._rope(self.raw_k, np.arange(L))
            exact_pages = np.full(self.k_pages.shape, np.nan)
            slots = np.arange(L)
            exact_pages[np.asarray(self.table)[slots // B], slots % B] = direct
            expected = reference.ragged_paged_attention(**dict(inputs, k_pages=exact_pages,
                                                               v_pages=self.v_pages.astype(np.float64)))
            kvc.expect(case, {"out": out}, {"out": expected.out},
                       what="attention over the kept keys encoded directly at their compacted positions (RO-13)",
                       checks=rra.checks(direct, self.key_eps, layout=self.layout, rotary_dim=D))
            return scores

        @precondition(lambda self: self.length < self.capacity)
        @rule(new=st.integers(1, 5))
        def append_and_attend(self, new):
            """Write `new` keys encoded at the next positions, attend with their queries, accumulate."""
            B, L = self.config.block_size, self.length
            new = min(new, self.capacity - L)
            k = floats(self.rng, (new, hkv, D), "float64")
            encoded = self._rope(k, np.arange(L, L + new)).astype(kv)    # one rounding (NU-RO6)
            v = floats(self.rng, (new, hkv, D), kv)
            for t in range(new):
                pos = L + t
                if pos // B == len(self.table):
                    self.table.append(self.free.pop())
                self.k_pages[self.table[pos // B], pos % B] = encoded[t]
                self.v_pages[self.table[pos // B], pos % B] = v[t]
            self.raw_k = np.concatenate([self.raw_k, k])
            self.key_eps = np.concatenate([self.key_eps, np.full(new, tolerance.u(kv))])
            scores = self._attend(new)
            step = Case("accumulate_scores", dict(acc=self.acc, counts=self.counts,
                                                  step_scores=np.asarray(scores)[0, :L + new]),
                        {"dtype": "float64", "tokens": L + new})
            state = kvc.check(step) if planned else kvc.reference(step)
            self.acc, self.counts = np.asarray(state.acc), np.asarray(state.counts)

        @precondition(lambda self: self.length >= self.config.max_cache_size + self.config.block_size)
        @rule()
        def evict_rotate_attend(self):
            """Plan (compared when well conditioned, NU-EV3), free the evicted pages, re-rotate the moved
            blocks through the backend (compared), re-query the last token (RO-13)."""
            c, B = self.config, self.config.block_size
            case = Case("plan_eviction", dict(block_table=np.array(self.table, I32), acc=self.acc,
                                              counts=self.counts, config=c),
                        {"dtype": "float64", "tokens": self.length, "page_size": B})
            if not planned:
                plan = kvc.reference(case)
            elif ev.well_conditioned(self.acc, self.counts, c):
                plan = kvc.check(case)
            else:
                plan = kvc.call(case)     # any valid plan must keep RO-13: the invariant still checks it
            evicted = np.asarray(plan.evicted_blocks)
            moved, deltas = np.asarray(plan.rotated_block_indices), np.asarray(plan.rotation_deltas)
            keep = np.ones(len(self.table), bool)
            keep[evicted] = False
            for b in evicted:
                self.k_pages[self.table[b]] = np.nan
                self.v_pages[self.table[b]] = np.nan
                self.free.append(self.table[b])
            if moved.size:
                params = {"kv_dtype": kv, "page_size": B, "head_dim": D, "layout": self.layout,
                          "tokens": int(moved.size) * B}
                if use_shift:
                    rot_case = Case("shift_keys", dict(k_pages=self.k_pages, rotated_block_indices=moved,
                                                       position_deltas=-deltas * B, theta=THETA,
                                                       layout=self.layout), dict(params, dtype=kv))
                else:
                    lut = reference.rerotation_lut(int(evicted.size) + 1, D, theta=THETA, block_size=B)
                    rot_case = Case("rotate_keys", dict(k_pages=self.k_pages, rotated_block_indices=moved,
                                                        rotation_deltas=deltas, trig_lut=lut.astype(lut_dtype),
                                                        layout=self.layout), dict(params, dtype=lut_dtype))
                self.k_pages = np.asarray(kvc.check(rot_case)).astype(kv)
            # eps of each kept key: one more re-rotation for the blocks that moved (delta > 0)
            shift = np.repeat(np.cumsum(~keep), B)[:self.length]
            tokens = np.repeat(keep, B)[:self.length]
            grow = np.array([rra.rotation_error(kv, lut_dtype=lut_dtype, shift=int(s) * B if use_shift else 0)
                             if s else 0.0 for s in shift])
            self.raw_k, self.key_eps = self.raw_k[tokens], (self.key_eps + grow)[tokens]
            self.table = [int(p) for p in plan.block_table]
            self.acc, self.counts = np.asarray(plan.acc), np.asarray(plan.counts)
            assert len(self.table) == -(-self.length // B) == -(-self.acc.shape[0] // B)
            self._attend(1)

    kvc.run_state_machine(EvictRotateAttend, budget=0.2, steps=6)
