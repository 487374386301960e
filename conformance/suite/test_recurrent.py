"""Conformance suite for spec/recurrent.md: `causal_conv1d_update`, `selective_state_update`,
`ssd_chunked_scan` and `rwkv6_wkv` over a slot pool.

Layers: hand-worked golden cases (the arithmetic is written next to each), Hypothesis differential tests
against the reference (one per features-matrix column), and oracle-free properties run through the
backend only (test_recurrent_properties.py): chunked == token by token (RS-18), no leakage between batch
rows (RS-7), split prefill carrying state == one call (RS-12, RS-18, RS-20). The `long` column of every differential test reaches
the sizes where kernels switch path (decode batches of hundreds of rows, 257+ channels, state sizes past
128, hundreds to thousands of tokens under chunk hints up to 256, real head dims) and its `edges` tier, as
the `_long` properties, the chunk / window ends of 8, 16 and 64 tokens; the `range` column the values at
the thresholds the spec pins (strategies/recurrent_reach.py, spec/recurrent.md section 6). Error inputs: slot
addressing (RS-2, RS-4), pool dtypes (RS-6) and the argument rules of each kernel, broken alone, are
rejected with the reference's ValueError/TypeError naming the argument. The store (RS-21 … RS-27) is the
op `recurrent_store_step`, checked in test_recurrent_store.py; the conv layouts (RS-13) are reference
functions, not backend ops, and are tested in tests/reference.
"""
from __future__ import annotations

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
from kvconform.conformance.strategies.malformed import recurrent as rs_bad
from kvconform.conformance.strategies.values import reseeded
from kvconform.reference.recurrent import WKV6, ConvUpdate, SelectiveStateUpdate, SSDScan

SUITE_OPS = ('causal_conv1d_update', 'rwkv6_wkv', 'selective_state_update', 'ssd_chunked_scan')

F32, NAN = np.float32, np.nan
L2 = math.log(2.0)   # softplus(0) = ln 2; with A = -1 the decay exp(-ln 2) is 1/2


#: numerics every compared recurrent case applies (compare_outputs and the family's CHECKS): NU-1 upcast, NU-2
#: float64 reference, NU-3 required precision, NU-4 / NU-R1 class E rows and windows, NU-6 / NU-R2 class R
#: outputs and states, NU-7 non-finite, NU-8 floors, NU-9 bounded inputs
NUMERICS = ("NU-1", "NU-2", "NU-3", "NU-4", "NU-6", "NU-7", "NU-8", "NU-9", "NU-R1", "NU-R2")


def _clauses(variants) -> tuple[str, ...]:
    snapshots = ("NU-R4",) if any("snapshots" in v.features for v in variants) else ()   # RS-19 snapshots
    return tuple(sorted({c for v in variants for c in v.clauses})) + NUMERICS + snapshots


# --- differential ----------------------------------------------------------------------------------

def _differential(kvc, op, variant):
    base = rs.VARIANTS[op][0]
    snapshots = ("NU-R4",) if "snapshots" in variant.features else ()
    kvc.cite(*dict.fromkeys(base.clauses + variant.clauses + NUMERICS + snapshots))
    claims = kvc.claims(features=variant.features)
    # The reach columns cost more per example: each tier of `long` and the `range` column run fewer.
    for kw, budget in rs.column_runs(op, variant):
        kvc.for_all(rs.STRATEGIES[op](claims, variant, **kw), kvc.check, budget=budget)


@conformance_test(op="causal_conv1d_update", layer="differential", clauses=_clauses(rs.CONV_VARIANTS))
@pytest.mark.parametrize("variant", rs.CONV_VARIANTS, ids=str)
def test_conv1d_differential(kvc, variant):
    _differential(kvc, "causal_conv1d_update", variant)


@conformance_test(op="selective_state_update", layer="differential", clauses=_clauses(rs.SSU_VARIANTS))
@pytest.mark.parametrize("variant", rs.SSU_VARIANTS, ids=str)
def test_selective_state_update_differential(kvc, variant):
    _differential(kvc, "selective_state_update", variant)


