"""The recurrent-state store: which slot holds which sequence's state (spec/recurrent.md RS-21 … RS-27).

Every operation is a pure function of (meta, pool): it returns new values and never modifies its
arguments. A failing call raises (StoreError for a refused operation, ValueError/TypeError for malformed
arguments) before producing anything, so a failed call changes nothing (RS-27).

meta: StoreMeta(seq_slot i64[max_seqs], seq_pos i64[max_seqs]); a sequence with slot -1 has no state.
pool: a tuple of arrays, one per kind of state (e.g. conv window and SSM state), each [num_slots, ...],
      float32|float64, sharing num_slots. A slot is free when no sequence refers to it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dtypes import dtype_name
from ..validation import as_array, int_input, int_scalar, require
from .slots import POOL_DTYPE_NAMES


class StoreError(ValueError):
    """A well-formed store operation that the spec refuses (no free slot, unknown sequence, ...)."""


class StoreMeta(NamedTuple):
    seq_slot: np.ndarray  # i64[max_seqs]; -1 = the sequence has no state
    seq_pos: np.ndarray   # i64[max_seqs]; tokens absorbed so far (0 when it has no state)


class StoreUpdate(NamedTuple):
    meta: StoreMeta
    pool: tuple


class SlotAssignment(NamedTuple):
    meta: StoreMeta
    pool: tuple
    state_indices: np.ndarray      # i32[B]: the slot of each requested sequence, in request order
    has_initial_state: np.ndarray  # bool[B]: False for a sequence that starts fresh


class Checkpoint(NamedTuple):
    pos: int
    rows: tuple  # one array per pool kind: that sequence's row, bit for bit


def new_store(max_seqs: int) -> StoreMeta:
    """An empty store for sequence ids 0..max_seqs-1 (RS-21)."""
    max_seqs = int_scalar("max_seqs", max_seqs, minimum=1)
    return StoreMeta(np.full(max_seqs, -1, dtype=np.int64), np.zeros(max_seqs, dtype=np.int64))


def slot_refcounts(meta: StoreMeta, num_slots: int) -> np.ndarray:
    """i64[num_slots]: how many sequences share each slot (0 = free)."""
    live = meta.seq_slot[meta.seq_slot >= 0]
    return np.bincount(live, minlength=num_slots).astype(np.int64)


def assign_slots(meta, pool, seq_ids, num_tokens) -> SlotAssignment:
    """Give each sequence of a batch its own slot before a kernel call, then count its new tokens (RS-22).

    seq_ids: i32[B] distinct sequence ids; num_tokens: int or i32[B] >= 0, tokens each absorbs.
    In request order: a sequence without state gets the lowest free slot, whose rows are set to exact
    zeros (has_initial_state False); a sequence whose slot is shared gets the lowest free slot with a bit
    copy of the shared rows (copy-on-write); any other keeps its slot. Refused (StoreError) when free slots
    run out.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    ids = int_input("seq_ids", seq_ids, 1, "[B]")
    _check_seqs("seq_ids", ids, meta)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("seq_ids must not contain duplicates (one slot per sequence per call)")
    counts = np.broadcast_to(_tokens(num_tokens, len(ids)), ids.shape)
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    refs = slot_refcounts(meta, num_slots)
    rows = [p.copy() for p in pool]
    fresh = np.zeros(len(ids), dtype=bool)
    for b, s in enumerate(ids):
        old = slot[s]
        if old >= 0 and refs[old] == 1:
            continue
        free = np.flatnonzero(refs == 0)
        if free.size == 0:
            raise StoreError(f"assign_slots: no free slot for sequence {int(s)} "
                             f"(all {num_slots} slots in use)")
        new = int(free[0])
        for arr in rows:
            if old < 0:
                arr[new] = 0   # assignment, so NaN left in the row cannot survive (RS-5)
            else:
                arr[new] = arr[old]
        fresh[b] = old < 0
        if old >= 0:
            refs[old] -= 1
        refs[new] += 1
        slot[s] = new
    pos[ids] += counts
    return SlotAssignment(StoreMeta(slot, pos), tuple(rows), slot[ids].astype(np.int32), ~fresh)


