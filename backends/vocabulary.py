"""The claim vocabulary of the backend protocol, per op: the ops and their families, features, layouts,\nlimits and conventions, and which claim fields each op reads (`kvconform claims OP` prints it)."""
from __future__ import annotations

from typing import Any

#: op name -> spec family (the spec file and the clause prefix). Method names on a backend.
OPS: dict[str, str] = {
    "ragged_paged_attention": "paged_attention",
    "write_kv": "paged_attention",
    "rotate_keys": "rotation",
    "shift_keys": "rotation",
    "accumulate_scores": "eviction",
    "plan_eviction": "eviction",
    "causal_conv1d_update": "recurrent",
    "selective_state_update": "recurrent",
    "ssd_chunked_scan": "recurrent",
    "rwkv6_wkv": "recurrent",
    "block_table_to_csr": "metadata",
    "csr_to_block_table": "metadata",
    "append_slot_mapping": "metadata",
    "arena_layout": "metadata",
    "slot_mapping_from_arena": "metadata",
    "page_table_step": "metadata",
    "ragged_paged_attention_csr": "metadata",
    "gated_delta_rule_update": "recurrent",
    "gated_delta_rule_chunked": "recurrent",
    "recurrent_store_step": "recurrent",
    "mla_paged_attention": "mla",
}


#: The claims vocabulary: every optional feature and layout name an op's claims may use, each one consulted
#: by the op's strategies (conformance/strategies/<family>.py). A name outside it is an error
#: (`claims_problems`), never a silently "unsupported" column.
FEATURES: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores", "gqa",
                               "per_head_scales", "per_token_scales", "head_sharding"),
    "write_kv": ("quantized_kv", "per_head_scales", "per_token_scales"),
    "rotate_keys": ("per_token_deltas", "per_block_deltas", "partial_rotary"),
    "shift_keys": ("per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas"),
    "accumulate_scores": (),
    "plan_eviction": (),
    "causal_conv1d_update": ("state_indices", "padding_slots", "multi_token", "bias", "silu"),
    "selective_state_update": ("state_indices", "padding_slots", "mamba2", "dt_bias", "dt_softplus", "skip_d",
                               "z_gate", "grouped_bc"),
    "ssd_chunked_scan": ("state_indices", "padding_slots", "initial_states", "snapshots", "dt_bias",
                         "dt_softplus", "skip_d", "z_gate", "grouped_bc"),
    "rwkv6_wkv": ("state_indices", "padding_slots", "initial_states"),
    "gated_delta_rule_update": ("state_indices", "padding_slots", "qk_l2norm"),
    "gated_delta_rule_chunked": ("state_indices", "padding_slots", "initial_states", "qk_l2norm"),
    "recurrent_store_step": (),     # one column: every command is drawn (spec/recurrent.md RS-21 .. RS-27)
    "mla_paged_attention": ("sliding_window", "soft_cap", "sinks"),     # spec/mla.md ML-6
}


LAYOUTS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("combined", "flat"),    # the cache handed in that layout (PA-39)
    "rotate_keys": ("half", "interleaved"),
    "shift_keys": ("half", "interleaved"),
}


#: `OpClaims.limits` keys the strategies read (constraint claims, conformance/strategies/constraints.py)
_KV_SHAPE = ("num_kv_heads", "head_dim", "page_size", "max_pages")


_SSM_SIZES = ("num_heads", "head_dim", "state_size", "num_groups")       # H, P (Mamba1: D), N, G


_SSM_CONVENTIONS = ("padding_outputs", "dt_softplus", "required_inputs")


_LINEAR_SIZES = ("num_qk_heads", "num_heads", "key_dim", "value_dim")    # Hk (GDN), H, K, V


LIMITS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": ("split_kv_min_keys", "max_head_dim", "q_len", "num_q_heads", "group_size",
                               "max_kv_len", "max_num_seqs", "dtype_pairs", "num_shards") + _KV_SHAPE,
    "write_kv": _KV_SHAPE + ("dtype_pairs",),
    "ragged_paged_attention_csr": ("split_kv_min_keys", "max_head_dim", "q_len", "num_q_heads", "group_size",
                                   "max_kv_len", "max_num_seqs", "dtype_pairs") + _KV_SHAPE,
    "rotate_keys": _KV_SHAPE,
    "shift_keys": _KV_SHAPE,
    # recurrent sizes (size constraints) and conventions (CONVENTIONS below); spec/recurrent.md section 6
    "causal_conv1d_update": ("min_width", "max_num_seqs", "width", "channels", "padding_outputs"),
    "selective_state_update": ("max_num_seqs",) + _SSM_SIZES + _SSM_CONVENTIONS,
    "ssd_chunked_scan": ("max_num_seqs", "seq_len") + _SSM_SIZES + _SSM_CONVENTIONS,
    "rwkv6_wkv": ("max_num_seqs", "seq_len") + _LINEAR_SIZES[1:] + ("equal_key_value_dims", "padding_outputs",
                                                                     "decays"),
    "gated_delta_rule_update": ("max_num_seqs",) + _LINEAR_SIZES + ("equal_key_value_dims", "padding_outputs"),
    "gated_delta_rule_chunked": ("max_num_seqs", "seq_len") + _LINEAR_SIZES
    + ("equal_key_value_dims", "padding_outputs"),
    # head_dims claims the latent dims d_c (spec/mla.md ML-1); one KV head, so no KV-head limits
    "mla_paged_attention": ("q_len", "num_q_heads", "max_kv_len", "max_num_seqs", "page_size", "max_pages",
                            "dtype_pairs"),
}