@conformance_test(op="ssd_chunked_scan", layer="differential", clauses=_clauses(rs.SSD_VARIANTS))
@pytest.mark.parametrize("variant", rs.SSD_VARIANTS, ids=str)
def test_ssd_chunked_scan_differential(kvc, variant):
    _differential(kvc, "ssd_chunked_scan", variant)


@conformance_test(op="rwkv6_wkv", layer="differential", clauses=_clauses(rs.RWKV_VARIANTS))
@pytest.mark.parametrize("variant", rs.RWKV_VARIANTS, ids=str)
def test_rwkv6_differential(kvc, variant):
    _differential(kvc, "rwkv6_wkv", variant)


# --- poison and anti-gaming properties ------------------------------------------------------------
# Clean cases in the differential tests; poison (NaN canary rows, NaN/inf fresh rows, padding inputs)
# is its own property, in the columns that have such locations.

def _poison_variants(op):
    return tuple(v for v in rs.VARIANTS[op] if v.name in ("base", "mamba1", "padding_slots", "initial_states"))


def _poison_test(op, clauses):
    @conformance_test(op=op, layer="property", clauses=clauses + ("NU-11",))
    @pytest.mark.parametrize("variant", _poison_variants(op), ids=str)
    def test(kvc, variant):
        claims = kvc.claims(features=variant.features)
        kvc.for_all(rs.STRATEGIES[op](claims, variant), kvc.check_poison, budget=0.4)
    return test


def _history_test(op):
    @conformance_test(op=op, layer="property", clauses=("RS-1", "RS-8", "NU-12"))
    def test(kvc):
        variant = rs.VARIANTS[op][0]
        claims = kvc.claims(features=variant.features)
        kvc.for_all(st.tuples(rs.STRATEGIES[op](claims, variant), st.integers(0, 2**32 - 1)),
                    lambda c: kvc.check_history(c[0], reseeded(c[0], rs.HISTORY_INPUTS[op], c[1])), budget=0.2)
    return test


test_conv1d_poison = _poison_test("causal_conv1d_update", ("RS-3", "RS-4"))
test_selective_state_update_poison = _poison_test("selective_state_update", ("RS-3", "RS-4"))
test_ssd_chunked_scan_poison = _poison_test("ssd_chunked_scan", ("RS-3", "RS-4", "RS-5"))
test_rwkv6_poison = _poison_test("rwkv6_wkv", ("RS-3", "RS-4", "RS-5"))
test_conv1d_call_history = _history_test("causal_conv1d_update")
test_selective_state_update_call_history = _history_test("selective_state_update")
test_ssd_chunked_scan_call_history = _history_test("ssd_chunked_scan")
test_rwkv6_call_history = _history_test("rwkv6_wkv")


# --- golden cases ----------------------------------------------------------------------------------
# Each golden is a `Golden` (conformance/goldens.py): its builder takes the optional features to turn on
# (each subset a restatement whose values stay exact) and returns the case and its hand-worked value; the
# features it always uses are required; `goldens.run` restates it in the options the backend claims and
# requires exactly the dimensions its case uses (tests/engine/test_golden_requirements.py checks both).

def _pool(rows, shape_tail):
    """A float32 pool of the given rows (None = NaN canary row, which must come back bitwise, RS-4)."""
    pool = np.full((len(rows),) + shape_tail, NAN, dtype=F32)
    for i, row in enumerate(rows):
        if row is not None:
            pool[i] = np.reshape(row, shape_tail)
    return pool


def _with_rows(pool, **rows):
    """The expected pool: a copy with some slots replaced, each rounded once to float32 (RS-6)."""
    out = pool.copy()
    for slot, row in rows.items():
        out[int(slot[1:])] = np.reshape(np.asarray(row, dtype=np.float64), pool.shape[1:]).astype(pool.dtype)
    return out


