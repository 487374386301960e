"""Conformance suite for the gated delta rule (spec/recurrent.md RS-28 … RS-35): `gated_delta_rule_update`
and `gated_delta_rule_chunked` over a slot pool.

Layers: hand-worked golden cases (arithmetic next to each); Hypothesis differential tests against the
reference, one per features-matrix column, on clean cases (the `long` column crosses 8/16-token kernel
chunks); a poison property per op (the same cases with every declared don't-care location filled: NaN
inputs of padding rows, NaN canary rows, +inf rows of fresh sequences); oracle-free properties through the
backend only: chunked == the backend's own update op token by token for two chunk hints (RS-34a/b), no
leakage (RS-7, RS-34c), split prefill carrying state == one call (RS-34a); error inputs (the reference's
ValueError/TypeError naming the argument).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform.conformance.harness import goldens
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.strategies.recurrent.common import _live_rows
from kvconform.conformance.strategies.recurrent import gated_delta as gdn
from kvconform.conformance.strategies.malformed import recurrent_gated_delta as gdn_bad
from kvconform.conformance.strategies.values import reseeded
from kvconform.reference.recurrent import GatedDeltaScan, GatedDeltaUpdate

SUITE_OPS = ('gated_delta_rule_chunked', 'gated_delta_rule_update')

F32 = np.float32
UPDATE, CHUNKED = "gated_delta_rule_update", "gated_delta_rule_chunked"
TOKENS = gdn.TOKEN_INPUTS


#: numerics every compared GDN case applies (the CHECKS of strategies/recurrent_gated_delta.py): NU-1
#: upcast, NU-2 float64 reference, NU-3 required precision, NU-4 class E padding rows, NU-R2g class R
#: outputs and states with the GDN growth term, NU-7 non-finite
NUMERICS = ("NU-1", "NU-2", "NU-3", "NU-4", "NU-7", "NU-R2g")


def _clauses(variants) -> tuple[str, ...]:
    return tuple(sorted({c for v in variants for c in v.clauses})) + NUMERICS


# --- differential ----------------------------------------------------------------------------------

def _differential(kvc, op, variant):
    base = gdn.VARIANTS[op][0]
    kvc.cite(*dict.fromkeys(base.clauses + variant.clauses + NUMERICS))
    claims = kvc.claims(features=variant.features)
    for kw, budget in rs.column_runs(op, variant):
        kvc.for_all(gdn.STRATEGIES[op](claims, variant, **kw), kvc.check, budget=budget)


@conformance_test(op=UPDATE, layer="differential", clauses=_clauses(gdn.GDN_UPDATE_VARIANTS))
@pytest.mark.parametrize("variant", gdn.GDN_UPDATE_VARIANTS, ids=str)
def test_gdn_update_differential(kvc, variant):
    _differential(kvc, UPDATE, variant)


@conformance_test(op=CHUNKED, layer="differential", clauses=_clauses(gdn.GDN_CHUNKED_VARIANTS))
@pytest.mark.parametrize("variant", gdn.GDN_CHUNKED_VARIANTS, ids=str)
def test_gdn_chunked_differential(kvc, variant):
    _differential(kvc, CHUNKED, variant)


# --- poison: don't-care locations filled (RS-3, RS-4, RS-5) ----------------------------------------

def _poison_test(op: str, columns: tuple[str, ...]):
    variants = {v.name: v for v in gdn.VARIANTS[op]}

    @conformance_test(op=op, layer="property", clauses=("RS-3", "RS-4", "RS-5", "RS-31"))
    @pytest.mark.parametrize("column", columns)
    def test(kvc, column):
        """The clean cases of a column with every declared don't-care location poisoned: NaN inputs of
        padding rows (never read, outputs exactly 0, RS-3), NaN canary rows no entry addresses (returned
        bit for bit, RS-4), +inf rows of fresh sequences (zeros selected, never `row * 0`, RS-5)."""
        variant = variants[column]
        kvc.cite(*variant.clauses)
        claims = kvc.claims(features=variant.features)
        kvc.for_all(gdn.STRATEGIES[op](claims, variant), lambda case: kvc.check(case.with_poison()), budget=0.4)
    return test


test_gdn_update_poison = _poison_test(UPDATE, ("state_indices", "padding_slots"))
test_gdn_chunked_poison = _poison_test(CHUNKED, ("padding_slots", "initial_states"))


def _history_test(op: str):
    @conformance_test(op=op, layer="property", clauses=("RS-28", "RS-32", "NU-12"))
    def test(kvc):
        """NU-12: the same case after a call with other values of the same shapes gives the same result."""
        variant = gdn.VARIANTS[op][0]
        claims = kvc.claims(features=variant.features)
        kvc.for_all(st.tuples(gdn.STRATEGIES[op](claims, variant), st.integers(0, 2**32 - 1)),
                    lambda c: kvc.check_history(c[0], reseeded(c[0], rs.HISTORY_INPUTS[op], c[1])), budget=0.2)
    return test


test_gdn_update_call_history = _history_test(UPDATE)
test_gdn_chunked_call_history = _history_test(CHUNKED)


# --- golden cases ----------------------------------------------------------------------------------
# Two tokens, one head, K = 2, V = 1, scale 1, float32 (all values exact in float32):
#   token 1: g = ln(1/2), beta = 1/2, k = [1, 0], v = 3, q = [1, 1], S0 = [1, 2]:
#            decay S = [0.5, 1]; S^T k = 0.5; u = 0.5 (3 - 0.5) = 1.25; S = [1.75, 1]; out = 2.75
#   token 2: g = 0, beta = 1, k = [0, 1], v = 0, q = [1, 0]:
#            S^T k = 1; u = -1; S = [1.75, 0]; out = 1.75
# (A decay applied after the write would give S = [0.5 * 1.75, 0.5], out 1.375; beta left out of the
# delta u = 2.5, out 4.)

def _two_tokens():
    q = np.array([[[1, 1]], [[1, 0]]], F32)
    k = np.array([[[1, 0]], [[0, 1]]], F32)
    v = np.array([[[3]], [[0]]], F32)
    g = np.array([[math.log(0.5)], [0.0]], F32)
    beta = np.array([[0.5], [1.0]], F32)
    return q, k, v, g, beta


def _pool(rows):
    """Float32 pool [slots, 1, 2, 1]; None = a NaN canary row that must come back bit for bit (RS-4)."""
    pool = np.full((len(rows), 1, 2, 1), np.nan, F32)
    for i, row in enumerate(rows):
        if row is not None:
            pool[i, 0, :, 0] = row
    return pool


def golden_update_token(options):
    q, k, v, g, beta = _two_tokens()
    pool = _pool([None, [1, 2]])
    case = Case(UPDATE, dict(q=q[:1], k=k[:1], v=v[:1], g=g[:1], beta=beta[:1], state=pool, scale=1.0,
                             state_indices=np.array([1], np.int32)))
    return case, GatedDeltaUpdate(np.array([[[2.75]]]), _pool([None, [1.75, 1]]))


def golden_update_padding(options):
    """Row 0 is padding (-1, NaN inputs): out row 0 exactly 0, pool untouched; row 1 as token 2 above from
    S = [1.75, 1] in slot 0."""
    q, k, v, g, beta = _two_tokens()
    pad = lambda a: np.concatenate([np.full_like(a[:1], np.nan), a[1:]])   # noqa: E731
    pool = _pool([[1.75, 1], [5, 6]])
    case = Case(UPDATE, dict(q=pad(q), k=pad(k), v=pad(v), g=pad(g), beta=pad(beta), state=pool, scale=1.0,
                             state_indices=np.array([-1, 0], np.int32)))
    return case, GatedDeltaUpdate(np.array([[[0.0]], [[1.75]]]), _pool([[1.75, 0], [5, 6]]))


def golden_update_heads(options):
    """H = 4 state heads over Hk = 2 q/k heads (heads 0, 1 read q/k head 0; 2, 3 read head 1), zero state,
    g = 0, beta = 1, scale 1, V = 1: out[h] = (q_j . k_j) v[h] = [1, 2, 6, 8]; a tiled h % Hk mapping gives
    [1, 4, 3, 8]. State rows S[h] = k_j v[h]."""
    q = np.array([[[1, 0], [0, 2]]], F32)
    k = np.array([[[1, 0], [0, 1]]], F32)
    v = np.array([[[1], [2], [3], [4]]], F32)
    state = np.zeros((1, 4, 2, 1), F32)
    case = Case(UPDATE, dict(q=q, k=k, v=v, g=np.zeros((1, 4), F32), beta=np.ones((1, 4), F32), state=state,
                             scale=1.0))
    S = np.zeros((1, 4, 2, 1))
    S[0, 0, 0, 0], S[0, 1, 0, 0], S[0, 2, 1, 0], S[0, 3, 1, 0] = 1, 2, 3, 4
    return case, GatedDeltaUpdate(np.array([[[1.0], [2.0], [6.0], [8.0]]]), S.astype(F32))


def _golden_chunked(chunk):
    def build(options):
        q, k, v, g, beta = _two_tokens()
        pool = _pool([[1, 2], None])
        case = Case(CHUNKED, dict(q=q, k=k, v=v, g=g, beta=beta, state=pool, cu_seqlens=np.array([0, 2], np.int32),
                                  chunk_size=chunk, scale=1.0))
        return case, GatedDeltaScan(np.array([[[2.75]], [[1.75]]]), _pool([[1.75, 0], None]))
    return build


def golden_chunked_fresh_and_empty(options):
    """Sequence 0 fresh over an inf row (starts from zeros, RS-5): token 1 gives S = [1.5, 0] (u = 0.5 * 3),
    out = 1.5; token 2: S^T k = 0, u = 0, out = S^T [1, 0] = 1.5. Sequence 1 is empty and keeps its row."""
    q, k, v, g, beta = _two_tokens()
    pool = _pool([[np.inf, np.inf], [7, 8]])
    case = Case(CHUNKED, dict(q=q, k=k, v=v, g=g, beta=beta, state=pool, cu_seqlens=np.array([0, 2, 2], np.int32),
                              chunk_size=2, scale=1.0, has_initial_state=np.array([False, True])))
    return case, GatedDeltaScan(np.array([[[1.5]], [[1.5]]]), _pool([[1.5, 0], [7, 8]]))


_GOLDENS = (
    Golden("update_token", UPDATE, golden_update_token, ("RS-30", "RS-31", "RS-4"), ("state_indices",)),
    Golden("update_padding", UPDATE, golden_update_padding, ("RS-31", "RS-3", "RS-4"), ("state_indices", "padding_slots")),
    Golden("update_heads", UPDATE, golden_update_heads, ("RS-28",)),
    Golden("chunked_chunk1", CHUNKED, _golden_chunked(1), ("RS-32", "RS-33")),
    Golden("chunked_chunk64", CHUNKED, _golden_chunked(64), ("RS-32", "RS-33")),
    Golden("chunked_fresh_empty", CHUNKED, golden_chunked_fresh_and_empty, ("RS-5", "RS-32"), ("initial_states",)),
)
_BY_NAME = {g.name: g for g in _GOLDENS}
#: restated at the head dims of Qwen3-Next / Kimi Linear (K = V = 128, RS-42), so that a backend claiming
#: only real sizes (or K == V, RS-40) runs goldens too
GOLDENS = _GOLDENS + (
    goldens.restated_at(_BY_NAME["update_heads"], "update_heads_real", dict(
        q=(1, 2, 128), k=(1, 2, 128), v=(1, 4, 128), state=(1, 4, 128, 128), out=(1, 4, 128))),
    goldens.restated_at(_BY_NAME["chunked_chunk64"], "chunked_chunk64_real", dict(
        q=(2, 1, 128), k=(2, 1, 128), v=(2, 1, 128), state=(2, 1, 128, 128), out=(2, 1, 128))),
)


def _golden_test(op):
    return goldens.suite_test(op, GOLDENS, rs.USES[op], rs.conventions)


test_gdn_update_golden = _golden_test(UPDATE)
test_gdn_chunked_golden = _golden_test(CHUNKED)


# --- properties: chunked == the update op token by token (RS-34 a, b) ------------------------------

def _both(a, b):
    return dataclasses.replace(a, dtypes=tuple(d for d in a.dtypes if d in b.dtypes),
                               kv_dtypes=tuple(d for d in a.kv_dtypes if d in b.kv_dtypes),
                               features=tuple(f for f in a.features if f in b.features))


def _token_by_token(kvc, case: Case) -> GatedDeltaScan:
    """RS-32's definition run on the backend: one `gated_delta_rule_update` call per token, each on a
    one-row pool holding the sequence's state (a fresh sequence starts from a zero row, RS-5)."""
    x = case.inputs
    pool, cu = x["state"], np.asarray(x["cu_seqlens"])
    slots = _live_rows(x.get("state_indices"), cu.shape[0] - 1)
    flags = x.get("has_initial_state")
    out = np.zeros(np.shape(x["v"]))
    new_pool = pool.copy()
    opts = {n: x[n] for n in ("scale", "use_qk_l2norm") if n in x}
    for s in range(cu.shape[0] - 1):
        slot = int(slots[s])
        if slot < 0:
            continue
        row = pool[slot:slot + 1].copy() if flags is None or flags[s] else np.zeros_like(pool[:1])
        for t in range(int(cu[s]), int(cu[s + 1])):
            step = {n: x[n][t:t + 1] for n in TOKENS}
            got = kvc.call(Case(UPDATE, dict(step, state=row, **opts), dict(case.params, token=t)))
            out[t], row = got[0][0], got[1]
        new_pool[slot] = row[0]
    return GatedDeltaScan(out, new_pool)


