"""The recurrent-state store: which slot holds which sequence's state (spec/recurrent.md RS-21 … RS-27).

Every operation is a pure function of (meta, pool): it returns new values and never modifies its
arguments. A failing call raises (StoreError for a refused operation, ValueError/TypeError for malformed
arguments) before producing anything, so a failed call changes nothing (RS-27).

meta: StoreMeta(seq_slot i64[max_seqs], seq_pos i64[max_seqs]); a sequence with slot -1 has no state.
pool: a tuple of arrays, one per kind of state (e.g. conv window and SSM state), each [num_slots, ...],
      float32|float64, sharing num_slots. A slot is free when no sequence refers to it.

Each operation is three steps, kept apart so that the backend op `recurrent_store_step` (store_step.py)
reuses them under its own argument names: checking the arguments (`check_state`, `check_rows`, ...),
planning on the metadata alone (`plan_*`: the new meta and the rows to write, raising StoreError for a
refused operation) and moving rows (`apply_moves`, `put_rows`), the same for every pool kind.
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


class RowMoves(NamedTuple):
    """The rows an assignment writes, the same in every pool kind (RS-22).

    dst: i64[m] distinct free slots; src: i64[m] the slot in use whose rows each one receives bit for bit
    (copy on write), or -1 for exact zeros (a fresh sequence, RS-5). No destination is a source, so the
    moves may run in any order or all at once."""
    dst: np.ndarray
    src: np.ndarray


class AssignPlan(NamedTuple):
    meta: StoreMeta
    moves: RowMoves
    state_indices: np.ndarray      # i32[B]
    has_initial_state: np.ndarray  # bool[B]


def new_store(max_seqs: int) -> StoreMeta:
    """An empty store for sequence ids 0..max_seqs-1 (RS-21)."""
    max_seqs = int_scalar("max_seqs", max_seqs, minimum=1)
    return StoreMeta(np.full(max_seqs, -1, dtype=np.int64), np.zeros(max_seqs, dtype=np.int64))


def slot_refcounts(meta: StoreMeta, num_slots: int) -> np.ndarray:
    """i64[num_slots]: how many sequences share each slot (0 = free)."""
    live = meta.seq_slot[meta.seq_slot >= 0]
    return np.bincount(live, minlength=num_slots).astype(np.int64)


# --- the operations (RS-22 … RS-26) --------------------------------------------------------------

def assign_slots(meta, pool, seq_ids, num_tokens) -> SlotAssignment:
    """Give each sequence of a batch its own slot before a kernel call, then count its new tokens (RS-22).

    seq_ids: i32[B] distinct sequence ids; num_tokens: int or i32[B] >= 0, tokens each absorbs.
    In request order: a sequence without state gets the lowest free slot, whose rows are set to exact
    zeros (has_initial_state False); a sequence whose slot is shared gets the lowest free slot with a bit
    copy of the shared rows (copy-on-write); any other keeps its slot. Refused (StoreError) when free slots
    run out.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    ids, counts = check_assign_args(meta, seq_ids, num_tokens)
    plan = plan_assign(meta, num_slots, ids, counts)
    return SlotAssignment(plan.meta, apply_moves(pool, plan.moves), plan.state_indices, plan.has_initial_state)


def copy_sequence(meta, pool, src, dst) -> StoreUpdate:
    """dst becomes a copy of src: it shares src's slot, data is copied later on write (RS-23).

    dst's previous slot is released. Refused when src has no state.
    """
    meta, pool, _ = _inputs(meta, pool)
    return StoreUpdate(plan_copy(meta, check_seq("src", src, meta), check_seq("dst", dst, meta)), pool)


def remove_sequence(meta, pool, seq) -> StoreUpdate:
    """Forget a sequence's state; a no-op when it has none (RS-24). Rows are left as they are."""
    meta, pool, _ = _inputs(meta, pool)
    return StoreUpdate(plan_remove(meta, check_seq("seq", seq, meta)), pool)


def keep_sequence(meta, pool, seq) -> StoreUpdate:
    """Remove every sequence except `seq` (RS-24)."""
    meta, pool, _ = _inputs(meta, pool)
    return StoreUpdate(plan_keep(meta, check_seq("seq", seq, meta)), pool)