def golden_conv_decode(options):
    # W = 3, taps [1, 10, 100] (tap W-1 on the newest input). Row 0: window [1, 2, 3] -> 1 + 20 + 300
    # = 321, new row [2, 3]; row 1: window [5, 6, 7] -> 5 + 60 + 700 = 765, new row [6, 7] (RS-11, RS-12)
    pool = _pool([[1, 2], [5, 6], None], (1, 2))
    case = Case("causal_conv1d_update", dict(x=np.array([[3], [7]], F32), conv_state=pool,
                                             weight=np.array([[1, 10, 100]], F32)), {})
    return case, ConvUpdate(np.array([[321.0], [765.0]]), _with_rows(pool, s0=[2, 3], s1=[6, 7]))


def golden_conv_multi_token(options):
    # T = 2 tokens [3, 4] after the window [1, 2]: outputs 1 + 20 + 300 = 321 and 2 + 30 + 400 = 432;
    # the new row is the last W-1 = 2 inputs [3, 4] (RS-10, RS-12)
    pool = _pool([[1, 2], None], (1, 2))
    case = Case("causal_conv1d_update", dict(x=np.array([[[3], [4]]], F32), conv_state=pool,
                                             weight=np.array([[1, 10, 100]], F32)), {})
    return case, ConvUpdate(np.array([[[321.0], [432.0]]]), _with_rows(pool, s0=[3, 4]))


def golden_conv_padding(options):
    # state_indices [-1, 2]: row 0 is padding (NaN input, output 0, nothing written); row 1 uses slot 2:
    # window [1, 2, 3] -> 321, slot 2 becomes [2, 3]; slots 0 and 1 (NaN canary) unchanged (RS-2 … RS-4)
    pool = _pool([[8, 9], None, [1, 2]], (1, 2))
    case = Case("causal_conv1d_update", dict(x=np.array([[NAN], [3]], F32), conv_state=pool,
                                             weight=np.array([[1, 10, 100]], F32),
                                             state_indices=np.array([-1, 2], np.int32)), {})
    return case, ConvUpdate(np.array([[0.0], [321.0]]), _with_rows(pool, s2=[2, 3]))


def golden_conv_bias_silu(options):
    # window [1, 2, 3] -> 321; with the bias -320 -> 1; silu(a) = a / (1 + e^-a): silu(1) = 1 / (1 + e^-1),
    # silu(321) = 321 / (1 + e^-321) (RS-9, RS-11)
    pool = _pool([[1, 2]], (1, 2))
    kw = {}
    acc = 321.0
    if "bias" in options:
        kw["bias"], acc = np.array([-320], F32), 1.0
    if "silu" in options:
        kw["activation"], acc = "silu", acc / (1.0 + math.exp(-acc))
    case = Case("causal_conv1d_update", dict(x=np.array([[3]], F32), conv_state=pool,
                                             weight=np.array([[1, 10, 100]], F32), **kw), {})
    return case, ConvUpdate(np.array([[acc]]), _with_rows(pool, s0=[2, 3]))


def golden_ssu_mamba1(options):
    # A = -1; with softplus dt = 0 -> dt' = ln 2 (RS-14), decay 1/2; without, dt = dt' = 1/2, decay e^-1/2.
    # S = 2: S' = 2 decay + dt' * 3 * 4; y = S' C (C = 1/2), + D x = 3 with D = 1 (skip_d), times
    # silu(2) = 2 / (1 + e^-2) with z = 2 (z_gate) (RS-15)
    pool = _pool([[2.0], None], (1, 1))
    softplus = "dt_softplus" in options
    dtp, dt = (L2, 0.0) if softplus else (0.5, 0.5)
    state = 2.0 * math.exp(-dtp) + dtp * 12.0
    y = state * 0.5
    kw = dict(dt_softplus=True) if softplus else {}
    if "skip_d" in options:
        kw["D"], y = np.array([1], F32), y + 3.0
    if "z_gate" in options:
        kw["z"], y = np.array([[2]], F32), y * 2.0 / (1.0 + math.exp(-2.0))
    case = Case("selective_state_update", dict(
        state=pool, x=np.array([[3]], F32), dt=np.array([[dt]], F32), A=np.array([[-1]], F32),
        B=np.array([[4]], F32), C=np.array([[0.5]], F32), **kw), {})
    return case, SelectiveStateUpdate(np.array([[y]]), _with_rows(pool, s0=[state]))


