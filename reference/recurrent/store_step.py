"""The store as one stateless backend op, `recurrent_store_step` (spec/recurrent.md §3, RS-21 … RS-27).

A backend's cache manager is checked like the page-table manager of the metadata family (MD-11): the
state travels as arrays, one call applies one command and returns the new state, so the suite's state
machine can drive any backend through its worker and compare every step. The rules are those of
store.py, whose checks, planning and row moves this module reuses under the op's argument names:

    seq_slot, seq_pos: i64[max_seqs]   the StoreMeta (RS-21)
    conv_pool: float32|float64 [num_slots, ...]   pool kind 0 (a conv window [num_slots, C, W-1])
    ssm_pool:  float32|float64 [num_slots, ...]   pool kind 1 (an SSM state [num_slots, D, N] or [.., H, P, N])

`validate_recurrent_store_step` checks a call and plans it on the metadata (every error, refusals included,
is raised there, so a failed call changes nothing, RS-27); `recurrent_store_step` then moves rows in
NumPy. A backend may run the same plan and move the rows on its device.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import int_scalar, require
from . import store
from .store import RowMoves, StoreMeta

STORE_COMMANDS = ("assign", "copy", "remove", "keep", "checkpoint", "restore", "rollback")


class StoreStep(NamedTuple):
    """The result of one store command (RS-21 … RS-26).

    seq_slot, seq_pos: i64[max_seqs]   the new StoreMeta
    conv_pool, ssm_pool                the new pools, in the input dtypes (rows of free slots unspecified)
    state_indices: i32[B]              "assign": each requested sequence's slot; else B = 0
    has_initial_state: bool[B]         "assign": False for a fresh sequence; else B = 0
    checkpoint_pos: i64[k]             "checkpoint": k = 1, the sequence's position; else k = 0
    checkpoint_conv, checkpoint_ssm    "checkpoint": [1, *row] bit copies of its rows; else [0, *row]
    """
    seq_slot: np.ndarray
    seq_pos: np.ndarray
    conv_pool: np.ndarray
    ssm_pool: np.ndarray
    state_indices: np.ndarray
    has_initial_state: np.ndarray
    checkpoint_pos: np.ndarray
    checkpoint_conv: np.ndarray
    checkpoint_ssm: np.ndarray


class StorePlan(NamedTuple):
    """A checked call planned on the metadata: what is left is moving rows, the same in both pools.

    pool: the checked (conv_pool, ssm_pool); moves: RowMoves of an assignment (empty otherwise);
    put_slot: the slot that receives `put_rows` (restore, rollback), -1 for none; read_slot: the slot a
    checkpoint copies, -1 for none."""
    meta: StoreMeta
    pool: tuple
    moves: RowMoves
    put_slot: int
    put_rows: tuple
    read_slot: int
    state_indices: np.ndarray
    has_initial_state: np.ndarray
    checkpoint_pos: np.ndarray


_NO_MOVES = RowMoves(np.zeros(0, np.int64), np.zeros(0, np.int64))
_POOLS = ("conv_pool", "ssm_pool")


def validate_recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, *, seq=0, seq_ids=None,
                              num_tokens=0, src=0, dst=0, saved_pos=0, saved_conv=None, saved_ssm=None,
                              snapshots_conv=None, snapshots_ssm=None) -> StorePlan:
    """Check one command and plan it (RS-21 … RS-27); arguments as `recurrent_store_step`.

    Raises ValueError/TypeError naming the argument for a malformed call and StoreError (a ValueError)
    for a refused one, before anything is produced."""
    meta, pool, num_slots = store.check_state(seq_slot, seq_pos, (conv_pool, ssm_pool), slot_name="seq_slot",
                                              pos_name="seq_pos", pool_names=_POOLS)
    require(isinstance(command, str) and command in STORE_COMMANDS,
            f"command must be one of {STORE_COMMANDS}, got {command!r}")
    none = dict(moves=_NO_MOVES, put_slot=-1, put_rows=(), read_slot=-1, state_indices=np.zeros(0, np.int32),
                has_initial_state=np.zeros(0, bool), checkpoint_pos=np.zeros(0, np.int64))
    if command == "assign":                                                            # RS-22
        if seq_ids is None:
            raise TypeError("seq_ids must be given for command 'assign' (i32[B] sequence ids)")
        ids, counts = store.check_assign_args(meta, seq_ids, num_tokens)
        plan = store.plan_assign(meta, num_slots, ids, counts)
        return StorePlan(**dict(none, meta=plan.meta, pool=pool, moves=plan.moves,
                                state_indices=plan.state_indices, has_initial_state=plan.has_initial_state))
    if command == "copy":                                                              # RS-23
        new = store.plan_copy(meta, store.check_seq("src", src, meta), store.check_seq("dst", dst, meta))
        return StorePlan(**dict(none, meta=new, pool=pool))
    seq = store.check_seq("seq", seq, meta)
    if command == "remove":                                                            # RS-24
        return StorePlan(**dict(none, meta=store.plan_remove(meta, seq), pool=pool))
    if command == "keep":                                                              # RS-24
        return StorePlan(**dict(none, meta=store.plan_keep(meta, seq), pool=pool))
    if command == "checkpoint":                                                        # RS-25
        slot = store.checkpoint_slot(meta, seq)
        return StorePlan(**dict(none, meta=meta, pool=pool, read_slot=slot,
                                checkpoint_pos=np.array([meta.seq_pos[seq]], np.int64)))
    if command == "restore":                                                           # RS-25
        pos = int_scalar("saved_pos", saved_pos, minimum=0)
        rows = store.check_rows(("saved_conv", "saved_ssm"), _given(saved_conv, saved_ssm, "saved", command),
                                pool, with_count=False)
        new, target = store.plan_put(meta, num_slots, seq, pos, "restore")
        return StorePlan(**dict(none, meta=new, pool=pool, put_slot=target, put_rows=rows))
    r = int_scalar("num_tokens", num_tokens, minimum=0)                                # RS-26
    snaps = store.check_rows(("snapshots_conv", "snapshots_ssm"),
                             _given(snapshots_conv, snapshots_ssm, "snapshots", command), pool, with_count=True)
    require(snaps[0].shape[0] == snaps[1].shape[0],
            f"snapshots_conv and snapshots_ssm must have the same count K, got {snaps[0].shape[0]} and "
            f"{snaps[1].shape[0]}")
    new, target = store.plan_rollback(meta, num_slots, seq, r, snaps[0].shape[0])
    return StorePlan(**dict(none, meta=new, pool=pool, put_slot=target, put_rows=tuple(s[r] for s in snaps)))


def recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, *, seq=0, seq_ids=None,
                         num_tokens=0, src=0, dst=0, saved_pos=0, saved_conv=None, saved_ssm=None,
                         snapshots_conv=None, snapshots_ssm=None) -> StoreStep:
    """One store command on (meta, pool) arrays; returns StoreStep. Inputs are not modified.

    command and the arguments it reads (the others are ignored):
      "assign"      seq_ids i32[B] distinct, num_tokens int | i32[B] >= 0     RS-22 (assign_slots)
      "copy"        src, dst                                                  RS-23 (copy_sequence)
      "remove"      seq                                                       RS-24 (remove_sequence)
      "keep"        seq                                                       RS-24 (keep_sequence)
      "checkpoint"  seq                                                       RS-25 (checkpoint)
      "restore"     seq, saved_pos, saved_conv [*conv row], saved_ssm [*ssm row]          RS-25 (restore)
      "rollback"    seq, num_tokens (= r), snapshots_conv [K, *conv row], snapshots_ssm [K, *ssm row]
                                                                              RS-26 (rollback)
    Sequence ids lie in [0, max_seqs). Refused operations raise StoreError (a ValueError), malformed
    arguments ValueError/TypeError naming the argument; either way nothing changes (RS-27).
    """
    plan = validate_recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, seq=seq, seq_ids=seq_ids,
                                     num_tokens=num_tokens, src=src, dst=dst, saved_pos=saved_pos,
                                     saved_conv=saved_conv, saved_ssm=saved_ssm, snapshots_conv=snapshots_conv,
                                     snapshots_ssm=snapshots_ssm)
    pool = store.apply_moves(plan.pool, plan.moves)
    if plan.put_slot >= 0:
        pool = store.put_rows(pool, plan.put_slot, plan.put_rows)
    read = [plan.read_slot] if plan.read_slot >= 0 else []
    return StoreStep(plan.meta.seq_slot, plan.meta.seq_pos, pool[0], pool[1], plan.state_indices,
                     plan.has_initial_state, plan.checkpoint_pos, plan.pool[0][read], plan.pool[1][read])


def _given(conv, ssm, name: str, command: str) -> tuple:
    for kind, value in (("conv", conv), ("ssm", ssm)):
        if value is None:
            raise TypeError(f"{name}_{kind} must be given for command {command!r}")
    return conv, ssm
