"""The models profile's case builders: one Case per ModelCase, from its fixed seed."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.scale import page_table, spread_slots
from kvconform.conformance.strategies.values import floats
from kvconform.reference import dtypes

from .cases import FP8_SCALES, ModelCase


def build(mc: ModelCase) -> Case:
    """The case of `mc`, the same on every run (its seed)."""
    return _BUILDERS[mc.op](mc, np.random.default_rng(mc.seed))


def _params(mc: ModelCase, **extra) -> dict:
    """The case's params: the model and batch, its dims (a recurrent state pool's dtype as `kv_dtype`, the
    name the claims judge it by) and `extra`."""
    dims = {("kv_dtype" if k == "state_dtype" else k): (list(v) if isinstance(v, tuple) else v)
            for k, v in mc.dims.items()}
    return dict(model=mc.model.name, batch=mc.batch, **dims, **extra)


def _activations(rng, shape, dtype: str) -> np.ndarray:
    """Standard normal values rounded to `dtype` (normalized activations: q . k / sqrt(D) of order one),
    generated in float32 (a 16k-token pool in well under a second); float8 pools draw every finite value of
    the format (values.floats), as stored data scaled by a per-tensor scale."""
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(dtype)):
        return floats(rng, shape, dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtypes.resolve_dtype(dtype))


def _attention_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    pool_shape = (num_pages, d["page_size"], d["hkv"], d["d"])
    k_pages, v_pages = (_activations(rng, pool_shape, d["kv_dtype"]) for _ in range(2))
    cu = np.concatenate([[0], np.cumsum(d["q_lens"])]).astype(np.int32)
    inputs = dict(q=_activations(rng, (int(cu[-1]), d["hq"], d["d"]), d["dtype"]), k_pages=k_pages, v_pages=v_pages,
                  kv_lens=np.asarray(d["kv_lens"], np.int32), page_indices=table, cu_q_lens=cu,
                  num_seqs=len(d["kv_lens"]))
    for name in ("sm_scale", "sliding_window", "soft_cap"):
        if d.get(name) is not None:
            inputs[name] = d[name]
    if d.get("sinks"):
        inputs["sinks"] = (rng.standard_normal(d["hq"]) * 2).astype(np.float32)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(d["kv_dtype"])):
        inputs["k_scale"], inputs["v_scale"] = FP8_SCALES
    return Case(mc.op, inputs, _params(mc, head_dim=d["d"], num_seqs=len(d["kv_lens"]), num_pages=num_pages), mc.seed)


def _write_case(mc: ModelCase, rng) -> Case:
    """The new tokens of the attention batch (the last q_len positions of each sequence) written to their
    slots of the sequence's pages."""
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    slots = []
    for i, (q_len, kv_len) in enumerate(zip(d["q_lens"], d["kv_lens"])):
        pos = np.arange(kv_len - q_len, kv_len)
        slots.append(table[i, pos // d["page_size"]] * d["page_size"] + pos % d["page_size"])
    slot_mapping = np.concatenate(slots).astype(np.int32)
    pool_shape = (num_pages, d["page_size"], d["hkv"], d["d"])
    k_pages, v_pages = (_activations(rng, pool_shape, d["kv_dtype"]) for _ in range(2))
    k, v = (_activations(rng, (slot_mapping.size, d["hkv"], d["d"]), d["dtype"]) for _ in range(2))
    inputs = dict(k_pages=k_pages, v_pages=v_pages, k=k, v=v, slot_mapping=slot_mapping)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(d["kv_dtype"])):
        inputs["k_scale"], inputs["v_scale"] = FP8_SCALES
    return Case(mc.op, inputs, _params(mc, head_dim=d["d"], tokens=int(slot_mapping.size), num_pages=num_pages),
                mc.seed)


def _mla_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    cu = np.concatenate([[0], np.cumsum(d["q_lens"])]).astype(np.int32)
    T = int(cu[-1])
    inputs = dict(q_nope=_activations(rng, (T, d["hq"], d["d_c"]), d["dtype"]),
                  q_pe=_activations(rng, (T, d["hq"], d["d_r"]), d["dtype"]),
                  c_kv_pages=_activations(rng, (num_pages, d["page_size"], d["d_c"]), d["dtype"]),
                  k_pe_pages=_activations(rng, (num_pages, d["page_size"], d["d_r"]), d["dtype"]),
                  kv_lens=np.asarray(d["kv_lens"], np.int32), page_indices=table, cu_q_lens=cu,
                  num_seqs=len(d["kv_lens"]), sm_scale=d["sm_scale"])
    return Case(mc.op, inputs, _params(mc, head_dim=d["d_c"], kv_dtype=d["dtype"], num_seqs=len(d["kv_lens"]),
                                       num_pages=num_pages), mc.seed)


def _slots(rng, rows: int) -> tuple[np.ndarray, int]:
    """Slots of `rows` rows spread over a pool of rows + 8 (the last slot among them)."""
    num_slots = rows + 8
    return spread_slots(rng, num_slots, rows, rows), num_slots


def _decays(rng, shape, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape)


def _gdn_update_case(mc: ModelCase, rng) -> Case:
    """Qwen3-Next's decode step: L2-normalised q, k (use_qk_l2norm), log gates g = -exp(A_log) * softplus(.)
    of a few tenths, betas sigmoid(.) in (0, 1)."""
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    B = d["rows"]
    inputs = dict(q=_activations(rng, (B, d["hk"], d["k"]), d["dtype"]),
                  k=_activations(rng, (B, d["hk"], d["k"]), d["dtype"]),
                  v=_activations(rng, (B, d["hv"], d["v"]), d["dtype"]),
                  g=(-_decays(rng, (B, d["hv"]), 0.01, 1.0)).astype(dtypes.resolve_dtype(d["dtype"])),
                  beta=_decays(rng, (B, d["hv"]), 0.05, 0.95).astype(dtypes.resolve_dtype(d["dtype"])),
                  state=_activations(rng, (num_slots, d["hv"], d["k"], d["v"]), d["state_dtype"]),
                  use_qk_l2norm=True, state_indices=idx)
    return Case(mc.op, inputs, _params(mc, num_seqs=B, tokens=B, num_slots=num_slots), mc.seed)


def _varlen(rng, d: dict):
    """cu_seqlens, state_indices, has_initial_state, pool rows of the chunked cases."""
    lens = d["seq_lens"]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    idx, num_slots = _slots(rng, len(lens))
    return cu, idx, np.asarray([not f for f in d["fresh"]], dtype=bool), num_slots


def _gdn_chunked_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    act = dtypes.resolve_dtype(d["dtype"])
    inputs = dict(q=_activations(rng, (T, d["hk"], d["k"]), d["dtype"]),
                  k=_activations(rng, (T, d["hk"], d["k"]), d["dtype"]),
                  v=_activations(rng, (T, d["hv"], d["v"]), d["dtype"]),
                  g=(-_decays(rng, (T, d["hv"]), 0.01, 1.0)).astype(act),
                  beta=_decays(rng, (T, d["hv"]), 0.05, 0.95).astype(act),
                  state=_activations(rng, (num_slots, d["hv"], d["k"], d["v"]), d["state_dtype"]),
                  cu_seqlens=cu, chunk_size=d["chunk_size"], use_qk_l2norm=True, state_indices=idx,
                  has_initial_state=has_initial)
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


def _conv_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    inputs = dict(x=_activations(rng, (d["rows"], d["channels"]), d["dtype"]),
                  conv_state=_activations(rng, (num_slots, d["channels"], d["width"] - 1), d["state_dtype"]),
                  weight=_activations(rng, (d["channels"], d["width"]), d["dtype"]), activation="silu",
                  state_indices=idx)
    if d["bias"]:
        inputs["bias"] = _activations(rng, (d["channels"],), d["dtype"])
    return Case(mc.op, inputs, _params(mc, num_seqs=d["rows"], tokens=d["rows"], num_slots=num_slots), mc.seed)


def _mamba_heads(rng, d: dict) -> dict:
    """Mamba-2's per-head parameters: A = -exp(A_log) in [-16, -1] (A_init_range (1, 16)), dt_bias
    softplus^-1 of dt in [0.001, 0.1] (dt_min, dt_max), D."""
    act = dtypes.resolve_dtype(d["dtype"])
    dt = rng.uniform(0.001, 0.1, size=d["h"])
    return dict(A=(-rng.uniform(1.0, 16.0, size=d["h"])).astype(act), D=_activations(rng, (d["h"],), d["dtype"]),
                dt_bias=np.log(np.expm1(dt)).astype(act))


def _ssu_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    B = d["rows"]
    inputs = dict(state=_activations(rng, (num_slots, d["h"], d["p"], d["n"]), d["state_dtype"]),
                  x=_activations(rng, (B, d["h"], d["p"]), d["dtype"]),
                  dt=(rng.standard_normal((B, d["h"])) * 0.5).astype(dtypes.resolve_dtype(d["dtype"])),
                  B=_activations(rng, (B, d["g"], d["n"]), d["dtype"]), C=_activations(rng, (B, d["g"], d["n"]), d["dtype"]),
                  dt_softplus=True, state_indices=idx, **_mamba_heads(rng, d))
    return Case(mc.op, inputs, _params(mc, num_seqs=B, tokens=B, num_slots=num_slots, mamba2=True), mc.seed)


def _ssd_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    inputs = dict(state=_activations(rng, (num_slots, d["h"], d["p"], d["n"]), d["state_dtype"]),
                  x=_activations(rng, (T, d["h"], d["p"]), d["dtype"]),
                  dt=(rng.standard_normal((T, d["h"])) * 0.5).astype(dtypes.resolve_dtype(d["dtype"])),
                  B=_activations(rng, (T, d["g"], d["n"]), d["dtype"]), C=_activations(rng, (T, d["g"], d["n"]), d["dtype"]),
                  cu_seqlens=cu, chunk_size=d["chunk_size"], state_indices=idx, has_initial_state=has_initial,
                  dt_softplus=True, **_mamba_heads(rng, d))
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


def _rwkv_case(mc: ModelCase, rng) -> Case:
    """RWKV-6 time mixing: decays w = exp(-exp(x)) of a trained model's spread (w in (0.4, 0.9999))."""
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    act = dtypes.resolve_dtype(d["dtype"])
    inputs = dict(r=_activations(rng, (T, d["h"], d["k"]), d["dtype"]), k=_activations(rng, (T, d["h"], d["k"]), d["dtype"]),
                  v=_activations(rng, (T, d["h"], d["v"]), d["dtype"]),
                  w=np.exp(-np.exp(rng.uniform(-9.0, -0.1, size=(T, d["h"], d["k"])))).astype(act),
                  u=_activations(rng, (d["h"], d["k"]), d["dtype"]),
                  state=_activations(rng, (num_slots, d["h"], d["k"], d["v"]), d["state_dtype"]),
                  cu_seqlens=cu, state_indices=idx, has_initial_state=has_initial)
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


_BUILDERS = {"ragged_paged_attention": _attention_case, "write_kv": _write_case, "mla_paged_attention": _mla_case,
             "gated_delta_rule_update": _gdn_update_case, "gated_delta_rule_chunked": _gdn_chunked_case,
             "causal_conv1d_update": _conv_case, "selective_state_update": _ssu_case, "ssd_chunked_scan": _ssd_case,
             "rwkv6_wkv": _rwkv_case}
