"""Fake kernels with real kernels' limits, claimed exactly (tests/engine/test_constraint_claims.py).

Each is the reference behind a guard that raises if the suite ever calls it outside its claimed limits:
a decode-only kernel (one query row per counted sequence), one that tiles only Hkv in {1, 2, 4}, and one
that needs head_dim % 128 == 0. A call outside the limits is a bug of the suite, never of the backend."""
import dataclasses

import numpy as np

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend


class _Limited(NumpyBackend):
    limits: dict = {}

    def capabilities(self):
        claims = super().capabilities()["ragged_paged_attention"]
        return {"ragged_paged_attention": dataclasses.replace(claims, layouts=(), limits=dict(self.limits))}

    def outside(self, q, k_pages, cu_q_lens, num_seqs) -> str:
        raise NotImplementedError

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
        # validate first, as a real adapter does: malformed input is rejected, not "outside the limits"
        result = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                                                  num_seqs, **kw)
        problem = self.outside(q, k_pages, np.asarray(cu_q_lens), int(num_seqs))
        if problem:
            raise RuntimeError(f"called outside the claimed limits: {problem}")
        return result


class DecodeOnly(_Limited):
    name = "decode-only"
    limits = {"q_len": {"values": [1]}}

    def outside(self, q, k_pages, cu, n):
        q_lens = np.diff(cu[:n + 1])
        return "" if np.all(q_lens == 1) else f"q_lens {q_lens.tolist()}"


class FewKvHeads(_Limited):
    name = "kv-heads-1-2-4"
    limits = {"num_kv_heads": {"values": [1, 2, 4]}}

    def outside(self, q, k_pages, cu, n):
        return "" if k_pages.shape[2] in (1, 2, 4) else f"Hkv {k_pages.shape[2]}"


class HeadDim128(_Limited):
    name = "head-dim-128"
    limits = {"head_dim": {"multiple_of": 128}}

    def outside(self, q, k_pages, cu, n):
        return "" if q.shape[2] % 128 == 0 else f"head_dim {q.shape[2]}"


class NoEmptySequences(_Limited):
    """A prefill kernel that takes no sequence without query rows (the convention of FlashMLA,
    deepseek-ai/FlashMLA#11, and of flash-attention's varlen kernels before Dao-AILab/flash-attention#2568):
    claimed as q_len >= 1 (spec/paged_attention.md PA-53)."""
    name = "no-empty-sequences"
    limits = {"q_len": {"min": 1}}

    def outside(self, q, k_pages, cu, n):
        q_lens = np.diff(cu[:n + 1])
        return "" if np.all(q_lens >= 1) else f"q_lens {q_lens.tolist()}"


# --- backends that decline calls with kvconform.Unsupported (backends/base.py:Unsupported) -----------

class DeclinesSoftCap(NumpyBackend):
    """Claims attention without soft cap and declines a soft-capped call at call time."""
    name = "declines-soft-cap"

    def capabilities(self):
        claims = super().capabilities()["ragged_paged_attention"]
        features = tuple(f for f in claims.features if f != "soft_cap")
        return {"ragged_paged_attention": dataclasses.replace(claims, features=features)}

    def ragged_paged_attention(self, *args, soft_cap=None, **kw):
        import kvconform
        if soft_cap is not None:
            raise kvconform.Unsupported("soft cap is not implemented by this kernel")
        return reference.ragged_paged_attention(*args, **kw)


class OverclaimsKvHeads(NumpyBackend):
    """Claims every KV-head count but declines Hkv = 3: it claims more than it supports."""
    name = "overclaims-kv-heads"

    def capabilities(self):
        return {"ragged_paged_attention": super().capabilities()["ragged_paged_attention"]}

    def ragged_paged_attention(self, q, k_pages, *args, **kw):
        import kvconform
        if k_pages.shape[2] == 3:
            raise kvconform.Unsupported("tiles take 1, 2, 4 or 8 KV heads")
        return reference.ragged_paged_attention(q, k_pages, *args, **kw)


class MinimumWindow(NumpyBackend):
    """A kernel whose sliding windows are at least 8 keys (spec/paged_attention.md PA-54), on ragged and
    MLA attention; its MLA kernel takes only RoPE dim 4 (spec/mla.md ML-12)."""
    name = "minimum-window"

    def capabilities(self):
        found = super().capabilities()
        limits = {"sliding_window": {"min": 8}}
        return {"ragged_paged_attention": dataclasses.replace(found["ragged_paged_attention"], layouts=(),
                                                              limits=limits),
                "mla_paged_attention": dataclasses.replace(found["mla_paged_attention"],
                                                           limits=dict(limits, rope_dim={"values": [4]}))}

    def ragged_paged_attention(self, *args, **kw):
        result = reference.ragged_paged_attention(*args, **kw)
        if kw.get("sliding_window") is not None and kw["sliding_window"] < 8:
            raise RuntimeError(f"called outside the claimed limits: sliding_window {kw['sliding_window']}")
        return result

    def mla_paged_attention(self, q_nope, q_pe, *args, **kw):
        result = reference.mla_paged_attention(q_nope, q_pe, *args, **kw)
        if q_pe.shape[2] != 4 or (kw.get("sliding_window") is not None and kw["sliding_window"] < 8):
            raise RuntimeError(f"called outside the claimed limits: d_r {q_pe.shape[2]}, window "
                               f"{kw.get('sliding_window')}")
        return result


class NoEmptyPageTables(NumpyBackend):
    """Page-table and slot-mapping kernels that take no empty sequence, claimed as seq_len >= 1
    (spec/metadata.md MD-24); each raises on a counted sequence without tokens (the manager: in the state
    it is handed or the one it returns)."""
    name = "no-empty-page-tables"
    OPS = ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "slot_mapping_from_arena",
           "page_table_step")

    def capabilities(self):
        found = super().capabilities()
        return {op: dataclasses.replace(found[op], limits={"seq_len": {"min": 1}}) for op in self.OPS}

    def _guarded(self, op, kw):
        from kvconform.conformance.engine.case import Case
        from kvconform.conformance.strategies.metadata import sequence_lengths
        result = getattr(reference, op)(**kw)
        lengths = sequence_lengths(Case(op, kw, {}))
        if lengths and min(lengths) < 1:
            raise RuntimeError(f"called outside the claimed limits: sequence lengths {lengths}")
        return result

    def block_table_to_csr(self, page_indices, kv_lens, num_seqs, page_size):
        return self._guarded("block_table_to_csr", dict(page_indices=page_indices, kv_lens=kv_lens,
                                                        num_seqs=num_seqs, page_size=page_size))

    def csr_to_block_table(self, kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq):
        return self._guarded("csr_to_block_table", dict(kv_indptr=kv_indptr, kv_indices=kv_indices,
                                                        kv_last_page_len=kv_last_page_len, page_size=page_size,
                                                        pages_per_seq=pages_per_seq))

    def append_slot_mapping(self, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
        return self._guarded("append_slot_mapping", dict(qo_indptr=qo_indptr, kv_indptr=kv_indptr,
                                                         kv_indices=kv_indices, kv_last_page_len=kv_last_page_len,
                                                         page_size=page_size))

    def slot_mapping_from_arena(self, arena, offsets, num_seqs, page_size):
        return self._guarded("slot_mapping_from_arena", dict(arena=arena, offsets=offsets, num_seqs=num_seqs,
                                                             page_size=page_size))

    def page_table_step(self, *args, **kw):
        import inspect
        return self._guarded("page_table_step",
                             dict(inspect.signature(reference.page_table_step).bind(*args, **kw).arguments))
