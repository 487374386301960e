"""Conformance suite for spec/eviction.md: `accumulate_scores` and `plan_eviction`.

Layers: hand-worked golden cases (expected values from the arithmetic written here), Hypothesis
differential tests against the reference on well-conditioned decisions (NU-EV3), oracle-free properties
through the backend (evicting twice does nothing, scaling every score by a power of two changes no
decision), a stateful machine: accumulate -> plan -> re-rotate the moved blocks (spec/rotation.md), and
error inputs: every error EV-17 lists, broken alone, is rejected with the reference's ValueError or
TypeError naming the argument.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvconform import reference
from kvconform.conformance.harness import goldens
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import eviction as ev
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies.malformed import eviction as ev_bad
from kvconform.conformance.strategies.values import floats
from kvconform.reference.eviction import EvictionConfig, EvictionPlan, ScoreState

SUITE_OPS = ('accumulate_scores', 'plan_eviction')

I32, F64 = np.int32, np.float64


def _plan(evicted, table, rotated, deltas, acc, counts) -> EvictionPlan:
    return EvictionPlan(np.array(evicted, I32), np.array(table, I32), np.array(rotated, I32),
                        np.array(deltas, I32).reshape(-1, 1), np.array(acc, F64), np.array(counts, I32))


def _plan_case(table, acc, counts, config: EvictionConfig) -> Case:
    return Case("plan_eviction", dict(block_table=np.array(table, I32), acc=np.array(acc, F64),
                                      counts=np.array(counts, I32), config=config),
                {"dtype": "float64", "kv_dtype": "int32", "tokens": len(acc)})


# --- golden cases ----------------------------------------------------------------------------------

#: name -> (acc, counts, step_scores), (acc', counts'); every one requires dtype float64 (its step_scores)
ACCUMULATE_GOLDEN = {
    # acc' = [acc, 0 x k] + step; counts' = [counts + k, k, ..., 1]                      (EV-4, EV-5)
    "two_new": (([1.0, 2.0], [2, 1], [0.5, 0.25, 4.0]), ([1.5, 2.25, 4.0], [3, 2, 1])),
    "no_new": (([1.0, 2.0], [2, 1], [0.5, 0.25]), ([1.5, 2.25], [2, 1])),
    "prefill": (([], [], [0.125, 1.0, 3.0]), ([0.125, 1.0, 3.0], [3, 2, 1])),
}


def golden_accumulate(name):
    """ACCUMULATE_GOLDEN[name] as a case of float64 scores (EV-3 .. EV-5)."""
    (acc, counts, step), (acc2, counts2) = ACCUMULATE_GOLDEN[name]
    case = Case("accumulate_scores", dict(acc=np.array(acc, F64), counts=np.array(counts, I32),
                                          step_scores=np.array(step, F64)), {"dtype": "float64"})
    return case, ScoreState(np.array(acc2, F64), np.array(counts2, I32))


def golden_protected_areas():
    # B = 2, start 2, recent 2, max 6; L = 11: n_full = 5, a partial block 5 (EV-8).
    # k = 5 - 6/2 = 2 (EV-9); evictable [2/2, 5 - 2/2) = blocks 1, 2, 3.
    # "sum", counts 1: beta = [2, 5, 1, 3, 0.5, 0.125]; blocks 4 (recent) and 5 (partial) are smaller
    # but protected, so blocks 2 and 3 go (EV-10). Survivors 4, 5 move back by 2 blocks (EV-14).
    acc = [1, 1, 2, 3, 0.5, 0.5, 1, 2, 0.25, 0.25, 0.125]
    table = [13, 10, 15, 11, 14, 12]
    case = _plan_case(table, acc, [1] * 11, EvictionConfig(2, 2, 2, 6, "sum"))
    keep = acc[:4] + acc[8:]
    return case, _plan([2, 3], [13, 10, 14, 12], [14, 12], [2, 2], keep, [1] * 7)


def golden_ties():
    # B = 1, no start/recent, max 2; L = 4: k = 2 of blocks 0..3; beta = [3, 1, 1, 1]: a three-way tie
    # goes to the lower indices 1, 2 (EV-10). Block 3 moves back by 2 (EV-14).
    case = _plan_case([7, 4, 9, 2], [3, 1, 1, 1], [4, 3, 2, 1], EvictionConfig(1, 0, 0, 2, "sum"))
    return case, _plan([1, 2], [7, 2], [2], [2], [3, 1], [4, 1])


def golden_norm_sum():
    # B = 2, max 2; L = 4: k = 1. acc [3, 3, 2, 2], counts [6, 3, 1, 1]: tau = [0.5, 1, 2, 2] (EV-6),
    # beta = [1.5, 4]: block 0 goes; block 1 moves back by one block.
    case = _plan_case([5, 8], [3, 3, 2, 2], [6, 3, 1, 1], EvictionConfig(2, 0, 0, 2, "norm_sum"))
    return case, _plan([0], [8], [8], [1], [2, 2], [1, 1])


def golden_sum():
    # The same state under "sum": beta = [6, 4], block 1 goes; nothing moves (m = 0: shapes [0], [0, 1]).
    case = _plan_case([5, 8], [3, 3, 2, 2], [6, 3, 1, 1], EvictionConfig(2, 0, 0, 2, "sum"))
    return case, _plan([1], [5], [], [], [3, 3], [6, 3])


def golden_below_threshold():
    # B = 2, max 4; L = 5 <= max + B - 1: nothing happens (EV-9).
    case = _plan_case([3, 1, 0], [1, 2, 3, 4, 5], [5, 4, 3, 2, 1], EvictionConfig(2, 0, 0, 4, "sum"))
    return case, _plan([], [3, 1, 0], [], [], [1, 2, 3, 4, 5], [5, 4, 3, 2, 1])


def golden_protected_areas_16():
    # protected_areas at page size 16: start 16, recent 16, max 48 tokens; L = 5 * 16 + 11 = 91: five
    # full blocks and a partial one (EV-8); k = 5 - 3 = 2 (EV-9); evictable blocks 1, 2, 3. Every token of
    # block b holds beta_b / 16 ("sum", counts 1..16 ignored): beta = [2, 5, 1, 3, 0.5] and the partial
    # block 0.125 * 11 / 16; blocks 2 and 3 go (EV-10), blocks 4 and 5 move back by 2 (EV-14).
    B, beta = 16, [2.0, 5.0, 1.0, 3.0, 0.5, 0.125]
    acc = np.repeat(np.array(beta) / B, B)[:91]
    counts = np.tile(np.arange(B, 0, -1), 6)[:91]
    table = [40, 7, 1000, 3, 64, 65]
    case = _plan_case(table, acc, counts, EvictionConfig(B, B, B, 3 * B, "sum"))
    keep = np.concatenate([np.arange(0, 2 * B), np.arange(4 * B, 91)])
    return case, _plan([2, 3], [40, 7, 64, 65], [64, 65], [2, 2], acc[keep], counts[keep])


#: every golden requires exactly what its case uses (ev.USES: the score dtype, plan_eviction's block size;
#: tests/engine/test_golden_requirements.py checks)
GOLDENS = (
    *(Golden(name, "accumulate_scores", goldens.fixed(functools.partial(golden_accumulate, name)),
             ("EV-3", "EV-4", "EV-5")) for name in ACCUMULATE_GOLDEN),
    Golden("protected_areas", "plan_eviction", goldens.fixed(golden_protected_areas),
           ("EV-8", "EV-9", "EV-10", "EV-12", "EV-13", "EV-14", "EV-15")),
    Golden("protected_areas_16", "plan_eviction", goldens.fixed(golden_protected_areas_16),
           ("EV-7", "EV-8", "EV-9", "EV-10", "EV-12", "EV-13", "EV-14", "EV-15")),
    Golden("ties", "plan_eviction", goldens.fixed(golden_ties), ("EV-10", "EV-12", "EV-14")),
    Golden("norm_sum", "plan_eviction", goldens.fixed(golden_norm_sum), ("EV-6", "EV-7", "EV-10", "EV-14")),
    Golden("sum", "plan_eviction", goldens.fixed(golden_sum), ("EV-6", "EV-7", "EV-14")),
    Golden("below_threshold", "plan_eviction", goldens.fixed(golden_below_threshold), ("EV-9", "EV-13", "EV-14")),
)

test_accumulate_golden = goldens.suite_test("accumulate_scores", GOLDENS, ev.USES["accumulate_scores"])
test_plan_eviction_golden = goldens.suite_test("plan_eviction", GOLDENS, ev.USES["plan_eviction"])


# --- differential ----------------------------------------------------------------------------------

@conformance_test(op="accumulate_scores", layer="differential", clauses=("EV-3", "EV-4", "EV-5", "EV-16", "NU-4", "NU-EV1", "NU-EV2"))
def test_accumulate_differential(kvc):
    kvc.for_all(ev.accumulate_cases(kvc.claims()), kvc.check)


@conformance_test(op="plan_eviction", layer="differential",
                  clauses=("EV-1", "EV-6", "EV-7", "EV-8", "EV-9", "EV-10", "EV-12", "EV-13", "EV-14",
                           "EV-15", "EV-16", "NU-4", "NU-EV1", "NU-EV3"))
def test_plan_eviction_differential(kvc):
    kvc.for_all(ev.plan_cases(kvc.claims()), kvc.check)


@conformance_test(op="accumulate_scores", layer="differential", clauses=("EV-3", "EV-4", "EV-5", "EV-16", "NU-4", "NU-EV1", "NU-EV2"))
@pytest.mark.parametrize("reach", ev.REACH)
def test_accumulate_reach(kvc, reach):
    """The reach columns (spec/eviction.md "Reach"): thousands of tokens past one program's tile (long);
    accumulators from float64 subnormals to 2^1000, narrow step scores at their subnormals and largest
    value, exact zeros, counts reaching INT32_MAX (range). Still one exact float64 addition (NU-EV2)."""
    kvc.for_all(ev.accumulate_cases(kvc.claims(), reach), kvc.check, budget=ev.BUDGETS[reach])


@conformance_test(op="plan_eviction", layer="differential",
                  clauses=("EV-1", "EV-6", "EV-7", "EV-8", "EV-9", "EV-10", "EV-12", "EV-13", "EV-14",
                           "EV-15", "EV-16", "NU-4", "NU-EV1", "NU-EV3"))
@pytest.mark.parametrize("reach", ev.REACH)
def test_plan_eviction_reach(kvc, reach):
    """The reach columns: a thousand blocks, hundreds evictable and evicted, past one selection and one
    scan tile (long); block scores over 2^-90 .. 2^90 with exact zeros and ties, counts near INT32_MAX,
    physical pages past 2^24 up to INT32_MAX (range). Well conditioned by construction (NU-EV3)."""
    kvc.for_all(ev.reach_plan_cases(kvc.claims(), reach), kvc.check, budget=ev.BUDGETS[reach])


# --- oracle-free properties ------------------------------------------------------------------------

def _applied(case: Case, plan) -> Case:
    return Case(case.op, dict(case.inputs, block_table=np.asarray(plan.block_table),
                              acc=np.asarray(plan.acc), counts=np.asarray(plan.counts)),
                dict(case.params, tokens=int(np.asarray(plan.acc).shape[0]), second=True), case.seed)


@conformance_test(op="plan_eviction", layer="property", clauses=("EV-11",))
def test_evicting_twice_does_nothing(kvc):
    """After a plan is applied, planning again evicts nothing and moves nothing (EV-11)."""
    claims = kvc.claims()

    def body(case):
        again = _applied(case, kvc.call(case))
        x = again.inputs
        nothing = _plan([], x["block_table"], [], [], x["acc"], x["counts"])
        kvc.expect(again, kvc.call(again), nothing, what="empty plan")
    kvc.for_all(ev.plan_cases(claims), body, budget=0.5)


@conformance_test(op="plan_eviction", layer="property", clauses=("EV-6", "EV-10"))
def test_scaling_scores_changes_nothing(kvc):
    """Multiplying every acc by a power of two scales every tau and beta exactly, so no decision
    changes (EV-6, EV-10); the returned acc is the scaled copy."""
    claims = kvc.claims()

    def body(drawn):
        case, power = drawn
        plan = kvc.call(case)
        factor = 2.0 ** power
        scaled = Case(case.op, dict(case.inputs, acc=case.inputs["acc"] * factor),
                      dict(case.params, scale=factor), case.seed)
        expected = plan._replace(acc=np.asarray(plan.acc) * factor)
        kvc.expect(scaled, kvc.call(scaled), expected, what="unscaled plan (acc scaled)")
    kvc.for_all(st.tuples(ev.plan_cases(claims), st.sampled_from((5, -3, 20))), body, budget=0.5)


# --- stateful: accumulate -> plan -> re-rotate ----------------------------------------------------

@conformance_test(op="plan_eviction", layer="stateful",
                  clauses=("EV-4", "EV-5", "EV-9", "EV-14", "EV-15", "RO-6", "RO-9"))
def test_accumulate_evict_rotate_state_machine(kvc):
    """One sequence grows step by step; each step's scores are accumulated by the backend, eviction is
    planned by the backend when the cache is over budget, and the moved blocks are re-rotated by the
    backend with a re-rotation LUT (EV-14, RO-6). Each call is compared with the reference on the same
    inputs; the backend's own results are carried forward. Plans are compared only when well
    conditioned (NU-EV3)."""
    acc_claims = kvc.claims("accumulate_scores")
    plan_claims = kvc.claims("plan_eviction")
    rot_claims = kvc.claims("rotate_keys", features=("per_block_deltas",))
    sizes = [b for b in (2, 1, 4) if (plan_claims.page_sizes is None or b in plan_claims.page_sizes)
             and (rot_claims.page_sizes is None or b in rot_claims.page_sizes)]
    kv = next((d for d in ("float32", "bfloat16", "float16") if d in rot_claims.kv_dtypes), None)
    lut_dtype = next((d for d in ("float32", "float64", "bfloat16") if d in rot_claims.dtypes), None)
    if not sizes or kv is None or lut_dtype is None or "float64" not in acc_claims.dtypes:
        pytest.skip("unsupported: no block size / dtypes claimed by all of accumulate, plan and rotate")
    head_dim, theta = 4, 10000.0

    class AccumulateEvictRotate(RuleBasedStateMachine):
        @initialize(seed=st.integers(0, 2**32 - 1), B=st.sampled_from(sizes), budget=st.integers(1, 3),
                    start=st.integers(0, 1), recent=st.integers(0, 1),
                    aggregation=st.sampled_from(("sum", "norm_sum")))
        def start(self, seed, B, budget, start, recent, aggregation):
            self.rng = np.random.default_rng(seed)
            self.config = EvictionConfig(B, start * B, recent * B, (start + recent + budget) * B, aggregation)
            self.pages = np.full((start + recent + budget + 3, B, 1, head_dim), np.nan, np.float32).astype(kv)
            self.free = list(range(self.pages.shape[0]))
            self.table: list[int] = []
            self.acc, self.counts = reference.empty_score_state()

        @rule(new=st.integers(0, 3))
        def step(self, new):
            B = self.config.block_size
            L = self.acc.shape[0]
            need = -(-(L + new) // B) - len(self.table)
            if need > len(self.free):
                return
            for _ in range(need):
                self.table.append(self.free.pop(int(self.rng.integers(0, len(self.free)))))
            for t in range(L, L + new):
                self.pages[self.table[t // B], t % B] = floats(self.rng, (1, head_dim), kv)
            case = Case("accumulate_scores", dict(acc=self.acc, counts=self.counts,
                                                  step_scores=np.abs(floats(self.rng, (L + new,), "float64"))),
                        {"dtype": "float64", "tokens": L + new})
            got = kvc.check(case)
            self.acc, self.counts = np.asarray(got.acc), np.asarray(got.counts)

        @precondition(lambda self: hasattr(self, "config")
                      and self.acc.shape[0] >= self.config.max_cache_size + self.config.block_size)
        @rule()
        def evict(self):
            c = self.config
            if not ev.well_conditioned(self.acc, self.counts, c):
                return   # ill-conditioned ranking: not compared (NU-EV3)
            case = Case("plan_eviction", dict(block_table=np.array(self.table, I32), acc=self.acc,
                                              counts=self.counts, config=c),
                        {"dtype": "float64", "tokens": int(self.acc.shape[0])})
            plan = kvc.check(case)
            evicted = np.asarray(plan.evicted_blocks)
            moved = np.asarray(plan.rotated_block_indices)
            if moved.size:
                lut = reference.rerotation_lut(int(evicted.size) + 1, head_dim, theta=theta,
                                               block_size=c.block_size).astype(lut_dtype)
                rot = Case("rotate_keys", dict(k_pages=self.pages, rotated_block_indices=moved,
                                               rotation_deltas=np.asarray(plan.rotation_deltas), trig_lut=lut),
                           {"dtype": lut_dtype, "kv_dtype": kv, "tokens": int(moved.size) * c.block_size})
                self.pages = np.asarray(kvc.check(rot)).astype(kv)
            self.free += [self.table[b] for b in evicted]
            self.table = [int(p) for p in plan.block_table]
            self.acc, self.counts = np.asarray(plan.acc), np.asarray(plan.counts)

        @invariant()
        def table_matches_length(self):
            if hasattr(self, "config"):
                assert len(self.table) == -(-self.acc.shape[0] // self.config.block_size)
                assert len(set(self.table) | set(self.free)) == self.pages.shape[0]

    kvc.run_state_machine(AccumulateEvictRotate, budget=0.4)


# --- errors: malformed input is rejected (EV-17) ---------------------------------------------------

@conformance_test(op="accumulate_scores", layer="errors", clauses=malformed.clauses_of(ev_bad.ACCUMULATE_RULES))
@pytest.mark.parametrize("rule", ev_bad.ACCUMULATE_RULES, ids=str)
def test_accumulate_rejects(kvc, rule):
    """One error of EV-17 for the accumulator (state shape, finiteness, counts >= 1, short step, int32
    overflow): the backend must raise the reference's ValueError/TypeError naming the argument."""
    malformed.check_rejects(kvc, ev_bad, "accumulate_scores", rule)


@conformance_test(op="plan_eviction", layer="errors", clauses=malformed.clauses_of(ev_bad.PLAN_RULES))
@pytest.mark.parametrize("rule", ev_bad.PLAN_RULES, ids=str)
def test_plan_eviction_rejects(kvc, rule):
    """One error of EV-17 for planning (config type, block table length, negative or duplicate pages,
    state): rejected, naming the argument."""
    malformed.check_rejects(kvc, ev_bad, "plan_eviction", rule)
