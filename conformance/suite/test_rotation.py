"""Conformance suite for spec/rotation.md: `rotate_keys` (LUT form) and `shift_keys` (theta form).

Layers: hand-worked golden cases (expected values from the arithmetic written here), Hypothesis
differential tests against the reference (one per features-matrix column), and (test_rotation_properties.py)
oracle-free properties run through the backend alone: zero row is the identity, [n, 1] equals its repeat to [n, page_size] bit
for bit, permuting (index, delta) rows changes nothing, heads are independent, LUT rows compose.
Error inputs: every error RO-12 lists, broken alone, is rejected with the reference's ValueError or
TypeError naming the argument. The stateful evict -> re-rotate machine lives in test_eviction.py (it spans
both families); the evict -> re-rotate -> attend invariant (RO-13) in test_evict_rotate_attend.py.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform.conformance.harness import goldens
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies import rotation as ro
from kvconform.conformance.strategies.malformed import rotation as ro_bad
from kvconform.conformance.strategies.values import reseeded
from kvconform.reference.dtypes import resolve_dtype

SUITE_OPS = ('rotate_keys', 'shift_keys')

NAN = np.nan
ROTATE_CLAUSES = ("RO-1", "RO-2", "RO-5", "RO-6", "RO-8", "RO-9", "RO-11")
SHIFT_CLAUSES = ("RO-1", "RO-2", "RO-3", "RO-5", "RO-8", "RO-10", "RO-11")
#: numerics the rotation CHECKS apply: NU-1, NU-3, NU-7, NU-9; class U rotated pairs (NU-5, NU-RO2 / NU-RO3),
#: copies exact (NU-4, NU-RO1), pairs with a non-finite input or a zero sign not compared (NU-RO5)
ROTATE_NUMERICS = ("NU-1", "NU-3", "NU-4", "NU-5", "NU-7", "NU-9", "NU-RO1", "NU-RO2", "NU-RO5")
SHIFT_NUMERICS = ("NU-1", "NU-3", "NU-4", "NU-5", "NU-7", "NU-9", "NU-RO1", "NU-RO3", "NU-RO5")
ALL_ROTATE = tuple(dict.fromkeys(ROTATE_CLAUSES + tuple(c for v in ro.ROTATE_VARIANTS for c in v.clauses)
                                 + ROTATE_NUMERICS))
ALL_SHIFT = tuple(dict.fromkeys(SHIFT_CLAUSES + tuple(c for v in ro.SHIFT_VARIANTS for c in v.clauses)
                                + SHIFT_NUMERICS))


def _derived(case: Case, note: dict, **inputs) -> Case:
    return Case(case.op, dict(case.inputs, **inputs), dict(case.params, **note), case.seed)


# --- golden cases ----------------------------------------------------------------------------------

# Two tokens of one KV head, D = 4; LUT rows are [c0, c1, s0, s1] (RO-9). Row 1 turns pair 0 by a
# quarter (c = 0, s = 1) and applies the non-rotation coefficients c = 0.5, s = 0.25 to pair 1 (the LUT
# is applied as given, RO-9); every product and sum below is exact in float32.
TOKENS = [[1.0, 2.0, 3.0, 4.0], [4.0, -2.0, 0.5, 1.0]]
LUT = [[1.0, 1.0, 0.0, 0.0], [0.0, 0.5, 1.0, 0.25]]
# (x, y) -> (x c - y s, x s + y c)   (RO-5)
ROW1 = {
    # half: pair 0 = dims (0, 2), pair 1 = dims (1, 3)                                     (RO-2)
    # token 0: (1, 3) -> (0 - 3, 1 + 0) = (-3, 1); (2, 4) -> (1 - 1, 0.5 + 2) = (0, 2.5)
    # token 1: (4, 0.5) -> (-0.5, 4); (-2, 1) -> (-1 - 0.25, -0.5 + 0.5) = (-1.25, 0)
    "half": [[-3.0, 0.0, 1.0, 2.5], [-0.5, -1.25, 4.0, 0.0]],
    # interleaved: pair 0 = dims (0, 1), pair 1 = dims (2, 3)
    # token 0: (1, 2) -> (-2, 1); (3, 4) -> (1.5 - 1, 0.75 + 2) = (0.5, 2.75)
    # token 1: (4, -2) -> (2, 4); (0.5, 1) -> (0.25 - 0.25, 0.125 + 0.5) = (0, 0.625)
    "interleaved": [[-2.0, 1.0, 0.5, 2.75], [2.0, 4.0, 0.0, 0.625]],
}


def _golden_pool():
    """Pages: 0 listed with row 0, 1 unlisted and full of NaN (must come back as is, RO-1), 2 listed."""
    pool = np.full((3, 2, 1, 4), NAN, dtype=np.float32)
    pool[0, :, 0] = [[0.5, -1.0, 2.0, 8.0], [3.0, 0.25, -4.0, 1.5]]
    pool[2, :, 0] = TOKENS
    return pool


def _params(kv_dtype, layout="half", dtype=None):
    return {"dtype": dtype or kv_dtype, "kv_dtype": kv_dtype, "layout": layout}


def golden_pair_updates(layout, form):
    """Hand-worked pair updates in both layouts; [n, 1] rows reach every token, [n, page_size] rows
    pick per token (RO-7): per-token row [1, 0] rotates token 0 only."""
    pool = _golden_pool()
    deltas = [[0], [1]] if form == "per_block" else [[0, 0], [1, 0]]
    case = Case("rotate_keys", dict(k_pages=pool, rotated_block_indices=np.array([0, 2], np.int32),
                                    rotation_deltas=np.array(deltas, np.int32),
                                    trig_lut=np.array(LUT, np.float32), layout=layout), _params("float32", layout))
    expected = pool.astype(np.float64)
    expected[2, 0, 0] = ROW1[layout][0]
    if form == "per_block":
        expected[2, 1, 0] = ROW1[layout][1]
    return case, expected


def golden_partial_rotary():
    """rotary_dim = 2 of D = 4, half layout: the only pair is dims (0, 1); dims 2, 3 are copied even
    when they hold NaN (RO-1, RO-2). Row [0, 1] maps (x, y) to (-y, x)."""
    pool = np.array([[[[1.0, 2.0, NAN, 7.0]], [[-3.0, 0.5, 6.0, NAN]]]], np.float32)
    case = Case("rotate_keys", dict(k_pages=pool, rotated_block_indices=np.array([0], np.int32),
                                    rotation_deltas=np.array([[1]], np.int32),
                                    trig_lut=np.array([[1.0, 0.0], [0.0, 1.0]], np.float32),
                                    layout="half", rotary_dim=2), _params("float32"))
    return case, np.array([[[[-2.0, 1.0, NAN, 7.0]], [[-0.5, -3.0, 6.0, NAN]]]])


def golden_no_blocks():
    """n = 0 is allowed and returns the pool unchanged, NaN included (RO-8, RO-11)."""
    pool = _golden_pool()
    case = Case("rotate_keys", dict(k_pages=pool, rotated_block_indices=np.zeros(0, np.int32),
                                    rotation_deltas=np.zeros((0, 1), np.int32),
                                    trig_lut=np.array(LUT, np.float32)), _params("float32"))
    return case, pool.astype(np.float64)


def _real_pool(kv_dtype, pages, page_size, hkv, head_dim):
    """Small integers (exact in float16 and bfloat16), different in every slot, head and dim."""
    values = (np.arange(pages * page_size * hkv * head_dim) * 7) % 61 - 30
    return values.reshape(pages, page_size, hkv, head_dim).astype(np.float64), \
        values.reshape(pages, page_size, hkv, head_dim).astype(resolve_dtype(kv_dtype))


def golden_real_size(kv_dtype):
    """Head dim 128, page size 16, 2 KV heads, half layout (RO-2, RO-9): pages 2 and 0 of 3 rotated by the
    quarter-turn LUT, row 1 and row 3: row r turns pair j by (r (j + 1)) mod 4 quarter turns, c, s in
    {0, +-1}, so every output is a key value or its negation, exact in the cache's dtype."""
    D, h = 128, 64
    exact, pool = _real_pool(kv_dtype, 3, 16, 2, D)
    lut = _quarter_turn_lut(D, resolve_dtype(kv_dtype))
    expected = exact.copy()
    for page, row in ((2, 1), (0, 3)):
        for j in range(h):
            c, s = float(lut[row, j]), float(lut[row, j + h])
            x, y = exact[page, :, :, j].copy(), exact[page, :, :, j + h].copy()
            expected[page, :, :, j] = x * c - y * s            # RO-5
            expected[page, :, :, j + h] = x * s + y * c
    case = Case("rotate_keys", dict(k_pages=pool, rotated_block_indices=np.array([2, 0], np.int32),
                                    rotation_deltas=np.array([[1], [3]], np.int32), trig_lut=lut),
                _params(kv_dtype))
    return case, expected