def copy_sequence(meta, pool, src, dst) -> StoreUpdate:
    """dst becomes a copy of src: it shares src's slot, data is copied later on write (RS-23).

    dst's previous slot is released. Refused when src has no state.
    """
    meta, pool, _ = _inputs(meta, pool)
    src, dst = _seq("src", src, meta), _seq("dst", dst, meta)
    if meta.seq_slot[src] < 0:
        raise StoreError(f"copy_sequence: src sequence {src} has no state")
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[dst], pos[dst] = slot[src], pos[src]
    return StoreUpdate(StoreMeta(slot, pos), pool)


def remove_sequence(meta, pool, seq) -> StoreUpdate:
    """Forget a sequence's state; a no-op when it has none (RS-24). Rows are left as they are."""
    meta, pool, _ = _inputs(meta, pool)
    seq = _seq("seq", seq, meta)
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[seq], pos[seq] = -1, 0
    return StoreUpdate(StoreMeta(slot, pos), pool)


def keep_sequence(meta, pool, seq) -> StoreUpdate:
    """Remove every sequence except `seq` (RS-24)."""
    meta, pool, _ = _inputs(meta, pool)
    seq = _seq("seq", seq, meta)
    others = np.arange(meta.seq_slot.shape[0]) != seq
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[others], pos[others] = -1, 0
    return StoreUpdate(StoreMeta(slot, pos), pool)


def checkpoint(meta, pool, seq) -> Checkpoint:
    """A bit copy of a sequence's rows and its token count (RS-25). Refused when it has no state."""
    meta, pool, _ = _inputs(meta, pool)
    seq = _seq("seq", seq, meta)
    slot = meta.seq_slot[seq]
    if slot < 0:
        raise StoreError(f"checkpoint: sequence {seq} has no state")
    return Checkpoint(int(meta.seq_pos[seq]), tuple(p[slot].copy() for p in pool))


def restore(meta, pool, seq, saved: Checkpoint) -> StoreUpdate:
    """Set a sequence's state to a checkpoint, bit for bit (RS-25).

    The rows go to the sequence's own slot if it is not shared, else to the lowest free slot (refused
    when there is none); other sequences are unaffected.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    seq = _seq("seq", seq, meta)
    pos, rows = _checkpoint_input(saved, pool)
    return _put(meta, pool, num_slots, seq, pos, rows, "restore")


def rollback(meta, pool, seq, num_tokens, snapshots) -> StoreUpdate:
    """Undo the last `num_tokens` tokens of a sequence from kernel snapshots (RS-26).

    snapshots: a tuple with one array [K, *row_shape] per pool kind, in the pool's dtype; snapshot r is
    the state after all but the last r absorbed tokens (as returned by the kernels, RS-19). Refused when
    the sequence has no state, or num_tokens > its token count, or num_tokens >= K.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    seq = _seq("seq", seq, meta)
    r = int_scalar("num_tokens", num_tokens, minimum=0)
    snaps = _rows_input("snapshots", snapshots, pool, with_count=True)
    depth = snaps[0].shape[0]
    require(all(s.shape[0] == depth for s in snaps),
            "snapshots must have the same count K for every pool kind")
    if meta.seq_slot[seq] < 0:
        raise StoreError(f"rollback: sequence {seq} has no state")
    if r > meta.seq_pos[seq]:
        raise StoreError(f"rollback: num_tokens ({r}) exceeds the tokens sequence {seq} has absorbed "
                         f"({int(meta.seq_pos[seq])})")
    if r >= depth:
        raise StoreError(f"rollback: num_tokens ({r}) needs snapshot {r}, but only K = {depth} were kept")
    return _put(meta, pool, num_slots, seq, int(meta.seq_pos[seq]) - r, tuple(s[r] for s in snaps),
                "rollback")


def _put(meta, pool, num_slots, seq, pos, rows, op):
    slot, seq_pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    refs = slot_refcounts(meta, num_slots)
    target = slot[seq]
    if target < 0 or refs[target] > 1:
        free = np.flatnonzero(refs == 0)
        if free.size == 0:
            raise StoreError(f"{op}: no free slot for sequence {seq} (all {num_slots} slots in use)")
        target = int(free[0])
    new_pool = []
    for arr, row in zip(pool, rows):
        arr = arr.copy()
        arr[target] = row
        new_pool.append(arr)
    slot[seq], seq_pos[seq] = target, pos
    return StoreUpdate(StoreMeta(slot, seq_pos), tuple(new_pool))


