"""What a recurrent case uses (its features and claim space, for goldens: harness/goldens.py) and the
diagnosis variations of the family (strategies/variations.py)."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from ..variations import rows_dropped, widened, without

# --- what a case uses (conformance/goldens.py) ------------------------------------------------------

_OPTIONAL_FEATURES = (("D", "skip_d"), ("z", "z_gate"), ("dt_bias", "dt_bias"))


def uses(case: Case) -> tuple[set, dict]:
    """The features a recurrent case uses (FEATURES names of backends/base.py) and its claim space: the
    dtypes, sizes (claim names of constraints.py) and conventions `outside` judges, read off its inputs."""
    x, op = case.inputs, case.op
    features, space = set(), {}
    idx = x.get("state_indices")
    if idx is not None:
        features.add("state_indices")
        if (np.asarray(idx) < 0).any():
            features.add("padding_slots")
    if x.get("has_initial_state") is not None:
        features.add("initial_states")
    if "cu_seqlens" in x:
        space["seq_len"] = [int(n) for n in np.diff(np.asarray(x["cu_seqlens"]))]
    name = dtypes.dtype_name
    if op == "causal_conv1d_update":
        features |= {f for f, on in (("multi_token", np.ndim(x["x"]) == 3), ("bias", x.get("bias") is not None),
                                     ("silu", x.get("activation") == "silu")) if on}
        space.update(dtype=name(x["x"].dtype), kv_dtype=name(x["conv_state"].dtype), num_seqs=np.shape(x["x"])[0],
                     channels=np.shape(x["x"])[-1], width=np.shape(x["weight"])[1])
    elif op in ("selective_state_update", "ssd_chunked_scan"):
        state = x["state"]
        mamba2 = np.ndim(state) == 4
        groups = np.shape(x["B"])[-2] if mamba2 else 1
        features |= {f for arg, f in _OPTIONAL_FEATURES if x.get(arg) is not None}
        features |= {f for f, on in (("mamba2", mamba2 and op == "selective_state_update"),
                                     ("grouped_bc", groups > 1), ("dt_softplus", bool(x.get("dt_softplus"))),
                                     ("snapshots", bool(x.get("num_snapshots")))) if on}
        space.update(dtype=name(x["x"].dtype), kv_dtype=name(state.dtype),
                     num_seqs=len(space["seq_len"]) if "seq_len" in space else np.shape(x["x"])[0],
                     num_heads=np.shape(state)[1] if mamba2 else 1, head_dim=np.shape(state)[-2],
                     state_size=np.shape(state)[-1], num_groups=groups, dt_softplus=bool(x.get("dt_softplus")),
                     optional_inputs=sorted(a for a, _ in _OPTIONAL_FEATURES if x.get(a) is not None))
    elif op in ("rwkv6_wkv", "gated_delta_rule_update", "gated_delta_rule_chunked"):
        state = x["state"]
        if x.get("use_qk_l2norm"):
            features.add("qk_l2norm")
        lead = x["r"] if op == "rwkv6_wkv" else x["q"]
        space.update(dtype=name(lead.dtype), kv_dtype=name(state.dtype), num_heads=np.shape(state)[1],
                     key_dim=np.shape(state)[2], value_dim=np.shape(state)[3],
                     num_seqs=len(space["seq_len"]) if "seq_len" in space else np.shape(lead)[0])
        if op != "rwkv6_wkv":
            space["num_qk_heads"] = np.shape(x["q"])[1]
    elif op == "recurrent_store_step":
        space.update(dtype=name(x["conv_pool"].dtype), kv_dtype=name(x["ssm_pool"].dtype))
    return features, {k: (int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v)
                      for k, v in space.items()}


# --- diagnosis variations (conformance/diagnosis.py) ----------------------------------------------

_ACTIVATIONS = ("x", "weight", "bias", "dt", "A", "B", "C", "z", "D", "dt_bias", "r", "k", "v", "w", "u")


#: the per-row inputs of the one-token ops, whose padding rows (state index -1, RS-3) "padding rows off" drops
_ROW_INPUTS = {"causal_conv1d_update": ("x", "state_indices"),
               "selective_state_update": ("x", "dt", "z", "B", "C", "state_indices"),
               "gated_delta_rule_update": ("q", "k", "v", "g", "beta", "state_indices")}


def _recurrent_diagnosis(case: Case) -> list:
    """Each optional term off, activations widened exactly to float32, padding rows dropped, the chunking
    hint at its ends."""
    idx = case.inputs.get("state_indices")
    found = [rows_dropped(case, "padding rows off", _ROW_INPUTS[case.op], np.asarray(idx) != -1)
             if case.op in _ROW_INPUTS and isinstance(idx, np.ndarray) else None,
             without(case, "bias off", bias=None), without(case, "silu off", activation=None),
             without(case, "z gate off", z=None), without(case, "D skip off", D=None),
             without(case, "dt_bias off", dt_bias=None), without(case, "dt_softplus off", dt_softplus=False),
             without(case, "snapshots off", num_snapshots=None),
             widened(case, _ACTIVATIONS, "activations widened to float32")]
    if case.op in ("ssd_chunked_scan", "gated_delta_rule_chunked"):   # the chunking hint (RS-18, RS-33)
        found += [without(case, "one chunk per sequence (chunk_size 64)", chunk_size=64),
                  without(case, "token by token (chunk_size 1)", chunk_size=1)]
    return [v for v in found if v is not None and not (v[0] == "dt_softplus off" and
                                                       not case.inputs.get("dt_softplus"))]
