"""The canonical attention call in the FlashAttention / vLLM varlen form: metadata, window, soft cap, scales.

FlashAttention's `flash_attn_varlen_func` and the kernels written to its interface (vLLM's FlashAttention
backend and its Triton `unified_attention`) take a ragged batch as `cu_seqlens_q`, `seqused_k`,
`max_seqlen_q`, `max_seqlen_k` and `block_table`, a window as `window_size=(left, right)`, the soft cap as
a float where 0 means off, and fp8 descales per sequence and KV head. The spec's call (spec/paged_attention.md
PA-1 .. PA-5, PA-15, PA-16, PA-48) says the same with `cu_q_lens`, `kv_lens`, `page_indices`, `num_seqs`,
`sliding_window = W`, `soft_cap` None or > 0 and a scale per tensor, per KV head or per token slot.

    varlen_metadata     VarlenMetadata from cu_q_lens, kv_lens, page_indices, num_seqs
    flash_window        sliding_window W -> (W - 1, 0); None -> (-1, -1)     (window_from_flash: back)
    flash_soft_cap      soft_cap c -> c; None -> 0.0                        (soft_cap_from_flash: back)
    per_sequence_scales a scalar or per-KV-head scale -> float32 [num_seqs, Hkv] (vLLM's descale shape)

Sources (vLLM's `vllm/v1/attention/backends/flash_attn.py`, read 2026-11): `FlashAttentionImpl.__init__`
stores `(sliding_window - 1, 0)`, `(-1, -1)` without a window, and `logits_soft_cap = 0` for none ("In
flash-attn, setting logits_soft_cap as 0 means no soft cap"); `forward` passes `cu_seqlens_q =
query_start_loc`, `seqused_k = seq_lens`, `max_query_len`, `max_seq_len`, `block_table`, and
`descale_shape = (cu_seqlens_q.shape[0] - 1, num_kv_heads)` with `layer._k_scale.expand(descale_shape)`.
FlashAttention's window keeps key j for row i iff i - left <= j <= i + right (flash_attn_interface.py
docstring), so (W - 1, 0) is PA-15's "the W most recent positions including the row's own".

Everything returned is NumPy (int32 metadata, float32 scales): convert with `to_torch(x, device)`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kvconform.reference.validation import int_input, int_scalar, require

__all__ = ["VarlenMetadata", "varlen_metadata", "flash_window", "window_from_flash", "flash_soft_cap",
           "soft_cap_from_flash", "per_sequence_scales"]


class VarlenMetadata(NamedTuple):
    """A block-table batch as FlashAttention's varlen arguments; only the num_seqs counted sequences (PA-5).

    cu_seqlens_q  int32[num_seqs + 1]        query row offsets (cu_q_lens[:num_seqs + 1])
    seqused_k     int32[num_seqs]            keys of each sequence (kv_lens[:num_seqs])
    cu_seqlens_k  int32[num_seqs + 1]        prefix sums of seqused_k (for kernels that take K packed)
    max_seqlen_q  int                        the longest query span (0 without sequences)
    max_seqlen_k  int                        the longest kv_len (0 without sequences)
    block_table   int32[num_seqs, pages_per_seq]   page_indices[:num_seqs]
    num_tokens    int                        cu_q_lens[num_seqs]: rows past it are padding (PA-25),
                                             which vLLM leaves out as query[:num_actual_tokens]
    """
    cu_seqlens_q: np.ndarray
    seqused_k: np.ndarray
    cu_seqlens_k: np.ndarray
    max_seqlen_q: int
    max_seqlen_k: int
    block_table: np.ndarray
    num_tokens: int


def _count(num_seqs) -> int:
    """num_seqs as an int: an integer or a one-element integer array (PA-1's table)."""
    if isinstance(num_seqs, np.ndarray):
        require(num_seqs.size == 1, f"num_seqs must be an integer or a one-element array, got shape {num_seqs.shape}")
        num_seqs = num_seqs.reshape(-1)[0]
    return int_scalar("num_seqs", num_seqs, minimum=0)


def varlen_metadata(cu_q_lens, kv_lens, page_indices, num_seqs) -> VarlenMetadata:
    """FlashAttention's varlen metadata of the canonical call's cu_q_lens i32[S+1], kv_lens i32[S],
    page_indices i32[S, pages_per_seq] and num_seqs <= S. Metadata rows past num_seqs (PA-5: ignored) are
    dropped, since FlashAttention takes the batch size from len(cu_seqlens_q) - 1. Raises ValueError or
    TypeError, naming the argument, for metadata PA-4 / PA-5 reject."""
    cu = int_input("cu_q_lens", cu_q_lens, 1, "[S+1]")
    lens = int_input("kv_lens", kv_lens, 1, "[S]")
    table = int_input("page_indices", page_indices, 2, "[S, pages_per_seq]")
    n = _count(num_seqs)
    require(n <= lens.shape[0], f"num_seqs must be <= len(kv_lens) = {lens.shape[0]}, got {n}")
    require(table.shape[0] >= n, f"page_indices must have num_seqs = {n} rows at least, got {table.shape[0]}")
    require(cu.shape[0] >= n + 1, f"cu_q_lens must have num_seqs + 1 = {n + 1} entries at least, got {cu.shape[0]}")
    cu, lens = cu[:n + 1], lens[:n]
    require(int(cu[0]) == 0, f"cu_q_lens[0] must be 0, got {int(cu[0])}")
    q_lens = np.diff(cu)
    require(bool((q_lens >= 0).all()), "cu_q_lens must be non-decreasing over the counted sequences (PA-4)")
    require(bool((lens >= 0).all()), "kv_lens must be >= 0 (PA-6)")
    return VarlenMetadata(
        cu_seqlens_q=cu.astype(np.int32),
        seqused_k=lens.astype(np.int32),
        cu_seqlens_k=np.concatenate([[0], np.cumsum(lens)]).astype(np.int32),
        max_seqlen_q=int(q_lens.max(initial=0)),
        max_seqlen_k=int(lens.max(initial=0)),
        block_table=np.ascontiguousarray(table[:n]).astype(np.int32),
        num_tokens=int(cu[n]),
    )


def flash_window(sliding_window) -> tuple[int, int]:
    """FlashAttention's `window_size` of the spec's window (PA-15): W -> (W - 1, 0), None -> (-1, -1)."""
    if sliding_window is None:
        return (-1, -1)
    w = int_scalar("sliding_window", sliding_window, minimum=1)
    return (w - 1, 0)


def window_from_flash(window_size) -> int | None:
    """The spec's sliding_window of a causal FlashAttention `window_size=(left, right)`: (-1, right) -> None,
    (left >= 0, 0 or -1) -> left + 1. A window reaching right of the row is not causal attention."""
    require(isinstance(window_size, (tuple, list)) and len(window_size) == 2,
            f"window_size must be a (left, right) pair, got {window_size!r}")
    left = int_scalar("window_size[0]", window_size[0], minimum=-1)
    right = int_scalar("window_size[1]", window_size[1], minimum=-1)
    require(right <= 0, f"window_size[1] must be 0 or -1 for causal attention (PA-7), got {right}")
    return None if left < 0 else left + 1


def flash_soft_cap(soft_cap) -> float:
    """FlashAttention's `softcap` of the spec's soft cap (PA-16): c -> c, None -> 0.0 (0 means off)."""
    if soft_cap is None:
        return 0.0
    value = float(soft_cap)
    require(math.isfinite(value) and value > 0, f"soft_cap must be None or finite and > 0 (PA-29), got {soft_cap!r}")
    return value


def soft_cap_from_flash(softcap) -> float | None:
    """The spec's soft_cap of FlashAttention's `softcap`: 0 -> None (off), c > 0 -> c."""
    value = float(softcap)
    require(math.isfinite(value) and value >= 0, f"softcap must be finite and >= 0 (0: off), got {softcap!r}")
    return None if value == 0 else value


def per_sequence_scales(scale, num_seqs, num_kv_heads, *, name: str = "k_scale") -> np.ndarray | None:
    """A dequantization scale (PA-18, PA-48) as vLLM's descale: float32 [num_seqs, num_kv_heads], each row
    the scale of each KV head. `scale`: None (unquantized pages: None back), a float or one-element array
    (per tensor), or float32 [Hkv] (per KV head). A per-token-slot scale [P, page_size, Hkv] has no
    per-sequence form: ValueError naming `name` (such a kernel reads the scales beside the pages)."""
    if scale is None:
        return None
    n = _count(num_seqs)
    heads = int_scalar("num_kv_heads", num_kv_heads, minimum=1)
    arr = np.asarray(scale, dtype=np.float32)
    if arr.size == 1:
        arr = arr.reshape(1)
    require(arr.ndim == 1 and arr.shape[0] in (1, heads),
            f"{name} must be a scalar or float32[{heads}] (one per KV head) to be given per sequence, got shape "
            f"{arr.shape}; per-token-slot scales [P, page_size, Hkv] stay beside the pages")
    require(bool(np.isfinite(arr).all() and (arr > 0).all()), f"{name} must be finite and > 0 (PA-18)")
    return np.ascontiguousarray(np.broadcast_to(arr, (n, heads)))
