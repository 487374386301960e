"""What the Pallas backend claims, per op (backends/base.py OpClaims): dtypes, features, layouts, limits."""
from __future__ import annotations

from ...reference import dtypes as ref_dtypes
from ..base import OpClaims

FLOAT_ACTIVATIONS = ("float32", "bfloat16", "float16")
FLOAT_KV = ("float32", "bfloat16", "float16")
QUANT_KV = ("float8_e4m3fn", "float8_e5m2", "int8")
MAX_HEAD_DIM = 256


def claims(shards) -> dict[str, OpClaims]:
    """The claims, `shards` the head-shard counts jax has devices for (runtime.shard_counts): head
    sharding (PA-49) is claimed only with them (on CPU, the ones make_backend asked for)."""
    sharding = (("head_sharding",), {"num_shards": {"values": list(shards)}}) if shards else ((), {})
    return {
        "ragged_paged_attention": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=FLOAT_KV + QUANT_KV, page_sizes=None, head_dims=None,
            layouts=("combined",),
            features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores", "gqa",
                      "per_head_scales", "per_token_scales") + sharding[0],
            limits={"max_head_dim": MAX_HEAD_DIM, **sharding[1]}),
        # MD-23: the block-table kernel reading the CSR arrays; no per-token scores in MD-23
        "ragged_paged_attention_csr": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=FLOAT_KV + QUANT_KV, page_sizes=None, head_dims=None,
            features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "gqa", "per_head_scales",
                      "per_token_scales"),
            limits={"max_head_dim": MAX_HEAD_DIM}),
        "slot_mapping_from_arena": OpClaims(dtypes=("int32",), kv_dtypes=("uint8",)),
        "append_slot_mapping": OpClaims(dtypes=("int32",), kv_dtypes=("int32",)),
        # float64 k/v too: PA-43/PA-44 round them to float32 first (fl32(x)), the step a TPU transfer of a
        # float64 array takes anyway (jax without x64), so the kernel receives exactly fl32(x)
        "write_kv": OpClaims(
            dtypes=FLOAT_ACTIVATIONS + ("float64",), kv_dtypes=FLOAT_KV + QUANT_KV, page_sizes=None, head_dims=None,
            features=("quantized_kv", "per_head_scales", "per_token_scales")),
        # absorbed MLA (ML-*): blocks of ragged query rows (decode and prefill) with all heads
        "mla_paged_attention": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=FLOAT_KV, page_sizes=None, head_dims=None,
            features=("sliding_window", "soft_cap", "sinks")),
        # eviction (EV-*): float64 state as 32-bit word pairs, exact float64 arithmetic in integer ops; any
        # float acc / step_scores dtype is upcast exactly to float64 first (NU-EV2's bit-exact class)
        "accumulate_scores": OpClaims(dtypes=ref_dtypes.FLOAT_DTYPE_NAMES),
        "plan_eviction": OpClaims(dtypes=ref_dtypes.FLOAT_DTYPE_NAMES, page_sizes=None),
        "rotate_keys": OpClaims(
            dtypes=FLOAT_KV, kv_dtypes=FLOAT_KV, page_sizes=None, head_dims=None,
            layouts=("half", "interleaved"),
            features=("per_token_deltas", "per_block_deltas", "partial_rotary")),
        "shift_keys": OpClaims(
            dtypes=FLOAT_KV, kv_dtypes=FLOAT_KV, page_sizes=None, head_dims=None,
            layouts=("half", "interleaved"),
            features=("per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas")),
        "causal_conv1d_update": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",), features=("state_indices", "padding_slots",
                                                                        "silu", "bias", "multi_token"),
            limits={"min_width": 2}),
        "selective_state_update": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
            features=("state_indices", "padding_slots", "mamba2", "dt_bias", "dt_softplus", "skip_d",
                      "z_gate", "grouped_bc")),
        "ssd_chunked_scan": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
            features=("state_indices", "padding_slots", "initial_states", "snapshots", "dt_bias",
                      "dt_softplus", "skip_d", "z_gate", "grouped_bc")),
        "rwkv6_wkv": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
            features=("state_indices", "padding_slots", "initial_states")),
        "gated_delta_rule_update": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
            features=("state_indices", "padding_slots", "qk_l2norm")),
        "gated_delta_rule_chunked": OpClaims(
            dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
            features=("state_indices", "padding_slots", "initial_states", "qk_l2norm")),
        # the store moves 32-bit words, never values: float64 pools are bit exact without float64 math
        "recurrent_store_step": OpClaims(dtypes=("float32", "float64"), kv_dtypes=("float32", "float64")),
    }
