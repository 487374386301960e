"""Real ranges shared by several ops, each with its source (spec/numerics.md "Reach by dimension").

A number here is the largest size a real model config or a serving stack's limit gives a dimension; the
citation names the model's config.json field or the serving stack's file and default. Ops narrow them
(`dataclasses.replace`) where their own argument is smaller.
"""
from __future__ import annotations

#: tokens of one step: vLLM's default max_num_batched_tokens is 16384 for the offline LLM class on GPUs
#: (8192 for the API server) with chunked prefill (vllm/engine/arg_utils.py, default_max_num_batched_tokens)
TOKENS = (16384, "vLLM vllm/engine/arg_utils.py default_max_num_batched_tokens: 16384 (LLM class, GPU)")
#: sequences of one step: vLLM's default max_num_seqs 1024 for the LLM class on GPUs (arg_utils.py)
SEQUENCES = (1024, "vLLM vllm/engine/arg_utils.py default_max_num_seqs: 1024 (LLM class, GPU)")
#: keys of one sequence: DeepSeek-V3's context
KEYS = (163840, "config.json of DeepSeek-V3: max_position_embeddings = 163840")
#: page-table entries of one sequence: DeepSeek-V3's context in vLLM's default 16-token blocks
PAGES_PER_SEQ = (10240, "163840 keys (config.json of DeepSeek-V3: max_position_embeddings) / 16 "
                        "(vLLM vllm/config/cache.py default block_size 16)")
#: tokens per page: vLLM sizes a hybrid model's attention page to hold one Mamba state page (672 tokens
#: for Nemotron-Nano-9B-v2, vllm-project/vllm#24280)
PAGE_SIZE = (672, "vllm-project/vllm#24280: Nemotron-Nano-9B-v2 attention block_size 672 (hybrid page)")
#: pages of one pool: vLLM sizes the pool from free memory. Llama-3.1-8B (config.json: num_hidden_layers
#: 32, num_key_value_heads 8, head_dim 128) keeps 128 KiB of bf16 K+V per token: 100 GiB of an H200 hold
#: 819200 tokens, 51200 pages of 16 and 819200 of FlashInfer's page_size 1
POOL_PAGES = (819200, "vLLM pool sized from free memory: Llama-3.1-8B config.json (32 layers, 8 KV heads, "
                      "head_dim 128) = 128 KiB/token bf16; 100 GiB of an H200 = 819200 pages of 1 token")
#: query heads: DeepSeek-V3 and Llama-3.1-405B both have 128
Q_HEADS = (128, "config.json of DeepSeek-V3 / Llama-3.1-405B: num_attention_heads = 128")
#: KV heads: DeepSeek-V3 declares 128 (its MLA prefill runs as MHA over 128 heads); Llama-3.1-405B has 8
KV_HEADS = (128, "config.json of DeepSeek-V3: num_key_value_heads = 128 (MHA-form prefill)")
#: query heads per KV head: absorbed MLA shares one latent among DeepSeek-V3's 128 heads; plain GQA reaches
#: 71 (config.json of Falcon-7B: n_head 71, multi_query true)
GROUP = (128, "config.json of DeepSeek-V3: num_attention_heads 128 over one absorbed latent; Falcon-7B MQA "
              "n_head 71")
#: head dim: Gemma-2 and Gemma-3 use 256
HEAD_DIM = (256, "config.json of Gemma-2-9B: head_dim = 256")
#: a stored KV row of MLA: DeepSeek-V3's kv_lora_rank 512 + qk_rope_head_dim 64 (vLLM concat_and_cache_mla)
LATENT_ROW = (576, "config.json of DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64 in one cache row")
LATENT_DIM = (512, "config.json of DeepSeek-V3: kv_lora_rank = 512")
ROPE_DIM = (64, "config.json of DeepSeek-V3: qk_rope_head_dim = 64")
#: a sliding window: Gemma-2's 4096 (Mistral-7B-v0.1: 4096 too)
WINDOW = (4096, "config.json of Gemma-2-9B: sliding_window = 4096")
