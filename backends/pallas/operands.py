"""Host-side operands of the Pallas kernels: the pages a call uses, attention operands in the kernel layout\n(combined K/V heads, lanes padded, counts bucketed), per-token scales beside the pages, arena slots."""
from __future__ import annotations

import numpy as np

from .bucketing import pow2
from .claims import MAX_HEAD_DIM
from .ragged_rows import NO_WINDOW
from .runtime import interpret_params, kernel
from .tiling import kv_heads_per_block

#: bucket floors of the page tables, block table or CSR (SMEM words, a few bytes each): every small table
#: of the ci profile shares one compiled kernel
MIN_SEQS, MIN_PAGES = 4, 16


#: bucket floor of the attention KV pool (pages): small pools (a few KiB of HBM per page) share a compiled
#: kernel; the kernel reads only the pages a page table names, so padding pages cost a copy, no work.
#: Measured on the ci profile's attention differential tests: 143 -> 124 distinct kernels with floor 32.
MIN_POOL_PAGES = 32



def _arena_slots(arena: np.ndarray, offsets, num_seqs: int, page_size: int, tokens: int) -> np.ndarray:
    """i32[tokens]: the arena kernel's slot mapping (validated arguments; `tokens` = qo_indptr[S] sizes the
    output bucket, pow2(tokens, 8))."""
    from .metadata import arena_words
    word_offsets = (np.asarray(offsets, np.int64) // 4).astype(np.int32)
    meta = np.array([num_seqs, page_size], np.int32)
    out = kernel("slot_mapping_from_arena")(arena_words(arena), word_offsets, meta, num_slots=pow2(tokens, 8),
                                            interpret=interpret_params())
    return np.asarray(out)[:tokens].astype(np.int32)


def _used_pages(call, s_pad: int, pps_pad: int, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(kv_lens i32[s_pad], block table i32[s_pad, pps_pad]) of a validated attention call, padded to the
    buckets; only each sequence's used pages are copied, the rest stay 0 (unused entries may hold anything,
    PA-24, and must never be read)."""
    n = call.num_seqs
    lens = np.zeros(s_pad, np.int32)
    lens[:n] = call.kv_lens[:n]
    table = np.zeros((s_pad, pps_pad), np.int32)
    for i in range(n):
        used = -(-int(call.kv_lens[i]) // page_size)
        table[i, :used] = call.page_indices[i, :used]
    return lens, table


def _attention_operands(call, q, k_pages, kv_layout: str, return_scores: bool, *, min_seqs: int = 1):
    """What both page-table forms hand the attention kernel besides the page table, from the reference's
    normalised call (`validate_ragged_paged_attention`): q and the combined pool padded to their buckets,
    cu_q_lens padded to pow2(S, min_seqs) + 1 entries (padding sequences have no rows), meta (num_seqs, window),
    the scales beside the pool for quantized pages (f32[P_pad, 2*Hkv, page_size], every scale form of PA-18 /
    PA-48 as one scale per slot and KV head; None for float pages), the float parameters and the static
    config."""
    from . import layout
    from .paged_attention import AttentionConfig
    q_arr = np.asarray(q)
    T, Hq, D = q_arr.shape
    P, page_size, Hkv, _ = call.k_pages.shape
    if D > MAX_HEAD_DIM:
        raise ValueError(f"q head dim D={D} exceeds the Pallas kernel's max_head_dim={MAX_HEAD_DIM} "
                         f"(one KV page of every head must fit the VMEM page buffer)")
    if kv_layout == "combined":
        q_k, kv_k = layout.attention_inputs_combined(q_arr, np.asarray(k_pages), t_pad=pow2(T, 8),
                                                     p_pad=pow2(P, MIN_POOL_PAGES))
    else:
        q_k, kv_k = layout.attention_inputs(q_arr, call.k_pages, call.v_pages, t_pad=pow2(T, 8),
                                            p_pad=pow2(P, MIN_POOL_PAGES))
    n = call.num_seqs
    s_pad = pow2(call.page_indices.shape[0], min_seqs)
    cu = np.full(s_pad + 1, int(call.cu_q_lens[n]), np.int32)
    cu[:n + 1] = call.cu_q_lens[:n + 1]
    meta = np.array([n, call.sliding_window or NO_WINDOW], np.int32)
    token_scales = None
    if call.k_scale is not None:   # K scales of head h in row 2h, V scales in 2h+1, slots on lanes (PA-48)
        token_scales = np.zeros((kv_k.shape[0], 2 * Hkv, page_size), np.float32)
        for rows, scale in ((slice(0, None, 2), call.k_scale), (slice(1, None, 2), call.v_scale)):
            per_slot = np.broadcast_to(np.asarray(scale, np.float32).reshape((1,) * (3 - np.ndim(scale))
                                                                              + np.shape(scale)), (P, page_size, Hkv))
            token_scales[:P, rows] = np.swapaxes(per_slot, 1, 2)
    fparams = np.zeros(4 + Hq, np.float32)
    fparams[:2] = (call.sm_scale, call.soft_cap or 0.0)       # cap 0: none
    fparams[4:] = -np.inf if call.sinks is None else call.sinks      # -inf: exactly no sink (PA-17)
    hb = kv_heads_per_block(Hq, Hkv, q_k.dtype, kv_k.dtype)   # PA-47: whole sublane tiles per block
    cfg = AttentionConfig(block_q=8, kv_heads_per_block=hb, return_scores=return_scores,
                          token_scales=token_scales is not None)
    return q_k, kv_k, token_scales, cu, meta, fparams, cfg


def _token_scales(scale, slots: np.ndarray, n_pad: int, page_size: int, hkv: int) -> np.ndarray:
    """f32[N_pad, Hkv, 1]: the scale each token head is stored with (PA-44, PA-48): the pool's scale, its
    KV head's, or the one beside its destination slot; 1 for skipped tokens and unquantized pools."""
    out = np.ones((n_pad, hkv, 1), np.float32)
    if scale is None:
        return out
    if np.ndim(scale) == 0:
        out[:] = np.float32(scale)
    elif np.ndim(scale) == 1:
        out[:] = np.asarray(scale, np.float32)[None, :, None]
    else:
        live = slots >= 0
        dest = slots[live]
        out[live] = np.asarray(scale, np.float32)[dest // page_size, dest % page_size][:, :, None]
    return out
