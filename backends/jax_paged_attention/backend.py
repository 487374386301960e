"""Claims and layout conversion for jax's decode `paged_attention` kernel (see the package docstring).

Claims (spec/paged_attention.md clauses in brackets): one query row per counted sequence (q_len = 1, so
kv_len >= 1) [PA-4, PA-6]; float32 or bfloat16 activations and float32, bfloat16 or int8 pages with scales
per tensor, per KV head or per token and KV head (the kernel's scale pages) [PA-18, PA-19, PA-48]; GQA
[PA-12]; soft cap [PA-16]. No sliding window, no sinks, no per-token scores, no fp8 pages (the kernel's
quantized form is int8 only). `pages_per_compute_block` = 1 (it must divide pages_per_seq).
"""
from __future__ import annotations

import numpy as np

from ...reference import paged_attention as ref_attention
from ..base import Availability, Backend, OpClaims
from ..jax_ragged_paged_attention.backend import JAX_VERSION, jax_availability
from ..pallas import runtime

UPSTREAM = "jax/experimental/pallas/ops/tpu/paged_attention/paged_attention_kernel.py"
INT8_RANGE = 127.5   # the kernel's int8 pages hold value * 127.5 / scale (quantization_utils.MAX_INT8)


class PagedAttentionBackend(Backend):
    name = "jax-paged-attention"
    version = f"jax-{JAX_VERSION}"

    def availability(self) -> Availability:
        return jax_availability(UPSTREAM)

    def capabilities(self) -> dict[str, OpClaims]:
        return {"ragged_paged_attention": OpClaims(
            dtypes=("float32", "bfloat16"), kv_dtypes=("float32", "bfloat16", "int8"), page_sizes=None,
            head_dims=None, features=("soft_cap", "gqa", "quantized_kv", "per_head_scales", "per_token_scales"),
            limits={"q_len": {"values": [1]}})}

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, return_scores=False, kv_layout="separate"):
        """Same contract as reference.ragged_paged_attention; out is float32 (q goes in as float32)."""
        call = ref_attention.validate_ragged_paged_attention(
            q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
            return_scores=return_scores, kv_layout=kv_layout)
        for arg, value in (("sliding_window", sliding_window), ("sinks", sinks),
                           ("return_scores", return_scores or None)):
            if value is not None:
                raise NotImplementedError(f"{arg}: not supported by {UPSTREAM} (not claimed)")
        n = call.num_seqs
        rows = call.cu_q_lens[:n]
        q_lens = call.cu_q_lens[1:n + 1] - rows
        if np.any(q_lens != 1):
            raise NotImplementedError(f"cu_q_lens: the decode kernel takes exactly one query row per sequence "
                                      f"(claimed q_len = 1), got q_lens {q_lens.tolist()}")
        T, Hq, D = call.q.shape
        out = np.zeros((T, Hq, D), np.float32)    # rows past cu_q_lens[num_seqs]: unspecified (PA-25)
        if n == 0:
            return out
        q_dec = np.asarray(q, np.float32)[rows] * np.float32(call.sm_scale)
        k, v = (np.ascontiguousarray(np.moveaxis(p, 2, 0)) for p in (call.k_pages, call.v_pages))
        if call.k_scale is not None:
            k, v = _quantized(k, call.k_scale), _quantized(v, call.v_scale)
        from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention
        runtime.release_if_needed()
        with runtime.interpret_context():
            res = paged_attention(q_dec, k, v, np.asarray(call.kv_lens[:n], np.int32),
                                  np.asarray(call.page_indices[:n], np.int32),
                                  attn_logits_soft_cap=call.soft_cap, pages_per_compute_block=1)
        out[rows] = np.asarray(res, np.float32)
        return out


def _quantized(pages: np.ndarray, scale):
    """int8 pages [Hkv, P, ps, D] with our scale (value = int8 * scale, PA-18, PA-48) in the kernel's
    QuantizedTensor form: scale pages [Hkv, P, ps, 1] holding scale * 127.5."""
    from jax.experimental.pallas.ops.tpu.paged_attention.quantization_utils import QuantizedTensor
    hkv, P, ps, _ = pages.shape
    s = np.asarray(scale, np.float32)
    if s.ndim == 0:
        s = np.broadcast_to(s, (hkv, P, ps))
    elif s.ndim == 1:                              # per KV head
        s = np.broadcast_to(s[:, None, None], (hkv, P, ps))
    else:                                          # per token slot and KV head [P, ps, Hkv]
        s = np.moveaxis(s, 2, 0)
    return QuantizedTensor(weight=pages, scales=np.ascontiguousarray(s[..., None] * np.float32(INT8_RANGE)))