def golden_shift(layout):
    """theta = 100, D = 4: w = [1, 100^(-1/2)] (RO-3); per-token deltas [3, -2]: token 0 moves by +3,
    token 1 by -2 (RO-10). Expected from math.cos / math.sin of the pinned float64 angles."""
    pool = np.array([[[TOKENS[0]], [TOKENS[1]]]], np.float32)
    case = Case("shift_keys", dict(k_pages=pool, rotated_block_indices=np.array([0], np.int32),
                                   position_deltas=np.array([[3, -2]], np.int32), theta=100.0, layout=layout),
                _params("float32", layout))
    w = [1.0, 100.0 ** (-2.0 / 4.0)]
    pairs = [(0, 2), (1, 3)] if layout == "half" else [(0, 1), (2, 3)]
    expected = np.zeros((1, 2, 1, 4))
    for t, delta in enumerate((3, -2)):
        for j, (a, b) in enumerate(pairs):
            angle = float(delta) * w[j]
            c, s = math.cos(angle), math.sin(angle)
            x, y = TOKENS[t][a], TOKENS[t][b]
            expected[0, t, 0, a] = x * c - y * s
            expected[0, t, 0, b] = x * s + y * c
    return case, expected


def golden_shift_real_size():
    """Llama-3's theta 500000, head dim 128, page size 16: page 1 of 2 moved by 4099 tokens (RO-3, RO-10);
    expected from math.cos / math.sin of fl64(4099 * w_j), w_j = 500000 ** (-2j / 128)."""
    D, h, delta = 128, 64, 4099
    exact, pool = _real_pool("float32", 2, 16, 1, D)
    expected = exact.copy()
    for j in range(h):
        angle = float(delta) * 500000.0 ** (-(2.0 * j) / D)
        c, s = math.cos(angle), math.sin(angle)
        x, y = exact[1, :, :, j].copy(), exact[1, :, :, j + h].copy()
        expected[1, :, :, j] = x * c - y * s
        expected[1, :, :, j + h] = x * s + y * c
    case = Case("shift_keys", dict(k_pages=pool, rotated_block_indices=np.array([1], np.int32),
                                   position_deltas=np.array([[delta]], np.int32), theta=500000.0),
                _params("float32"))
    return case, expected


