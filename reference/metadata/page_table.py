"""The page-table manager (MD-11 .. MD-22): one command at a time over a CSR page table."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_index_range, int_input, int_scalar, require
from .tables import _INT32_MAX, I32, _cdiv, _page_size

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
