"""Oracle-free properties of spec/paged_attention.md, run through the backend alone: page placement
invariance (PA-10), batch independence (PA-5, PA-11), and the stateful machine that appends tokens with
write_kv and attends over them with ragged_paged_attention (PA-43, PA-45, PA-7, PA-10). The golden,
differential, poison and errors layers of the same ops are in test_paged_attention.py."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import constraints
from kvconform.conformance.strategies import paged_attention as pa

SUITE_OPS = ('ragged_paged_attention', 'write_kv')


# --- oracle-free properties ------------------------------------------------------------------------

def _permute_pages(case: Case, perm: list[int]) -> Case:
    """Move physical page p to perm[p] and rewrite the table: the logical cache is unchanged."""
    x = dict(case.inputs)
    inverse = np.argsort(perm)
    x["k_pages"] = case.inputs["k_pages"][inverse]
    x["v_pages"] = case.inputs["v_pages"][inverse]
    x["page_indices"] = np.asarray(perm, dtype=np.int32)[case.inputs["page_indices"]]
    return Case(case.op, x, dict(case.params, permuted=True), case.seed)


@st.composite
def _with_permutation(draw, claims):
    case = draw(pa.attention_cases(claims, pa.ATTENTION_VARIANTS[0]))
    perm = draw(st.permutations(range(case.inputs["k_pages"].shape[0])))
    return case, list(perm)


@conformance_test(op="ragged_paged_attention", layer="property", clauses=("PA-10",))
def test_attention_page_placement_invariance(kvc):
    """Where pages sit in the pool does not change the result (PA-10): compare two backend runs."""
    claims = kvc.claims()

    def body(drawn):
        case, perm = drawn
        first = kvc.call(case)
        moved = _permute_pages(case, perm)
        kvc.expect(moved, kvc.call(moved), first, what="run before the pages were moved")
    kvc.for_all(_with_permutation(claims), body, budget=0.5)


def _single_sequence(case: Case, i: int) -> Case:
    x = dict(case.inputs)
    cu = case.inputs["cu_q_lens"]
    lo, hi = int(cu[i]), int(cu[i + 1])
    x["q"] = case.inputs["q"][lo:hi]
    x["kv_lens"] = case.inputs["kv_lens"][i:i + 1]
    x["page_indices"] = case.inputs["page_indices"][i:i + 1]
    x["cu_q_lens"] = np.array([0, hi - lo], np.int32)
    x["num_seqs"] = 1
    return Case(case.op, x, dict(case.params, alone=i), case.seed)


@conformance_test(op="ragged_paged_attention", layer="property", clauses=("PA-5", "PA-11"))
def test_attention_batch_independence(kvc):
    """A sequence's rows do not depend on the other sequences of the batch (PA-5, PA-11)."""
    claims = kvc.claims()

    def body(case):
        batch = kvc.call(case)
        cu = case.inputs["cu_q_lens"]
        for i in range(int(case.inputs["num_seqs"])):
            if cu[i + 1] > cu[i]:
                alone = _single_sequence(case, i)
                kvc.expect(alone, batch[cu[i]:cu[i + 1]], kvc.call(alone),
                           what=f"rows of sequence {i} computed alone")
    kvc.for_all(pa.attention_cases(claims, pa.ATTENTION_VARIANTS[0]), body, budget=0.5)


# --- stateful: append tokens with write_kv, attend with ragged_paged_attention ----------------------

