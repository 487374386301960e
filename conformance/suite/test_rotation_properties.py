"""Oracle-free properties of spec/rotation.md, run through the backend alone: zero deltas are the identity
(RO-6, RO-10), a block's rows equal their repeat (RO-7), row order does not matter (RO-8), heads are
independent (RO-1), rotations compose (RO-5, RO-9). The golden, differential, poison and errors layers
are in test_rotation.py."""
from __future__ import annotations


import numpy as np
from hypothesis import strategies as st

from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import rotation as ro
from kvconform.conformance.suite.test_rotation import _derived, _quarter_turn_lut

SUITE_OPS = ('rotate_keys', 'shift_keys')


# --- oracle-free properties (backend only) ---------------------------------------------------------

def _strategy(op: str, claims, variant):
    return (ro.rotate_keys_cases if op == "rotate_keys" else ro.shift_keys_cases)(claims, variant)


def _deltas_name(op: str) -> str:
    return "rotation_deltas" if op == "rotate_keys" else "position_deltas"


def _zero_identity(kvc, op):
    claims = kvc.claims(op, features=("per_block_deltas",))

    def body(case):
        name = _deltas_name(op)
        zero = _derived(case, {"zero": True}, **{name: np.zeros_like(case.inputs[name])})
        kvc.expect(zero, kvc.call(zero), zero.inputs["k_pages"], what="input (zero delta)")
    kvc.for_all(_strategy(op, claims, ro.ROTATE_VARIANTS[0]), body, budget=0.4)


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-6", "RO-9"))
def test_rotate_keys_zero_row_is_identity(kvc):
    """Row 0 of the re-rotation LUT returns the keys unchanged (RO-6), within NU-RO2."""
    _zero_identity(kvc, "rotate_keys")


@conformance_test(op="shift_keys", layer="property", clauses=("RO-10",))
def test_shift_keys_zero_delta_is_identity(kvc):
    """A shift of 0 tokens returns the keys unchanged (RO-10), within NU-RO3."""
    _zero_identity(kvc, "shift_keys")


def _broadcast(kvc, op):
    claims = kvc.claims(op, features=("per_block_deltas", "per_token_deltas"))

    def body(case):
        # The [n, 1] case is the one recorded: its reproducer is the call that a broadcast bug gets wrong.
        name = _deltas_name(op)
        narrow = _derived(case, {"exact_identity": "[n, 1] vs its repeat (RO-7)"})
        wide = np.repeat(case.inputs[name], case.inputs["k_pages"].shape[1], axis=1)
        repeated = _derived(case, {"repeated": True}, **{name: wide})
        kvc.expect(narrow, kvc.call(narrow), kvc.call(repeated), what="run with the deltas repeated to "
                   "[n, page_size]")
    kvc.for_all(_strategy(op, claims, ro.ROTATE_VARIANTS[0]), body, budget=0.4)


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-7",))
def test_rotate_keys_block_rows_equal_their_repeat(kvc):
    """[n, 1] rows and their repeat to [n, page_size] give the same bits (RO-7, NU-RO1)."""
    _broadcast(kvc, "rotate_keys")


@conformance_test(op="shift_keys", layer="property", clauses=("RO-7",))
def test_shift_keys_block_deltas_equal_their_repeat(kvc):
    """[n, 1] deltas and their repeat to [n, page_size] give the same bits (RO-7, NU-RO1)."""
    _broadcast(kvc, "shift_keys")


@st.composite
def _with_perm(draw, strategy):
    case = draw(strategy)
    return case, draw(st.permutations(range(case.inputs["rotated_block_indices"].shape[0])))


def _row_order(kvc, op):
    claims = kvc.claims(op, features=("per_token_deltas",))

    def body(drawn):
        case, perm = drawn
        case = _derived(case, {"exact_identity": "joint permutation of rows (RO-8)"})
        perm = np.asarray(perm, dtype=np.int64)
        name = _deltas_name(op)
        moved = _derived(case, {"permuted": True},
                         rotated_block_indices=case.inputs["rotated_block_indices"][perm],
                         **{name: case.inputs[name][perm]})
        kvc.expect(case, kvc.call(case), kvc.call(moved), what="run with the rows permuted")
    kvc.for_all(_with_perm(_strategy(op, claims, ro.ROTATE_VARIANTS[1])), body, budget=0.4)


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-8",))
def test_rotate_keys_row_order_does_not_matter(kvc):
    """Permuting the rows of (rotated_block_indices, rotation_deltas) together changes no bit (RO-8)."""
    _row_order(kvc, "rotate_keys")


@conformance_test(op="shift_keys", layer="property", clauses=("RO-8",))
def test_shift_keys_row_order_does_not_matter(kvc):
    """Permuting the rows of (rotated_block_indices, position_deltas) together changes no bit (RO-8)."""
    _row_order(kvc, "shift_keys")


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-1",))
def test_heads_are_independent(kvc):
    """Every KV head uses the same coefficients: rotating one head alone gives the bits of that head in
    the all-heads run (RO-1, NU-RO1)."""
    claims = kvc.claims(features=("per_block_deltas",))

    def body(case):
        whole = kvc.call(case)
        for h in range(case.inputs["k_pages"].shape[2]):
            alone = _derived(case, {"exact_identity": f"head {h} alone (RO-1)"},
                             k_pages=np.ascontiguousarray(case.inputs["k_pages"][:, :, h:h + 1]))
            kvc.expect(alone, kvc.call(alone), whole[:, :, h:h + 1], what=f"head {h} of the all-heads run")
    kvc.for_all(ro.rotate_keys_cases(claims, ro.ROTATE_VARIANTS[0]), body, budget=0.3)




@st.composite
def _composition(draw, claims):
    case = draw(ro.rotate_keys_cases(claims, ro.ROTATE_VARIANTS[0]))
    n = case.inputs["rotated_block_indices"].shape[0]
    r1 = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32).reshape(n, 1)
    r2 = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32).reshape(n, 1)
    return case, r1, r2


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-5", "RO-9"))
def test_rows_compose(kvc):
    """Rotating by row r1 and then by row r2 equals rotating by the row of the summed turn (the
    composition identity of spec/rotation.md), on a quarter-turn LUT whose rows compose exactly."""
    claims = kvc.claims(features=("per_block_deltas",))

    def body(drawn):
        case, r1, r2 = drawn
        x = case.inputs
        rd = x.get("rotary_dim") or x["k_pages"].shape[-1]
        lut = _quarter_turn_lut(rd, x["trig_lut"].dtype)
        step1 = _derived(case, {"step": 1}, trig_lut=lut, rotation_deltas=r1)
        once = np.asarray(kvc.call(step1)).astype(x["k_pages"].dtype)  # quarter turns: values unchanged
        step2 = _derived(step1, {"step": 2}, k_pages=once, rotation_deltas=r2)
        twice = kvc.call(step2)
        joint = _derived(step1, {"step": "joint"}, rotation_deltas=(r1 + r2) % 4)
        kvc.expect(step2, twice, kvc.call(joint), what="single rotation by the summed row")
    kvc.for_all(_composition(claims), body, budget=0.4)


