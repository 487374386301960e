"""What the Triton backend claims, per op (backends/base.py OpClaims): dtypes, features, layouts, limits."""
from __future__ import annotations

from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes

ACT_DTYPES = ("float32", "float16", "bfloat16")
KV_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")
#: recurrent activations (RS-6). Not float64: the kernels compute and return float32, and an output narrower
#: than the activations fails NU-3 (claiming float64 would claim a precision the kernels do not deliver).
RECURRENT_ACT_DTYPES = ("float32", "float16", "bfloat16")
RECURRENT_POOL_DTYPES = ("float32",)   # recurrent pools: float64 pools run, but float32 math misses NU-R2 at n = 1


def claims(split_kv_min_keys: int) -> dict[str, OpClaims]:
    """The claims; `split_kv_min_keys`: keys from which the attention kernels split the KV range
    (attention_launch.split_threshold: natively or under the interpreter)."""
    return {
        "ragged_paged_attention": OpClaims(
            dtypes=ACT_DTYPES, kv_dtypes=KV_DTYPES, page_sizes=None, head_dims=None,
            features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores", "gqa",
                      "per_head_scales", "per_token_scales"),
            limits={"split_kv_min_keys": split_kv_min_keys}),
        # MD-23: the same kernels reading the CSR page table in place (constexpr CSR); no scores
        "ragged_paged_attention_csr": OpClaims(
            dtypes=ACT_DTYPES, kv_dtypes=KV_DTYPES, page_sizes=None, head_dims=None,
            features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "gqa",
                      "per_head_scales", "per_token_scales"),
            limits={"split_kv_min_keys": split_kv_min_keys}),
        # MD-7, MD-10: one slot-mapping kernel over separate arrays or the packed arena read in place
        "append_slot_mapping": OpClaims(dtypes=("int32",), kv_dtypes=("int32",)),
        "slot_mapping_from_arena": OpClaims(dtypes=("int32",), kv_dtypes=("uint8",)),
        "write_kv": OpClaims(
            dtypes=ACT_DTYPES + ("float64",), kv_dtypes=KV_DTYPES, page_sizes=None, head_dims=None,
            features=("quantized_kv", "per_head_scales", "per_token_scales")),
        "rotate_keys": OpClaims(
            dtypes=ACT_DTYPES, kv_dtypes=ACT_DTYPES, page_sizes=None, head_dims=None, layouts=("half", "interleaved"),
            features=("per_token_deltas", "per_block_deltas", "partial_rotary")),
        "shift_keys": OpClaims(
            dtypes=ACT_DTYPES, kv_dtypes=ACT_DTYPES, page_sizes=None, head_dims=None, layouts=("half", "interleaved"),
            features=("per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas")),
        # Eviction (EV-*): float64 accumulation and exact selection on device; any float step_scores /
        # acc dtype is upcast exactly to float64 before the kernels (so NU-EV2's bit-exact class applies).
        "accumulate_scores": OpClaims(dtypes=dtypes.FLOAT_DTYPE_NAMES),
        "plan_eviction": OpClaims(dtypes=dtypes.FLOAT_DTYPE_NAMES, page_sizes=None),
        # Recurrent (RS-*): float32 math in the kernels; pools float32/float64 (RS-6), rows read and
        # written in place on a copy; conv windows copied in the pool dtype (exact, NU-R1).
        "causal_conv1d_update": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "multi_token", "bias", "silu")),
        "selective_state_update": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "mamba2", "dt_bias", "dt_softplus", "skip_d",
                      "z_gate", "grouped_bc")),
        "ssd_chunked_scan": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "initial_states", "snapshots", "dt_bias",
                      "dt_softplus", "skip_d", "z_gate", "grouped_bc")),
        "rwkv6_wkv": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "initial_states")),
        # Gated delta rule (RS-28 .. RS-33): float32 math; the chunked kernel is the WY/UT form.
        "gated_delta_rule_update": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "qk_l2norm")),
        "gated_delta_rule_chunked": OpClaims(
            dtypes=RECURRENT_ACT_DTYPES, kv_dtypes=RECURRENT_POOL_DTYPES,
            features=("state_indices", "padding_slots", "initial_states", "qk_l2norm")),
        # the store moves bits (32-bit words), so float64 pools are exact too (RS-22, RS-25, RS-26)
        "recurrent_store_step": OpClaims(dtypes=("float32", "float64"), kv_dtypes=("float32", "float64")),
        # Latent attention (ML-*): one program per query row, all heads, so decode and prefill alike
        "mla_paged_attention": OpClaims(dtypes=ACT_DTYPES, kv_dtypes=ACT_DTYPES, page_sizes=None, head_dims=None,
                                        features=("sliding_window", "soft_cap", "sinks")),
    }
