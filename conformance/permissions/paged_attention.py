"""Permissions of the attention family (PA-19, PA-25, NU-3, NU-PA1, NU-PA2; ML-4 and MD-23 inherit them).

Each backend computes `ragged_paged_attention`, `ragged_paged_attention_csr` and `mla_paged_attention`
through `_attention_float32.attend` with one set of latitudes switched on, in the most adversarial form
the clauses allow. The reference validates each call (so layouts, CSR tables and MLA's equivalent call of
ML-4 arrive canonical, and bad input is rejected exactly as the reference rejects it).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kvconform import reference
from kvconform.reference.metadata import validate_ragged_paged_attention_csr
from kvconform.reference.mla import validate_mla_paged_attention
from kvconform.reference.paged_attention import AttentionOutput, validate_ragged_paged_attention

from . import Permission, permission
from ._attention_float32 import How, attend

ATTENTION_OPS = ("ragged_paged_attention", "ragged_paged_attention_csr", "mla_paged_attention")


class _Float32Attention(Permission):
    """The three attention ops computed by `attend` with the class's `how`."""
    how = How()

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        call = validate_ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                               **kw)
        out, scores = attend(call, np.asarray(q).dtype, self.how)
        return AttentionOutput(out, scores) if call.return_scores else out

    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices,
                                   kv_last_page_len, **kw):
        call = validate_ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices,
                                                   kv_last_page_len, **kw)
        return attend(call, np.asarray(q).dtype, self.how)[0]

    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                            num_seqs, **kw):
        call = validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices,
                                            cu_q_lens, num_seqs, **kw)
        # ML-4's equivalent call holds the latent cache upcast to float64; a kernel holds it in its own dtype
        a = call.attention
        pages = {"k_pages": a.k_pages.astype(c_kv_pages.dtype), "v_pages": a.v_pages.astype(c_kv_pages.dtype)}
        out, _ = attend(dataclasses.replace(a, **pages), np.asarray(q_nope).dtype, self.how)
        return out[:, :, :call.latent_dim]


@permission(id=("kv_in_compute_dtype", "probs_in_compute_dtype", "output_in_required_precision",
                "float32_sums"), ops=ATTENTION_OPS, clause="PA-19, NU-3, NU-PA1",
            description="dequantized K/V (and K/V wider than q) rounded to q's dtype, probabilities rounded to "
                        "q's dtype before PV, output in q's dtype; float32 sums, one rounding per term, last key "
                        "first")
class NarrowOperands(_Float32Attention):
    how = How(kv_rounded=True, probs_rounded=True, order="reverse")


@permission(id="kv_in_compute_dtype", ops=ATTENTION_OPS, clause="PA-19, NU-PA1",
            description="only the K/V rounding: dequantized K/V rounded to q's dtype, float32 elsewhere, float32 "
                        "matrix products")
class KvInComputeDtype(_Float32Attention):
    how = How(kv_rounded=True)


@permission(id="scales_folded", ops=ATTENTION_OPS, clause="PA-19",
            description="stored fp8/int8 values are the operands: fl32(sm_scale * k_scale) scales the logits, "
                        "v_scale the probabilities; probabilities rounded to q's dtype")
class FoldedScales(_Float32Attention):
    how = How(fold_scales=True, probs_rounded=True, order="forward")     # sequential, first key first


@permission(id=("split_kv", "flushed_probabilities"), ops=ATTENTION_OPS, clause="NU-PA1, NU-PA2, NU-12",
            description="split-KV over blocks of 16 keys: float32 partial max, sum and output per block, "
                        "combined last block first; probabilities below 2^-126 flushed to zero in the scores")
class SplitKvFloat32(_Float32Attention):
    how = How(kv_rounded=True, probs_rounded=True, order="split", block=16, flush=True)


@permission(id="nondeterministic_order", ops=ATTENTION_OPS, clause="NU-12, NU-PA1",
            description="every call sums in an order drawn afresh (first or last key first, or split-KV blocks "
                        "of 16 combined last first), probabilities and output in q's dtype: the same call twice "
                        "may differ in its last bits, as float atomics on a GPU do")
class NondeterministicOrder(_Float32Attention):
    ORDERS = ("forward", "reverse", "split")

    def __init__(self):
        super().__init__()
        self._rng = np.random.default_rng()          # OS entropy: no two processes agree either

    @property
    def how(self) -> How:
        return How(probs_rounded=True, order=str(self._rng.choice(self.ORDERS)))


@permission(id="padding_rows_unspecified", ops=ATTENTION_OPS, clause="PA-25, ML-7",
            description="padding output rows (past cu_q_lens[num_seqs]) filled with NaN")
class PaddingRowsNan(_Float32Attention):
    how = How(padding=float("nan"))


@permission(id="output_wider", ops=ATTENTION_OPS, clause="NU-3, PA-20",
            description="output returned as float32 (wider than a 16-bit q), computed in float32")
class WiderOutput(_Float32Attention):
    how = How(narrow_out=False)


@permission(id="head_blocks", ops="ragged_paged_attention", clause="PA-47, PA-12",
            description="query heads processed in blocks of one (each with only its own KV head, its sink and its "
                        "scales), scores summed over the blocks")
class OneHeadBlocks(Permission):
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        call = validate_ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                               **kw)
        Hq, Hkv = call.q.shape[1], call.k_pages.shape[2]
        out, scores = np.zeros(call.q.shape), None
        for h in range(Hq):
            kv = slice(h // (Hq // Hkv), h // (Hq // Hkv) + 1)
            part = reference.ragged_paged_attention(
                call.q[:, h:h + 1], call.k_pages[:, :, kv], call.v_pages[:, :, kv], call.kv_lens, call.page_indices,
                call.cu_q_lens, call.num_seqs, sm_scale=call.sm_scale, sliding_window=call.sliding_window,
                soft_cap=call.soft_cap, sinks=None if call.sinks is None else call.sinks[h:h + 1],
                k_scale=_head_scale(call.k_scale, kv), v_scale=_head_scale(call.v_scale, kv),
                return_scores=call.return_scores)
            if call.return_scores:
                part, head_scores = part
                scores = head_scores if scores is None else scores + head_scores
            out[:, h:h + 1] = part
        return AttentionOutput(out, scores) if call.return_scores else out


def _head_scale(scale, kv: slice):
    """The scale of one KV head: a scalar as is, [Hkv] -> [1], [P, page_size, Hkv] -> [P, page_size, 1]."""
    if scale is None or np.ndim(scale) == 0:
        return scale
    return scale[kv] if np.ndim(scale) == 1 else scale[:, :, kv]
