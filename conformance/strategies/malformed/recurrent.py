"""Malformed inputs for spec/recurrent.md: slot addressing (RS-2, RS-4), pool dtypes (RS-6) and the shape
and argument rules of the four kernels (RS-10, RS-14 .. RS-20).

Shared tables: `_slot_rules` (state_indices out of [-1, num_slots), duplicates, wrong length, wrong
dtype, and a pool too small for `state_indices=None`), `_varlen_rules` (cu_seqlens and has_initial_state of
the prefill kernels). Rules on state_indices / has_initial_state / snapshots draw from the features-matrix
column that turns the feature on, so they apply only to backends that claim it. The pool-dtype rule uses
int32, a dtype the spec never allows for a pool (float16 pools are also rejected by RS-6, but a float
dtype a backend does not claim is `unsupported`, not an error case).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from .. import recurrent as rs
from ..values import sampled_from
from . import as_float, as_int, grown, index, need, rule

VARIANTS = rs.VARIANTS
POOL = {"causal_conv1d_update": "conv_state", "selective_state_update": "state", "ssd_chunked_scan": "state",
        "rwkv6_wkv": "state", "gated_delta_rule_update": "state", "gated_delta_rule_chunked": "state"}


def valid(op: str, claims: OpClaims, variant):
    return rs.STRATEGIES[op](claims, variant)


def _column(op: str, name: str):
    return {v.name: v for v in VARIANTS[op]}[name]


def _set(x: dict, name: str, where, value) -> dict:
    arr = np.array(x[name], copy=True)
    arr[where] = value
    return {name: arr}


def _grow(name: str, axis: int, like=None):
    """`name` one entry longer along `axis`; an absent optional input is first made with its valid shape
    (`like(x)` gives that shape)."""
    def corrupt(draw, x, claims):
        arr = x.get(name)
        if arr is None:
            arr = np.zeros(like(x), dtype=np.asarray(x["x"]).dtype)
        return {name: grown(np.asarray(arr), axis)}
    return corrupt


def _not_float(name: str):
    def corrupt(draw, x, claims):
        return {name: as_int(x[name])}
    return corrupt


def _bool_flag(name: str):
    def corrupt(draw, x, claims):
        return {name: draw(sampled_from((1, 0, "true")))}
    return corrupt


# --- slots (RS-2, RS-4) and pools (RS-6) ----------------------------------------------------------

def _slot_rules(op: str) -> tuple:
    pool = POOL[op]
    indexed = _column(op, "state_indices")

    def out_of_range(draw, x, claims):
        idx = x["state_indices"]
        slots = x[pool].shape[0]
        return _set(x, "state_indices", index(draw, idx.shape[0]), draw(sampled_from((slots, slots + 2, -2, -5))))

    def duplicate(draw, x, claims):
        idx = np.array(x["state_indices"], copy=True)
        live = np.flatnonzero(idx >= 0)
        need(live.size >= 2)
        i, j = draw(st.permutations(live.tolist()))[:2]
        idx[j] = idx[i]
        return {"state_indices": idx}

    def wrong_length(draw, x, claims):
        idx = x["state_indices"]
        pad = np.full(1, -1, idx.dtype)       # a padding entry: no other rule breaks
        return {"state_indices": np.concatenate([idx, pad]) if draw(st.booleans()) else idx[:-1]}

    def not_integer(draw, x, claims):
        return {"state_indices": as_float(x["state_indices"])}

    def too_few_slots(draw, x, claims):
        rows = x[pool].shape[0]
        rows_of = x["x"] if "x" in x else x["v"]          # gated delta rule ops: one v row per batch row
        batch = np.asarray(x["cu_seqlens"]).shape[0] - 1 if "cu_seqlens" in x else np.asarray(rows_of).shape[0]
        need(batch >= 1)
        return {pool: x[pool][:min(rows, batch) - draw(st.integers(1, batch))]}

    def pool_not_float(draw, x, claims):
        return {pool: as_int(x[pool])}

    return (
        rule("state_indices_out_of_range", ("RS-2",), "state_indices",
             "state_indices entries must lie in [-1, num_slots)", out_of_range, variant=indexed),
        rule("state_indices_duplicate", ("RS-4", "RS-2"), "state_indices",
             "non-negative state_indices must be distinct", duplicate, variant=indexed),
        rule("state_indices_length", ("RS-2",), "state_indices", "state_indices must have one entry per row",
             wrong_length, variant=indexed),
        rule("state_indices_not_integer", ("RS-2",), "state_indices", "state_indices must have an integer dtype",
             not_integer, variant=indexed),
        rule("too_few_slots", ("RS-2",), ("state_indices", pool),
             "state_indices=None (row b uses slot b) needs batch <= num_slots", too_few_slots),
        rule("pool_not_float", ("RS-6",), pool, f"{pool} must have dtype float32 or float64", pool_not_float),
    )


# --- causal_conv1d_update (RS-10) -----------------------------------------------------------------

def _conv_x_rank(draw, x, claims):
    arr = np.asarray(x["x"])
    if draw(st.booleans()):
        return {"x": arr.reshape(-1)}                                  # rank 1
    return {"x": arr.reshape((1,) * (4 - arr.ndim) + arr.shape)}     # rank 4


def _conv_bias(draw, x, claims):
    channels = np.asarray(x["weight"]).shape[0]
    return {"bias": np.zeros(channels + draw(st.integers(1, 2)), np.asarray(x["x"]).dtype)}


def _conv_activation(draw, x, claims):
    return {"activation": draw(sampled_from(("relu", "gelu", "SiLU", "swish")))}


CONV_RULES = (
    rule("x_rank", ("RS-10",), "x", "x must have rank 2 [B, C] or rank 3 [B, T, C]", _conv_x_rank),
    rule("x_not_float", ("RS-10",), "x", "x must have a floating dtype", _not_float("x")),
    rule("weight_channels", ("RS-10",), "weight", "weight must have shape [C, W]", _grow("weight", 0)),
    rule("conv_state_channels", ("RS-10", "RS-1"), "conv_state", "conv_state must have shape [num_slots, C, W-1]",
         _grow("conv_state", 1)),
    rule("bias_shape", ("RS-10",), "bias", "bias must have shape [C]", _conv_bias, features=("bias",)),
    rule("activation_unknown", ("RS-10",), "activation", "activation must be None or 'silu'", _conv_activation,
         features=("silu",)),
) + _slot_rules("causal_conv1d_update")


# --- selective_state_update (RS-14 .. RS-16) ------------------------------------------------------

def _groups_not_dividing(draw, x, claims):
    # G = H + 1 groups never divide H heads (RS-16); B and C change together (one rule)
    b = np.asarray(x["B"])
    heads = x["state"].shape[1]
    shape = b.shape[:-2] + (heads + 1, b.shape[-1])
    return {"B": np.zeros(shape, b.dtype), "C": np.zeros(shape, np.asarray(x["C"]).dtype)}


def _state_rank(draw, x, claims):
    # rank 5: neither Mamba1 (3) nor Mamba2 (4); one more axis on a Mamba1 state would read as Mamba2
    state = x["state"]
    return {"state": state.reshape(state.shape + (1,) * (5 - state.ndim))}


_M1_DIM = lambda x: (x["state"].shape[1],)            # Mamba1 [D]
_M1_TOKENS = lambda x: np.asarray(x["x"]).shape        # Mamba1 [B, D]

SSU_RULES = (
    rule("x_shape", ("RS-15",), "x", "x must have shape [B, D]", _grow("x", 1)),
    rule("dt_shape", ("RS-15",), "dt", "dt must have shape [B, D]", _grow("dt", 1)),
    rule("A_shape", ("RS-15",), "A", "A must have shape [D, N]", _grow("A", 1)),
    rule("B_shape", ("RS-15",), "B", "B must have shape [B, N]", _grow("B", 1)),
    rule("C_shape", ("RS-15",), "C", "C must have shape [B, N]", _grow("C", 1)),
    rule("D_shape", ("RS-15",), "D", "D must have shape [D]", _grow("D", 0, _M1_DIM)),
    rule("z_shape", ("RS-15",), "z", "z must have shape [B, D]", _grow("z", 1, _M1_TOKENS)),
    rule("dt_bias_shape", ("RS-15", "RS-14"), "dt_bias", "dt_bias must have shape [D]", _grow("dt_bias", 0, _M1_DIM)),
    rule("dt_softplus_not_bool", ("RS-14",), "dt_softplus", "dt_softplus must be a bool", _bool_flag("dt_softplus")),
    rule("state_rank", ("RS-15", "RS-16"), "state", "state must have rank 3 (Mamba1) or 4 (Mamba2)", _state_rank),
    rule("groups_not_dividing", ("RS-16",), ("B", "C"), "the group count G of B and C must divide H",
         _groups_not_dividing, variant=_column("selective_state_update", "mamba2")),
) + _slot_rules("selective_state_update")


# --- prefill kernels: cu_seqlens and has_initial_state (RS-17) ------------------------------------

def _cu_start(draw, x, claims):
    cu = np.asarray(x["cu_seqlens"])
    # in [1, cu[1]]: still non-decreasing when sequence 0 has tokens
    return _set(x, "cu_seqlens", 0, draw(st.integers(1, max(1, int(cu[1])))))


def _cu_decreasing(draw, x, claims):
    cu = np.asarray(x["cu_seqlens"])
    seqs = cu.shape[0] - 1
    need(seqs >= 2)
    i = draw(st.integers(1, seqs - 1))     # an interior offset: the first and last stay right
    return _set(x, "cu_seqlens", i, int(cu[i + 1]) + draw(st.integers(1, 2)))


def _cu_end(draw, x, claims):
    cu = np.asarray(x["cu_seqlens"])
    return _set(x, "cu_seqlens", cu.shape[0] - 1, int(cu[-1]) + draw(st.integers(1, 2)))


def _cu_not_integer(draw, x, claims):
    return {"cu_seqlens": as_float(x["cu_seqlens"])}


def _initial_not_bool(draw, x, claims):
    return {"has_initial_state": np.asarray(x["has_initial_state"]).astype(np.int8)}


def _initial_length(draw, x, claims):
    flags = np.asarray(x["has_initial_state"])
    return {"has_initial_state": np.concatenate([flags, flags[:1]]) if draw(st.booleans()) else flags[:-1]}


def _varlen_rules(op: str) -> tuple:
    fresh = _column(op, "initial_states")
    return (
        rule("cu_seqlens_start", ("RS-17",), "cu_seqlens", "cu_seqlens must start at 0", _cu_start),
        rule("cu_seqlens_decreasing", ("RS-17",), "cu_seqlens", "cu_seqlens must be non-decreasing", _cu_decreasing),
        rule("cu_seqlens_end", ("RS-17",), "cu_seqlens", "cu_seqlens must end at T, the packed token count", _cu_end),
        rule("cu_seqlens_not_integer", ("RS-17",), "cu_seqlens", "cu_seqlens must have an integer dtype",
             _cu_not_integer),
        rule("has_initial_state_not_bool", ("RS-17", "RS-5"), "has_initial_state",
             "has_initial_state must have dtype bool", _initial_not_bool, variant=fresh),
        rule("has_initial_state_length", ("RS-17", "RS-5"), "has_initial_state",
             "has_initial_state must have one entry per sequence [S]", _initial_length, variant=fresh),
    )


# --- ssd_chunked_scan (RS-17 .. RS-19) ------------------------------------------------------------

def _chunk_invalid(draw, x, claims):
    return {"chunk_size": draw(sampled_from((0, -1, 2.5)))}


def _snapshots_negative(draw, x, claims):
    return {"num_snapshots": -draw(st.integers(1, 3))}


SSD_RULES = (
    rule("x_shape", ("RS-17",), "x", "x must have shape [T, H, P]", _grow("x", 2)),
    rule("dt_shape", ("RS-17",), "dt", "dt must have shape [T, H]", _grow("dt", 1)),
    rule("A_shape", ("RS-17",), "A", "A must have shape [H]", _grow("A", 0)),
    rule("groups_not_dividing", ("RS-17", "RS-16"), ("B", "C"), "the group count G of B and C must divide H",
         _groups_not_dividing),
    rule("chunk_size_invalid", ("RS-18",), "chunk_size", "chunk_size must be an integer >= 1", _chunk_invalid),
    rule("dt_softplus_not_bool", ("RS-14",), "dt_softplus", "dt_softplus must be a bool", _bool_flag("dt_softplus")),
    rule("num_snapshots_negative", ("RS-19",), "num_snapshots", "num_snapshots must be >= 0", _snapshots_negative,
         variant=_column("ssd_chunked_scan", "snapshots")),
) + _varlen_rules("ssd_chunked_scan") + _slot_rules("ssd_chunked_scan")


# --- rwkv6_wkv (RS-20) ----------------------------------------------------------------------------

RWKV_RULES = (
    rule("r_not_float", ("RS-20",), "r", "r must have a floating dtype", _not_float("r")),
    rule("k_shape", ("RS-20",), "k", "k must have shape [T, H, K]", _grow("k", 2)),
    rule("w_shape", ("RS-20",), "w", "w must have shape [T, H, K]", _grow("w", 2)),
    rule("v_shape", ("RS-20",), "v", "v must have shape [T, H, V]", _grow("v", 1)),
    rule("u_shape", ("RS-20",), "u", "u must have shape [H, K]", _grow("u", 1)),
) + _varlen_rules("rwkv6_wkv") + _slot_rules("rwkv6_wkv")

RULES = {"causal_conv1d_update": CONV_RULES, "selective_state_update": SSU_RULES,
         "ssd_chunked_scan": SSD_RULES, "rwkv6_wkv": RWKV_RULES}