def golden_ssu_mamba2_groups(options):
    # H = 4 heads, G = 2 groups: heads 0, 1 read group 0 (B 1, C 2), heads 2, 3 read group 1 (B 10, C 3).
    # From a zero state with dt' = 1: S' = x B = [1, 1, 10, 10], y = S' C = [2, 2, 30, 30] (RS-16).
    # A tiled h % G mapping would give [2, 30, 2, 30].
    pool = _pool([np.zeros(4)], (4, 1, 1))
    case = Case("selective_state_update", dict(
        state=pool, x=np.ones((1, 4, 1), F32), dt=np.ones((1, 4), F32), A=-np.ones(4, F32),
        B=np.array([[[1], [10]]], F32), C=np.array([[[2], [3]]], F32)), {})
    return case, SelectiveStateUpdate(np.array([[[2.0], [2.0], [30.0], [30.0]]]),
                                      _with_rows(pool, s0=[1, 1, 10, 10]))


def golden_ssu_padding(options):
    # state_indices [-1, 1]: row 0 is padding (NaN inputs: output exactly 0, no slot written, RS-3); row 1
    # updates slot 1 (S = 2, dt' = 1/2, A = -1, x = 3, B = 4): S' = 2 e^-1/2 + 6, y = S' / 2 (C = 1/2).
    # Slot 0 (a NaN canary) and slot 2 come back bit for bit (RS-4).
    pool = _pool([None, [2.0], [7.0]], (1, 1))
    state = 2.0 * math.exp(-0.5) + 6.0
    case = Case("selective_state_update", dict(
        state=pool, x=np.array([[NAN], [3]], F32), dt=np.array([[NAN], [0.5]], F32), A=np.array([[-1]], F32),
        B=np.array([[NAN], [4]], F32), C=np.array([[NAN], [0.5]], F32),
        state_indices=np.array([-1, 1], np.int32)), {})
    return case, SelectiveStateUpdate(np.array([[0.0], [state * 0.5]]), _with_rows(pool, s1=[state]))


def _ssd_golden_inputs(chunk_size, softplus):
    # H = P = N = G = 1, A = -1. With softplus dt = 0 -> dt' = ln 2, decay d = 1/2 per token; without,
    # dt = dt' = 1/2, d = e^-1/2.
    # seq 0 (slot 0, S0 = 4): x 2, B 1, C 1 -> S = 4 d + 2 dt', y = S; then x 1, B 4, C 1/2 ->
    #   S = (4 d + 2 dt') d + 4 dt', y = S / 2.
    # seq 1 (slot 1, empty): writes its starting state 7 back (RS-18).
    # seq 2 (slot 2, S0 = -2): x 4, B 1, C 2 -> S = -2 d + 4 dt', y = 2 S.  Slot 3: NaN canary.
    dtp, dt = (L2, 0.0) if softplus else (0.5, 0.5)
    d = math.exp(-dtp)
    pool = _pool([[4.0], [7.0], [-2.0], None], (1, 1, 1))
    t = lambda *v: np.array(v, F32).reshape(len(v), 1, 1)   # noqa: E731
    inputs = dict(state=pool, x=t(2, 1, 4), dt=np.full((3, 1), dt, F32), A=np.array([-1], F32), B=t(1, 4, 1),
                  C=t(1, 0.5, 2), cu_seqlens=np.array([0, 2, 2, 3], np.int32), chunk_size=chunk_size,
                  **(dict(dt_softplus=True) if softplus else {}))
    s0a = 4 * d + 2 * dtp
    s0b = s0a * d + 4 * dtp
    s2 = -2 * d + 4 * dtp
    out = np.array([s0a, s0b / 2, 2 * s2]).reshape(3, 1, 1)
    return inputs, out, _with_rows(pool, s0=[s0b], s1=[7.0], s2=[s2])