def _inputs(meta, pool):
    if not isinstance(meta, StoreMeta):
        raise TypeError(f"meta must be a StoreMeta, got {type(meta).__name__}")
    slot = int_input("meta.seq_slot", meta.seq_slot, 1, "[max_seqs]")
    pos = int_input("meta.seq_pos", meta.seq_pos, 1, "[max_seqs]")
    require(slot.shape == pos.shape, "meta.seq_slot and meta.seq_pos must have the same shape [max_seqs]")
    if not isinstance(pool, (tuple, list)) or len(pool) == 0:
        raise TypeError(f"pool must be a non-empty tuple of arrays [num_slots, ...], got {type(pool).__name__}")
    arrays = tuple(as_array(f"pool[{i}]", p) for i, p in enumerate(pool))
    for i, arr in enumerate(arrays):
        if dtype_name(arr.dtype) not in POOL_DTYPE_NAMES:
            raise TypeError(f"pool[{i}] must have dtype float32 or float64, got {dtype_name(arr.dtype)}")
        require(arr.ndim >= 1 and arr.shape[0] == arrays[0].shape[0],
                f"pool[{i}] must have the same leading num_slots as pool[0] ({arrays[0].shape[0]}), "
                f"got shape {arr.shape}")
    num_slots = arrays[0].shape[0]
    require(bool(((slot >= -1) & (slot < num_slots)).all()),
            f"meta.seq_slot entries must lie in [-1, {num_slots})")
    require(bool((pos >= 0).all()), "meta.seq_pos entries must be >= 0")
    return StoreMeta(slot, pos), arrays, num_slots


def _seq(name, value, meta):
    return int_scalar(name, value, minimum=0, maximum=meta.seq_slot.shape[0] - 1)


def _check_seqs(name, ids, meta):
    bad = np.flatnonzero((ids < 0) | (ids >= meta.seq_slot.shape[0]))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}]={int(ids[bad[0]])} is out of range "
                         f"[0, {meta.seq_slot.shape[0]}) (sequence ids)")


def _tokens(num_tokens, batch):
    if isinstance(num_tokens, (int, np.integer)) and not isinstance(num_tokens, (bool, np.bool_)):
        value = np.int64(int_scalar("num_tokens", num_tokens, minimum=0))
        return np.full(batch, value)
    counts = int_input("num_tokens", num_tokens, 1, "[B]")
    require(counts.shape == (batch,), f"num_tokens must be an int or have shape [B] = ({batch},), "
                                      f"got {counts.shape}")
    require(bool((counts >= 0).all()), "num_tokens must be >= 0")
    return counts


def _rows_input(name, rows, pool, with_count: bool):
    """One array per pool kind, in the pool's dtype, shaped like a row (or [K] + a row's shape)."""
    if not isinstance(rows, (tuple, list)) or len(rows) != len(pool):
        raise TypeError(f"{name} must be a tuple with one array per pool kind ({len(pool)})")
    out = []
    for i, (row, arr) in enumerate(zip(rows, pool)):
        row = as_array(f"{name}[{i}]", row)
        if row.dtype != arr.dtype:
            raise TypeError(f"{name}[{i}] must have the pool's dtype {dtype_name(arr.dtype)} "
                            f"(restores are bit for bit), got {dtype_name(row.dtype)}")
        got = row.shape[1:] if with_count else row.shape
        layout = ("K",) + arr.shape[1:] if with_count else arr.shape[1:]
        require(row.ndim == arr.ndim - 1 + with_count and got == arr.shape[1:],
                f"{name}[{i}] must have shape {layout}, got {row.shape}")
        out.append(row)
    return tuple(out)


def _checkpoint_input(saved, pool):
    if not isinstance(saved, Checkpoint):
        raise TypeError(f"saved must be a Checkpoint, got {type(saved).__name__}")
    pos = int_scalar("saved.pos", saved.pos, minimum=0)
    return pos, _rows_input("saved.rows", saved.rows, pool, with_count=False)