#: The `OpClaims` set fields each op's strategies read (dtypes, kv_dtypes, page_sizes, head_dims): a field
#: an op never reads means nothing for it, so `kvconform list` leaves it out (features, layouts and limits
#: are shown where FEATURES, LAYOUTS, LIMITS register names for the op). Found by recording which fields
#: the draws of every suite test read in a quick-profile run of all ops (2026-11-26), then by reading the
#: strategies: rotate_keys' dtypes are its LUT dtype, accumulate_scores' its score dtype, the recurrent
#: ops' kv_dtypes their state pools' dtypes, mla's head_dims its latent dims d_c (spec/mla.md ML-1).
_ATTENTION_FIELDS = ("dtypes", "kv_dtypes", "page_sizes", "head_dims")


_RECURRENT_FIELDS = ("dtypes", "kv_dtypes")


CLAIM_FIELDS: dict[str, tuple[str, ...]] = {
    "ragged_paged_attention": _ATTENTION_FIELDS,
    "ragged_paged_attention_csr": _ATTENTION_FIELDS,
    "write_kv": _ATTENTION_FIELDS,
    "rotate_keys": _ATTENTION_FIELDS,
    "shift_keys": ("kv_dtypes", "page_sizes", "head_dims"),
    "accumulate_scores": ("dtypes",),
    "plan_eviction": ("page_sizes",),
    "causal_conv1d_update": _RECURRENT_FIELDS,
    "selective_state_update": _RECURRENT_FIELDS,
    "ssd_chunked_scan": _RECURRENT_FIELDS,
    "rwkv6_wkv": _RECURRENT_FIELDS,
    "gated_delta_rule_update": _RECURRENT_FIELDS,
    "gated_delta_rule_chunked": _RECURRENT_FIELDS,
    "recurrent_store_step": ("kv_dtypes",),
    "block_table_to_csr": ("page_sizes",),
    "csr_to_block_table": ("page_sizes",),
    "append_slot_mapping": ("page_sizes",),
    "slot_mapping_from_arena": ("page_sizes",),
    "page_table_step": ("page_sizes",),
    "arena_layout": (),
    "mla_paged_attention": _ATTENTION_FIELDS,
}


#: Convention claims: limits that are not sizes but a choice a real kernel made that the spec leaves open
#: (spec/recurrent.md RS-36 … RS-40), with the values each may take. A convention narrows what is drawn or
#: compared; it never loosens a tolerance.
CONVENTIONS: dict[str, tuple[Any, ...]] = {
    "padding_outputs": ("unspecified",),            # RS-36: padding rows' outputs are not compared
    "dt_softplus": ("always",),                     # RS-37: softplus applied to dt on every call
    "required_inputs": ("D", "dt_bias"),            # RS-38: a list of these, always passed
    "equal_key_value_dims": (True,),                # RS-40: K == V
    "decays": ("positive",),                        # RS-44: decays drawn > 0 (log-space kernels)
}


def convention_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a valid claim of the convention `name` (None: valid, or not a convention)."""
    allowed = CONVENTIONS.get(name)
    if allowed is None:
        return None
    if name == "required_inputs":
        if isinstance(value, (list, tuple)) and value and all(v in allowed for v in value):
            return None
        return f"limit required_inputs must be a non-empty list of {list(allowed)}, got {value!r}"
    if any(value == a and type(value) is type(a) for a in allowed):
        return None
    return f"limit {name} must be one of {list(allowed)}, got {value!r}"


#: Limits whose value is not a size constraint (strategies/constraints.py): "count", a plain integer >= 1
#: (a threshold or a bound the strategies read as is); "dtype_pairs", a list of [activation, KV] dtype-name
#: pairs. Every other registered limit is a size constraint: an int >= 1 (upper bound) or a dict with the
#: keys of SIZE_CONSTRAINT_KEYS. Conventions (CONVENTIONS) are judged by convention_problem. A new limit of
#: another kind must be added here, or its values are judged as a size constraint.
LIMIT_KINDS: dict[str, str] = {"split_kv_min_keys": "count", "max_head_dim": "count", "min_width": "count",
                               "dtype_pairs": "dtype_pairs"}


#: the keys of a dict size constraint: {"values": [int, ...]}, {"multiple_of": int}, {"min": int, "max": int}
SIZE_CONSTRAINT_KEYS = ("values", "multiple_of", "min", "max")


#: OpClaims fields holding names, and those holding sizes (None = any)
_NAME_FIELDS = ("dtypes", "kv_dtypes", "layouts", "features")


_SIZE_FIELDS = ("page_sizes", "head_dims")


# MD-23: attention over CSR metadata draws the block-table attention columns (per-token scores and head
# sharding aside)
FEATURES["ragged_paged_attention_csr"] = tuple(f for f in FEATURES["ragged_paged_attention"]
                                               if f not in ("return_scores", "head_sharding"))


# Claims real kernels needed (spec/paged_attention.md PA-54, spec/mla.md ML-12): the windows a kernel takes
# (a minimum sliding window: {"min": W}), MLA's RoPE dim d_r ({"values": [64]})
for _op in ("ragged_paged_attention", "ragged_paged_attention_csr", "mla_paged_attention"):
    LIMITS[_op] += ("sliding_window",)


LIMITS["mla_paged_attention"] += ("rope_dim",)


# no empty sequences for the page-table ops (spec/metadata.md MD-24): {"seq_len": {"min": 1}}
for _op in ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "slot_mapping_from_arena",
            "page_table_step"):
    LIMITS[_op] = LIMITS.get(_op, ()) + ("seq_len",)