def checkpoint(meta, pool, seq) -> Checkpoint:
    """A bit copy of a sequence's rows and its token count (RS-25). Refused when it has no state."""
    meta, pool, _ = _inputs(meta, pool)
    seq = check_seq("seq", seq, meta)
    slot = checkpoint_slot(meta, seq)
    return Checkpoint(int(meta.seq_pos[seq]), tuple(p[slot].copy() for p in pool))


def restore(meta, pool, seq, saved: Checkpoint) -> StoreUpdate:
    """Set a sequence's state to a checkpoint, bit for bit (RS-25).

    The rows go to the sequence's own slot if it is not shared, else to the lowest free slot (refused
    when there is none); other sequences are unaffected.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    seq = check_seq("seq", seq, meta)
    if not isinstance(saved, Checkpoint):
        raise TypeError(f"saved must be a Checkpoint, got {type(saved).__name__}")
    pos = int_scalar("saved.pos", saved.pos, minimum=0)
    rows = check_rows(_kind_names("saved.rows", saved.rows, pool), saved.rows, pool, with_count=False)
    new_meta, target = plan_put(meta, num_slots, seq, pos, "restore")
    return StoreUpdate(new_meta, put_rows(pool, target, rows))


def rollback(meta, pool, seq, num_tokens, snapshots) -> StoreUpdate:
    """Undo the last `num_tokens` tokens of a sequence from kernel snapshots (RS-26).

    snapshots: a tuple with one array [K, *row_shape] per pool kind, in the pool's dtype; snapshot r is
    the state after all but the last r absorbed tokens (as returned by the kernels, RS-19). Refused when
    the sequence has no state, or num_tokens > its token count, or num_tokens >= K.
    """
    meta, pool, num_slots = _inputs(meta, pool)
    seq = check_seq("seq", seq, meta)
    r = int_scalar("num_tokens", num_tokens, minimum=0)
    names = _kind_names("snapshots", snapshots, pool)
    snaps = check_rows(names, snapshots, pool, with_count=True)
    require(all(s.shape[0] == snaps[0].shape[0] for s in snaps),
            "snapshots must have the same count K for every pool kind")
    new_meta, target = plan_rollback(meta, num_slots, seq, r, snaps[0].shape[0])
    return StoreUpdate(new_meta, put_rows(pool, target, tuple(s[r] for s in snaps)))


# --- planning on the metadata (arguments already checked) -----------------------------------------

def plan_assign(meta: StoreMeta, num_slots: int, ids: np.ndarray, counts: np.ndarray) -> AssignPlan:
    """RS-22 on the metadata: the new meta, the row moves, state_indices and has_initial_state."""
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    refs = slot_refcounts(meta, num_slots)
    dst, src = [], []
    fresh = np.zeros(len(ids), dtype=bool)
    for b, s in enumerate(ids):
        old = slot[s]
        if old >= 0 and refs[old] == 1:
            continue
        free = np.flatnonzero(refs == 0)
        if free.size == 0:
            raise StoreError(f"assign_slots: no free slot for seq_ids[{b}] (sequence {int(s)}; "
                             f"all {num_slots} slots in use)")
        new = int(free[0])
        dst.append(new)
        src.append(int(old))      # -1: rows set to zeros (RS-5); else copy on write
        fresh[b] = old < 0
        if old >= 0:
            refs[old] -= 1
        refs[new] += 1
        slot[s] = new
    pos[ids] += counts
    moves = RowMoves(np.array(dst, dtype=np.int64), np.array(src, dtype=np.int64))
    return AssignPlan(StoreMeta(slot, pos), moves, slot[ids].astype(np.int32), ~fresh)


def plan_copy(meta: StoreMeta, src: int, dst: int) -> StoreMeta:
    """RS-23: dst shares src's slot and position. Refused when src has no state."""
    if meta.seq_slot[src] < 0:
        raise StoreError(f"copy_sequence: src sequence {src} has no state")
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[dst], pos[dst] = slot[src], pos[src]
    return StoreMeta(slot, pos)


