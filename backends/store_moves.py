"""The row moves of one `recurrent_store_step` as a device kernel takes them (spec/recurrent.md RS-21 .. RS-27).

Shared by the Triton and Pallas store kernels: the metadata is planned on the host by the reference's
`validate_recurrent_store_step` (every check and refusal happens there, so a refused call launches nothing,
RS-27); this module turns the plan into one list of row writes per call and the pools into 32-bit words,
so that a kernel moves bits and never values.

Encoding of a write (dst, src) into a target array of rows:
    src >= 0    the pool's row src           (copy on write, checkpoint)
    src == -1   zero words, i.e. +0.0         (a fresh sequence, RS-5)
    src <= -2   the given row -src - 2        (restore, rollback)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvconform.reference.recurrent.store_step import StorePlan


class RowWrites(NamedTuple):
    """src, dst: i32[m] encoded as above; rows: per pool kind, i32[k, R] words of the given rows (k >= 1:
    a zero row when none is given, so a kernel always has a valid buffer); checkpoint_src: i32[1] the slot
    a checkpoint reads, or i32[0]."""
    src: np.ndarray
    dst: np.ndarray
    rows: tuple
    checkpoint_src: np.ndarray


def as_words(a: np.ndarray) -> np.ndarray:
    """[n, *row] float32/float64 -> i32[n, R] words of the same bits (a float64 value is two words)."""
    a = np.ascontiguousarray(a)
    return a.view(np.int32).reshape(a.shape[0], -1) if a.size else np.zeros((a.shape[0], 0), np.int32)


def from_words(words: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The inverse of as_words: i32[n, R] -> [n, *like.shape[1:]] in like's dtype, bits unchanged."""
    words = np.ascontiguousarray(words, dtype=np.int32)
    return words.view(like.dtype).reshape((words.shape[0],) + like.shape[1:])


def row_writes(plan: StorePlan) -> RowWrites:
    """The plan's pool writes: its assignment moves, then the put of restore/rollback (never both)."""
    src = [int(s) for s in plan.moves.src]
    dst = [int(d) for d in plan.moves.dst]
    rows = []
    for kind, pool in enumerate(plan.pool):
        given = plan.put_rows[kind] if plan.put_slot >= 0 else np.zeros(pool.shape[1:], pool.dtype)
        rows.append(as_words(np.asarray(given, dtype=pool.dtype)[None]))
    if plan.put_slot >= 0:
        src.append(-2)
        dst.append(plan.put_slot)
    checkpoint = [plan.read_slot] if plan.read_slot >= 0 else []
    return RowWrites(np.array(src, np.int32), np.array(dst, np.int32), tuple(rows), np.array(checkpoint, np.int32))
