"""Malformed and refused calls of the store op `recurrent_store_step` (spec/recurrent.md RS-21 … RS-27).

Malformed: the state arrays (RS-21: integer metadata of one shape, slots in [-1, num_slots), positions
>= 0; pools float32/float64 sharing num_slots, RS-6), the command, sequence ids, duplicate seq_ids,
negative token counts, rows of the wrong dtype or shape, snapshot counts that differ between kinds.
Refused (StoreError, a ValueError): copying, checkpointing or rolling back a sequence with no state, and
rolling back past its position or past the kept snapshots (RS-23, RS-25, RS-26). Either way the call
must raise the reference's family naming the argument, and produce nothing (RS-27). Running out of free
slots depends on the whole state; the state machine of the suite checks it
(conformance/suite/test_recurrent_store.py).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from ..recurrent import store
from ..values import sampled_from
from . import as_float, grown, need, rule

OP = store.OP
VARIANTS = store.VARIANTS


def valid(op: str, claims: OpClaims, variant):
    return store.store_step_cases(claims, variant)


def _stateless(x) -> list[int]:
    return [int(s) for s in np.flatnonzero(np.asarray(x["seq_slot"]) < 0)]


# --- the state (RS-21, RS-6) ----------------------------------------------------------------------

def _slot_not_int(draw, x, claims):
    return {"seq_slot": as_float(x["seq_slot"])}


def _pos_shape(draw, x, claims):
    return {"seq_pos": grown(np.asarray(x["seq_pos"]), 0)}


def _slot_out_of_range(draw, x, claims):
    bad = np.array(x["seq_slot"], copy=True)
    bad[draw(st.integers(0, bad.shape[0] - 1))] = np.shape(x["conv_pool"])[0]
    return {"seq_slot": bad}


def _pos_negative(draw, x, claims):
    bad = np.array(x["seq_pos"], copy=True)
    bad[draw(st.integers(0, bad.shape[0] - 1))] = -1
    return {"seq_pos": bad}


def _pool_half(draw, x, claims):
    name = draw(sampled_from(("conv_pool", "ssm_pool")))
    return {name: np.asarray(x[name]).astype(np.float16)}, name


def _num_slots_differ(draw, x, claims):
    return {"ssm_pool": grown(np.asarray(x["ssm_pool"]), 0)}


# --- the command and its arguments (RS-22 … RS-27) ---------------------------------------------------

def _unknown_command(draw, x, claims):
    return {"command": draw(sampled_from(("fork", "seq_cp", "Assign", "")))}


def _seq_out_of_range(draw, x, claims):
    need(x["command"] in ("remove", "keep", "checkpoint", "restore", "rollback"))
    return {"seq": np.shape(x["seq_slot"])[0] + draw(st.integers(0, 2))}


def _duplicate_seq_ids(draw, x, claims):
    need(x["command"] == "assign")
    ids = np.asarray(x["seq_ids"])
    tokens = x["num_tokens"]
    if isinstance(tokens, np.ndarray):
        tokens = np.concatenate([tokens, tokens[:1]])
    return {"seq_ids": np.concatenate([ids, ids[:1]]), "num_tokens": tokens}


def _negative_tokens(draw, x, claims):
    need(x["command"] in ("assign", "rollback"))
    if isinstance(x["num_tokens"], np.ndarray):
        bad = np.array(x["num_tokens"], copy=True)
        bad[0] = -1
        return {"num_tokens": bad}
    return {"num_tokens": -1}


def _saved_dtype(draw, x, claims):
    need(x["command"] == "restore")
    name = draw(sampled_from(("saved_conv", "saved_ssm")))
    other = np.float32 if np.asarray(x[name]).dtype == np.float64 else np.float64
    return {name: np.asarray(x[name]).astype(other)}, name


def _saved_shape(draw, x, claims):
    need(x["command"] == "restore")
    name = draw(sampled_from(("saved_conv", "saved_ssm")))
    return {name: grown(np.asarray(x[name]), np.ndim(x[name]) - 1)}, name


def _snapshot_counts_differ(draw, x, claims):
    need(x["command"] == "rollback")
    return {"snapshots_ssm": grown(np.asarray(x["snapshots_ssm"]), 0)}


# --- refused operations (StoreError) ---------------------------------------------------------------

def _copy_stateless(draw, x, claims):
    need(x["command"] == "copy" and _stateless(x))
    return {"src": draw(sampled_from(_stateless(x)))}


def _checkpoint_stateless(draw, x, claims):
    need(x["command"] == "checkpoint" and _stateless(x))
    return {"seq": draw(sampled_from(_stateless(x)))}


def _rollback_past_position(draw, x, claims):
    """num_tokens one past the sequence's position, with one more snapshot kept (so K stays > r)."""
    need(x["command"] == "rollback")
    r = int(np.asarray(x["seq_pos"])[x["seq"]]) + 1
    extra = max(0, r + 1 - np.shape(x["snapshots_conv"])[0])
    return {"num_tokens": r, "snapshots_conv": grown(np.asarray(x["snapshots_conv"]), 0, extra) if extra else
            x["snapshots_conv"], "snapshots_ssm": grown(np.asarray(x["snapshots_ssm"]), 0, extra) if extra else
            x["snapshots_ssm"]}


