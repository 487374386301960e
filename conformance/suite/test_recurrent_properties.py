"""Oracle-free properties of spec/recurrent.md, run through the backend alone: chunked == token by token
(RS-18), no leakage between batch rows (RS-7), split prefill carrying state == one call (RS-12, RS-18,
RS-20); the `_long` variants reach the chunk / window ends of 8, 16 and 64 tokens. The differential,
golden and errors layers of the same ops are in test_recurrent.py."""
from __future__ import annotations

import dataclasses

import hypothesis
import numpy as np
from hypothesis import strategies as st

from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import recurrent as rs
from kvconform.reference.recurrent import ConvUpdate, SSDScan

SUITE_OPS = ('causal_conv1d_update', 'rwkv6_wkv', 'selective_state_update', 'ssd_chunked_scan')



# --- properties: chunked == token by token (RS-18) -------------------------------------------------

def _both(a, b):
    """Claims of two ops intersected (dtypes, pool dtypes): what both may be called with."""
    return dataclasses.replace(a, dtypes=tuple(d for d in a.dtypes if d in b.dtypes),
                               kv_dtypes=tuple(d for d in a.kv_dtypes if d in b.kv_dtypes))


def _token_by_token(kvc, case: Case) -> SSDScan:
    """RS-18's definition run on the backend: one `selective_state_update` (Mamba2) call per token,
    each on a one-row pool holding the sequence's state (fresh rows start from zeros, RS-5)."""
    x = case.inputs
    pool, cu = x["state"], np.asarray(x["cu_seqlens"])
    out = np.zeros(x["x"].shape)
    new_pool = pool.copy()
    flags = x.get("has_initial_state")
    for s in range(cu.shape[0] - 1):
        row = pool[s:s + 1].copy() if flags is None or flags[s] else np.zeros_like(pool[:1])
        for t in range(int(cu[s]), int(cu[s + 1])):
            step = {k: x[k] for k in ("A", "D", "dt_bias", "dt_softplus") if k in x}
            step.update({k: x[k][t:t + 1] for k in ("x", "dt", "B", "C", "z") if k in x})
            got = kvc.call(Case("selective_state_update", dict(state=row, **step), dict(case.params, token=t)))
            out[t], row = got[0][0], got[1]
        new_pool[s] = row[0]
    return SSDScan(out, new_pool, np.zeros((cu.shape[0] - 1, 0) + pool.shape[1:], pool.dtype))


@st.composite
def _ssd_two_chunks(draw, claims, variant=rs.SSD_VARIANTS[0], sizes=rs.CHUNK_SIZES, max_seqs=2):
    case = draw(rs.ssd_cases(claims, variant, max_seqs=max_seqs, max_len=5))
    sizes = draw(st.lists(st.sampled_from(sizes), min_size=2, max_size=2, unique=True))
    return case, sizes


def _chunked_vs_token_by_token(kvc, strategy, budget):
    def body(drawn):
        case, sizes = drawn
        expected = _token_by_token(kvc, case)
        for size in sizes:
            chunked = Case(case.op, dict(case.inputs, chunk_size=size), dict(case.params, chunk_size=size))
            kvc.expect(chunked, kvc.call(chunked), expected, what="token-by-token selective_state_update")
    kvc.for_all(strategy, body, budget=budget)


@conformance_test(op="ssd_chunked_scan", layer="property", clauses=("RS-18", "RS-16"))
def test_ssd_chunked_equals_token_by_token(kvc):
    """Two chunk sizes of `ssd_chunked_scan` each agree with the Mamba2 `selective_state_update` applied
    token by token, all on the backend: the chunking is a hint that may not change results (RS-18)."""
    ssu = kvc.claims("selective_state_update", features=("mamba2",))
    claims = kvc.claims()
    _chunked_vs_token_by_token(kvc, _ssd_two_chunks(_both(claims, ssu)), budget=0.4)