#: every golden requires exactly what its case uses (ro.USES: features, LUT and cache dtypes, page size,
#: head dim, layout; tests/engine/test_golden_requirements.py checks)
GOLDENS = (
    *(Golden(f"{layout}_{form}", "rotate_keys", goldens.fixed(functools.partial(golden_pair_updates, layout, form)),
             ("RO-1", "RO-2", "RO-5", "RO-7", "RO-9"), (f"{form}_deltas",))
      for layout in ("half", "interleaved") for form in ("per_block", "per_token")),
    Golden("partial_rotary", "rotate_keys", goldens.fixed(golden_partial_rotary), ("RO-1", "RO-2", "RO-9"),
           ("partial_rotary", "per_block_deltas")),
    Golden("no_blocks", "rotate_keys", goldens.fixed(golden_no_blocks), ("RO-8", "RO-11"), ("per_block_deltas",)),
    *(Golden(f"real_size_{kv}", "rotate_keys", goldens.fixed(functools.partial(golden_real_size, kv)),
             ("RO-1", "RO-2", "RO-5", "RO-7", "RO-9"), ("per_block_deltas",))
      for kv in ("float32", "bfloat16", "float16")),
    *(Golden(f"{layout}_per_token_negative", "shift_keys", goldens.fixed(functools.partial(golden_shift, layout)),
             ("RO-2", "RO-3", "RO-5", "RO-7", "RO-10"), ("negative_deltas", "per_token_deltas"))
      for layout in ("half", "interleaved")),
    Golden("real_size", "shift_keys", goldens.fixed(golden_shift_real_size), ("RO-2", "RO-3", "RO-5", "RO-10"),
           ("per_block_deltas",)),
)

test_rotate_keys_golden = goldens.suite_test("rotate_keys", GOLDENS, ro.USES["rotate_keys"])
test_shift_keys_golden = goldens.suite_test("shift_keys", GOLDENS, ro.USES["shift_keys"])


# --- differential ----------------------------------------------------------------------------------