def _rollback_past_snapshots(draw, x, claims):
    """Only the snapshots before r kept (K = r): r itself is not there."""
    need(x["command"] == "rollback" and x["num_tokens"] >= 1)
    r = x["num_tokens"]
    return {"snapshots_conv": np.asarray(x["snapshots_conv"])[:r], "snapshots_ssm": np.asarray(x["snapshots_ssm"])[:r]}


_ENDS = {c: store.command_variant(c) for c in store.COMMAND_ARGS}   # valid cases ending with that command
_STATE = ("RS-21", "RS-27")

RULES = {OP: (
    rule("seq_slot_not_integer", _STATE, "seq_slot", "seq_slot must have an integer dtype", _slot_not_int),
    rule("seq_pos_shape", _STATE, ("seq_pos", "seq_slot"), "seq_slot and seq_pos must have the same shape [max_seqs]",
         _pos_shape),
    rule("seq_slot_out_of_range", _STATE, "seq_slot", "seq_slot entries must lie in [-1, num_slots)",
         _slot_out_of_range),
    rule("seq_pos_negative", _STATE, "seq_pos", "seq_pos entries must be >= 0", _pos_negative),
    rule("pool_float16", ("RS-6",) + _STATE, ("conv_pool", "ssm_pool"), "pools are float32 or float64", _pool_half),
    rule("pools_num_slots_differ", _STATE, ("ssm_pool", "conv_pool"), "conv_pool and ssm_pool must share num_slots",
         _num_slots_differ),
    rule("unknown_command", ("RS-27",), "command", "command must be one of the seven store commands",
         _unknown_command),
    rule("seq_out_of_range", _STATE, "seq", "seq must be a sequence id in [0, max_seqs)", _seq_out_of_range,
         variant=_ENDS["checkpoint"]),
    rule("duplicate_seq_ids", ("RS-22", "RS-27"), "seq_ids", "seq_ids must be distinct", _duplicate_seq_ids,
         variant=_ENDS["assign"]),
    rule("negative_num_tokens", ("RS-22", "RS-27"), "num_tokens", "num_tokens must be >= 0", _negative_tokens,
         variant=_ENDS["assign"]),
    rule("saved_rows_dtype", ("RS-25", "RS-27"), ("saved_conv", "saved_ssm"),
         "restored rows have the pool's dtype (bit for bit)", _saved_dtype, variant=_ENDS["restore"]),
    rule("saved_rows_shape", ("RS-25", "RS-27"), ("saved_conv", "saved_ssm"), "restored rows have a row's shape",
         _saved_shape, variant=_ENDS["restore"]),
    rule("snapshot_counts_differ", ("RS-26", "RS-27"), ("snapshots_ssm", "snapshots_conv"),
         "both kinds keep the same number K of snapshots", _snapshot_counts_differ, variant=_ENDS["rollback"]),
    rule("refused_copy_without_state", ("RS-23", "RS-27"), "src", "copy is refused when src has no state",
         _copy_stateless, variant=_ENDS["copy"]),
    rule("refused_checkpoint_without_state", ("RS-25", "RS-27"), "seq",
         "checkpoint is refused when the sequence has no state", _checkpoint_stateless, variant=_ENDS["checkpoint"]),
    rule("refused_rollback_past_position", ("RS-26", "RS-27"), "num_tokens",
         "rollback is refused when num_tokens exceeds the sequence's position", _rollback_past_position,
         variant=_ENDS["rollback"]),
    rule("refused_rollback_past_snapshots", ("RS-26", "RS-27"), "num_tokens",
         "rollback is refused when snapshot num_tokens was not kept (num_tokens >= K)", _rollback_past_snapshots,
         variant=_ENDS["rollback"]),
)}