@conformance_test(op="ssd_chunked_scan", layer="property", clauses=("RS-17", "RS-18", "RS-16"))
def test_ssd_chunked_equals_token_by_token_long(kvc):
    """The same across chunk ends: one sequence of 8 … 20 tokens (the long column) under two hints of
    (8, 16, 1, 3, 4, 64), whose kernel chunks (8 or 16 tokens, RS-18) it crosses: the state carried from
    one chunk into the next is the token-by-token state. One SSU call per token: few examples."""
    ssu = kvc.claims("selective_state_update", features=("mamba2",))
    claims = kvc.claims()
    _chunked_vs_token_by_token(kvc, _ssd_two_chunks(_both(claims, ssu), rs.column("ssd_chunked_scan", "long"),
                                                    rs.LONG_CHUNK_SIZES + (64,), max_seqs=1), budget=0.12)


# --- properties: no leakage (RS-7) -----------------------------------------------------------------

#: per op: arrays with one row per batch row / token, the pool, and whether rows are packed sequences
_ROW_ARRAYS = {
    "causal_conv1d_update": (("x",), "conv_state", False),
    "selective_state_update": (("x", "dt", "B", "C", "z"), "state", False),
    "ssd_chunked_scan": (("x", "dt", "B", "C", "z"), "state", True),
    "rwkv6_wkv": (("r", "k", "v", "w"), "state", True),
}


def _alone(case: Case, s: int, slot: int) -> Case:
    """Row / sequence s run by itself, its slot the only row of a one-row pool, no state_indices."""
    names, pool_name, packed = _ROW_ARRAYS[case.op]
    x = dict(case.inputs)
    if packed:
        cu = np.asarray(x["cu_seqlens"])
        rows = slice(int(cu[s]), int(cu[s + 1]))
        x["cu_seqlens"] = np.array([0, rows.stop - rows.start], np.int32)
    else:
        rows = slice(s, s + 1)
    for name in names:
        if name in x:
            x[name] = x[name][rows]
    x[pool_name] = x[pool_name][slot:slot + 1]
    x.pop("state_indices", None)
    if "has_initial_state" in x:
        x["has_initial_state"] = x["has_initial_state"][s:s + 1]
    return Case(case.op, x, dict(case.params, alone=s, num_seqs=1), case.seed)


def _part(case: Case, result, s: int, slot: int):
    """The fields of row / sequence s in a batched result, shaped like the result of `_alone`."""
    fields = list(result)
    names, _, packed = _ROW_ARRAYS[case.op]
    if packed:
        cu = np.asarray(case.inputs["cu_seqlens"])
        fields[0] = fields[0][int(cu[s]):int(cu[s + 1])]
    else:
        fields[0] = fields[0][s:s + 1]
    fields[1] = fields[1][slot:slot + 1]
    if len(fields) > 2:
        fields[2] = fields[2][s:s + 1]
    return type(result)(*fields)


def _no_leakage_test(op: str):
    @conformance_test(op=op, layer="property", clauses=("RS-7",))
    def test(kvc):
        """Each row / sequence of a batch, run alone in a one-row pool, gets what it got in the batch:
        no dependence on the other rows, their order, the batch size or which slot holds it (RS-7)."""
        # Every claimed variant that has slot indices (a row's slot is then not its batch index, so a
        # backend storing row i's state at slot i instead of state_indices[i] is seen); the first
        # variant where the backend claims none.
        claimed = set(kvc.claims().features)
        variants = [v for v in rs.VARIANTS[op]
                    if "state_indices" in v.features and set(v.features) <= claimed] or [rs.VARIANTS[op][0]]

        def body(case):
            batch = kvc.call(case)
            slots = case.inputs.get("state_indices")
            rows = len(case.params.get("lengths", [])) or case.inputs["x"].shape[0]
            for s in range(rows):
                slot = s if slots is None else int(slots[s])
                if slot < 0:      # a padding row has no slot (RS-3, its own variant's tests)
                    continue
                alone = _alone(case, s, slot)
                kvc.expect(alone, kvc.call(alone), _part(case, batch, s, slot),
                           what=f"row {s} of the batched call")
        for variant in variants:
            claims = kvc.claims(features=variant.features)
            kvc.for_all(rs.STRATEGIES[op](claims, variant), body, budget=0.4 / len(variants))
    return test


test_conv1d_no_leakage = _no_leakage_test("causal_conv1d_update")
test_selective_state_update_no_leakage = _no_leakage_test("selective_state_update")
test_ssd_chunked_scan_no_leakage = _no_leakage_test("ssd_chunked_scan")
test_rwkv6_no_leakage = _no_leakage_test("rwkv6_wkv")