@st.composite
def _two_hints(draw, claims, variant, sizes, max_seqs):
    case = draw(gdn.gdn_chunked_cases(claims, variant, max_seqs=max_seqs, max_len=5))
    return case, draw(st.lists(st.sampled_from(sizes), min_size=2, max_size=2, unique=True))


def _chunked_vs_token_by_token(kvc, variant, sizes, max_seqs, budget):
    claims = _both(kvc.claims(features=variant.features), kvc.claims(UPDATE))

    def body(drawn):
        case, sizes = drawn
        expected = _token_by_token(kvc, case)
        for size in sizes:
            chunked = Case(case.op, dict(case.inputs, chunk_size=size), dict(case.params, chunk_size=size))
            kvc.expect(chunked, kvc.call(chunked), expected, what="token-by-token gated_delta_rule_update")
    kvc.for_all(_two_hints(claims, variant, sizes, max_seqs), body, budget=budget)


@conformance_test(op=CHUNKED, layer="property", clauses=("RS-34", "RS-32", "RS-33"))
def test_gdn_chunked_equals_token_by_token(kvc):
    """Two chunk hints of `gated_delta_rule_chunked` each agree with the backend's own
    `gated_delta_rule_update` applied token by token: the chunking is a hint (RS-33, RS-34a/b)."""
    _chunked_vs_token_by_token(kvc, gdn.GDN_CHUNKED_VARIANTS[0], rs.CHUNK_SIZES, 2, 0.4)


