"""Paged-KV metadata (spec/metadata.md, clauses MD-1 .. MD-22): CSR page tables and their block-table
form, the append slot mapping, the packed auxiliary arena, and the page-table manager that produces them.

NumPy only; every array is int32 unless stated (arena bytes: uint8, byte offsets/sizes: int64).

Two conventions describe one paged cache (MD-1):
  block table (jax / torch_xla / vLLM, spec/paged_attention.md): page_indices i32[S, pages_per_seq],
      kv_lens i32[S], num_seqs;
  CSR (FlashInfer / TVM): kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S].
`qo_indptr` of the CSR world is `cu_q_lens` of the block-table world (MD-7).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .validation import as_array, check_index_range, int_input, int_scalar, require

__all__ = [
    "CsrPageTable", "BlockTable", "ArenaLayout", "PageTableState",
    "block_table_to_csr", "csr_to_block_table", "append_slot_mapping",
    "arena_layout", "pack_arena", "arena_views", "slot_mapping_from_arena",
    "empty_page_table", "page_table_step", "MANAGER_COMMANDS", "ARENA_ORDER",
    "ragged_paged_attention_csr",
    "validate_block_table_to_csr", "validate_csr_to_block_table", "validate_append_slot_mapping",
    "validate_arena_layout", "validate_slot_mapping_from_arena", "validate_page_table_step",
    "validate_ragged_paged_attention_csr",
]

I32 = np.int32
_INT32_MAX = 2 ** 31 - 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CsrPageTable(NamedTuple):
    """CSR page table (MD-2 .. MD-4): kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S]."""
    kv_indptr: np.ndarray
    kv_indices: np.ndarray
    kv_last_page_len: np.ndarray


class BlockTable(NamedTuple):
    """Block-table form (MD-5, MD-6): page_indices i32[S, pages_per_seq], kv_lens i32[S]."""
    page_indices: np.ndarray
    kv_lens: np.ndarray


class ArenaLayout(NamedTuple):
    """Packed arena layout (MD-8, MD-9): offsets i64[n] (bytes), copy_bytes i64[], total_bytes i64[]."""
    offsets: np.ndarray
    copy_bytes: np.ndarray
    total_bytes: np.ndarray


# --- validation --------------------------------------------------------------------------------

def _page_size(page_size) -> int:
    return int_scalar("page_size", page_size, minimum=1)


def validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size):
    """Checks MD-2 .. MD-4; returns (indptr, indices, last) as int64 and page_size."""
    P = _page_size(page_size)
    indptr = int_input("kv_indptr", kv_indptr, 1, "[S+1]")
    indices = int_input("kv_indices", kv_indices, 1, "[nnz]")
    last = int_input("kv_last_page_len", kv_last_page_len, 1, "[S]")
    require(indptr.shape[0] >= 1, "kv_indptr must have shape [S+1] with S >= 0, got shape (0,)")
    S = indptr.shape[0] - 1
    require(last.shape[0] == S, f"kv_last_page_len must have shape [S] = ({S},) to match kv_indptr [S+1], "
                                f"got {tuple(last.shape)}")
    require(indptr[0] == 0, f"kv_indptr[0] must be 0 (MD-2), got {int(indptr[0])}")
    steps = np.diff(indptr)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"kv_indptr must be non-decreasing (MD-2): kv_indptr[{k + 1}]={int(indptr[k + 1])} < "
                         f"kv_indptr[{k}]={int(indptr[k])}")
    require(indptr[-1] == indices.shape[0],
            f"kv_indptr[S] must equal len(kv_indices) (MD-2): kv_indptr[{S}]={int(indptr[-1])}, "
            f"len(kv_indices)={indices.shape[0]}")
    check_index_range("kv_indices", indices, 0, np.iinfo(np.int32).max + 1, " (page ids are int32 >= 0, MD-2)")
    for i in range(S):
        if steps[i] == 0:
            require(last[i] == 0, f"kv_last_page_len[{i}] must be 0 for a sequence with no pages (MD-4), "
                                  f"got {int(last[i])}")
        else:
            require(1 <= last[i] <= P, f"kv_last_page_len[{i}]={int(last[i])} must lie in [1, page_size={P}] "
                                       f"for a sequence with pages (MD-3)")
    return indptr, indices, last, P


def _kv_lens_from_csr(indptr, last, P):
    pages = np.diff(indptr)
    return np.where(pages > 0, (pages - 1) * P + last, 0)


# --- MD-2 .. MD-6: conversions -----------------------------------------------------------------

def validate_block_table_to_csr(page_indices, kv_lens, num_seqs, page_size):
    """Check `block_table_to_csr`'s arguments (MD-22); returns (page_indices i64, kv_lens i64[num_seqs],
    num_seqs, page_size). Raises ValueError/TypeError naming the argument."""
    P = _page_size(page_size)
    table = int_input("page_indices", page_indices, 2, "[S, pages_per_seq]")
    lens = int_input("kv_lens", kv_lens, 1, "[S]")
    S = int_scalar("num_seqs", num_seqs, minimum=0, maximum=lens.shape[0])
    require(table.shape[0] >= S, f"page_indices must have at least num_seqs={S} rows, got {table.shape[0]}")
    lens = lens[:S]
    check_index_range("kv_lens", lens, 0, table.shape[1] * P + 1,
                      f" (at most pages_per_seq * page_size = {table.shape[1] * P})")
    for i in range(S):
        check_index_range("page_indices", table[i, :_cdiv(int(lens[i]), P)], 0, np.iinfo(np.int32).max + 1,
                          " (owned pages are >= 0)")
    return table, lens, S, P


def block_table_to_csr(page_indices, kv_lens, num_seqs, page_size) -> CsrPageTable:
    """Block table -> CSR (MD-2, MD-3, MD-4, MD-5).

    page_indices: i32[S_max, pages_per_seq]; kv_lens: i32[S_max]; only the first `num_seqs` rows count.
    Sequence i owns pages page_indices[i, :cdiv(kv_lens[i], page_size)] in logical order; entries past
    that are padding and never read (MD-6). Returns kv_indptr i32[num_seqs+1] (kv_indptr[0] = 0,
    kv_indptr[i+1] - kv_indptr[i] = cdiv(kv_lens[i], page_size)), kv_indices i32[nnz] (the owned pages,
    sequence after sequence), kv_last_page_len i32[num_seqs] (kv_len - (pages-1)*page_size in
    [1, page_size]; 0 for an empty sequence).
    """
    table, lens, S, P = validate_block_table_to_csr(page_indices, kv_lens, num_seqs, page_size)
    pages = np.array([_cdiv(int(n), P) for n in lens], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(I32)
    indices = np.concatenate([table[i, :pages[i]] for i in range(S)] + [np.zeros(0, np.int64)])
    last = np.where(pages > 0, lens - (pages - 1) * P, 0).astype(I32)
    return CsrPageTable(indptr, indices.astype(I32), last)


def validate_csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq):
    """Check `csr_to_block_table`'s arguments (MD-22); returns (indptr, indices, last as int64, page_size,
    pages_per_seq)."""
    indptr, indices, last, P = validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size)
    W = int_scalar("pages_per_seq", pages_per_seq, minimum=1)
    pages = np.diff(indptr)
    if pages.size and pages.max() > W:
        i = int(np.argmax(pages))
        raise ValueError(f"pages_per_seq={W} is smaller than the {int(pages[i])} pages of sequence {i} (MD-5)")
    return indptr, indices, last, P, W


def csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq) -> BlockTable:
    """CSR -> block table (MD-5, MD-6).

    Returns page_indices i32[S, pages_per_seq] (row i starts with kv_indices[kv_indptr[i]:kv_indptr[i+1]];
    the rest is padding, unspecified by MD-6: the reference writes 0) and kv_lens i32[S]
    (= (pages-1)*page_size + kv_last_page_len, 0 for an empty sequence).
    """
    indptr, indices, last, P, W = validate_csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size,
                                                              pages_per_seq)
    S = indptr.shape[0] - 1
    pages = np.diff(indptr)
    table = np.zeros((S, W), dtype=I32)
    for i in range(S):
        table[i, :pages[i]] = indices[indptr[i]:indptr[i + 1]]
    return BlockTable(table, _kv_lens_from_csr(indptr, last, P).astype(I32))


# --- MD-7: append slot mapping ------------------------------------------------------------------

def validate_append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
    """Check `append_slot_mapping`'s arguments (MD-22); returns (qo, indptr, indices, last as int64, P)."""
    indptr, indices, last, P = validate_csr(kv_indptr, kv_indices, kv_last_page_len, page_size)
    qo = int_input("qo_indptr", qo_indptr, 1, "[S+1]")
    S = indptr.shape[0] - 1
    require(qo.shape[0] == S + 1, f"qo_indptr must have shape [S+1] = ({S + 1},) like kv_indptr, got {tuple(qo.shape)}")
    require(qo[0] == 0, f"qo_indptr[0] must be 0 (MD-7), got {int(qo[0])}")
    q_lens = np.diff(qo)
    kv_lens = _kv_lens_from_csr(indptr, last, P)
    for i in range(S):
        require(0 <= q_lens[i] <= kv_lens[i], f"qo_indptr: sequence {i} has q_len={int(q_lens[i])} outside "
                                              f"[0, kv_len={int(kv_lens[i])}] (MD-7)")
        if q_lens[i]:      # MD-7: every slot written is an int32
            first, last_pos = int(kv_lens[i] - q_lens[i]), int(kv_lens[i] - 1)
            pages = indices[indptr[i] + first // P:indptr[i] + last_pos // P + 1]
            top = max(int(pages[:-1].max()) * P + P - 1 if pages.shape[0] > 1 else -1,
                      int(pages[-1]) * P + last_pos % P)
            require(top <= _INT32_MAX, f"kv_indices: sequence {i} writes slot {top} = page * page_size + offset, "
                                       f"past int32 (MD-7)")
    return qo, indptr, indices, last, P


def append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size) -> np.ndarray:
    """Slots of the new tokens of a step (MD-7): i32[T], T = qo_indptr[S].

    qo_indptr: i32[S+1] (= cu_q_lens). Sequence i has kv_len_i tokens in the cache *including* its
    q_len_i = qo_indptr[i+1] - qo_indptr[i] new ones; new token t (0 <= t < q_len_i) sits at position
    p = kv_len_i - q_len_i + t, in page kv_indices[kv_indptr[i] + p // page_size], and its slot is
    page * page_size + p % page_size (the `slot_mapping` of write_kv, PA).
    """
    qo, indptr, indices, last, P = validate_append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                                                page_size)
    S = indptr.shape[0] - 1
    q_lens = np.diff(qo)
    kv_lens = _kv_lens_from_csr(indptr, last, P)
    slots = []
    for i in range(S):
        for p in range(int(kv_lens[i] - q_lens[i]), int(kv_lens[i])):
            slots.append(int(indices[indptr[i] + p // P]) * P + p % P)
    return np.array(slots, dtype=I32)


# --- MD-8 .. MD-10: the packed auxiliary arena --------------------------------------------------

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


# --- MD-11 .. MD-22: the page-table manager -----------------------------------------------------

MANAGER_COMMANDS = ("add", "append", "fork", "pop", "remove", "window")


class PageTableState(NamedTuple):
    """Manager state plus the metadata of one step (MD-11, MD-21).

    seq_ids i32[S] (ascending), seq_lens i32[S], kv_indptr i32[S+1], kv_indices i32[nnz] (CSR over the
    sequences in seq_ids order), ref_counts i32[num_pages] (0 = free), sinks i32[S], windows i32[S]
    (0 = no window): the state, fed back into the next step. Step metadata: kv_last_page_len i32[S]
    (MD-3/4 of the new state), copies i32[k, 3] (src page, dst page, tokens: the copy-on-write copies the
    step requires, in order), slots i32[n] (the slots of appended tokens, MD-7; empty for other commands).
    """
    seq_ids: np.ndarray
    seq_lens: np.ndarray
    kv_indptr: np.ndarray
    kv_indices: np.ndarray
    ref_counts: np.ndarray
    sinks: np.ndarray
    windows: np.ndarray
    kv_last_page_len: np.ndarray
    copies: np.ndarray
    slots: np.ndarray


def empty_page_table(num_pages: int) -> dict:
    """The state of a manager with no sequence and `num_pages` free pages (MD-11), as step keywords."""
    n = int_scalar("num_pages", num_pages, minimum=1)
    z = np.zeros(0, I32)
    return dict(seq_ids=z, seq_lens=z, kv_indptr=np.zeros(1, I32), kv_indices=z,
                ref_counts=np.zeros(n, I32), sinks=z, windows=z)


def _validate_state(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, P):
    ids = int_input("seq_ids", seq_ids, 1, "[S]")
    S = ids.shape[0]
    lens = int_input("seq_lens", seq_lens, 1, "[S]")
    sk = int_input("sinks", sinks, 1, "[S]")
    wn = int_input("windows", windows, 1, "[S]")
    for name, arr in (("seq_lens", lens), ("sinks", sk), ("windows", wn)):
        require(arr.shape[0] == S, f"{name} must have shape [S] = ({S},) like seq_ids, got {tuple(arr.shape)}")
    require(np.all(np.diff(ids) > 0), "seq_ids must be strictly increasing (MD-11)")
    indptr = int_input("kv_indptr", kv_indptr, 1, "[S+1]")
    indices = int_input("kv_indices", kv_indices, 1, "[nnz]")
    refs = int_input("ref_counts", ref_counts, 1, "[num_pages]")
    require(refs.shape[0] >= 1, "ref_counts must have shape [num_pages] with num_pages >= 1")
    require(indptr.shape[0] == S + 1, f"kv_indptr must have shape [S+1] = ({S + 1},), got {tuple(indptr.shape)}")
    require(indptr[0] == 0 and np.all(np.diff(indptr) >= 0) and indptr[-1] == indices.shape[0],
            "kv_indptr must start at 0, be non-decreasing and end at len(kv_indices) (MD-2)")
    check_index_range("kv_indices", indices, 0, refs.shape[0], " (page ids of the pool, MD-11)")
    check_index_range("seq_lens", lens, 0, 2**31, " (int32 lengths)")
    pages = np.diff(indptr)
    for i in range(S):
        require(pages[i] == _cdiv(int(lens[i]), P), f"seq_lens[{i}]={int(lens[i])} needs "
                f"{_cdiv(int(lens[i]), P)} pages, kv_indptr gives {int(pages[i])} (MD-11)")
        require((wn[i] == 0 and sk[i] == 0) or 0 <= sk[i] < wn[i],
                f"sinks[{i}]={int(sk[i])}, windows[{i}]={int(wn[i])} must satisfy 0 <= sink < window, "
                f"or both 0 (MD-19)")
    for i in range(S):
        if lens[i] % P:
            last_page = int(indices[indptr[i + 1] - 1])
            require(refs[last_page] == 1, f"ref_counts[{last_page}]={int(refs[last_page])}: the partial last page "
                                          f"of sequence {int(ids[i])} must not be shared (MD-12)")
    counted = np.bincount(indices, minlength=refs.shape[0]) if indices.size else np.zeros(refs.shape[0], np.int64)
    bad = np.flatnonzero(counted != refs)
    require(not bad.size, f"ref_counts[{int(bad[0]) if bad.size else 0}] must equal the number of sequences "
                          f"holding that page (MD-12)")
    return [int(i) for i in ids], [int(n) for n in lens], \
        [[int(p) for p in indices[indptr[i]:indptr[i + 1]]] for i in range(S)], \
        [int(r) for r in refs], [int(s) for s in sk], [int(w) for w in wn]


def validate_page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                             command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
    """Check the state (MD-11, MD-12), the command and its common arguments (MD-22); returns (page_size,
    then the state as Python lists: ids, lens, page lists, ref counts, sinks, windows; seq, n). The rules
    that depend on the state (live ids, pos, sink) are checked by `page_table_step` itself."""
    P = _page_size(page_size)
    state = _validate_state(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, P)
    require(isinstance(command, str) and command in MANAGER_COMMANDS,
            f"command must be one of {MANAGER_COMMANDS}, got {command!r}")
    seq = int_scalar("seq", seq, minimum=0, maximum=2**31 - 1)
    n = int_scalar("n", n, minimum=0)
    return (P, *state, seq, n)


def page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                    command, seq, n=0, parent=-1, pos=0, window=0, sink=0) -> PageTableState:
    """One manager command on a state (MD-11 .. MD-22); returns the new state and its metadata.

    command (MD-13 .. MD-19): "add" (seq), "append" (seq, n), "fork" (seq = child, parent, pos),
    "pop" (seq, n), "remove" (seq), "window" (seq, window, sink). Pages are allocated lowest free id
    first (MD-12). The input arrays are not modified.
    """
    P, ids, lens, tables, refs, sks, wns, seq, n = validate_page_table_step(
        seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size, command, seq, n)
    copies: list[tuple[int, int, int]] = []
    slots: list[int] = []

    def where(s: int, name: str) -> int:
        require(s in ids, f"{name}={s} is not a live sequence (live: {ids})")
        return ids.index(s)

    def alloc() -> int:
        free = [p for p, r in enumerate(refs) if r == 0]
        require(bool(free), f"out of pages: all {len(refs)} pages of ref_counts are in use (MD-12)")
        refs[free[0]] = 1
        return free[0]

    def release(p: int) -> None:
        refs[p] -= 1

    def trim(i: int) -> None:                                                   # MD-20
        if wns[i] == 0:
            return
        keep_from = lens[i] - (wns[i] - sks[i])
        first, stop = _cdiv(sks[i], P), max(keep_from, 0) // P
        if stop > first:
            for p in tables[i][first:stop]:
                release(p)
            del tables[i][first:stop]
            lens[i] -= (stop - first) * P

    if command == "add":                                                        # MD-13
        require(seq not in ids, f"seq={seq} already exists (MD-13)")
        ids.append(seq); lens.append(0); tables.append([]); sks.append(0); wns.append(0)
    elif command == "append":                                                   # MD-14
        i = where(seq, "seq")
        require(lens[i] + n <= _INT32_MAX, f"n={n}: sequence {seq} of length {lens[i]} would pass int32 (MD-14)")
        for _ in range(n):
            p = lens[i]
            if p % P == 0:
                tables[i].append(alloc())
            slots.append(tables[i][p // P] * P + p % P)
            require(slots[-1] <= _INT32_MAX, f"page_size={P}: the slot {slots[-1]} of page {tables[i][p // P]} is "
                                             f"past int32 (MD-14)")
            lens[i] += 1
        trim(i)
    elif command == "fork":                                                     # MD-15, MD-16, MD-21
        require(seq not in ids, f"seq={seq} already exists: a fork child must be new (MD-15)")
        parent = int_scalar("parent", parent, minimum=0)
        j = where(parent, "parent")
        pos = int_scalar("pos", pos, minimum=0, maximum=lens[j])
        if wns[j]:
            require(pos <= sks[j], f"pos={pos}: a sequence with a window forks only inside its sink "
                                   f"(pos <= sink={sks[j]}) (MD-21)")
        shared = tables[j][:pos // P]
        for p in shared:
            refs[p] += 1
        table = list(shared)
        if pos % P:
            dst = alloc()
            copies.append((tables[j][pos // P], dst, pos % P))
            table.append(dst)
        ids.append(seq); lens.append(pos); tables.append(table); sks.append(0); wns.append(0)
    elif command == "pop":                                                      # MD-17
        i = where(seq, "seq")
        require(n <= lens[i], f"n={n} must be <= the length {lens[i]} of sequence {seq} (MD-17)")
        lens[i] -= n
        keep = _cdiv(lens[i], P)
        for p in tables[i][keep:]:
            release(p)
        del tables[i][keep:]
        if lens[i] % P and refs[tables[i][-1]] > 1:
            src = tables[i][-1]
            release(src)
            dst = alloc()
            copies.append((src, dst, lens[i] % P))
            tables[i][-1] = dst
    elif command == "remove":                                                   # MD-18
        i = where(seq, "seq")
        for p in tables[i]:
            release(p)
        for lst in (ids, lens, tables, sks, wns):
            del lst[i]
    else:                                                                       # "window", MD-19
        i = where(seq, "seq")
        window = int_scalar("window", window, minimum=1)
        sink = int_scalar("sink", sink, minimum=0)
        require(sink < window, f"sink={sink} must be < window={window} (MD-19)")
        sks[i], wns[i] = sink, window
        trim(i)

    order = sorted(range(len(ids)), key=lambda k: ids[k])
    ids, lens, tables, sks, wns = ([lst[k] for k in order] for lst in (ids, lens, tables, sks, wns))
    counts = [len(t) for t in tables]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(I32)
    flat = np.array([p for t in tables for p in t], dtype=I32)
    last = np.array([L - (c - 1) * P if c else 0 for L, c in zip(lens, counts)], dtype=I32)
    return PageTableState(np.array(ids, I32), np.array(lens, I32), indptr, flat, np.array(refs, I32),
                          np.array(sks, I32), np.array(wns, I32), last,
                          np.array(copies, I32).reshape(-1, 3), np.array(slots, I32))


# --- MD-23: attention over the CSR layout ---------------------------------------------------------

def ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None):
    """`ragged_paged_attention` (spec/paged_attention.md) with its page table in CSR form (MD-23).

    q: [T, Hq, D] float; k_pages, v_pages: [P, page_size, Hkv, D]; qo_indptr: i32[S+1] (= cu_q_lens,
    MD-7); kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S] (MD-2 .. MD-4), page_size
    taken from k_pages. Every sequence counts (num_seqs = S). Options as ragged_paged_attention (no
    per-token scores). Returns out: float64[T, Hq, D], identical to the block-table call on
    csr_to_block_table's conversion (MD-5).
    """
    table, qo, S = _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len)
    from .paged_attention import ragged_paged_attention
    return ragged_paged_attention(q, k_pages, v_pages, table.kv_lens, table.page_indices, qo, S,
                                  sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap,
                                  sinks=sinks, k_scale=k_scale, v_scale=v_scale)


def _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len):
    k = np.asarray(k_pages)
    require(k.ndim == 4, f"k_pages must have rank 4 [P, page_size, Hkv, D], got shape {tuple(k.shape)}")
    P = int(k.shape[1])
    indptr, indices, _, _ = validate_csr(kv_indptr, kv_indices, kv_last_page_len, P)
    # checked here, on the argument the caller gave, before MD-5's conversion turns it into a block table
    # whose own check would name `page_indices`, an argument this op does not have
    check_index_range("kv_indices", indices, 0, int(k.shape[0]),
                      f" (page ids index k_pages' {int(k.shape[0])} pages, MD-2, MD-23)")
    qo = int_input("qo_indptr", qo_indptr, 1, "[S+1]")
    S = indptr.shape[0] - 1
    require(qo.shape[0] == S + 1, f"qo_indptr must have shape [S+1] = ({S + 1},) like kv_indptr, got {tuple(qo.shape)}")
    width = max(1, int(np.diff(indptr).max()) if S else 1)
    return csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, P, width), qo.astype(I32), S


def validate_ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                        *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                                        k_scale=None, v_scale=None):
    """Check `ragged_paged_attention_csr`'s arguments (MD-2 .. MD-4, MD-23, and PA's rules); returns the
    normalised block-table call of `validate_ragged_paged_attention` (MD-5's conversion)."""
    table, qo, S = _csr_attention_table(k_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len)
    from .paged_attention import validate_ragged_paged_attention
    return validate_ragged_paged_attention(q, k_pages, v_pages, table.kv_lens, table.page_indices, qo, S,
                                           sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap,
                                           sinks=sinks, k_scale=k_scale, v_scale=v_scale)
