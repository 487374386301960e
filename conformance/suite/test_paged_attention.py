"""Conformance suite for spec/paged_attention.md: `ragged_paged_attention` and `write_kv`.

Layers: hand-worked golden cases (expected values from the arithmetic written here), Hypothesis
differential tests against the reference (one per features-matrix column), poison and call-history
properties, and error inputs (the oracle-free properties and the stateful append/attend machine are in
test_paged_attention_properties.py):
every precondition of PA-26 .. PA-29, PA-42, PA-44 and PA-46 broken alone must be rejected with the
reference's ValueError/TypeError naming the argument, while the entries PA-30 exempts from checks (and
any negative slot, PA-41) must be accepted.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden, suite_test
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import goldens, malformed
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies.malformed import kv_write as kv_bad
from kvconform.conformance.strategies.malformed import paged_attention as pa_bad
from kvconform.conformance.strategies.values import reseeded

SUITE_OPS = ('ragged_paged_attention', 'write_kv')
BASE_CLAUSES = pa.ATTENTION_VARIANTS[0].clauses
#: clauses every compared case of the op checks: the op and its output values (PA-1, PA-20; empty
#: sequences and rows that always see a key are drawn, PA-8, PA-9; the logit order PA-13) and the numerics
#: compare_outputs applies (NU-1 upcast, NU-2 float64 reference, NU-3 required precision, NU-6 / NU-PA1 /
#: NU-PA2 class R, NU-7 non-finite, NU-8 floors, NU-9 bounded inputs)
ATTENTION_EVERY_CASE = ("PA-1", "PA-8", "PA-9", "PA-13", "PA-20", "NU-1", "NU-2", "NU-3", "NU-6", "NU-7",
                        "NU-8", "NU-9", "NU-PA1", "NU-PA2")
WRITE_EVERY_CASE = ("NU-1", "NU-4", "NU-7", "NU-9", "NU-PA3")     # write_kv results are class E
ALL_ATTENTION_CLAUSES = tuple(sorted({c for v in pa.ATTENTION_VARIANTS for c in v.clauses})) + ATTENTION_EVERY_CASE
ALL_WRITE_CLAUSES = tuple(sorted({c for v in pa.WRITE_VARIANTS for c in v.clauses})) + WRITE_EVERY_CASE
F32, NAN = np.float32, np.nan


# --- golden cases ----------------------------------------------------------------------------------

def _one_seq(q_rows, keys, values, *, page_size=2, kv_dtype=np.float32, pad_rows=0, **options):
    """A single sequence: q [q_len, Hq, D], keys/values [kv_len, Hkv, D] laid out on pages 1.. (page 0
    and the tail of the last page hold NaN poison, PA-24), with `pad_rows` NaN rows after q (PA-25)."""
    q = np.asarray(q_rows, dtype=np.float32)
    k = np.asarray(keys, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    kv_len, hkv, d = k.shape
    n_pages = -(-kv_len // page_size)
    k_pages = np.full((n_pages + 1, page_size, hkv, d), NAN, dtype=np.float32)
    v_pages = np.full_like(k_pages, NAN)
    for j in range(kv_len):   # token j on physical page n_pages - j // page_size (reversed table)
        k_pages[n_pages - j // page_size, j % page_size] = k[j]
        v_pages[n_pages - j // page_size, j % page_size] = v[j]
    table = np.array([[n_pages - p for p in range(n_pages)]], dtype=np.int32)
    if pad_rows:
        q = np.concatenate([q, np.full((pad_rows,) + q.shape[1:], NAN, dtype=np.float32)])
    inputs = dict(q=q, k_pages=k_pages.astype(kv_dtype), v_pages=v_pages.astype(kv_dtype),
                  kv_lens=np.array([kv_len], np.int32), page_indices=table,
                  cu_q_lens=np.array([0, len(q_rows)], np.int32), num_seqs=1, **options)
    return Case("ragged_paged_attention", inputs, {})   # dtypes and sizes: read off the inputs (goldens.uses)


def _softmax_mix(logits, values, sink=None):
    """sum_j e^{s_j} v_j / (sum_j e^{s_j} [+ e^{sink}]), written out for the hand-worked cases."""
    weights = [math.exp(s) for s in logits]
    total = sum(weights) + (math.exp(sink) if sink is not None else 0.0)
    return [sum(w * v[i] for w, v in zip(weights, values)) / total for i in range(len(values[0]))]


def _soft_capped(s: float, cap: float) -> float:
    return cap * math.tanh(s / cap)


def golden_decode_two_keys(options):
    # s = [0, 2] with sm_scale 1: out = (1*v0 + e^2*v1) / (1 + e^2)   (PA-7, PA-14). Restated with a window
    # of 2 (both keys inside, PA-15), a soft cap of 4 (s1 = 4 tanh(1/2), PA-16), a sink of logit 0 (PA-17)
    on = dict(sliding_window=2, soft_cap=4.0, sinks=np.array([0.0], F32))
    case = _one_seq([[[1, 0]]], [[[0, 0]], [[2, 0]]], [[[1, 0]], [[0, 1]]], sm_scale=1.0, pad_rows=1,
                    **{k: v for k, v in on.items() if k in options})
    s1 = _soft_capped(2.0, 4.0) if "soft_cap" in options else 2.0
    row = _softmax_mix([0, s1], [[1, 0], [0, 1]], sink=0.0 if "sinks" in options else None)
    return case, goldens.expected_rows(case, [[row]])


def golden_prefill_causal(options):
    # q_len 2 = kv_len: row 0 (position 0) sees key 0 only -> v0; row 1 sees both (PA-6, PA-7). Restated
    # with a window of 2 (every key of both rows inside, PA-15)
    window = dict(sliding_window=2) if "sliding_window" in options else {}
    case = _one_seq([[[1, 0]], [[1, 0]]], [[[0, 0]], [[2, 0]]], [[[1, 0]], [[0, 1]]], sm_scale=1.0, **window)
    return case, goldens.expected_rows(case, [[[1.0, 0.0]], [_softmax_mix([0, 2], [[1, 0], [0, 1]])]])


def golden_gqa(options):
    # Hq 4, Hkv 2, one key: heads 0, 1 read KV head 0 (v = [1, 0]); heads 2, 3 read KV head 1 (PA-12).
    # Restated with a window of 1 (the key inside, PA-15), a soft cap of 4 (logit 0 stays 0, PA-16) and
    # sinks of logit 0 (each takes half the mass, PA-17)
    on = dict(sliding_window=1, soft_cap=4.0, sinks=np.zeros(4, F32))
    case = _one_seq([[[1, 0], [1, 0], [1, 0], [1, 0]]], [[[0, 0], [0, 0]]], [[[1, 0], [0, 1]]],
                    **{k: v for k, v in on.items() if k in options})
    half = 0.5 if "sinks" in options else 1.0
    return case, goldens.expected_rows(case, [[[half, 0], [half, 0], [0, half], [0, half]]])


def golden_sliding_window(options):
    # kv_len 3, decode row at position 2, W = 2: keys 1 and 2 visible, equal logits -> (v1 + v2) / 2 (PA-15)
    case = _one_seq([[[1, 0]]], [[[0, 0]]] * 3, [[[4, 0]], [[0, 2]], [[0, 6]]], sliding_window=2)
    return case, goldens.expected_rows(case, [[[0.0, 4.0]]])


def golden_sinks(options):
    # one key with logit 0 and a sink logit 0: the sink takes half the mass, out = v / 2 (PA-17)
    case = _one_seq([[[1, 0]]], [[[0, 0]]], [[[2, 4]]], sinks=np.array([0.0], np.float32))
    return case, goldens.expected_rows(case, [[[1.0, 2.0]]])


def golden_soft_cap(options):
    # s = [0, 1000] capped at 5: 5 * tanh(200) = 5 in float64, out = (v0 + e^5 v1) / (1 + e^5) (PA-16)
    case = _one_seq([[[1000, 0]]], [[[0, 0]], [[1, 0]]], [[[1, 0]], [[0, 1]]], sm_scale=1.0, soft_cap=5.0)
    return case, goldens.expected_rows(case, [[_softmax_mix([0, _soft_capped(1000.0, 5.0)], [[1, 0], [0, 1]])]])


def golden_fp8_scale(options):
    # float8_e4m3fn pages hold k = 0, v = 1.5; scales 2: dequantized v = 3 for the only key (PA-18, PA-19);
    # restated with the scales given per KV head (float32[Hkv], PA-48)
    scale = np.array([2.0], F32) if "per_head_scales" in options else 2.0
    case = _one_seq([[[1, 0]]], [[[0, 0]]], [[[1.5, -1.5]]], kv_dtype=ml_dtypes.float8_e4m3fn,
                    k_scale=scale, v_scale=scale)
    return case, goldens.expected_rows(case, [[[3.0, -3.0]]])


def golden_empty_sequence_first(options):
    # sequence 0 has no query row and no key (PA-8), its block-table row names page 1 (NaN: it can see no
    # key there, PA-24); sequence 1's one row sees its one key on page 2 alone: out = v = [2, 4] (PA-5,
    # PA-10). A kernel that lets sequence 1 read what it fetched for sequence 0 gives NaN.
    k_pages = np.full((3, 2, 1, 2), NAN, F32)
    v_pages = np.full_like(k_pages, NAN)
    k_pages[2, 0, 0], v_pages[2, 0, 0] = [0.0, 0.0], [2.0, 4.0]
    case = Case(RPA, dict(q=np.array([[[1.0, 0.0]]], F32), k_pages=k_pages, v_pages=v_pages,
                          kv_lens=np.array([0, 1], np.int32), page_indices=np.array([[1], [2]], np.int32),
                          cu_q_lens=np.array([0, 0, 1], np.int32), num_seqs=2), {})
    return case, goldens.expected_rows(case, [[[2.0, 4.0]]])


RPA = "ragged_paged_attention"
#: features: what every restatement uses; options: what a restatement may add (the backend's claimed ones);
#: both exactly what the inputs use (goldens.features_used, tests/engine/test_golden_requirements.py).
#: Options never change a dtype (a quantized restatement would pick fp8 or int8 pages and skip on a backend
#: claiming only the other). Every golden holds NaN in its unused page and slots (PA-24).
_ATTENTION_GOLDENS = (
    Golden("decode_two_keys", RPA, golden_decode_two_keys, ("PA-7", "PA-14", "PA-24", "PA-25"),
           options=("sliding_window", "soft_cap", "sinks")),
    Golden("prefill_causal", RPA, golden_prefill_causal, ("PA-6", "PA-7", "PA-24"), options=("sliding_window",)),
    Golden("gqa", RPA, golden_gqa, ("PA-12", "PA-24"), ("gqa",), ("sliding_window", "soft_cap", "sinks")),
    Golden("sliding_window", RPA, golden_sliding_window, ("PA-15", "PA-24"), ("sliding_window",)),
    Golden("sinks", RPA, golden_sinks, ("PA-17", "PA-24"), ("sinks",)),
    Golden("soft_cap", RPA, golden_soft_cap, ("PA-16", "PA-24"), ("soft_cap",)),
    Golden("fp8_scale", RPA, golden_fp8_scale, ("PA-18", "PA-19", "PA-24"), ("quantized_kv",),
           ("per_head_scales",)),
    Golden("empty_sequence_first", RPA, golden_empty_sequence_first, ("PA-5", "PA-8", "PA-10", "PA-24")),
)


def _pool(dtype, page_size=2):
    return np.zeros((2, page_size, 1, 1), dtype=dtype)


def _write_case(k, v, slots, pages, **scales) -> Case:
    return Case("write_kv", dict(k_pages=pages, v_pages=pages.copy(), k=k, v=v,
                                 slot_mapping=np.array(slots, np.int32), **scales), {})


def golden_write_slots(options):
    # slots [3, -1, 0] on 2 pages of 2: token 0 -> page 1 offset 1, token 1 skipped, token 2 -> page 0
    # offset 0: the k pool in slot order 0..3 becomes [5, 0, 0, 3], v its negation (PA-41, PA-43)
    k = np.array([[[3]], [[NAN]], [[5]]], np.float32)
    case = _write_case(k, -k, [3, -1, 0], _pool(np.float32))
    return case, {"k_pages": np.array([5, 0, 0, 3], np.float32).reshape(2, 2, 1, 1),
                  "v_pages": np.array([-5, 0, 0, -3], np.float32).reshape(2, 2, 1, 1)}   # +0.0 stays +0.0


def golden_write_fp8_rounding(options):
    # e4m3fn near 1 has spacing 1/8: 1.0625 is a tie -> 1.0 (even mantissa), 1.1875 a tie -> 1.25,
    # 1000 saturates to 448; with scale 2, 3.0 / 2 = 1.5 exactly (PA-44); restated with the scales per KV
    # head (float32[Hkv], PA-48)
    fp8 = ml_dtypes.float8_e4m3fn
    k = np.array([[[1.0625]], [[1.1875]], [[1000.0]], [[-1000.0]]], np.float32)
    head = "per_head_scales" in options
    case = _write_case(k, k * 3, [0, 1, 2, 3], _pool(fp8), k_scale=np.array([1.0], F32) if head else 1.0,
                       v_scale=np.array([2.0], F32) if head else 2.0)
    k_expect = np.array([1.0, 1.25, 448.0, -448.0]).astype(fp8).reshape(2, 2, 1, 1)
    # v = 3k / 2: 1.59375 -> 1.625 (spacing 1/8: 1.5, 1.625; 1.59375 is nearer 1.625), 1.78125 -> 1.75,
    # 1500 -> 448, -1500 -> -448
    v_expect = np.array([1.625, 1.75, 448.0, -448.0]).astype(fp8).reshape(2, 2, 1, 1)
    return case, {"k_pages": k_expect, "v_pages": v_expect}


def golden_write_padded_rows(options):
    # PA-50: k/v carry 3 rows, the slot mapping 1: row 0 goes to slot 1; rows 1 and 2 (NaN) are padding,
    # never read, so the pools hold 7 (k) and -7 (v) at slot 1 and nothing else changes
    k = np.array([[[7]], [[NAN]], [[NAN]]], np.float32)
    case = _write_case(k, -k, [1], _pool(np.float32))
    return case, {"k_pages": np.array([0, 7, 0, 0], np.float32).reshape(2, 2, 1, 1),
                  "v_pages": np.array([0, -7, 0, 0], np.float32).reshape(2, 2, 1, 1)}


_WRITE_GOLDENS = (
    Golden("slots_and_skip", "write_kv", golden_write_slots, ("PA-41", "PA-43", "PA-45")),
    Golden("padded_rows", "write_kv", golden_write_padded_rows, ("PA-50", "PA-45")),
    Golden("fp8_rounding", "write_kv", golden_write_fp8_rounding, ("PA-44",), ("quantized_kv",),
           ("per_head_scales",)),
)


def write_at_size(case: Case, expected: dict, head_dim: int = goldens.REAL_HEAD_DIM,
                  page_size: int = goldens.REAL_PAGE_SIZE) -> tuple[Case, dict]:
    """A write_kv golden restated at `head_dim` and `page_size`: slot s of the old layout (page s // P0,
    offset s % P0) becomes page * page_size + offset, k/v and the pools get zero dims (stored zeros), and
    the expected pools move the same way."""
    x = dict(case.inputs)
    old = x["k_pages"].shape[1]

    def moved(pool):
        out = np.zeros((pool.shape[0], page_size) + pool.shape[2:-1] + (head_dim,), pool.dtype)
        out[:, :old, ..., :pool.shape[-1]] = pool
        return out
    slots = np.asarray(x["slot_mapping"])
    x["slot_mapping"] = np.where(slots >= 0, slots // old * page_size + slots % old, slots).astype(slots.dtype)
    x.update(k_pages=moved(x["k_pages"]), v_pages=moved(x["v_pages"]), k=goldens.padded_dims(x["k"], head_dim),
             v=goldens.padded_dims(x["v"], head_dim))
    return Case(case.op, x, dict(case.params), case.seed), {name: moved(pool) for name, pool in expected.items()}


#: every golden in float32 at its own small sizes, and at real sizes (head dim 128, pages of 16: goldens.py)
#: in each dtype where its inputs stay exact, so that a backend taking only real sizes runs goldens (issue 31)
GOLDENS = (_ATTENTION_GOLDENS
           + tuple(r for g in _ATTENTION_GOLDENS for r in goldens.at_real_size(g, goldens.attention_real))
           + _WRITE_GOLDENS + tuple(r for g in _WRITE_GOLDENS for r in goldens.at_real_size(g, write_at_size)))

test_attention_golden = suite_test(RPA, GOLDENS, pa.USES[RPA])
test_write_kv_golden = suite_test("write_kv", GOLDENS, pa.USES["write_kv"])


# --- differential ----------------------------------------------------------------------------------

@conformance_test(op="ragged_paged_attention", layer="differential", clauses=ALL_ATTENTION_CLAUSES)
@pytest.mark.parametrize("variant", pa.ATTENTION_VARIANTS, ids=str)
def test_attention_differential(kvc, variant):
    kvc.cite(*dict.fromkeys(BASE_CLAUSES + variant.clauses + ATTENTION_EVERY_CASE))
    claims = kvc.claims(features=variant.features)
    kvc.for_all(pa.attention_cases(claims, variant), kvc.check, budget=pa.example_share(variant))


@conformance_test(op="write_kv", layer="differential", clauses=ALL_WRITE_CLAUSES)
@pytest.mark.parametrize("variant", pa.WRITE_VARIANTS, ids=str)
def test_write_kv_differential(kvc, variant):
    kvc.cite(*dict.fromkeys(pa.WRITE_VARIANTS[0].clauses + variant.clauses + WRITE_EVERY_CASE))
    claims = kvc.claims(features=variant.features)
    kvc.for_all(pa.write_kv_cases(claims, variant), kvc.check, budget=pa.example_share(variant))


# --- poison and anti-gaming properties ------------------------------------------------------------
# Differential cases are clean; poison in every don't-care location is its own property, so a NaN leak
# and a numeric error are two findings, and the diagnosis names the region that leaks.

POISON_VARIANTS = tuple(v for v in pa.ATTENTION_VARIANTS if v.name in ("base", "sliding_window", "combined",
                                                                        "return_scores", "per_token_scales"))


@conformance_test(op="ragged_paged_attention", layer="property", clauses=("PA-5", "PA-24", "PA-25", "NU-11"))
@pytest.mark.parametrize("variant", POISON_VARIANTS, ids=str)
def test_attention_poison(kvc, variant):
    claims = kvc.claims(features=variant.features)
    kvc.for_all(pa.attention_cases(claims, variant), kvc.check_poison, budget=0.4)


#: poison in skipped tokens, padding rows and unwritten slots: the columns of base-sized calls (the long and
#: range columns' poison is that of the same code paths, at a multiple of the cost)
WRITE_POISON_VARIANTS = tuple(v for v in pa.WRITE_VARIANTS if not (v.long or v.values))


@conformance_test(op="write_kv", layer="property", clauses=("PA-41", "PA-45", "PA-50", "NU-11"))
@pytest.mark.parametrize("variant", WRITE_POISON_VARIANTS, ids=str)
def test_write_kv_poison(kvc, variant):
    claims = kvc.claims(features=variant.features)
    kvc.for_all(pa.write_kv_cases(claims, variant), kvc.check_poison, budget=0.4)


@conformance_test(op="ragged_paged_attention", layer="property", clauses=("PA-7", "PA-14", "NU-12"))
def test_attention_call_history(kvc):
    claims = kvc.claims()
    kvc.for_all(st.tuples(pa.attention_cases(claims, pa.ATTENTION_VARIANTS[0]), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], pa.HISTORY_INPUTS["ragged_paged_attention"],
                                                             c[1])), budget=0.2)


@conformance_test(op="write_kv", layer="property", clauses=("PA-43", "PA-45", "NU-12"))
def test_write_kv_call_history(kvc):
    claims = kvc.claims()
    kvc.for_all(st.tuples(pa.write_kv_cases(claims, pa.WRITE_VARIANTS[0]), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], pa.HISTORY_INPUTS["write_kv"], c[1])),
                budget=0.2)


LAYOUT_VARIANTS = tuple(v for v in pa.ATTENTION_VARIANTS if v.layout)


@conformance_test(op="ragged_paged_attention", layer="property", clauses=("PA-36", "PA-37", "PA-38", "PA-39", "NU-12"))
@pytest.mark.parametrize("variant", LAYOUT_VARIANTS, ids=str)
def test_attention_layout_gives_the_canonical_result(kvc, variant):
    """PA-39: a claimed layout gives the backend's own canonical (separate) result, under the op's checks as
    NU-12 compares a repeated call (atomics differ in the last bits); canonical vs reference: differential."""
    claims = kvc.claims(features=variant.features)
    if variant.layout not in (claims.layouts or ()):
        pytest.skip(f"unsupported: layout {variant.layout!r} is not claimed")
    base = pa.ATTENTION_VARIANTS[0]

    def body(case):
        canonical = kvc.call(case)
        in_layout = pa.in_layout(case, variant.layout)
        kvc.expect(in_layout, kvc.call(in_layout), canonical,
                   what="backend's result for the same cache in the separate layout (PA-39, judged as NU-12)")
    kvc.for_all(pa.attention_cases(claims, base), body, budget=0.4)


# --- errors: malformed input is rejected, ignored input is not checked ----------------------------

@conformance_test(op="ragged_paged_attention", layer="errors", clauses=malformed.clauses_of(pa_bad.ATTENTION_RULES))
@pytest.mark.parametrize("rule", pa_bad.ATTENTION_RULES, ids=str)
def test_attention_rejects(kvc, rule):
    """One precondition of PA-26 .. PA-29 broken on a valid case: the backend must raise the reference's
    ValueError/TypeError, naming the argument (never return a result)."""
    malformed.check_rejects(kvc, pa_bad, "ragged_paged_attention", rule)


@conformance_test(op="write_kv", layer="errors", clauses=malformed.clauses_of(kv_bad.WRITE_RULES))
@pytest.mark.parametrize("rule", kv_bad.WRITE_RULES, ids=str)
def test_write_kv_rejects(kvc, rule):
    """One precondition of PA-42, PA-44, PA-46 broken on a valid case: rejected, naming the argument."""
    malformed.check_rejects(kvc, kv_bad, "write_kv", rule)


JUNK = (-7, -1, 2**31 - 1, -2**31)   # any integer, out of range or not (PA-5, PA-24); P-relative added below


@st.composite
def _junk_in_ignored_entries(draw, claims):
    """A valid attention case plus 1-2 metadata rows past num_seqs and one more page-table column, all
    holding junk: the rows past num_seqs (PA-5) and the table entries past cdiv(kv_len, page_size) (PA-24)
    are ignored, so PA-30 forbids rejecting them, and they must not change a bit of the output."""
    case = draw(pa.attention_cases(claims, pa.ATTENTION_VARIANTS[0]))
    x = case.inputs
    n, P, page_size = int(x["num_seqs"]), x["k_pages"].shape[0], x["k_pages"].shape[1]
    junk = st.sampled_from(JUNK + (P, P + 9))
    extra = draw(st.integers(1, 2))
    kv = np.concatenate([x["kv_lens"], np.zeros(extra, x["kv_lens"].dtype)])
    table = np.concatenate([x["page_indices"], np.zeros((extra, x["page_indices"].shape[1]), np.int32)])
    table = np.concatenate([table, np.zeros((table.shape[0], 1), np.int32)], axis=1)
    cu = np.concatenate([x["cu_q_lens"], np.zeros(extra, x["cu_q_lens"].dtype)])
    for i in range(n, kv.shape[0]):
        kv[i] = draw(junk)
        cu[i + 1] = draw(junk)
        table[i] = draw(junk)
    for i in range(n):
        table[i, -(-int(kv[i]) // page_size):] = draw(junk)
    inputs = dict(x, kv_lens=kv, page_indices=table, cu_q_lens=cu)
    return Case(case.op, inputs, dict(case.params, junk_rows=extra), case.seed)


@conformance_test(op="ragged_paged_attention", layer="errors", clauses=("PA-30", "PA-5", "PA-24"))
def test_attention_rejects_no_ignored_entry(kvc):
    """PA-30: metadata of sequences >= num_seqs and unused page-table entries are not validated (junk,
    out-of-range and negative values there are accepted) and change no output bit (compared with the
    reference under NU-PA1, which ignores them)."""
    kvc.for_all(_junk_in_ignored_entries(kvc.claims()), kvc.check, budget=0.4)


@st.composite
def _any_negative_slot(draw, claims):
    """A valid write_kv case whose skipped tokens use assorted negative slots (at least one skipped token:
    one is appended when none was drawn); their k/v rows hold NaN, which is never read (PA-41)."""
    case = draw(pa.write_kv_cases(claims, pa.WRITE_VARIANTS[0]))
    x = case.inputs
    slots, k, v = x["slot_mapping"].copy(), x["k"], x["v"]
    if not (slots < 0).any():
        slots = np.concatenate([slots, np.full(1, -1, slots.dtype)])
        k = np.concatenate([k, np.full((1,) + k.shape[1:], np.nan, k.dtype)])
        v = np.concatenate([v, np.full((1,) + v.shape[1:], np.nan, v.dtype)])
    for t in np.flatnonzero(slots < 0):
        slots[t] = draw(st.sampled_from((-1, -2, -1000, -2**31)))
    return Case(case.op, dict(x, slot_mapping=slots, k=k, v=v), case.params, case.seed)


@conformance_test(op="write_kv", layer="errors", clauses=("PA-41",))
def test_write_kv_rejects_no_negative_slot(kvc):
    """PA-41: every slot < 0 skips its token, not only -1; such a call is valid and writes nothing there."""
    kvc.for_all(_any_negative_slot(kvc.claims()), kvc.check, budget=0.4)
