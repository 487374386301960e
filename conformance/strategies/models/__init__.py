"""The `models` profile's cases: the shapes of real models, in realistic batches (conformance/models_suite/).

The ci profile draws small shapes; a kernel that is right there can still be wrong at the head counts,
head dims, GQA groups, windows, caps, sinks and state sizes real models use, or in a batch that mixes
decode rows over thousands of keys with a prefill chunk. Each `ModelCase` is one call of one op at one
model's dimensions, built from a fixed seed (the same case on every run), judged against the reference
with the op's own checks (CHECKS, spec/numerics.md), like any drawn case. Activations and KV pages are
bfloat16 (what the models serve in), recurrent state pools float32; one case stores Llama's KV cache as
float8_e4m3fn with per-tensor scales (vLLM's `--kv-cache-dtype fp8`).

Batches: attention and its KV write take four decode rows at 1024 .. 8192 keys plus one 256-token prefill
chunk after 256 cached tokens (a chunked prefill); MLA takes DeepSeek-V3's decode rows, once with one
row per sequence and once with two (its multi-token-prediction draft, `num_nextn_predict_layers` 1);
the one-token recurrent updates take eight decode rows on slots spread over the pool, the chunked scans
a 512-token prefill from a fresh state, a 256-token chunk continuing from a stored state and (RWKV-6)
decode rows of one token. Fewer rows than a serving batch, never smaller heads: the profile stays a few
minutes on the numpy backend on 2 cores (docs/performance.md).

The model dimensions come from each model's Hugging Face config.json (`ModelConfig.fields` cites them;
`kvconform list --profile models` prints the table):

- Llama-3.1 8B / 70B: num_attention_heads 32 / 64, num_key_value_heads 8, head_dim 128 (hidden_size /
  num_attention_heads = 4096 / 32, 8192 / 64).
- Qwen3-30B-A3B / Qwen3-235B-A22B: num_attention_heads 32 / 64, num_key_value_heads 4, head_dim 128
  (GQA groups of 8 and 16).
- Mistral-7B-v0.1: num_attention_heads 32, num_key_value_heads 8, head_dim 128, sliding_window 4096.
- Gemma-2 9B: num_attention_heads 16, num_key_value_heads 8, head_dim 256, sliding_window 4096 on its
  local layers (every other layer; the others are global), attn_logit_softcapping 50.0,
  query_pre_attn_scalar 256 (sm_scale = 256^-0.5). Its final_logit_softcapping 30.0 caps the LM head's
  logits, not attention's, so no op here applies it.
- gpt-oss-120b: num_attention_heads 64, num_key_value_heads 8, head_dim 64, sliding_window 128 on every
  other layer (`layer_types` alternates sliding_attention and full_attention), a learned sink logit per
  query head on every layer.
- DeepSeek-V3: num_attention_heads 128, kv_lora_rank 512 (d_c), qk_rope_head_dim 64 (d_r),
  qk_nope_head_dim 128, rope_scaling yarn with factor 40, mscale_all_dim 1.0: softmax scale
  (qk_nope_head_dim + qk_rope_head_dim)^-0.5 * mscale^2 with mscale = 0.1 * ln(40) + 1; the latent cache
  in pages of 64 tokens (FlashMLA's block size).
- Qwen3-Next-80B-A3B: linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
  linear_value_head_dim 128, linear_conv_kernel_dim 4 (the gated delta rule's conv over q, k and v:
  2 * 16 * 128 + 32 * 128 = 8192 channels).
- Mamba-2 2.7B: d_model 2560, expand 2, headdim 64, d_state 128, ngroups 1, d_conv 4, chunk_size 256
  (80 heads of 64 channels; conv over x, B and C: 5120 + 2 * 128 = 5376 channels).
- RWKV-6 (Finch 7B): hidden_size 4096, head_size 64 (64 heads).
"""
from __future__ import annotations

from .builders import build  # noqa: F401
from .cases import (ATTENTION, CASES, DECODE_ROWS, DEEPSEEK_V3, FP8_SCALES, GEMMA2_9B, GPT_OSS_120B,  # noqa: F401
                    LLAMA_8B, LLAMA_70B, MAMBA2_2_7B, MISTRAL_7B, MIX_KV_LENS, MIX_Q_LENS, MLA, MLA_PAGE_SIZE, OPS,
                    PAGE_SIZE, QWEN3_30B, QWEN3_235B, QWEN3_NEXT, RECURRENT, RWKV6_7B, WRITE_KV, ModelCase,
                    ModelConfig, deepseek_sm_scale, of_op, table)