def _golden_ssd(chunk_size):
    def build(options):
        inputs, out, pool = _ssd_golden_inputs(chunk_size, "dt_softplus" in options)
        return Case("ssd_chunked_scan", inputs, {}), SSDScan(out, pool, np.zeros((3, 0, 1, 1, 1), F32))
    return build


def golden_ssd_fresh_snapshots(options):
    # One sequence of 2 tokens in slot 0, which holds NaN, with has_initial_state False: it starts from
    # exact zeros (RS-5). dt' = ln 2 (softplus of 0) or 1/2, decay d = e^-dt': x 2, B 1, C 1 -> S = 2 dt',
    # y = S; x 1, B 4, C 1/2 -> S = 2 dt' d + 4 dt', y = S / 2. Snapshots r = 0, 1, 2: [S, 2 dt', 0] (RS-19).
    softplus = "dt_softplus" in options
    dtp, dt = (L2, 0.0) if softplus else (0.5, 0.5)
    d = math.exp(-dtp)
    s1, s2 = 2 * dtp, 2 * dtp * d + 4 * dtp
    pool = _pool([None, [9.0]], (1, 1, 1))
    t = lambda *v: np.array(v, F32).reshape(len(v), 1, 1)   # noqa: E731
    inputs = dict(state=pool, x=t(2, 1), dt=np.full((2, 1), dt, F32), A=np.array([-1], F32), B=t(1, 4),
                  C=t(1, 0.5), cu_seqlens=np.array([0, 2], np.int32), has_initial_state=np.array([False]),
                  num_snapshots=3, **(dict(dt_softplus=True) if softplus else {}))
    snaps = np.array([s2, s1, 0.0]).astype(F32).reshape(1, 3, 1, 1, 1)
    return (Case("ssd_chunked_scan", inputs, {}),
            SSDScan(np.array([s1, s2 / 2]).reshape(2, 1, 1), _with_rows(pool, s0=[s2]), snaps))


def golden_rwkv6(options):
    # K = 2, V = 1, S0 = [2, 1]. Token 0: r [1, 1], k [1, 2], v 3, u [1/2, 0], w [1/2, 1/4]:
    #   y = 1 * (2 + 1/2 * 1 * 3) + 1 * (1 + 0) = 4.5;  S = [2/2 + 1 * 3, 1/4 + 2 * 3] = [4, 6.25]
    # Token 1: r [2, 0], k [1, 1], v 1, w [1/2, 1/2]:
    #   y = 2 * (4 + 1/2 * 1 * 1) = 9;  S = [4/2 + 1, 6.25/2 + 1] = [3, 4.125]   (RS-20)
    pool = _pool([[2.0, 1.0], None], (1, 2, 1))
    tok = lambda rows: np.array(rows, F32).reshape(len(rows), 1, -1)   # noqa: E731  [T, H=1, *]
    inputs = dict(r=tok([[1, 1], [2, 0]]), k=tok([[1, 2], [1, 1]]), v=tok([[3], [1]]),
                  w=tok([[.5, .25], [.5, .5]]), u=np.array([[.5, 0]], F32), state=pool,
                  cu_seqlens=np.array([0, 2], np.int32))
    return Case("rwkv6_wkv", inputs, {}), WKV6(np.array([4.5, 9.0]).reshape(2, 1, 1),
                                               _with_rows(pool, s0=[3.0, 4.125]))


