"""kvconform.adapters: what a backend wrapping a torch (or Triton, CUDA) kernel needs, so that it writes no
dtype, layout or page-table code of its own (docs/wrapping-a-torch-kernel.md).

  arrays         exact NumPy <-> torch for every dtype of the spec (bfloat16 and float8 through bit views),
                 on any device, always copying inputs; any array-like -> NumPy (torch, jax, DLPack)
  cache_layouts  the canonical caches and state pools <-> vLLM's, FlashInfer's and sglang's layouts
  page_tables    slot mappings, block tables and CSR page tables in those stacks' conventions
  varlen         the canonical attention call in FlashAttention's / vLLM's varlen form: cu_seqlens_q,
                 seqused_k, max_seqlen_q/k, block_table; window (W - 1, 0); soft cap 0 = off; descales
                 per sequence and KV head

Importing this package never imports torch: each function imports it when it needs it.
"""
from .arrays import ConversionError, describe_array, host_view, numpy_dtype, to_numpy, to_torch, torch_dtype
from .cache_layouts import (from_flashinfer_kv_cache, from_sglang_kv_buffer, from_vllm_conv_state,
                            from_vllm_gdn_state, from_vllm_kv_cache, sequence_kv, to_flashinfer_kv_cache,
                            to_sglang_kv_buffer, to_vllm_conv_state, to_vllm_gdn_state, to_vllm_kv_cache)
from .page_tables import (SequenceSpan, flashinfer_batch_indices_positions, sequence_spans, sglang_out_cache_loc,
                          sglang_req_to_token, slot_mapping)
from .varlen import (VarlenMetadata, flash_soft_cap, flash_window, per_sequence_scales, soft_cap_from_flash,
                     varlen_metadata, window_from_flash)

__all__ = ["ConversionError", "describe_array", "host_view", "numpy_dtype", "to_numpy", "to_torch", "torch_dtype",
           "from_flashinfer_kv_cache", "from_sglang_kv_buffer", "from_vllm_conv_state", "from_vllm_gdn_state",
           "from_vllm_kv_cache", "sequence_kv", "to_flashinfer_kv_cache", "to_sglang_kv_buffer",
           "to_vllm_conv_state", "to_vllm_gdn_state", "to_vllm_kv_cache", "SequenceSpan",
           "flashinfer_batch_indices_positions", "sequence_spans", "sglang_out_cache_loc", "sglang_req_to_token",
           "slot_mapping", "VarlenMetadata", "varlen_metadata", "flash_window", "window_from_flash",
           "flash_soft_cap", "soft_cap_from_flash", "per_sequence_scales"]