# --- properties: split calls carrying state == one call (RS-12, RS-18, RS-20) ----------------------

@st.composite
def _split_points(draw, strategy):
    case = draw(strategy)
    lengths = case.params.get("lengths")
    if lengths is None:   # conv [B, T, C]: one split point for all rows
        steps = case.inputs["x"].shape[1]
        hypothesis.assume(steps >= 2)     # both calls get at least one token
        return case, draw(st.integers(1, steps - 1))
    return case, [draw(st.integers(0, n)) for n in lengths]


def _split_varlen(case: Case, cuts):
    names, pool_name, _ = _ROW_ARRAYS[case.op]
    cu = np.asarray(case.inputs["cu_seqlens"])
    first_rows, second_rows = [], []
    for s, k in enumerate(cuts):
        first_rows += list(range(int(cu[s]), int(cu[s]) + k))
        second_rows += list(range(int(cu[s]) + k, int(cu[s + 1])))
    parts = []
    for rows, lens in ((first_rows, cuts), (second_rows, [int(n) - k for n, k in zip(np.diff(cu), cuts)])):
        x = dict(case.inputs)
        for name in names:
            if name in x:
                x[name] = x[name][rows]
        x["cu_seqlens"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        parts.append((x, rows))
    return parts


def _split_test(op: str, clause: str, variant, budget: float = 0.4):
    @conformance_test(op=op, layer="property", clauses=(clause,) + (("RS-17",) if variant.long else ()))
    def test(kvc):
        """Prefill in two calls, the second starting from the pool the first returned, equals one
        call: outputs within class R, conv windows bitwise (RS-12: the window holds copies of inputs),
        states within class R (RS-18, RS-20: the result is the token-by-token recurrence, whatever
        the cut)."""
        claims = kvc.claims(features=variant.features)
        _, pool_name, _ = _ROW_ARRAYS[op]

        def body(drawn):
            case, cuts = drawn
            whole = kvc.call(case)
            if op == "causal_conv1d_update":
                first = dict(case.inputs, x=case.inputs["x"][:, :cuts])
                second = dict(case.inputs, x=case.inputs["x"][:, cuts:])
                r1 = kvc.call(Case(op, first, dict(case.params, part=1)))
                r2 = kvc.call(Case(op, dict(second, conv_state=r1[1]), dict(case.params, part=2)))
                joined = ConvUpdate(np.concatenate([r1[0], r2[0]], axis=1), r2[1])
            else:
                (x1, rows1), (x2, rows2) = _split_varlen(case, cuts)
                r1 = kvc.call(Case(op, x1, dict(case.params, part=1)))
                x2 = dict(x2, **{pool_name: r1[1]})
                x2.pop("has_initial_state", None)     # the first call wrote every sequence's row
                r2 = kvc.call(Case(op, x2, dict(case.params, part=2)))
                out = np.zeros(whole[0].shape, dtype=np.asarray(r2[0]).dtype)
                out[rows1] = r1[0]
                out[rows2] = r2[0]
                joined = type(whole)(out, r2[1], *list(r2)[2:])
            kvc.expect(case, joined, whole, what="one call over all tokens")
        kvc.for_all(_split_points(rs.STRATEGIES[op](claims, variant)), body, budget=budget)
    return test


test_conv1d_split_calls = _split_test("causal_conv1d_update", "RS-12", rs.CONV_VARIANTS[3])
test_ssd_chunked_scan_split_calls = _split_test("ssd_chunked_scan", "RS-18", rs.SSD_VARIANTS[0])
test_rwkv6_split_calls = _split_test("rwkv6_wkv", "RS-20", rs.RWKV_VARIANTS[0])
# Long columns: sequences across kernel chunk / window ends, cut anywhere (a cut off a chunk end makes
# the second call's chunks start mid-way through the first call's tiling).
test_ssd_chunked_scan_split_calls_long = _split_test("ssd_chunked_scan", "RS-18", rs.column("ssd_chunked_scan", "long"), 0.12)
test_rwkv6_split_calls_long = _split_test("rwkv6_wkv", "RS-20", rs.column("rwkv6_wkv", "long"), 0.12)