@conformance_test(op=CHUNKED, layer="property", clauses=("RS-34", "RS-33", "RS-17"))
def test_gdn_chunked_equals_token_by_token_long(kvc):
    """The same across kernel chunk ends: one sequence of 9 … 20 tokens under two hints of
    (8, 16, 1, 3, 4, 64): the state carried from one chunk into the next is the token-by-token state."""
    _chunked_vs_token_by_token(kvc, rs.column(CHUNKED, "long"), rs.LONG_CHUNK_SIZES + (64,), 1, 0.12)


# --- properties: no leakage (RS-7, RS-34c) ---------------------------------------------------------

def _alone(case: Case, s: int, slot: int) -> Case:
    x = dict(case.inputs)
    if "cu_seqlens" in x:
        cu = np.asarray(x["cu_seqlens"])
        rows = slice(int(cu[s]), int(cu[s + 1]))
        x["cu_seqlens"] = np.array([0, rows.stop - rows.start], np.int32)
    else:
        rows = slice(s, s + 1)
    for name in TOKENS:
        x[name] = x[name][rows]
    x["state"] = x["state"][slot:slot + 1]
    x.pop("state_indices", None)
    if "has_initial_state" in x:
        x["has_initial_state"] = x["has_initial_state"][s:s + 1]
    return Case(case.op, x, dict(case.params, alone=s, num_seqs=1), case.seed)