_CONV, _SSU, _SSD, _RWKV = "causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv"
_GOLDENS = (
    Golden("conv_decode", _CONV, golden_conv_decode, ("RS-10", "RS-11", "RS-12", "RS-4")),
    Golden("conv_multi_token", _CONV, golden_conv_multi_token, ("RS-10", "RS-12"), ("multi_token",)),
    Golden("conv_padding", _CONV, golden_conv_padding, ("RS-2", "RS-3", "RS-4"), ("state_indices", "padding_slots")),
    Golden("conv_bias_silu", _CONV, golden_conv_bias_silu, ("RS-9", "RS-11"), options=("bias", "silu")),
    Golden("ssu_mamba1", _SSU, golden_ssu_mamba1, ("RS-9", "RS-14", "RS-15", "RS-6"),
           options=("dt_softplus", "skip_d", "z_gate")),
    Golden("ssu_mamba2_groups", _SSU, golden_ssu_mamba2_groups, ("RS-16",), ("mamba2", "grouped_bc")),
    Golden("ssu_padding", _SSU, golden_ssu_padding, ("RS-2", "RS-3", "RS-4"), ("state_indices", "padding_slots")),
    Golden("ssd_chunk1", _SSD, _golden_ssd(1), ("RS-17", "RS-18", "RS-4"), options=("dt_softplus",)),
    Golden("ssd_chunk64", _SSD, _golden_ssd(64), ("RS-17", "RS-18", "RS-4"), options=("dt_softplus",)),
    Golden("ssd_fresh_snapshots", _SSD, golden_ssd_fresh_snapshots, ("RS-5", "RS-19"),
           ("initial_states", "snapshots"), ("dt_softplus",)),
    Golden("rwkv6", _RWKV, golden_rwkv6, ("RS-20", "RS-4")),
)
_BY_NAME = {g.name: g for g in _GOLDENS}
#: restated at real sizes (RS-42: channels past a 64-lane tile, Mamba-2's headdim 64 and d_state 128,
#: RWKV-6's head size 64), so that a backend claiming only real sizes runs goldens too
GOLDENS = _GOLDENS + (
    goldens.restated_at(_BY_NAME["conv_decode"], "conv_decode_real", dict(
        x=(2, 64), conv_state=(3, 64, 2), weight=(64, 3), out=(2, 64))),
    goldens.restated_at(_BY_NAME["ssu_mamba2_groups"], "ssu_mamba2_groups_real", dict(
        state=(1, 4, 64, 128), x=(1, 4, 64), B=(1, 2, 128), C=(1, 2, 128), out=(1, 4, 64))),
    goldens.restated_at(_BY_NAME["ssd_chunk64"], "ssd_chunk64_real", dict(
        state=(4, 1, 64, 128), x=(3, 1, 64), B=(3, 1, 128), C=(3, 1, 128), out=(3, 1, 64),
        snapshots=(3, 0, 1, 64, 128))),
    goldens.restated_at(_BY_NAME["rwkv6"], "rwkv6_real", dict(
        r=(2, 1, 64), k=(2, 1, 64), w=(2, 1, 64), v=(2, 1, 64), u=(1, 64), state=(2, 1, 64, 64), out=(2, 1, 64)),
        fills=dict(w=1.0)),
)


def _golden_test(op):
    return goldens.suite_test(op, GOLDENS, rs.USES[op], rs.conventions)


test_conv1d_golden = _golden_test(_CONV)
test_selective_state_update_golden = _golden_test(_SSU)
test_ssd_chunked_scan_golden = _golden_test(_SSD)
test_rwkv6_golden = _golden_test(_RWKV)


# --- errors: malformed input is rejected (RS-2, RS-4, RS-6, RS-10, RS-14 … RS-20) -----------------

def _rejects_test(op: str):
    rules = rs_bad.RULES[op]

    @conformance_test(op=op, layer="errors", clauses=malformed.clauses_of(rules))
    @pytest.mark.parametrize("rule", rules, ids=str)
    def test(kvc, rule):
        """One argument rule of the op broken on a valid case (a slot out of range or used twice, a pool
        dtype, a shape): the backend must raise the reference's ValueError/TypeError naming the argument,
        never write a row or return a result."""
        malformed.check_rejects(kvc, rs_bad, op, rule)
    return test


test_conv1d_rejects = _rejects_test("causal_conv1d_update")
test_selective_state_update_rejects = _rejects_test("selective_state_update")
test_ssd_chunked_scan_rejects = _rejects_test("ssd_chunked_scan")
test_rwkv6_rejects = _rejects_test("rwkv6_wkv")