def plan_remove(meta: StoreMeta, seq: int) -> StoreMeta:
    """RS-24: seq has no state afterwards."""
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[seq], pos[seq] = -1, 0
    return StoreMeta(slot, pos)


def plan_keep(meta: StoreMeta, seq: int) -> StoreMeta:
    """RS-24: every sequence but seq has no state afterwards."""
    others = np.arange(meta.seq_slot.shape[0]) != seq
    slot, pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    slot[others], pos[others] = -1, 0
    return StoreMeta(slot, pos)


def checkpoint_slot(meta: StoreMeta, seq: int) -> int:
    """RS-25: the slot a checkpoint of seq copies. Refused when it has no state."""
    slot = int(meta.seq_slot[seq])
    if slot < 0:
        raise StoreError(f"checkpoint: seq (sequence {seq}) has no state")
    return slot


def plan_rollback(meta: StoreMeta, num_slots: int, seq: int, r: int, depth: int) -> tuple[StoreMeta, int]:
    """RS-26: (new meta, the slot that receives snapshot r). Refused when seq has no state, r exceeds its
    position, or snapshot r was not kept (r >= K = depth)."""
    if meta.seq_slot[seq] < 0:
        raise StoreError(f"rollback: seq (sequence {seq}) has no state")
    if r > meta.seq_pos[seq]:
        raise StoreError(f"rollback: num_tokens ({r}) exceeds the tokens sequence {seq} has absorbed "
                         f"({int(meta.seq_pos[seq])})")
    if r >= depth:
        raise StoreError(f"rollback: num_tokens ({r}) needs snapshot {r}, but only K = {depth} were kept")
    return plan_put(meta, num_slots, seq, int(meta.seq_pos[seq]) - r, "rollback")


def plan_put(meta: StoreMeta, num_slots: int, seq: int, pos: int, op: str) -> tuple[StoreMeta, int]:
    """RS-25: (new meta, target slot): seq's own slot if unshared, else the lowest free one (refused when
    none); seq's position becomes pos."""
    slot, seq_pos = meta.seq_slot.copy(), meta.seq_pos.copy()
    refs = slot_refcounts(meta, num_slots)
    target = int(slot[seq])
    if target < 0 or refs[target] > 1:
        free = np.flatnonzero(refs == 0)
        if free.size == 0:
            raise StoreError(f"{op}: no free slot for seq (sequence {seq}; all {num_slots} slots in use)")
        target = int(free[0])
    slot[seq], seq_pos[seq] = target, pos
    return StoreMeta(slot, seq_pos), target


# --- moving rows (every pool kind alike) -----------------------------------------------------------

def apply_moves(pool: tuple, moves: RowMoves) -> tuple:
    """New pools with `moves` applied: rows copied bit for bit, or set (never multiplied) to zeros."""
    copy, zero = moves.src >= 0, moves.src < 0
    out = []
    for arr in pool:
        arr = arr.copy()
        arr[moves.dst[copy]] = arr[moves.src[copy]]
        arr[moves.dst[zero]] = 0      # assignment, so NaN left in the row cannot survive (RS-5)
        out.append(arr)
    return tuple(out)


def put_rows(pool: tuple, slot: int, rows: tuple) -> tuple:
    """New pools with `rows` (one per kind, bit for bit) written to `slot`."""
    out = []
    for arr, row in zip(pool, rows):
        arr = arr.copy()
        arr[slot] = row
        out.append(arr)
    return tuple(out)


# --- argument checks (names given by the caller, so the step op's errors name its own arguments) --------

def check_state(seq_slot, seq_pos, pool, *, slot_name: str, pos_name: str, pool_names) -> tuple:
    """(StoreMeta with int64 arrays, the pool arrays, num_slots); ValueError/TypeError naming the argument."""
    slot = int_input(slot_name, seq_slot, 1, "[max_seqs]")
    pos = int_input(pos_name, seq_pos, 1, "[max_seqs]")
    require(slot.shape == pos.shape, f"{slot_name} and {pos_name} must have the same shape [max_seqs]")
    arrays = tuple(as_array(name, p) for name, p in zip(pool_names, pool))
    for name, arr in zip(pool_names, arrays):
        if dtype_name(arr.dtype) not in POOL_DTYPE_NAMES:
            raise TypeError(f"{name} must have dtype float32 or float64, got {dtype_name(arr.dtype)}")
        require(arr.ndim >= 1 and arr.shape[0] == arrays[0].shape[0],
                f"{name} must have the same leading num_slots as {pool_names[0]} ({arrays[0].shape[0]}), "
                f"got shape {arr.shape}")
    num_slots = arrays[0].shape[0]
    require(bool(((slot >= -1) & (slot < num_slots)).all()), f"{slot_name} entries must lie in [-1, {num_slots})")
    require(bool((pos >= 0).all()), f"{pos_name} entries must be >= 0")
    return StoreMeta(slot, pos), arrays, num_slots