@conformance_test(op="rotate_keys", layer="differential", clauses=ALL_ROTATE)
@pytest.mark.parametrize("variant", ro.ROTATE_VARIANTS, ids=str)
def test_rotate_keys_differential(kvc, variant):
    kvc.cite(*dict.fromkeys(ROTATE_CLAUSES + variant.clauses + ROTATE_NUMERICS))
    claims = kvc.claims(features=variant.features)
    kvc.for_all(ro.rotate_keys_cases(claims, variant), kvc.check, budget=ro.BUDGETS.get(variant.reach, 1.0))


@conformance_test(op="shift_keys", layer="differential", clauses=ALL_SHIFT)
@pytest.mark.parametrize("variant", ro.SHIFT_VARIANTS, ids=str)
def test_shift_keys_differential(kvc, variant):
    kvc.cite(*dict.fromkeys(SHIFT_CLAUSES + variant.clauses + SHIFT_NUMERICS))
    claims = kvc.claims(features=variant.features)
    kvc.for_all(ro.shift_keys_cases(claims, variant), kvc.check, budget=ro.BUDGETS.get(variant.reach, 1.0))


# --- poison and anti-gaming properties ------------------------------------------------------------

@conformance_test(op="rotate_keys", layer="property", clauses=("RO-1", "NU-11"))
def test_rotate_keys_poison(kvc):
    claims = kvc.claims(features=ro.ROTATE_VARIANTS[0].features)
    kvc.for_all(ro.rotate_keys_cases(claims, ro.ROTATE_VARIANTS[0]), kvc.check_poison, budget=0.4)


@conformance_test(op="shift_keys", layer="property", clauses=("RO-1", "NU-11"))
def test_shift_keys_poison(kvc):
    claims = kvc.claims(features=ro.SHIFT_VARIANTS[0].features)
    kvc.for_all(ro.shift_keys_cases(claims, ro.SHIFT_VARIANTS[0]), kvc.check_poison, budget=0.4)


@conformance_test(op="rotate_keys", layer="property", clauses=("RO-5", "RO-9", "NU-12"))
def test_rotate_keys_call_history(kvc):
    claims = kvc.claims(features=ro.ROTATE_VARIANTS[0].features)
    kvc.for_all(st.tuples(ro.rotate_keys_cases(claims, ro.ROTATE_VARIANTS[0]), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], ("k_pages",), c[1])), budget=0.2)


@conformance_test(op="shift_keys", layer="property", clauses=("RO-5", "RO-10", "NU-12"))
def test_shift_keys_call_history(kvc):
    claims = kvc.claims(features=ro.SHIFT_VARIANTS[0].features)
    kvc.for_all(st.tuples(ro.shift_keys_cases(claims, ro.SHIFT_VARIANTS[0]), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], ("k_pages",), c[1])), budget=0.2)


def _quarter_turn_lut(rotary_dim: int, dtype) -> np.ndarray:
    """Row r turns pair j by (r * (j + 1)) mod 4 quarter turns: c, s in {0, +-1}, exact in any dtype,
    and row r1 followed by row r2 is row (r1 + r2) mod 4."""
    h = rotary_dim // 2
    quarters = (np.arange(4)[:, None] * (np.arange(h)[None, :] + 1)) % 4
    cos = np.array([1.0, 0.0, -1.0, 0.0])[quarters]
    sin = np.array([0.0, 1.0, 0.0, -1.0])[quarters]
    return np.concatenate([cos, sin], axis=1).astype(dtype)


# --- errors: malformed input is rejected (RO-12) ---------------------------------------------------

@conformance_test(op="rotate_keys", layer="errors", clauses=malformed.clauses_of(ro_bad.ROTATE_RULES))
@pytest.mark.parametrize("rule", ro_bad.ROTATE_RULES, ids=str)
def test_rotate_keys_rejects(kvc, rule):
    """One error of RO-12 (block indices, deltas, LUT, layout, rotary_dim) on a valid case: the backend
    must raise the reference's ValueError/TypeError naming the argument; an in-place kernel that clamps a
    LUT row or rotates a duplicated page twice returns a silent wrong answer instead."""
    malformed.check_rejects(kvc, ro_bad, "rotate_keys", rule)


@conformance_test(op="shift_keys", layer="errors", clauses=malformed.clauses_of(ro_bad.SHIFT_RULES))
@pytest.mark.parametrize("rule", ro_bad.SHIFT_RULES, ids=str)
def test_shift_keys_rejects(kvc, rule):
    """One error of RO-12 for the theta form (block rules, theta, int32 shifts): rejected, naming the
    argument."""
    malformed.check_rejects(kvc, ro_bad, "shift_keys", rule)
