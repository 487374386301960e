"""The crossed columns (spec/numerics.md NU-15 "crossed") draw what they claim: for every op whose registry
marks a dimension `crossed`, one column per value regime, whose draws put the first query row's largest
logit only in a tile past the first (at its own position, past every tile of model.TILES below the
sequence's length), far above every earlier logit, so that a running max that stops growing overflows."""
from __future__ import annotations

import numpy as np
import pytest

from dimension_columns import columns, draw
from kvconform import reference
from kvconform.backends.numpy import make_backend
from kvconform.conformance.dimensions import REGISTRY
from kvconform.conformance.dimensions.model import TILES
from kvconform.conformance.mutants.online_softmax import EXP_LIMIT, row_logits
from kvconform.conformance.strategies import attention_reach as ar
from kvconform.conformance.strategies import dimension_reach as dr

ATTENTION_OPS = ("ragged_paged_attention", "mla_paged_attention", "ragged_paged_attention_csr")


def _call(op: str, x: dict):
    """The equivalent validated ragged_paged_attention call of a drawn case of `op`."""
    if op == "mla_paged_attention":
        return reference.validate_mla_paged_attention(**x).attention
    if op == "ragged_paged_attention_csr":
        indptr = np.asarray(x["kv_indptr"])
        S = indptr.shape[0] - 1
        table = reference.csr_to_block_table(x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"],
                                             int(np.shape(x["k_pages"])[1]), max(1, int(np.diff(indptr).max())))
        rest = {k: v for k, v in x.items() if k not in ("kv_indptr", "kv_indices", "kv_last_page_len", "qo_indptr")}
        return reference.validate_ragged_paged_attention(kv_lens=table.kv_lens, page_indices=table.page_indices,
                                                         cu_q_lens=x["qo_indptr"], num_seqs=S, **rest)
    return reference.validate_ragged_paged_attention(**{k: v for k, v in x.items() if k != "return_scores"})


def test_every_registry_op_with_a_crossed_dimension_has_its_columns():
    registry_op = {"ragged_paged_attention_csr": "ragged_paged_attention"}   # CSR draws the block-table columns
    for op in ATTENTION_OPS:
        names = {name for name, _, _ in columns(op)}
        want = {f"reach_{d}{dr.CROSSED}{r}" for d, r in dr.crossed_columns(registry_op.get(op, op), ar.RANGE_REGIMES)}
        assert want and want <= names, (op, want - names)
    assert {op for op, dims in REGISTRY.items() if any(d.crossed for d in dims)} >= {"ragged_paged_attention",
                                                                                     "mla_paged_attention"}


@pytest.mark.parametrize("op", ATTENTION_OPS)
def test_the_largest_logit_lies_only_past_the_first_tile(op):
    claims = make_backend().capabilities()[op]
    crossed = [(name, strategy) for name, _, strategy in columns(op) if dr.CROSSED in name]
    for name, strategy in crossed:
        for case in draw(strategy(claims), 3):
            call = _call(op, case.inputs)
            s, lo = row_logits(call, 0)
            row = s[0, 0]                                   # the first row, first head: the aligned one
            at = int(call.kv_lens[0]) - int(call.cu_q_lens[1] - call.cu_q_lens[0])
            assert lo + int(np.argmax(row)) == at, (name, case.params)
            assert at >= max([t for t in TILES if t < int(call.kv_lens[0])] + [0]), (name, case.params)
            earlier = row[:at - lo][np.isfinite(row[:at - lo])]
            gap = row[at - lo] - earlier.max()
            cap = call.soft_cap
            # uncapped: past float32's exp range; capped: the whole span of the cap (-cap .. cap), nearly
            assert gap > (EXP_LIMIT if cap is None else 1.9 * cap), (name, gap, case.params)


def test_write_kv_limits_lie_only_past_the_first_token_tile():
    claims = make_backend().capabilities()["write_kv"]
    crossed = [(name, strategy) for name, _, strategy in columns("write_kv") if dr.CROSSED in name]
    assert [name for name, _ in crossed] == [f"reach_tokens{dr.CROSSED}{r}" for r in ar.WRITE_RANGE_REGIMES]
    for name, strategy in crossed:
        for case in draw(strategy(claims), 3):
            x = case.inputs
            late = dr.past_first_tiles(len(x["slot_mapping"]))
            assert late >= 128, (name, case.params)
            for a in ("k", "v"):
                values = np.abs(x[a].astype(np.float64))
                # ordinary values (|x| < 2^10) in the first tiles; every other value past them at a limit
                assert values[:late].max() < 2.0 ** 10 <= values[late:].max(), (name, a, case.params)


def test_shift_keys_range_deltas_lie_only_past_the_first_block_tile():
    claims = make_backend().capabilities()["shift_keys"]
    crossed = [(name, strategy) for name, _, strategy in columns("shift_keys") if dr.CROSSED in name]
    assert [name for name, _ in crossed] == [f"reach_rotated_blocks{dr.CROSSED}deltas"]
    for name, strategy in crossed:
        for case in draw(strategy(claims), 3):
            deltas = np.abs(case.inputs["position_deltas"].astype(np.int64))
            late = dr.past_first_tiles(deltas.shape[0])
            assert late >= 16, (name, case.params)
            # ordinary shifts (at most 5000) in the first tiles; past them shifts across 2^24 and to int32's ends
            assert deltas[:late].max() <= 5000 and deltas[late:].max() >= 2 ** 24 - 1, (name, case.params)
