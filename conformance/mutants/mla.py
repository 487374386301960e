"""Mutants of latent paged attention (spec/mla.md): realistic bugs of absorbed MLA kernels, each wrapping
the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference

from . import Mutant, mutant


@mutant(op="mla_paged_attention", clause="ML-3",
        description="default sm_scale over the latent dim only, d_c ** -0.5 (the RoPE dims forgotten)")
class ScaleOverLatentOnly(Mutant):
    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, *args, sm_scale=None, **kw):
        if sm_scale is None:
            sm_scale = np.shape(q_nope)[2] ** -0.5
        return reference.mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, *args, sm_scale=sm_scale, **kw)


@mutant(op="mla_paged_attention", clause="ML-3",
        description="the RoPE part of the logits is dropped: only q_nope . c_kv is scored")
class RopePartIgnored(Mutant):
    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, *args, **kw):
        return reference.mla_paged_attention(q_nope, q_pe, c_kv_pages, np.zeros_like(k_pe_pages), *args, **kw)


@mutant(op="mla_paged_attention", clause="ML-1",
        description="RoPE keys read from the logical page number instead of page_indices (the latent "
                    "pool goes through the page table, the RoPE pool does not)")
class RopeFromLogicalPage(Mutant):
    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                            num_seqs, **kw):
        call = reference.validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices,
                                                      cu_q_lens, num_seqs, **kw)
        a = call.attention
        page_size = np.shape(c_kv_pages)[1]
        # what the buggy kernel reads, as one call: each (sequence, page) gets a page of its own in a new
        # pool, holding the latent page the table names and the RoPE page of the logical number
        c_kv, k_pe = np.asarray(c_kv_pages), np.asarray(k_pe_pages)
        table = np.zeros_like(np.asarray(page_indices))
        latent, rope, pages = [c_kv[:1]], [k_pe[:1]], 1   # page 0: the target of every unused table entry
        for i in range(a.num_seqs):
            used = -(-int(a.kv_lens[i]) // page_size)
            table[i, :used] = pages + np.arange(used)
            latent += [c_kv[a.page_indices[i, :used]]]
            rope += [k_pe[np.arange(used)]]
            pages += used
        return reference.mla_paged_attention(q_nope, q_pe, np.concatenate(latent), np.concatenate(rope), kv_lens,
                                             table, cu_q_lens, num_seqs, **kw)


@mutant(op="mla_paged_attention", clause="ML-5",
        description="every prefill row masked as a decode row: each row of a chunk sees all kv_len keys (the "
                    "position of its last row) instead of its own causal prefix")
class PrefillRowMaskedAsDecode(Mutant):
    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                            num_seqs, **kw):
        call = reference.validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices,
                                                      cu_q_lens, num_seqs, **kw)
        a = call.attention
        q_lens = np.diff(a.cu_q_lens[:a.num_seqs + 1])
        seq = np.repeat(np.arange(a.num_seqs), q_lens)      # the sequence of each counted row
        rows = int(a.cu_q_lens[a.num_seqs])
        # one decode "sequence" per row: position kv_len - 1 whatever the row's place in its chunk
        out = np.zeros(np.shape(q_nope), np.float64)
        if rows:
            out[:rows] = reference.mla_paged_attention(
                np.asarray(q_nope)[:rows], np.asarray(q_pe)[:rows], c_kv_pages, k_pe_pages, a.kv_lens[seq],
                a.page_indices[seq], np.arange(rows + 1, dtype=np.int32), rows, **kw)
        return out


def _narrowed(dtype: str, features: tuple = ()):
    """capabilities() claiming only `dtype` queries and pools and `features` for the op (the rest as the numpy
    backend): the option columns the mutant cannot be caught by are skipped instead of run."""
    import dataclasses

    def capabilities(self):
        claims = super(type(self), self).capabilities()
        claims["mla_paged_attention"] = dataclasses.replace(claims["mla_paged_attention"], dtypes=(dtype,),
                                                            kv_dtypes=(dtype,), features=features)
        return claims
    return capabilities


@mutant(op="mla_paged_attention", clause="ML-3", only_caught_by="long_latent|reach_latent_dim", max_size=12,
        description="the latent part of the logits summed over one 256-wide tile of d_c: with DeepSeek's "
                    "d_c = 512 the latent dims past 256 never reach the logits")
class LatentLogitsOneTile(Mutant):
    TILE = 256
    capabilities = _narrowed("float32")

    def mla_paged_attention(self, q_nope, *args, **kw):
        result = reference.mla_paged_attention(q_nope, *args, **kw)   # validates first
        if np.ndim(q_nope) == 3 and np.shape(q_nope)[2] <= self.TILE:
            return result
        if np.shape(q_nope)[2] > self.TILE:
            q_nope = np.array(q_nope, copy=True)
            q_nope[..., self.TILE:] = 0
        return reference.mla_paged_attention(q_nope, *args, **kw)


@mutant(op="mla_paged_attention", clause="ML-2", only_caught_by="long_heads|reach_q_heads", max_size=140,
        description="query heads in one block of 64: with more heads (DeepSeek-V3's 128) the heads past the "
                    "64th get no output")
class HeadsPastOneBlock(Mutant):
    BLOCK = 64
    capabilities = _narrowed("float32")

    def mla_paged_attention(self, q_nope, *args, **kw):
        out = reference.mla_paged_attention(q_nope, *args, **kw)
        if np.shape(q_nope)[1] > self.BLOCK:
            out = out.copy()
            out[:, self.BLOCK:] = 0
        return out