def _part(case: Case, result, s: int, slot: int):
    out = result[0]
    if "cu_seqlens" in case.inputs:
        cu = np.asarray(case.inputs["cu_seqlens"])
        out = out[int(cu[s]):int(cu[s + 1])]
    else:
        out = out[s:s + 1]
    return type(result)(out, result[1][slot:slot + 1])


def _no_leakage_test(op: str):
    @conformance_test(op=op, layer="property", clauses=("RS-7", "RS-34"))
    def test(kvc):
        """Each row / sequence of a batch, run alone in a one-row pool, gets what it got in the batch:
        no dependence on the other rows, their order, the batch size or its slot (RS-7, RS-34c)."""
        variants = gdn.VARIANTS[op]
        variant = variants[1] if "state_indices" in kvc.claims().features else variants[0]
        claims = kvc.claims(features=variant.features)

        def body(case):
            batch = kvc.call(case)
            slots = case.inputs.get("state_indices")
            for s in range(case.params["num_seqs"]):
                slot = s if slots is None else int(slots[s])
                if slot < 0:
                    continue
                alone = _alone(case, s, slot)
                kvc.expect(alone, kvc.call(alone), _part(case, batch, s, slot), what=f"row {s} of the batched call")
        kvc.for_all(gdn.STRATEGIES[op](claims, variant), body, budget=0.4)
    return test


