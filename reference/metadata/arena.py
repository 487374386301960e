"""The packed auxiliary arena (MD-8 .. MD-10): where each metadata array lives in one uint8 buffer."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import as_array, int_input, int_scalar, require
from .tables import I32, _cdiv, _page_size, append_slot_mapping


class ArenaLayout(NamedTuple):
    """Packed arena layout (MD-8, MD-9): offsets i64[n] (bytes), copy_bytes i64[], total_bytes i64[]."""
    offsets: np.ndarray
    copy_bytes: np.ndarray
    total_bytes: np.ndarray


#: the arrays `slot_mapping_from_arena` reads, in arena order (MD-10)
ARENA_ORDER = ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len")


def validate_arena_layout(nbytes, alignment, start=0):
    """Check `arena_layout`'s arguments (MD-22); returns (nbytes i64[n], alignment, start)."""
    sizes = int_input("nbytes", nbytes, 1, "[n]")
    bad = np.flatnonzero(sizes < 0)
    require(not bad.size, f"nbytes[{int(bad[0]) if bad.size else 0}]={int(sizes[bad[0]]) if bad.size else 0} "
                          f"must be >= 0 (byte sizes, MD-8)")
    A = int_scalar("alignment", alignment, minimum=1)
    require(A & (A - 1) == 0, f"alignment must be a power of two (MD-8), got {A}")
    begin = int_scalar("start", start, minimum=0)
    total = _layout(sizes, A, begin)[2]
    # MD-9: offsets, copy_bytes and total_bytes are i64, so a layout ending past 2**63 - 1 bytes cannot be
    # returned (Python ints above: the check itself cannot overflow)
    require(total <= np.iinfo(np.int64).max,
            f"nbytes: the layout of these sizes (start {begin}, alignment {A}) takes {total} bytes, past "
            f"2**63 - 1, the range of its i64 offsets (MD-9)")
    return sizes, A, begin


def _layout(sizes, A: int, pos: int) -> tuple[list[int], int, int]:
    """(offsets, copy_bytes, total_bytes) of MD-8/MD-9 as Python ints."""
    def up(x: int) -> int:
        return _cdiv(x, A) * A

    offsets = []
    for n in sizes:
        pos = up(pos)
        offsets.append(pos)
        pos += int(n)
    copy = offsets[-1] + int(sizes[-1]) if offsets else 0
    return offsets, copy, up(copy)


def arena_layout(nbytes, alignment, start=0) -> ArenaLayout:
    """Packed layout of n arrays of `nbytes` i64[n] bytes (MD-8, MD-9).

    offsets[0] = align_up(start, alignment); offsets[k] = align_up(offsets[k-1] + nbytes[k-1], alignment)
    (the smallest aligned offset at or after the end of the previous array; an empty array takes no
    bytes but still gets an aligned offset). copy_bytes = offsets[n-1] + nbytes[n-1] (the end of the
    last array, what a host-to-device copy must move; 0 for n = 0); total_bytes = align_up(copy_bytes,
    alignment) (the arena size). alignment: a power of two >= 1; start >= 0.
    """
    offsets, copy, total = _layout(*validate_arena_layout(nbytes, alignment, start))
    return ArenaLayout(np.array(offsets, np.int64), np.array(copy, np.int64), np.array(total, np.int64))


def pack_arena(arrays, alignment, start=0, fill=None, rng=None):
    """(arena u8[total_bytes], offsets i64[n]): the arrays' bytes at their MD-8 offsets.

    Bytes outside the arrays hold `fill` (a byte value), or random garbage from `rng` when fill is None
    and rng is given, else 0. Not an op: the suite's way of building packed inputs (MD-10)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    lay = arena_layout(np.array([a.nbytes for a in arrays], np.int64), alignment, start)
    total = int(lay.total_bytes)
    if fill is not None:
        arena = np.full(total, fill, np.uint8)
    elif rng is not None:
        arena = rng.integers(0, 256, size=total, dtype=np.uint8)
    else:
        arena = np.zeros(total, np.uint8)
    for a, off in zip(arrays, lay.offsets):
        arena[int(off):int(off) + a.nbytes] = a.view(np.uint8).reshape(-1)
    return arena, lay.offsets


def arena_views(arena, offsets, lengths, dtype=np.int32) -> list:
    """Views (no copies) of `lengths[k]` elements of `dtype` at byte offset `offsets[k]` of `arena`."""
    arena = np.asarray(arena)
    item = np.dtype(dtype).itemsize
    return [arena[int(o):int(o) + int(n) * item].view(dtype) for o, n in zip(offsets, lengths)]


def slot_mapping_from_arena(arena, offsets, num_seqs, page_size) -> np.ndarray:
    """`append_slot_mapping` reading its four int32 arrays from one packed arena (MD-10).

    arena: u8[N]; offsets: i64[4], byte offsets of qo_indptr [S+1], kv_indptr [S+1], kv_indices [nnz]
    (nnz = kv_indptr[S]) and kv_last_page_len [S] (ARENA_ORDER), each a multiple of 4 and in bounds;
    every other byte of the arena is garbage and must not be read. Returns i32[T] as MD-7.
    """
    qo, indptr, indices, last = validate_slot_mapping_from_arena(arena, offsets, num_seqs, page_size)
    return append_slot_mapping(qo, indptr, indices, last, page_size)


def validate_slot_mapping_from_arena(arena, offsets, num_seqs, page_size):
    """Check `slot_mapping_from_arena`'s arguments (MD-10, MD-22); returns the four int32 views
    (qo_indptr, kv_indptr, kv_indices, kv_last_page_len) into the arena, in ARENA_ORDER."""
    buf = as_array("arena", arena)   # a ragged nested list: a TypeError naming arena, not NumPy's own
    require(buf.dtype == np.uint8 and buf.ndim == 1, f"arena must be a uint8[N] byte buffer, got "
                                                      f"{buf.dtype}{list(buf.shape)}")
    offs = int_input("offsets", offsets, 1, "[4]")
    require(offs.shape[0] == 4, f"offsets must have shape [4] ({', '.join(ARENA_ORDER)}), got {tuple(offs.shape)}")
    S = int_scalar("num_seqs", num_seqs, minimum=0)
    _page_size(page_size)
    for k, name in enumerate(ARENA_ORDER):
        require(offs[k] >= 0 and offs[k] % 4 == 0,
                f"offsets[{k}] ({name}) must be a non-negative multiple of 4 bytes (MD-10), got {int(offs[k])}")

    def view(k: int, n: int) -> np.ndarray:
        end = int(offs[k]) + 4 * n
        require(end <= buf.shape[0], f"offsets[{k}] ({ARENA_ORDER[k]}): {n} int32 at byte {int(offs[k])} "
                                     f"end past the arena ({buf.shape[0]} bytes) (MD-10)")
        return buf[int(offs[k]):end].view(I32)

    qo, indptr, last = view(0, S + 1), view(1, S + 1), view(3, S)
    require(0 <= int(indptr[-1]) <= buf.shape[0] // 4, f"kv_indptr[S]={int(indptr[-1])} read from the arena "
                                                        f"is not a valid page count (MD-10)")
    return qo, indptr, view(2, int(indptr[-1])), last
