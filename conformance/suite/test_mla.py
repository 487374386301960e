"""Conformance suite for spec/mla.md: `mla_paged_attention` (absorbed latent paged attention).

Layers: hand-worked golden cases, Hypothesis differential tests against the reference (one per
features-matrix column), properties (poison in every don't-care location, call history, and ML-8: the
op equals ordinary multi-head attention after up-projection), and error inputs (ML-9).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform import reference
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden, suite_test
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies import mla
from kvconform.conformance.strategies import goldens
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies.malformed import mla as mla_bad
from kvconform.conformance.strategies.values import reseeded

SUITE_OPS = ('mla_paged_attention',)

OP = mla.OP
#: clauses every compared case checks: the op's inputs and output (ML-1 .. ML-5, ML-10) and the numerics
#: compare_outputs applies (NU-1 upcast, NU-2 float64 reference, NU-3 required precision, NU-6 / NU-PA1
#: class R, NU-7 non-finite, NU-8 floors, NU-9 bounded inputs)
EVERY_CASE = ("ML-10", "NU-1", "NU-2", "NU-3", "NU-6", "NU-7", "NU-8", "NU-9", "NU-PA1")
ALL_CLAUSES = tuple(dict.fromkeys(c for v in mla.VARIANTS for c in v.clauses)) + EVERY_CASE
NAN = np.nan


# --- golden cases ----------------------------------------------------------------------------------

def _one_seq(q_nope, q_pe, latents, rope_keys, *, page_size=2, pad_rows=0, **options):
    """One sequence: q_nope [q_len, H, d_c], q_pe [q_len, H, d_r], latents [kv_len, d_c], rope_keys
    [kv_len, d_r] laid out on pages in reverse order; page 0 and the tail of the last page hold NaN
    (ML-7), and `pad_rows` NaN rows follow the queries."""
    qn, qp = np.asarray(q_nope, np.float32), np.asarray(q_pe, np.float32)
    c, r = np.asarray(latents, np.float32), np.asarray(rope_keys, np.float32)
    kv_len = c.shape[0]
    n_pages = -(-kv_len // page_size)
    c_pages = np.full((n_pages + 1, page_size, c.shape[1]), NAN, np.float32)
    r_pages = np.full((n_pages + 1, page_size, r.shape[1]), NAN, np.float32)
    for j in range(kv_len):
        c_pages[n_pages - j // page_size, j % page_size] = c[j]
        r_pages[n_pages - j // page_size, j % page_size] = r[j]
    if pad_rows:
        qn = np.concatenate([qn, np.full((pad_rows,) + qn.shape[1:], NAN, np.float32)])
        qp = np.concatenate([qp, np.full((pad_rows,) + qp.shape[1:], NAN, np.float32)])
    inputs = dict(q_nope=qn, q_pe=qp, c_kv_pages=c_pages, k_pe_pages=r_pages,
                  kv_lens=np.array([kv_len], np.int32),
                  page_indices=np.array([[n_pages - p for p in range(n_pages)]], np.int32),
                  cu_q_lens=np.array([0, len(q_nope)], np.int32), num_seqs=1, **options)
    return Case(OP, inputs, {})   # dtypes and sizes: read off the inputs (goldens.uses)


def _mix(logits, latents, sink=None):
    """sum_j e^{s_j} c_j / (sum_j e^{s_j} [+ e^{sink}]), written out."""
    w = [math.exp(s) for s in logits]
    total = sum(w) + (math.exp(sink) if sink is not None else 0.0)
    return [sum(wj * c[i] for wj, c in zip(w, latents)) / total for i in range(len(latents[0]))]


def golden_rope_part_counts(options):
    # sm_scale 1: s0 = 0; s1 = [1,0].[1,1] + [1].[1] = 2 (without k_pe it would be 1): (c0 + e^2 c1) / (1 + e^2).
    # Restated with a window of 2 (both keys inside), a soft cap of 4 (s1 = 4 tanh(1/2)) and a sink of logit 0
    # (ML-6)
    on = dict(sliding_window=2, soft_cap=4.0, sinks=np.array([0.0], np.float32))
    case = _one_seq([[[1, 0]]], [[[1]]], [[0, 0], [1, 1]], [[0], [1]], sm_scale=1.0, pad_rows=1,
                    **{k: v for k, v in on.items() if k in options})
    s1 = 4.0 * math.tanh(0.5) if "soft_cap" in options else 2.0
    row = _mix([0, s1], [[0, 0], [1, 1]], sink=0.0 if "sinks" in options else None)
    return case, goldens.expected_rows(case, [[row]])


def golden_default_scale(options):
    # d_c 3, d_r 1: default sm_scale = 4 ** -0.5 = 1/2 (ML-3); s1 = (2 + 2) / 2 = 2, s0 = 0
    case = _one_seq([[[2, 0, 0]]], [[[2]]], [[0, 0, 0], [1, 0, 4]], [[0], [1]])
    return case, goldens.expected_rows(case, [[_mix([0, 2], [[0, 0, 0], [1, 0, 4]])]])


def golden_prefill_causal(options):
    # q_len 2 = kv_len: row 0 (position 0) sees c0 only; row 1 sees both with s = [0, 1]; two heads alike;
    # restated with a window of 2 (every key of both rows inside, ML-6)
    q = [[[1, 0], [1, 0]], [[1, 0], [1, 0]]]
    window = dict(sliding_window=2) if "sliding_window" in options else {}
    case = _one_seq(q, [[[0], [0]], [[0], [0]]], [[0, 2], [1, 0]], [[5], [7]], sm_scale=1.0, **window)
    row1 = _mix([0, 1], [[0, 2], [1, 0]])
    return case, goldens.expected_rows(case, [[[0, 2], [0, 2]], [row1, row1]])


def golden_heads_share_one_key(options):
    # three heads with different queries, one key: every head's output is that latent (ML-2)
    case = _one_seq([[[1, 0], [0, 3], [-2, 1]]], [[[1], [0], [2]]], [[4, -2]], [[1]])
    return case, goldens.expected_rows(case, [[[4, -2], [4, -2], [4, -2]]])


def golden_sliding_window(options):
    # kv_len 3, decode row at position 2, W = 2: keys 1 and 2, equal logits 0 -> (c1 + c2) / 2 (ML-6)
    case = _one_seq([[[0, 0]]], [[[0]]], [[8, 0], [0, 2], [0, 6]], [[0], [0], [0]], sliding_window=2)
    return case, goldens.expected_rows(case, [[[0.0, 4.0]]])


def golden_sinks(options):
    # one key with logit 0, sink logit 0: the sink takes half the mass (ML-6)
    case = _one_seq([[[0, 0]]], [[[0]]], [[2, 4]], [[1]], sinks=np.array([0.0], np.float32))
    return case, goldens.expected_rows(case, [[[1.0, 2.0]]])


def golden_soft_cap(options):
    # s = [0, 1000] (all from the RoPE part) capped at 5: (c0 + e^5 c1) / (1 + e^5) (ML-6)
    case = _one_seq([[[0, 0]]], [[[1000]]], [[1, 0], [0, 1]], [[0], [1]], sm_scale=1.0, soft_cap=5.0)
    return case, goldens.expected_rows(case, [[_mix([0, 5.0 * math.tanh(200.0)], [[1, 0], [0, 1]])]])


#: features: what every restatement uses; options: what a restatement may add. Every golden holds NaN in
#: its unused page and slots (ML-7).
_GOLDENS = (
    Golden("rope_part_counts", OP, golden_rope_part_counts, ("ML-3", "ML-4", "ML-7"),
           options=("sliding_window", "soft_cap", "sinks")),
    Golden("default_scale", OP, golden_default_scale, ("ML-3", "ML-7")),
    Golden("prefill_causal", OP, golden_prefill_causal, ("ML-5", "ML-2", "ML-7"), options=("sliding_window",)),
    Golden("heads_share_one_key", OP, golden_heads_share_one_key, ("ML-2", "ML-7")),
    Golden("sliding_window", OP, golden_sliding_window, ("ML-6", "ML-7"), ("sliding_window",)),
    Golden("sinks", OP, golden_sinks, ("ML-6", "ML-7"), ("sinks",)),
    Golden("soft_cap", OP, golden_soft_cap, ("ML-6", "ML-7"), ("soft_cap",)),
)


def at_size(case: Case, expected, d_c: int = goldens.REAL_MLA_LATENT, page_size: int = goldens.REAL_MLA_PAGE_SIZE):
    """An MLA golden restated at latent dim `d_c`, DeepSeek's RoPE dim 64 and `page_size`: zero dims added to
    both query parts and both pools (the hand-worked logits and latent outputs unchanged, the new output
    columns 0), tokens re-paged (goldens.repaged), the scale the golden used written out (the default of ML-3
    follows d_c + d_r)."""
    x = dict(case.inputs)
    d_r = max(goldens.REAL_MLA_ROPE, x["q_pe"].shape[2])
    sm_scale = x.get("sm_scale") or (x["q_nope"].shape[2] + x["q_pe"].shape[2]) ** -0.5
    pad = goldens.padded_dims
    pools, table = goldens.repaged([pad(x["c_kv_pages"], d_c), pad(x["k_pe_pages"], d_r)],
                                   x["kv_lens"], x["page_indices"], int(x["num_seqs"]), page_size)
    x.update(q_nope=pad(x["q_nope"], d_c), q_pe=pad(x["q_pe"], d_r), c_kv_pages=pools[0],
             k_pe_pages=pools[1], page_indices=table, sm_scale=sm_scale)
    return Case(case.op, x, dict(case.params), case.seed), pad(np.asarray(expected, np.float64), d_c)


#: every golden in float32 at its own small sizes, and at DeepSeek-V3's sizes (d_c 512, d_r 64, pages of 64)
#: in each dtype where its inputs stay exact
GOLDENS = _GOLDENS + tuple(r for g in _GOLDENS for r in goldens.at_real_size(g, at_size))

test_mla_golden = suite_test(OP, GOLDENS, mla.USES[OP])


# --- differential ----------------------------------------------------------------------------------

@conformance_test(op=OP, layer="differential", clauses=ALL_CLAUSES)
@pytest.mark.parametrize("variant", mla.VARIANTS, ids=str)
def test_mla_differential(kvc, variant):
    kvc.cite(*dict.fromkeys(mla.VARIANTS[0].clauses + variant.clauses + EVERY_CASE))
    claims = kvc.claims(features=variant.features)
    kvc.for_all(mla.mla_cases(claims, variant), kvc.check, budget=pa.example_share(variant))


# --- properties ------------------------------------------------------------------------------------

POISON_VARIANTS = tuple(v for v in mla.VARIANTS if v.name in ("base", "combined"))


@conformance_test(op=OP, layer="property", clauses=("ML-7", "NU-11"))
@pytest.mark.parametrize("variant", POISON_VARIANTS, ids=str)
def test_mla_poison(kvc, variant):
    claims = kvc.claims(features=variant.features)
    kvc.for_all(mla.mla_cases(claims, variant), kvc.check_poison, budget=0.4)


@conformance_test(op=OP, layer="property", clauses=("ML-5", "NU-12"))
def test_mla_call_history(kvc):
    claims = kvc.claims()
    kvc.for_all(st.tuples(mla.mla_cases(claims, mla.VARIANTS[0]), st.integers(0, 2**32 - 1)),
                lambda c: kvc.check_history(c[0], reseeded(c[0], mla.HISTORY_INPUTS[OP], c[1])), budget=0.2)


@conformance_test(op=OP, layer="property", clauses=("ML-8", "ML-10"))
@pytest.mark.parametrize("variant", [v for v in mla.VARIANTS if v.name in ("base", "combined")], ids=str)
def test_mla_equals_mha_after_up_projection(kvc, variant):
    """ML-8: the backend's latent output equals ordinary multi-head attention (float64 reference, H KV
    heads) over keys [c W_UK[h] | k_pe] and values c W_UV[h], mapped back by W_UV^T (orthogonal maps)."""
    claims = kvc.claims(features=variant.features)

    def body(case: Case):
        x = case.inputs
        H, d_c = x["q_nope"].shape[1:]
        rng = np.random.default_rng(case.seed)
        w_uk, w_uv = mla.orthogonal(rng, d_c, H), mla.orthogonal(rng, d_c, H)
        out_mha = reference.ragged_paged_attention(**mla.up_projected(x, w_uk, w_uv))[:, :, :d_c]
        latent = np.einsum("thv,hcv->thc", out_mha, w_uv)      # out = out_MHA W_UV^T
        kvc.expect(case, kvc.call(case), latent, what="multi-head attention after up-projection (ML-8)")

    kvc.for_all(mla.mla_cases(claims, variant), body, budget=0.4)


# --- errors ----------------------------------------------------------------------------------------

@conformance_test(op=OP, layer="errors", clauses=malformed.clauses_of(mla_bad.RULES[OP]))
@pytest.mark.parametrize("rule", mla_bad.RULES[OP], ids=str)
def test_mla_rejects(kvc, rule):
    """One rule of ML-9 broken on a valid case: the backend must raise the reference's ValueError /
    TypeError naming the argument."""
    malformed.check_rejects(kvc, mla_bad, OP, rule)
