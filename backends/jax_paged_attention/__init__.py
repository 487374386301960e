"""Adapter: jax's Pallas decode `paged_attention` TPU kernel (jax 0.10.2, pinned) as a kvconform backend.

Wraps `jax.experimental.pallas.ops.tpu.paged_attention.paged_attention` (upstream file
jax/experimental/pallas/ops/tpu/paged_attention/paged_attention_kernel.py, int8 pages through
quantization_utils.py beside it), run natively on a TPU and in Pallas TPU interpret mode elsewhere
(`backends/pallas/runtime.py`).

Kernel shapes (one query row per sequence: decode only):
    q:            [B, Hq, D] float          (the row of each sequence, already multiplied by the softmax scale)
    k_pages:      [Hkv, P, page_size, D]    v_pages likewise; or QuantizedTensor(int8 pages, f32 scales
                                            [Hkv, P, page_size, 1]) read as int8 * scales / 127.5
    lengths:      i32[B];  page_indices: i32[B, pages_per_seq]
    -> out:       [B, Hq, D] in q's dtype

The adapter converts layouts only: it picks each counted sequence's query row (q_len = 1 is claimed),
moves the KV-head axis first, multiplies q by sm_scale (the kernel takes no scale) and puts the rows back at
cu_q_lens. `make_backend()` never imports jax: without jax the backend loads and `availability()` says why.
"""
from __future__ import annotations


def make_backend():
    from .backend import PagedAttentionBackend
    return PagedAttentionBackend()


__all__ = ["make_backend"]
