"""Adapter: jax's Pallas `ragged_paged_attention` TPU kernel (jax 0.10.2, pinned) as a kvconform backend.

Wraps `jax.experimental.pallas.ops.tpu.ragged_paged_attention.ragged_paged_attention`
(upstream file jax/experimental/pallas/ops/tpu/ragged_paged_attention/kernel.py), run natively on a TPU and
in Pallas TPU interpret mode elsewhere (`backends/pallas/runtime.py`), with the two interpreter patches of
`backends/pallas/interpreter_patches.py` (bugs of the interpreter in jax 0.10.2, not of the kernel).

Kernel shapes:
    q:            [T, Hq, D] float          (T = max_num_batched_tokens)
    kv_pages:     [P, page_size, 2*Hkv, D]  K of head h at 2h, V at 2h+1 (the combined layout, PA-36)
    kv_lens:      i32[S];  page_indices: i32[S, pages_per_seq];  cu_q_lens: i32[S+1];  num_seqs: i32[1]
    -> out:       [T, Hq, D] in q's dtype

The adapter converts layouts only (separate -> combined K/V heads, num_seqs to i32[1]); every limit of the
kernel is a claim (`backend.RaggedPagedAttentionBackend.capabilities`). `make_backend()` never imports jax:
without jax the backend loads and `availability()` says why it cannot run.
"""
from __future__ import annotations


def make_backend():
    from .backend import RaggedPagedAttentionBackend
    return RaggedPagedAttentionBackend()


__all__ = ["make_backend"]