@conformance_test(op="write_kv", layer="stateful", clauses=("PA-43", "PA-45", "PA-7", "PA-10"))
def test_append_and_attend_state_machine(kvc):
    """Sequences grow by write_kv on the backend's own cache and are attended from it; the reference
    model does the same on its cache. Pools stay bitwise equal, outputs within tolerance."""
    write_claims = kvc.claims("write_kv")
    att_claims = kvc.claims("ragged_paged_attention")
    both = [p for p in constraints.allowed(write_claims, "page_size", write_claims.page_sizes or (2,))
            if constraints.admits(att_claims.limits.get("page_size"), p)
            and (att_claims.page_sizes is None or p in att_claims.page_sizes)]
    dims = [d for d in constraints.allowed(write_claims, "head_dim", write_claims.head_dims or (4,))
            if constraints.admits(att_claims.limits.get("head_dim"), d)
            and (att_claims.head_dims is None or d in att_claims.head_dims)]
    if not both or not dims:
        pytest.skip("unsupported: no page size and head dim claimed by both write_kv and ragged_paged_attention")
    page_size, head_dim = both[0], dims[0]
    dtype = next((d for d in ("float32", "float16", "bfloat16") if d in write_claims.kv_dtypes
                  and d in write_claims.dtypes and d in att_claims.dtypes and d in att_claims.kv_dtypes), None)
    if dtype is None:
        pytest.skip("unsupported: no float KV dtype claimed by both write_kv and ragged_paged_attention")
    heads = [p for p in pa._head_counts(att_claims, pa.ATTENTION_VARIANTS[0])
             if constraints.admits(write_claims.limits.get("num_kv_heads"), p[0])]
    if not heads:
        pytest.skip("unsupported: no KV head count claimed by both write_kv and ragged_paged_attention")
    hkv, group = next((p for p in heads if p[1] > 1), heads[0])
    hq = hkv * group
    steps = constraints.allowed(att_claims, "q_len", (1, 2, 3), "query rows per sequence")
    steps = tuple(n for n in steps if n > 0) or pytest.skip("unsupported: no positive q_len claimed")
    from kvconform.conformance.strategies.values import floats
    num_pages = constraints.upper(write_claims, "max_pages", constraints.upper(att_claims, "max_pages", 6))
    max_pages = min(3, num_pages)

    class AppendAttend(RuleBasedStateMachine):
        @initialize(seed=st.integers(0, 2**32 - 1))
        def start(self, seed):
            self.rng = np.random.default_rng(seed)
            pool = np.full((num_pages, page_size, hkv, head_dim), np.nan, dtype=np.float32).astype(dtype)
            self.backend_pools = (pool, pool.copy())
            self.model_pools = (pool.copy(), pool.copy())
            self.free = list(range(num_pages))
            self.seqs: list[dict] = []

        @rule(n=st.sampled_from(steps))
        def append(self, n):
            if len(self.seqs) < 2 and self.rng.random() < 0.5 or not self.seqs:
                self.seqs.append({"pages": [], "len": 0})
            seq = self.seqs[int(self.rng.integers(0, len(self.seqs)))]
            need = -(-(seq["len"] + n) // page_size)
            if need > max_pages or need - len(seq["pages"]) > len(self.free):
                return
            while len(seq["pages"]) < need:
                seq["pages"].append(self.free.pop(int(self.rng.integers(0, len(self.free)))))
            pos = range(seq["len"], seq["len"] + n)
            slots = np.array([seq["pages"][p // page_size] * page_size + p % page_size for p in pos], np.int32)
            k = floats(self.rng, (n, hkv, head_dim), dtype)
            v = floats(self.rng, (n, hkv, head_dim), dtype)
            case = Case("write_kv", dict(k_pages=self.backend_pools[0], v_pages=self.backend_pools[1], k=k,
                                         v=v, slot_mapping=slots), {"dtype": dtype, "kv_dtype": dtype})
            got = kvc.call(case)
            model = kvc.reference(Case("write_kv", dict(case.inputs, k_pages=self.model_pools[0],
                                                        v_pages=self.model_pools[1])))
            kvc.expect(case, got, model, what="reference model of the cache")
            self.backend_pools, self.model_pools = (got[0], got[1]), (model[0], model[1])
            seq["len"] += n
            seq["new"] = n

        @precondition(lambda self: any(s.get("new") for s in getattr(self, "seqs", [])))
        @rule()
        def attend(self):
            live = [s for s in self.seqs if s.get("new")]
            q_lens = [s["new"] for s in live]
            cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
            table = np.zeros((len(live), max_pages), np.int32)
            for i, s in enumerate(live):
                table[i, :len(s["pages"])] = s["pages"]
            inputs = dict(q=floats(self.rng, (int(cu[-1]), hq, head_dim), dtype),
                          kv_lens=np.array([s["len"] for s in live], np.int32), page_indices=table,
                          cu_q_lens=cu, num_seqs=len(live))
            case = Case("ragged_paged_attention", dict(inputs, k_pages=self.backend_pools[0],
                                                       v_pages=self.backend_pools[1]),
                        {"dtype": dtype, "kv_dtype": dtype})
            expected = kvc.reference(Case(case.op, dict(inputs, k_pages=self.model_pools[0],
                                                        v_pages=self.model_pools[1])))
            kvc.expect(case, kvc.call(case), expected, what="reference model of the cache")
            for s in live:
                s["new"] = 0

        @invariant()
        def pages_disjoint(self):
            used = [p for s in getattr(self, "seqs", []) for p in s["pages"]]
            assert len(used) == len(set(used))

    kvc.run_state_machine(AppendAttend, budget=0.5)