test_gdn_update_no_leakage = _no_leakage_test(UPDATE)
test_gdn_chunked_no_leakage = _no_leakage_test(CHUNKED)


# --- properties: split prefill carrying state == one call (RS-34a) --------------------------------

@st.composite
def _split_points(draw, strategy):
    case = draw(strategy)
    return case, [draw(st.integers(0, n)) for n in case.params["lengths"]]


def _split_test(variant, budget=0.4):
    @conformance_test(op=CHUNKED, layer="property", clauses=("RS-34", "RS-32") + (("RS-17",) if variant.long else ()))
    def test(kvc):
        """Prefill in two calls, the second starting from the pool the first returned, equals one call
        (outputs and states within class R), wherever each sequence is cut (RS-34a)."""
        claims = kvc.claims(features=variant.features)

        def body(drawn):
            case, cuts = drawn
            whole = kvc.call(case)
            cu = np.asarray(case.inputs["cu_seqlens"])
            rows1 = [t for s, c in enumerate(cuts) for t in range(int(cu[s]), int(cu[s]) + c)]
            rows2 = [t for s, c in enumerate(cuts) for t in range(int(cu[s]) + c, int(cu[s + 1]))]
            lens1 = list(cuts)
            lens2 = [int(n) - c for n, c in zip(np.diff(cu), cuts)]
            parts = []
            for rows, lens in ((rows1, lens1), (rows2, lens2)):
                x = dict(case.inputs)
                for name in TOKENS:
                    x[name] = x[name][rows]
                x["cu_seqlens"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
                parts.append(x)
            r1 = kvc.call(Case(CHUNKED, parts[0], dict(case.params, part=1)))
            x2 = dict(parts[1], state=r1[1])
            x2.pop("has_initial_state", None)   # the first call wrote every live sequence's row
            r2 = kvc.call(Case(CHUNKED, x2, dict(case.params, part=2)))
            out = np.zeros(np.shape(whole[0]), dtype=np.asarray(r2[0]).dtype)
            out[rows1] = r1[0]
            out[rows2] = r2[0]
            kvc.expect(case, GatedDeltaScan(out, r2[1]), whole, what="one call over all tokens")
        kvc.for_all(_split_points(gdn.STRATEGIES[CHUNKED](claims, variant)), body, budget=budget)
    return test


test_gdn_chunked_split_calls = _split_test(gdn.GDN_CHUNKED_VARIANTS[0])
test_gdn_chunked_split_calls_long = _split_test(rs.column(CHUNKED, "long"), 0.12)


# --- errors: malformed input is rejected ------------------------------------------------------------

def _rejects_test(op: str):
    rules = gdn_bad.RULES[op]

    @conformance_test(op=op, layer="errors", clauses=malformed.clauses_of(rules))
    @pytest.mark.parametrize("rule", rules, ids=str)
    def test(kvc, rule):
        """One argument rule broken on a valid case (shapes, head sharing, scale, flags, slots, packing):
        the backend must raise the reference's ValueError/TypeError naming the argument."""
        malformed.check_rejects(kvc, gdn_bad, op, rule)
    return test


test_gdn_update_rejects = _rejects_test(UPDATE)
test_gdn_chunked_rejects = _rejects_test(CHUNKED)
