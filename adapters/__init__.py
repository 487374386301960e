"""kvconform.adapters: what a backend wrapping a torch (or Triton, CUDA) kernel needs, so that it writes no
dtype, layout or page-table code of its own (docs/wrapping-a-torch-kernel.md).

  arrays         exact NumPy <-> torch for every dtype of the spec (bfloat16 and float8 through bit views),
                 on any device, always copying inputs; any array-like -> NumPy (torch, jax, DLPack)
  cache_layouts  the canonical caches and state pools <-> vLLM's, FlashInfer's and sglang's layouts
  page_tables    slot mappings, block tables and CSR page tables in those stacks' conventions

Importing this package never imports torch: each function imports it when it needs it.
"""
from .arrays import ConversionError, describe_array, host_view, numpy_dtype, to_numpy, to_torch, torch_dtype
from .cache_layouts import (from_flashinfer_kv_cache, from_sglang_kv_buffer, from_vllm_conv_state,
                            from_vllm_gdn_state, from_vllm_kv_cache, sequence_kv, to_flashinfer_kv_cache,
                            to_sglang_kv_buffer, to_vllm_conv_state, to_vllm_gdn_state, to_vllm_kv_cache)
from .page_tables import (SequenceSpan, flashinfer_batch_indices_positions, sequence_spans, sglang_out_cache_loc,
                          sglang_req_to_token, slot_mapping)

__all__ = ["ConversionError", "describe_array", "host_view", "numpy_dtype", "to_numpy", "to_torch", "torch_dtype",
           "from_flashinfer_kv_cache", "from_sglang_kv_buffer", "from_vllm_conv_state", "from_vllm_gdn_state",
           "from_vllm_kv_cache", "sequence_kv", "to_flashinfer_kv_cache", "to_sglang_kv_buffer",
           "to_vllm_conv_state", "to_vllm_gdn_state", "to_vllm_kv_cache", "SequenceSpan",
           "flashinfer_batch_indices_positions", "sequence_spans", "sglang_out_cache_loc", "sglang_req_to_token",
           "slot_mapping"]
