"""Latent paged attention, DeepSeek-style MLA in absorbed form (spec/mla.md, clauses ML-1 .. ML-10).

The op is defined through its equivalent attention call (ML-4): one KV head whose keys are the latent
vector followed by the RoPE key part, and whose values are the latent vector padded with zeros. This
module checks the MLA-specific arguments, builds that call in float64 and hands it to
`ragged_paged_attention`, so positions, masking, windows, caps, sinks and the don't-care rules (ML-5 ..
ML-7) are the paged-attention reference's own code, never a second copy of it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .paged_attention import AttentionCall, ragged_paged_attention, validate_ragged_paged_attention
from .validation import float_array, float_input, require

__all__ = ["MLACall", "mla_paged_attention", "validate_mla_paged_attention"]


@dataclass(frozen=True)
class MLACall:
    """The arguments of one `mla_paged_attention` call after validation (ML-1, ML-9).

    q_nope:     float[T, H, d_c], the caller's array (storage dtype, not copied)
    q_pe:       float[T, H, d_r], idem
    c_kv_pages: float[P, page_size, d_c], idem
    k_pe_pages: float[P, page_size, d_r], idem
    attention:  the equivalent `ragged_paged_attention` call of ML-4, validated (float64 q [T, H, d_c + d_r],
                k_pages [P, page_size, 1, d_c + d_r], v_pages the latent padded with zeros; sm_scale resolved
                by ML-3; kv_lens, page_indices, cu_q_lens, num_seqs, options normalised as PA-26 .. PA-30)
    """
    q_nope: np.ndarray
    q_pe: np.ndarray
    c_kv_pages: np.ndarray
    k_pe_pages: np.ndarray
    attention: AttentionCall

    @property
    def latent_dim(self) -> int:
        return int(self.c_kv_pages.shape[2])


def mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                        sm_scale=None, sliding_window=None, soft_cap=None, sinks=None):
    """Absorbed multi-head latent attention of a ragged batch over a paged latent cache (ML-1 .. ML-7).

    q_nope:       [T, H, d_c] float  absorbed no-RoPE query part
    q_pe:         [T, H, d_r] float  RoPE query part
    c_kv_pages:   [P, page_size, d_c] float  paged latent cache
    k_pe_pages:   [P, page_size, d_r] float  paged RoPE key part, one for all heads (ML-2)
    kv_lens, page_indices, cu_q_lens, num_seqs: the ragged batch metadata of ragged_paged_attention
    sm_scale:     float > 0, default (d_c + d_r) ** -0.5 (ML-3)
    sliding_window, soft_cap: as ragged_paged_attention (ML-6)
    sinks:        float[H] (ML-6)

    Returns out: float64[T, H, d_c], the latent output before W_UV (ML-4); rows t >= cu_q_lens[num_seqs]
    are unspecified (ML-7), 0 here.
    """
    call = validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                                        num_seqs, sm_scale=sm_scale, sliding_window=sliding_window,
                                        soft_cap=soft_cap, sinks=sinks)
    a = call.attention
    out = ragged_paged_attention(a.q, a.k_pages, a.v_pages, a.kv_lens, a.page_indices, a.cu_q_lens, a.num_seqs,
                                 sm_scale=a.sm_scale, sliding_window=a.sliding_window, soft_cap=a.soft_cap,
                                 sinks=a.sinks)
    return out[:, :, :call.latent_dim]   # the zero padding of the values gives zero columns: dropped


def _rank3(name: str, x, layout: str) -> np.ndarray:
    # dtype rule (TypeError naming the argument) and rank, without upcasting the pool; the rank is checked
    # on the array itself, so a 0-d input is a ValueError naming it rather than an IndexError
    return float_array(name, x, 3, layout)


def validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                                 num_seqs, *, sm_scale=None, sliding_window=None, soft_cap=None,
                                 sinks=None) -> MLACall:
    """Check every argument of `mla_paged_attention` (ML-1, ML-9) and return them normalised (`MLACall`).

    Raises ValueError, or TypeError for a wrong type or dtype, naming the argument and the broken rule;
    the metadata and option rules are those of `validate_ragged_paged_attention`, which checks the
    equivalent call (ML-4) and names the same arguments.
    """
    q_nope = _rank3("q_nope", q_nope, "[T, H, d_c]")
    q_pe = _rank3("q_pe", q_pe, "[T, H, d_r]")
    c_kv = _rank3("c_kv_pages", c_kv_pages, "[P, page_size, d_c]")
    k_pe = _rank3("k_pe_pages", k_pe_pages, "[P, page_size, d_r]")
    T, H, d_c = q_nope.shape
    require(H >= 1, f"q_nope must have at least one head (H >= 1), got shape {tuple(q_nope.shape)}")
    require(d_c >= 1, f"q_nope must have latent dim d_c >= 1, got shape {tuple(q_nope.shape)}")
    require(q_pe.shape[:2] == (T, H),
            f"q_pe must have the rows and heads of q_nope (T, H) = {(T, H)}, got shape {tuple(q_pe.shape)}")
    d_r = q_pe.shape[2]
    require(d_r >= 1, f"q_pe must have RoPE dim d_r >= 1, got shape {tuple(q_pe.shape)}")
    require(c_kv.shape[2] == d_c,
            f"c_kv_pages latent dim must equal q_nope's d_c={d_c}, got shape {tuple(c_kv.shape)}")
    require(k_pe.shape[2] == d_r,
            f"k_pe_pages RoPE dim must equal q_pe's d_r={d_r}, got shape {tuple(k_pe.shape)}")
    require(k_pe.shape[:2] == c_kv.shape[:2],
            f"k_pe_pages must have the pages and page_size of c_kv_pages {tuple(c_kv.shape[:2])}, "
            f"got shape {tuple(k_pe.shape)}")
    require(c_kv.shape[1] >= 1, f"c_kv_pages must have page_size >= 1, got shape {tuple(c_kv.shape)}")

    # ML-4: the equivalent single-KV-head call, in float64 (exact upcasts, PA-20).
    q = np.concatenate([float_input("q_nope", q_nope), float_input("q_pe", q_pe)], axis=2)
    c64 = float_input("c_kv_pages", c_kv)
    keys = np.concatenate([c64, float_input("k_pe_pages", k_pe)], axis=2)[:, :, None, :]
    values = np.concatenate([c64, np.zeros(k_pe.shape)], axis=2)[:, :, None, :]
    attention = validate_ragged_paged_attention(q, keys, values, kv_lens, page_indices, cu_q_lens, num_seqs,
                                                sm_scale=sm_scale, sliding_window=sliding_window,
                                                soft_cap=soft_cap, sinks=sinks)
    return MLACall(q_nope, q_pe, c_kv, k_pe, attention)
