"""Conformance suite for the recurrent-state store (spec/recurrent.md RS-21 … RS-27): the backend op
`recurrent_store_step` (assign, copy, remove, keep, checkpoint, restore, rollback on arrays).

Layers: a hand-worked golden script (copy on write, restore, rollback, keep, fresh rows over NaN), one
golden per step; differential tests against the reference, one per command the drawn case ends with; properties: the
don't-care locations poisoned (NaN in free rows must never surface: a fresh sequence's rows are set to
exact zeros, RS-5/RS-22; unused snapshots are never read, RS-26) and call history (NU-12); a state machine
that drives the backend's own state through random commands, compares every step exactly, fills free rows
with NaN between steps and checks that refused commands (no free slot, rollback past the position) raise
ValueError (StoreError) and change nothing; error inputs (RS-27), malformed and refused calls each alone.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvconform.conformance.harness import goldens
from kvconform.conformance.harness.goldens import Golden
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.strategies.recurrent import reach
from kvconform.conformance.strategies.recurrent import store as rstore
from kvconform.conformance.strategies.malformed import recurrent_store as rstore_bad
from kvconform.conformance.strategies.values import reseeded
from kvconform.reference.recurrent import StoreStep

SUITE_OPS = ('recurrent_store_step',)

OP = rstore.OP
F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64
ALL = ("RS-21", "RS-22", "RS-23", "RS-24", "RS-25", "RS-26", "RS-27")


# --- golden ----------------------------------------------------------------------------------------
# max_seqs 3, num_slots 3; conv rows [1, 2] float32, SSM rows [1, 1] float64. Each entry: the command, the
# new (seq_slot, seq_pos), the rows written {slot: (conv, ssm)} and any other fields worked out by hand.

def _script():
    n = np.nan
    conv = np.array([[[1, 2]], [[3, 4]], [[n, n]]], F32)
    ssm = np.array([[[10]], [[20]], [[n]]], F64)
    snaps = (np.array([[[9, 9]], [[8, 8]], [[-1, -2]]], F32), np.array([[[0.5]], [[0.25]], [[-3]]], F64))
    return conv, ssm, [
        # two fresh sequences, in request order: seq 2 -> lowest free slot 0, seq 0 -> slot 1; rows zeros
        (dict(command="assign", seq_ids=np.array([2, 0], I32), num_tokens=3), ([1, -1, 0], [3, 0, 3]),
         {0: ([0, 0], 0), 1: ([0, 0], 0)}, dict(state_indices=np.array([0, 1], I32),
                                                 has_initial_state=np.array([False, False]))),
        # restore into seq 0's own (unshared) slot 1, position 5
        (dict(command="restore", seq=0, saved_pos=5, saved_conv=np.array([[5, 6]], F32),
              saved_ssm=np.array([[7]], F64)), ([1, -1, 0], [5, 0, 3]), {1: ([5, 6], 7)}, {}),
        # seq 1 shares seq 0's slot 1 and position; no row moves
        (dict(command="copy", src=0, dst=1), ([1, 1, 0], [5, 5, 3]), {}, {}),
        # seq 1 is shared: copy on write into the lowest free slot 2 (which held NaN); +2 tokens
        (dict(command="assign", seq_ids=np.array([1], I32), num_tokens=np.array([2], I32)), ([1, 2, 0], [5, 7, 3]),
         {2: ([5, 6], 7)}, dict(state_indices=np.array([2], I32), has_initial_state=np.array([True]))),
        (dict(command="checkpoint", seq=1), ([1, 2, 0], [5, 7, 3]), {},
         dict(checkpoint_pos=np.array([7], I64), checkpoint_conv=np.array([[[5, 6]]], F32),
              checkpoint_ssm=np.array([[[7]]], F64))),
        # undo 2 tokens: snapshot 2 into seq 1's own slot 2, position 7 - 2 = 5
        (dict(command="rollback", seq=1, num_tokens=2, snapshots_conv=snaps[0], snapshots_ssm=snaps[1]),
         ([1, 2, 0], [5, 5, 3]), {2: ([-1, -2], -3)}, {}),
        (dict(command="keep", seq=1), ([-1, 2, -1], [0, 5, 0]), {}, {}),
        # run with NaN in the now free rows 0 and 1: fresh rows are exact zeros all the same (RS-5)
        (dict(command="assign", seq_ids=np.array([0, 2], I32), num_tokens=1), ([0, 2, 1], [1, 5, 1]),
         {0: ([0, 0], 0), 1: ([0, 0], 0)}, dict(state_indices=np.array([0, 1], I32),
                                                 has_initial_state=np.array([False, False]))),
        (dict(command="remove", seq=1), ([0, -1, 1], [1, 0, 1]), {}, {}),
    ]


NAN_BEFORE = 7   # the step before which the free rows 0 and 1 are filled with NaN


def _expected(state, slots, rows, fields) -> StoreStep:
    conv, ssm = state["conv_pool"].copy(), state["ssm_pool"].copy()
    for slot, (c, s) in rows.items():
        conv[slot], ssm[slot] = np.reshape(c, conv.shape[1:]), s
    empty = dict(state_indices=np.zeros(0, I32), has_initial_state=np.zeros(0, bool),
                 checkpoint_pos=np.zeros(0, I64), checkpoint_conv=np.zeros((0,) + conv.shape[1:], F32),
                 checkpoint_ssm=np.zeros((0,) + ssm.shape[1:], F64))
    return StoreStep(np.array(slots[0], I64), np.array(slots[1], I64), conv, ssm, **dict(empty, **fields))


def golden_step(i: int):
    """Step `i` of the script: its input state the hand-worked result of the steps before it (free rows 0
    and 1 filled with NaN before NAN_BEFORE), its expected result worked out by hand."""
    conv, ssm, script = _script()
    state = dict(seq_slot=np.full(3, -1, I64), seq_pos=np.zeros(3, I64), conv_pool=conv, ssm_pool=ssm)
    for j, (cmd, slots, rows, fields) in enumerate(script[:i + 1]):
        if j == NAN_BEFORE:
            state = dict(state, conv_pool=state["conv_pool"].copy(), ssm_pool=state["ssm_pool"].copy())
            state["conv_pool"][:2], state["ssm_pool"][:2] = np.nan, np.nan     # free rows: stale NaN
        expected = _expected(state, slots, rows, fields)
        if j == i:
            return rstore.step_case(state, cmd, step=i), expected
        state = rstore.state_of(expected)
    raise IndexError(f"the script has {len(script)} steps, not {i + 1}")


#: one golden per step of the script (each from the hand-worked state before it, so a wrong step fails
#: alone); each requires what its case uses (rs.USES: the conv and SSM pool dtypes, float32 and float64)
GOLDENS = tuple(Golden(f"step{i}_{cmd['command']}", OP, goldens.fixed(functools.partial(golden_step, i)),
                       ALL[:-1] + ("RS-5",)) for i, (cmd, *_) in enumerate(_script()[2]))

test_store_step_golden = goldens.suite_test(OP, GOLDENS, rs.USES[OP])


# --- differential ----------------------------------------------------------------------------------

@conformance_test(op=OP, layer="differential", clauses=rstore.STORE_CLAUSES)
@pytest.mark.parametrize("command", tuple(rstore.COMMAND_ARGS))
def test_store_step_differential(kvc, command):
    """A drawn history, then one `command`: every field exact, pools on the rows in use."""
    claims = kvc.claims()
    kvc.for_all(rstore.store_step_cases(claims, rstore.command_variant(command)), kvc.check, budget=0.4)


@conformance_test(op=OP, layer="differential", clauses=("RS-21", "RS-22", "RS-42"))
def test_store_step_long(kvc):
    """The long column: one assignment of hundreds of sequences over hundreds of slots (`rows`), and rows
    of real sizes (`state`: 257+ conv channels, SSM state sizes past 128), every field exact."""
    claims = kvc.claims()
    for tier in reach.LONG_TIERS[OP]:
        kvc.for_all(rstore.store_step_cases(claims, rs.column(OP, "long"), tier=tier), kvc.check,
                    budget=reach.TIER_BUDGET)


@conformance_test(op=OP, layer="differential", clauses=("RS-22", "RS-25", "RS-26", "RS-43", "NU-R1", "NU-R5"))
def test_store_step_range(kvc):
    """The range column: rows holding the edges of the pool format (+-0.0, subnormals, the largest finite,
    +-inf, NaN payloads), moved by any command: every live row bit for bit (NaN as NaN)."""
    kvc.for_all(rstore.store_step_cases(kvc.claims(), rs.column(OP, "range")), kvc.check, budget=reach.RANGE_BUDGET)


# --- properties ------------------------------------------------------------------------------------

@conformance_test(op=OP, layer="property", clauses=("RS-5", "RS-22", "RS-24", "RS-26"))
def test_store_step_poison(kvc):
    """Every don't-care location poisoned: NaN in the rows of free slots (a fresh sequence's rows are set
    to exact zeros, a copy on write copies a live row, RS-5/RS-22/RS-24) and in the snapshots a rollback
    does not restore (RS-26): same result as the reference on the same input."""
    kvc.for_all(rstore.store_step_cases(kvc.claims()), lambda case: kvc.check(case.with_poison()), budget=0.6)


@conformance_test(op=OP, layer="property", clauses=("RS-21", "NU-12"))
def test_store_step_call_history(kvc):
    """NU-12: the same case after a call with other pool values of the same shapes gives the same result."""
    kvc.for_all(st.tuples(rstore.store_step_cases(kvc.claims()), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], rstore.HISTORY_INPUTS[OP], c[1])), budget=0.2)


# --- stateful: the backend's store driven step by step ----------------------------------------------

@conformance_test(op=OP, layer="stateful", clauses=ALL + ("RS-5",))
def test_store_state_machine(kvc):
    """Random commands on the backend's own state, each step compared exactly with the reference on the
    same input; checkpoints the backend returned are restored later; free rows are filled with NaN between
    steps (stale data, RS-24); refused commands (no free slot, RS-22/RS-25; rollback past the position,
    RS-26) must raise ValueError naming the argument, and the state carried on is the one before (RS-27)."""
    claims = kvc.claims()

    class Store(RuleBasedStateMachine):
        @initialize(data=st.data())
        def start(self, data):
            self.state, self.saved, self.steps = data.draw(rstore.empty_state(claims)), [], 0

        @rule(data=st.data())
        def command(self, data):
            cmd = data.draw(rstore.commands(self.state))
            if cmd["command"] == "restore" and self.saved and data.draw(st.booleans()):
                pos, conv, ssm = self.saved[data.draw(st.integers(0, len(self.saved) - 1))]
                cmd.update(saved_pos=pos, saved_conv=conv, saved_ssm=ssm)
            case = rstore.step_case(self.state, cmd, step=self.steps)
            self.steps += 1
            if rstore.step(self.state, cmd) is None:       # refused: no free slot
                kvc.expect_rejected(case, argument="seq_ids" if cmd["command"] == "assign" else "seq",
                                    clause=("RS-22", "RS-25", "RS-27"), rule="a refused command (no free slot)")
                return
            out = kvc.check(case)
            if cmd["command"] == "checkpoint":
                self.saved.append((int(out.checkpoint_pos[0]), np.asarray(out.checkpoint_conv[0]),
                                   np.asarray(out.checkpoint_ssm[0])))
            self.state = rstore.state_of(out)

        @rule()
        def stale_rows(self):
            free = rstore.free_slots(self.state)
            for p in ("conv_pool", "ssm_pool"):
                self.state[p] = self.state[p].copy()
                self.state[p][free] = np.nan

        @precondition(lambda self: hasattr(self, "state") and rstore.live_seqs(self.state))
        @rule(data=st.data())
        def rollback_too_far(self, data):
            seq = data.draw(st.sampled_from(rstore.live_seqs(self.state)))
            r = int(self.state["seq_pos"][seq]) + 1
            conv = np.zeros((r + 1,) + self.state["conv_pool"].shape[1:], self.state["conv_pool"].dtype)
            ssm = np.zeros((r + 1,) + self.state["ssm_pool"].shape[1:], self.state["ssm_pool"].dtype)
            case = rstore.step_case(self.state, dict(command="rollback", seq=seq, num_tokens=r, snapshots_conv=conv,
                                                     snapshots_ssm=ssm), step=self.steps, refused=True)
            kvc.expect_rejected(case, argument="num_tokens", clause=("RS-26", "RS-27"),
                                rule="rollback past the sequence's position is refused")

        @invariant()
        def stateless_at_zero(self):
            if hasattr(self, "state"):
                slot, pos = self.state["seq_slot"], self.state["seq_pos"]
                assert (pos[slot < 0] == 0).all(), "a sequence without state has position 0 (RS-21)"

    kvc.run_state_machine(Store, budget=0.5, steps=16)


# --- errors: malformed and refused calls (RS-27) -----------------------------------------------------

@conformance_test(op=OP, layer="errors", clauses=malformed.clauses_of(rstore_bad.RULES[OP]))
@pytest.mark.parametrize("rule", rstore_bad.RULES[OP], ids=str)
def test_store_step_rejects(kvc, rule):
    """One rule broken on a valid case (state arrays, command, arguments) or a refused operation: the
    backend must raise the reference's ValueError/TypeError (StoreError is a ValueError) naming the
    argument, and return nothing."""
    malformed.check_rejects(kvc, rstore_bad, OP, rule)
