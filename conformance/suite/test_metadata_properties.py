"""Oracle-free properties of spec/metadata.md, run through the backend alone (padding of a block table does
not matter, CSR <-> block table round trips, arena garbage and placement do not matter, arena layout
invariants) and the page-table manager's state machine (MD-11 .. MD-22). The golden, differential,
reach and errors layers are in test_metadata.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvconform import reference
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import metadata as md
from kvconform.reference.metadata import CsrPageTable
from kvconform.conformance.suite.test_metadata import I32, MANAGER_CLAUSES

SUITE_OPS = ('arena_layout', 'block_table_to_csr', 'csr_to_block_table', 'page_table_step',
             'ragged_paged_attention_csr', 'slot_mapping_from_arena')


# --- oracle-free properties ------------------------------------------------------------------------

@conformance_test(op="block_table_to_csr", layer="property", clauses=("MD-6",))
def test_block_table_padding_does_not_matter(kvc):
    """Padding entries and rows past num_seqs hold -1 (an invalid page): same CSR as the clean case."""
    def body(case):
        kvc.expect(case.with_poison(), kvc.call(case.with_poison()), kvc.call(case), what="the clean case")
    kvc.for_all(md.block_table_to_csr_cases(kvc.claims()), body, budget=0.5)


#: poison in the slots no CSR-listed page holds, padding rows and unlisted pages: the columns of base-sized
#: calls with the window, the quantized cache and the most KV heads (the block-table op's poison columns,
#: test_paged_attention.py POISON_VARIANTS, for what MD-23 shares with it)
CSR_POISON_VARIANTS = tuple(v for v in md.csr_attention_variants()
                            if v.name in ("base", "sliding_window", "combined", "many_kv_heads"))


@conformance_test(op="ragged_paged_attention_csr", layer="property", clauses=("MD-23", "PA-24", "PA-25", "NU-11"))
@pytest.mark.parametrize("variant", CSR_POISON_VARIANTS, ids=str)
def test_attention_csr_poison(kvc, variant):
    """NaN (or the format's poison) in every location a CSR call must not read changes no output row."""
    claims = kvc.claims(features=variant.features)
    kvc.for_all(md.attention_csr_cases(claims, variant), kvc.check_poison, budget=0.4)


@conformance_test(op="csr_to_block_table", layer="property", clauses=("MD-5",))
def test_csr_block_table_round_trip(kvc):
    """CSR -> block table (backend) -> CSR (backend) is the identity (MD-5)."""
    claims = kvc.claims()
    back_claims = kvc.claims("block_table_to_csr")
    kvc.claims("csr_to_block_table")

    def body(case):
        x = case.inputs
        bt = kvc.call(case)
        S = int(x["kv_last_page_len"].shape[0])
        again = Case("block_table_to_csr", dict(page_indices=np.asarray(bt.page_indices), kv_lens=np.asarray(bt.kv_lens),
                                                num_seqs=S, page_size=x["page_size"]), dict(case.params, round_trip=True))
        kvc.expect(again, kvc.call(again), CsrPageTable(x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"]),
                   what="the CSR table it came from")
    del back_claims
    kvc.for_all(md.csr_to_block_table_cases(claims), body, budget=0.5)


@conformance_test(op="slot_mapping_from_arena", layer="property", clauses=("MD-9", "MD-10"))
def test_arena_garbage_and_placement_do_not_matter(kvc):
    """The arena's other bytes set to 0xFF, and the same arrays repacked at another alignment and start:
    both give the backend's slot mapping of separate arrays (append_slot_mapping, MD-7)."""
    claims = kvc.claims()
    kvc.claims("append_slot_mapping")
    kvc.claims("slot_mapping_from_arena")

    def body(drawn):
        case, A, start = drawn
        x = case.inputs
        S = x["num_seqs"]
        nnz_end = int(x["offsets"][1]) + 4 * S
        indptr = x["arena"][int(x["offsets"][1]):nnz_end + 4].view(I32)
        lengths = [S + 1, S + 1, int(indptr[-1]), S]
        arrays = [v.copy() for v in reference.arena_views(x["arena"], x["offsets"], lengths)]
        plain = Case("append_slot_mapping", dict(qo_indptr=arrays[0], kv_indptr=arrays[1], kv_indices=arrays[2],
                                                 kv_last_page_len=arrays[3], page_size=x["page_size"]),
                     dict(case.params, separate=True))
        want = kvc.call(plain)
        kvc.expect(case.with_poison(), kvc.call(case.with_poison()), want, what="separate arrays")
        arena, offsets = reference.pack_arena(arrays, A, start=start, fill=0xFF)
        moved = Case(case.op, dict(x, arena=arena, offsets=offsets), dict(case.params, alignment=A, start=start))
        kvc.expect(moved, kvc.call(moved), want, what="separate arrays")
    kvc.for_all(st.tuples(md.slot_mapping_from_arena_cases(claims), st.sampled_from((4, 8, 32, 256)),
                          st.integers(4, 300)), body, budget=0.5)


@conformance_test(op="arena_layout", layer="property", clauses=("MD-8", "MD-9"))
def test_arena_layout_invariants(kvc):
    """Offsets aligned, in order, each at or after the previous end and less than one alignment past it;
    copy_bytes is the last end; total_bytes the smallest aligned size holding it."""
    def body(case):
        x = case.inputs
        lay = kvc.call(case)
        off, n, A = np.asarray(lay.offsets, np.int64), np.asarray(x["nbytes"], np.int64), x["alignment"]
        prev = [x["start"]] + list(off[:-1] + n[:-1])
        ok = off.shape == n.shape and all(o % A == 0 and p <= o < p + A for o, p in zip(off, prev))
        end = int(off[-1] + n[-1]) if n.size else 0
        ok = ok and int(lay.copy_bytes) == end and int(lay.total_bytes) % A == 0 \
            and end <= int(lay.total_bytes) < end + A
        if not ok:
            kvc.expect(case, lay, reference.arena_layout(**x), what="the MD-8/MD-9 invariants (violated)")
    kvc.for_all(md.arena_layout_cases(kvc.claims()), body, budget=0.5)


# --- stateful: the manager ------------------------------------------------------------------------

@conformance_test(op="page_table_step", layer="stateful", clauses=MANAGER_CLAUSES + ("MD-7", "MD-22"))
def test_page_table_manager_state_machine(kvc):
    """The backend's manager is driven through random valid commands; every step's state and metadata
    is compared exactly with the reference on the same input, and the backend's own state is carried
    forward. Invalid commands (a pop past the length, a fork past a windowed parent's sink, MD-21) must
    be rejected. Each step's append slots also equal MD-7's slot mapping of the new CSR table."""
    claims = kvc.claims()
    sizes = [P for P in (2, 1, 3) if claims.page_sizes is None or P in claims.page_sizes]
    if not sizes:
        pytest.skip("unsupported: no page size 1, 2 or 3 claimed")
    low = md.shortest(claims)       # a claimed seq_len minimum (MD-24): 0 without it

    class Manager(RuleBasedStateMachine):
        @initialize(P=st.sampled_from(sizes))
        def start(self, P):
            self.P, self.state, self.steps = P, reference.empty_page_table(md.NUM_PAGES), 0
            if low:     # MD-24: no "add" under the claim; the reference adds the first sequence with tokens
                for cmd in (dict(command="add", seq=0), dict(command="append", seq=0, n=low + P)):
                    self.state = md.state_of(md.step(self.state, P, cmd))

        @rule(data=st.data())
        def command(self, data):
            cmd = data.draw(md.commands(self.state, self.P, low=low))
            expected = md.step(self.state, self.P, cmd)
            if expected is None or not md.admitted_step(self.state, expected, low):
                return                  # the pool is full, or a sequence left below a claimed seq_len (MD-24)
            case = md.step_case(self.state, self.P, cmd, step=self.steps)
            out = kvc.check(case)
            self.steps += 1
            if cmd["command"] == "append" and cmd["n"] and not np.asarray(out.windows)[list(out.seq_ids).index(cmd["seq"])]:
                i = list(out.seq_ids).index(cmd["seq"])
                q = np.zeros(len(out.seq_ids) + 1, I32)
                q[i + 1:] = cmd["n"]
                slots = reference.append_slot_mapping(q, out.kv_indptr, out.kv_indices, out.kv_last_page_len, self.P)
                kvc.expect(case, out, out._replace(slots=slots), what="MD-7's slot mapping of the new table")
            self.state = md.state_of(out)

        @precondition(lambda self: hasattr(self, "state") and len(self.state["seq_ids"]))
        @rule(data=st.data())
        def pop_too_many(self, data):
            i = data.draw(st.integers(0, len(self.state["seq_ids"]) - 1))
            seq, n = int(self.state["seq_ids"][i]), int(self.state["seq_lens"][i]) + 1
            case = md.step_case(self.state, self.P, dict(command="pop", seq=seq, n=n), invalid=True)
            kvc.expect_rejected(case, argument="n", clause="MD-17", rule="pop n <= the sequence's length")

        @precondition(lambda self: hasattr(self, "state") and any(
            w and n > s for w, n, s in zip(self.state["windows"], self.state["seq_lens"], self.state["sinks"])))
        @rule(data=st.data())
        def fork_past_sink(self, data):
            ids = [int(s) for s, w, n, k in zip(self.state["seq_ids"], self.state["windows"], self.state["seq_lens"],
                                              self.state["sinks"]) if w and n > k]
            parent = data.draw(st.sampled_from(ids))
            i = list(self.state["seq_ids"]).index(parent)
            pos = data.draw(st.integers(int(self.state["sinks"][i]) + 1, int(self.state["seq_lens"][i])))
            child = max(int(s) for s in self.state["seq_ids"]) + 1
            case = md.step_case(self.state, self.P, dict(command="fork", seq=child, parent=parent, pos=pos),
                                invalid=True)
            kvc.expect_rejected(case, argument="pos", clause="MD-21",
                                rule="a windowed sequence forks only inside its sink")

        @invariant()
        def counts_match(self):
            if hasattr(self, "state"):
                x = self.state
                counted = np.bincount(x["kv_indices"], minlength=md.NUM_PAGES) if x["kv_indices"].size else 0
                assert np.array_equal(counted + np.zeros(md.NUM_PAGES, np.int64), x["ref_counts"])

    kvc.run_state_machine(Manager, budget=0.5, steps=16)