def check_assign_args(meta: StoreMeta, seq_ids, num_tokens) -> tuple[np.ndarray, np.ndarray]:
    """seq_ids as i64[B] (distinct, in range) and num_tokens as i64[B] (RS-22)."""
    ids = int_input("seq_ids", seq_ids, 1, "[B]")
    bad = np.flatnonzero((ids < 0) | (ids >= meta.seq_slot.shape[0]))
    if bad.size:
        raise ValueError(f"seq_ids[{int(bad[0])}]={int(ids[bad[0]])} is out of range "
                         f"[0, {meta.seq_slot.shape[0]}) (sequence ids)")
    if len(np.unique(ids)) != len(ids):
        raise ValueError("seq_ids must not contain duplicates (one slot per sequence per call)")
    return ids, np.broadcast_to(_tokens(num_tokens, len(ids)), ids.shape)


def check_seq(name: str, value, meta: StoreMeta) -> int:
    """A sequence id in [0, max_seqs)."""
    return int_scalar(name, value, minimum=0, maximum=meta.seq_slot.shape[0] - 1)


def check_rows(names, rows, pool, with_count: bool) -> tuple:
    """One array per pool kind (`names[i]` names kind i), in the pool's dtype, shaped like a row (or
    [K] + a row's shape when `with_count`)."""
    out = []
    for name, row, arr in zip(names, rows, pool):
        row = as_array(name, row)
        if row.dtype != arr.dtype:
            raise TypeError(f"{name} must have the pool's dtype {dtype_name(arr.dtype)} "
                            f"(restores are bit for bit), got {dtype_name(row.dtype)}")
        got = row.shape[1:] if with_count else row.shape
        layout = ("K",) + arr.shape[1:] if with_count else arr.shape[1:]
        require(row.ndim == arr.ndim - 1 + with_count and got == arr.shape[1:],
                f"{name} must have shape {layout}, got {row.shape}")
        out.append(row)
    return tuple(out)


def _inputs(meta, pool):
    if not isinstance(meta, StoreMeta):
        raise TypeError(f"meta must be a StoreMeta, got {type(meta).__name__}")
    if not isinstance(pool, (tuple, list)) or len(pool) == 0:
        raise TypeError(f"pool must be a non-empty tuple of arrays [num_slots, ...], got {type(pool).__name__}")
    return check_state(meta.seq_slot, meta.seq_pos, pool, slot_name="meta.seq_slot", pos_name="meta.seq_pos",
                       pool_names=tuple(f"pool[{i}]" for i in range(len(pool))))


def _kind_names(name: str, rows, pool) -> tuple[str, ...]:
    """`name[i]` for each kind, once `rows` is known to be a tuple with one entry per pool kind."""
    if not isinstance(rows, (tuple, list)) or len(rows) != len(pool):
        raise TypeError(f"{name} must be a tuple with one array per pool kind ({len(pool)})")
    return tuple(f"{name}[{i}]" for i in range(len(pool)))


def _tokens(num_tokens, batch):
    if isinstance(num_tokens, (int, np.integer)) and not isinstance(num_tokens, (bool, np.bool_)):
        value = np.int64(int_scalar("num_tokens", num_tokens, minimum=0))
        return np.full(batch, value)
    counts = int_input("num_tokens", num_tokens, 1, "[B]")
    require(counts.shape == (batch,), f"num_tokens must be an int or have shape [B] = ({batch},), "
                                      f"got {counts.shape}")
    require(bool((counts >= 0).all()), "num_tokens must be >= 0")
    return counts
