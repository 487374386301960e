"""The metadata ops' reach columns: `long` and `range` page tables, arenas and manager histories past the\nthresholds spec/metadata.md names, and the generated `reach_<dimension>` columns (conformance/dimensions/)."""
from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case, PoisonRegion

from .. import dimension_reach as dr
from ..values import pick, sampled_from, seeds
from .manager import admitted_step, live, step
from .tables import (DIM_PREFIX, I32, INT32_MAX, LONG_ARRAYS, LONG_NUM_SEQS, LONG_OTHER_PAGES, LONG_PAGE_SIZES,
                     LONG_POOL, LONG_PREFILL, LONG_WIDEST, PADDING, RANGE_NBYTES, RANGE_PAGE_SIZES, _padding_regions,
                     admitted, shortest)


def _reach_page_size(draw, claims: OpClaims, reach: str) -> int:
    sizes = claims.page_sizes or (LONG_PAGE_SIZES if reach == "long" else RANGE_PAGE_SIZES)
    if reach == "range" and claims.page_sizes:
        sizes = tuple(sorted(claims.page_sizes, reverse=True))     # the largest claimed size first
    return pick(draw, sizes, "page size")


@st.composite
def reach_page_tables(draw, claims: OpClaims, reach: str, *, slots: bool = False):
    """(page_indices i32[S_max, W], kv_lens i32[S_max], num_seqs, pages i64[S], P) of a reach column.

    long: LONG_NUM_SEQS sequences, one with LONG_WIDEST pages, the others up to LONG_OTHER_PAGES (empty
    ones included). range: 1..3 sequences, one with kv_len near INT32_MAX (as far as its pages and the
    page ids reach), the others up to 4 pages, page ids up to INT32_MAX, or (slots=True: the slots of
    MD-7 are int32) up to the largest page whose last slot is INT32_MAX."""
    if reach.startswith(DIM_PREFIX):
        return draw(dim_page_tables(claims, reach[len(DIM_PREFIX):]))
    P = _reach_page_size(draw, claims, reach)
    rng = np.random.default_rng(draw(seeds))
    top = (INT32_MAX - P + 1) // P + 1 if slots else INT32_MAX + 1      # page ids in [0, top)
    if reach == "long":
        S, widest = pick(draw, LONG_NUM_SEQS, "sequences"), pick(draw, LONG_WIDEST, "widest")
        lens = rng.integers(0, LONG_OTHER_PAGES * P + 1, size=S)
        lens[rng.random(S) < 0.1] = 0
    else:
        S = draw(st.integers(1, 3))
        widest = min(130, -(-INT32_MAX // P), top - 4 * (S - 1))
        lens = rng.integers(0, 4 * P + 1, size=S)
    first = int(rng.integers(0, S))
    lens[first] = min(INT32_MAX, widest * P) - int(rng.integers(0, P))
    lens = np.maximum(lens, shortest(claims))          # a claimed seq_len (MD-24)
    assume(admitted(claims, lens))
    pages = -(-lens.astype(np.int64) // P)
    need = int(pages.sum())
    if reach == "range":                     # distinct ids at the top of the range, top - 1 among them
        offsets = rng.permutation(min(top, 1 << 16))[:need]
        ids = top - 1 - offsets
        if need and 0 not in offsets:
            ids[0] = top - 1
    else:
        ids = rng.permutation(need + 2)[:need]
    extra = draw(st.integers(0, 1))
    W = int(max(1, pages.max())) + draw(st.integers(0, 1))
    table = np.full((S + extra, W), PADDING, I32)
    cursor = 0
    for i, n in enumerate(pages):
        table[i, :n] = ids[cursor:cursor + n]
        cursor += n
    lens_all = np.concatenate([lens, rng.integers(0, W * P + 1, size=extra)]).astype(I32)
    return table, lens_all, S, pages, P


#: the op whose registry sizes a dimension of the page-table ops (the same sizes for all of them)
_TABLE_OP = {"sequences": "block_table_to_csr", "pages_per_seq": "block_table_to_csr",
             "table_pages": "csr_to_block_table", "tokens": "append_slot_mapping"}


@st.composite
def dim_page_tables(draw, claims: OpClaims, dim: str):
    """reach_page_tables' form for a generated column: `dim` large (sequences, pages of one sequence,
    pages of the whole table, or the new tokens of append's one prefill: a sequence that long), the rest
    small, page ids a shuffled pool, the smallest claimed page size."""
    P = min(claims.page_sizes or (2,))
    rng = np.random.default_rng(draw(seeds))
    if dim == "arena_bytes":    # the arena of slot_mapping_from_arena: mostly kv_indices, 4 bytes a page
        dim, n = "table_pages", dr.pick_size(draw, "slot_mapping_from_arena", "arena_bytes") // 4
    else:
        n = dr.pick_size(draw, _TABLE_OP[dim], dim)
    if dim == "sequences":
        pages = rng.integers(0, 3, size=n)
    elif dim == "pages_per_seq":
        pages = np.array([n, 1])
    elif dim == "table_pages":
        pages = np.full(64, n // 64)
        pages[0] += n - int(pages.sum())
    else:   # tokens: one sequence holding them all, one short one
        pages = np.array([-(-n // P), 1])
    low = shortest(claims)          # MD-24: a claimed seq_len minimum (no empty sequences) raises the short ones
    pages = np.maximum(pages.astype(np.int64), -(-low // P))
    lens = np.maximum(np.where(pages > 0, pages * P - rng.integers(0, P, size=pages.shape[0]), 0), low)
    if dim == "tokens":
        lens[0] = max(int(lens[0]), n)
    S, need = int(pages.shape[0]), int(pages.sum())
    ids = rng.permutation(need + 2)[:need]
    W = int(max(1, pages.max()))
    table = np.full((S, W), PADDING, I32)
    cursor = 0
    for i, k in enumerate(pages):
        table[i, :k] = ids[cursor:cursor + k]
        cursor += k
    return table, lens.astype(I32), S, pages, P


def _reach_params(reach: str, P: int, S: int, **extra) -> dict:
    return dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=S, variant=reach, reach=reach, **extra)


@st.composite
def reach_block_table_to_csr_cases(draw, claims: OpClaims, reach: str):
    table, lens, S, pages, P = draw(reach_page_tables(claims, reach))
    clean = np.where(table == PADDING, 0, table).astype(I32)             # padding entries are poison (MD-6)
    return Case("block_table_to_csr", dict(page_indices=clean, kv_lens=lens, num_seqs=S, page_size=P),
                _reach_params(reach, P, S, tokens=int(lens[:S].sum())), poison=_padding_regions(clean, pages, S))


@st.composite
def reach_csr_to_block_table_cases(draw, claims: OpClaims, reach: str):
    table, lens, S, pages, P = draw(reach_page_tables(claims, reach))
    csr = reference.block_table_to_csr(np.where(table == PADDING, 0, table), lens, S, P)
    W = int(max(1, pages.max())) + draw(st.integers(0, 1))
    return Case("csr_to_block_table", dict(kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices,
                                           kv_last_page_len=csr.kv_last_page_len, page_size=P, pages_per_seq=W),
                _reach_params(reach, P, S, tokens=int(lens[:S].sum())))


@st.composite
def reach_append_inputs(draw, claims: OpClaims, reach: str):
    """(qo_indptr, CsrPageTable, P). long: a decode row (q_len 1) for every non-empty sequence and one
    prefill chunk of LONG_PREFILL tokens past one 64-token block; range: up to 40 new tokens per sequence,
    the longest sequence's ending at kv_len near INT32_MAX."""
    table, lens, S, pages, P = draw(reach_page_tables(claims, reach, slots=True))
    csr = reference.block_table_to_csr(np.where(table == PADDING, 0, table), lens, S, P)
    rng = np.random.default_rng(draw(seeds))
    kv = lens[:S].astype(np.int64)
    if reach == DIM_PREFIX + "tokens":     # the first sequence's new tokens are the dimension
        q = np.minimum(kv, 1)
        q[0] = dr.pick_size(draw, "append_slot_mapping", "tokens")
    elif reach.startswith(DIM_PREFIX):
        q = np.minimum(kv, 1)
    elif reach == "long":
        q = np.minimum(kv, 1)
        chunked = int(rng.integers(0, S))
        q[chunked] = min(int(kv[chunked]), LONG_PREFILL)
    else:
        q = np.minimum(rng.integers(0, 41, size=S), kv)
        q[int(np.argmax(kv))] = max(1, int(q[int(np.argmax(kv))]))      # the longest one writes
    return np.concatenate([[0], np.cumsum(q)]).astype(I32), csr, P


@st.composite
def reach_append_slot_mapping_cases(draw, claims: OpClaims, reach: str):
    qo, csr, P = draw(reach_append_inputs(claims, reach))
    inputs = dict(qo_indptr=qo, kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices,
                  kv_last_page_len=csr.kv_last_page_len, page_size=P)
    return Case("append_slot_mapping", inputs, _reach_params(reach, P, int(qo.shape[0] - 1), tokens=int(qo[-1])))


@st.composite
def reach_slot_mapping_from_arena_cases(draw, claims: OpClaims, reach: str):
    qo, csr, P = draw(reach_append_inputs(claims, reach))
    A = draw(sampled_from((16, 256, 4)))
    seed = draw(seeds)
    arrays = [qo, csr.kv_indptr, csr.kv_indices, csr.kv_last_page_len]
    arena, offsets = reference.pack_arena(arrays, A, start=draw(st.integers(1, 64)), rng=np.random.default_rng(seed))
    garbage = np.ones(arena.shape[0], bool)
    for a, o in zip(arrays, offsets):
        garbage[int(o):int(o) + a.nbytes] = False
    S = int(qo.shape[0] - 1)
    return Case("slot_mapping_from_arena", dict(arena=arena, offsets=offsets.astype(np.int64), num_seqs=S, page_size=P),
                dict(_reach_params(reach, P, S, tokens=int(qo[-1])), kv_dtype="uint8", alignment=A), seed,
                poison=(PoisonRegion("garbage", "arena", garbage, clause="MD-10",
                                     what="arena bytes outside the four arrays", value=0xFF),))


@st.composite
def reach_arena_layout_cases(draw, claims: OpClaims, reach: str):
    """long: hundreds of arrays; range: sizes up to MD-22's 2^40 - 1 bytes, starts and alignments far past
    2^31 bytes (int32 offsets wrap there)."""
    rng = np.random.default_rng(draw(seeds))
    if reach.startswith(DIM_PREFIX):
        n = dr.pick_size(draw, "arena_layout", "arrays")
        nbytes = rng.integers(0, 4096, size=n)
        A, start = draw(sampled_from((16, 256, 4))), draw(st.integers(0, 64))
    elif reach == "long":
        n = pick(draw, LONG_ARRAYS, "arrays")
        nbytes = rng.integers(0, 4096, size=n)
        A, start = draw(sampled_from((16, 256, 4))), draw(st.integers(0, 64))
    else:
        n = draw(st.integers(1, 5))
        nbytes = np.where(rng.random(n) < 0.3, RANGE_NBYTES, rng.integers(1 << 31, RANGE_NBYTES, size=n))
        A = draw(sampled_from((1 << 16, 16, 1 << 31)))
        start = draw(sampled_from((0, (1 << 31) - 1, 1 << 40)))
    return Case("arena_layout", dict(nbytes=nbytes.astype(np.int64), alignment=A, start=start),
                dict(dtype="int64", kv_dtype="int64", arrays=n, alignment=A, start=start, tokens=0, variant=reach,
                     reach=reach))


@st.composite
def reach_page_table_states(draw, claims: OpClaims, reach: str):
    """(state, P) of the manager built directly, valid by MD-11/MD-12. long: LONG_POOL pages, up to 256
    sequences, one past 64 or 128 pages, a third of them sharing a prefix of full pages with an earlier
    one (reference counts > 1), windows on a fifth. range: sequence ids near INT32_MAX, page sizes of 2^27
    (claimed sizes: the largest) and a pool of 2^31 / P pages, every slot an int32 up to INT32_MAX, one
    sequence over all but three pages (a length near 2^31)."""
    rng = np.random.default_rng(draw(seeds))
    dim = reach[len(DIM_PREFIX):] if reach.startswith(DIM_PREFIX) else ""
    if dim:     # a generated column: one dimension large (the appended tokens: the command's, below)
        P = min(claims.page_sizes or (2,))
        n = dr.pick_size(draw, "page_table_step", dim)
        S = n if dim == "sequences" else 8
        lens = rng.integers(0, 2 * P + 1, size=S)
        if dim == "table_pages":
            lens[:] = (n // S) * P
        need = int((-(-lens // P)).sum())
        num_pages = n if dim == "pool_pages" else need + (n // P + 2 if dim == "appended" else 0) + 8
        ids = np.sort(rng.permutation(max(S, 1 << 12))[:S])
    elif reach == "long":
        P = _reach_page_size(draw, claims, reach)
        num_pages, S = pick(draw, LONG_POOL, "pool pages"), pick(draw, LONG_NUM_SEQS, "sequences")
        lens = rng.integers(0, 8 * P + 1, size=S)
        lens[int(rng.integers(0, S))] = pick(draw, (130, 70), "widest") * P - int(rng.integers(0, P))
        ids = np.sort(rng.permutation(1 << 12)[:S])
    else:
        P = pick(draw, tuple(sorted(claims.page_sizes, reverse=True)) if claims.page_sizes else (1 << 27, 3 << 24),
                 "page size")
        num_pages = max(4, min(16, (1 << 31) // P))
        S = draw(st.integers(1, 3))
        lens = rng.integers(0, P, size=S)
        lens[0] = (num_pages - 3) * P - int(rng.integers(0, 3))
        ids = np.sort(INT32_MAX - rng.permutation(64)[:S])
    lens = np.maximum(lens, shortest(claims))       # MD-24: a claimed seq_len minimum raises the short ones
    pages = -(-lens.astype(np.int64) // P)
    keep = np.cumsum(pages) <= num_pages - 2      # room for the command's own pages
    lens, pages, ids = lens[keep], pages[keep], ids[keep]
    pool = [int(p) for p in rng.permutation(num_pages)]
    tables: list[list[int]] = []
    for i, n in enumerate(pages):
        full, shared = int(lens[i] // P), []
        donors = [j for j in range(i) if lens[j] // P >= 1]
        if reach == "long" and donors and full and rng.random() < 0.3:
            j = donors[int(rng.integers(0, len(donors)))]
            shared = tables[j][:int(rng.integers(1, min(full, int(lens[j] // P)) + 1))]
        tables.append(shared + [pool.pop() for _ in range(int(n) - len(shared))])
    S = len(tables)
    windows, sinks = np.zeros(S, np.int64), np.zeros(S, np.int64)
    windowed = rng.random(S) < (0.2 if reach == "long" else 0.0)
    windows[windowed] = lens[windowed] + rng.integers(P, 4 * P, size=int(windowed.sum()))
    sinks[windowed] = rng.integers(0, P, size=int(windowed.sum()))
    flat = np.array([p for t in tables for p in t], np.int64)
    refs = np.bincount(flat, minlength=num_pages)
    state = dict(seq_ids=ids.astype(I32), seq_lens=lens.astype(I32),
                 kv_indptr=np.concatenate([[0], np.cumsum([len(t) for t in tables])]).astype(I32),
                 kv_indices=flat.astype(I32), ref_counts=refs.astype(I32), sinks=sinks.astype(I32),
                 windows=windows.astype(I32))
    return state, P


@st.composite
def _reach_command(draw, state: dict, P: int, reach: str) -> dict:
    """One valid command on the longest sequence of a reach state: an append across pages (long: up to
    300 tokens; range: a few, within int32 lengths), a fork sharing its pages, a pop across pages with
    copy on write where shared, a removal, a window trimming pages; a new id next to the largest one."""
    ids = live(state)
    lens = [int(n) for n in state["seq_lens"]]
    i = int(np.argmax(lens))
    seq, L = ids[i], lens[i]
    sink, window = int(state["sinks"][i]), int(state["windows"][i])
    if reach == DIM_PREFIX + "appended":     # the dimension is the command's token count
        return dict(command="append", seq=seq, n=dr.pick_size(draw, "page_table_step", "appended"))
    command = draw(sampled_from(("append", "fork", "pop", "window", "remove")))
    if command == "append":
        top = 300 if reach == "long" else min(5, INT32_MAX - L)
        return dict(command="append", seq=seq, n=draw(st.integers(min(P + 1, top), top)))
    if command == "fork":
        child = next(c for c in range(max(ids) + 1, max(ids) - 200, -1) if c not in ids and c <= INT32_MAX)
        pos = draw(st.integers(0, sink if window else L))
        return dict(command="fork", seq=child, parent=seq, pos=pos)
    if command == "pop":
        return dict(command="pop", seq=seq, n=draw(st.integers(0, L)))
    if command == "remove":
        return dict(command="remove", seq=seq)
    window = draw(st.integers(1, 8 * P))
    return dict(command="window", seq=seq, window=window, sink=draw(st.integers(0, window - 1)))


@st.composite
def reach_page_table_step_cases(draw, claims: OpClaims, reach: str):
    """One valid command (`_reach_command`) on a reach state (`reach_page_table_states`)."""
    state, P = draw(reach_page_table_states(claims, reach))
    assume(len(state["seq_ids"]))
    cmd = draw(_reach_command(state, P, reach))
    out = step(state, P, cmd)
    assume(out is not None and admitted_step(state, out, shortest(claims)))     # MD-24 under a claim
    return Case("page_table_step", dict(state, page_size=P, **cmd),
                dict(_reach_params(reach, P, len(state["seq_ids"]),
                                   tokens=int(np.asarray(state["seq_lens"], np.int64).sum())), **cmd))


REACH_CASES = {"block_table_to_csr": reach_block_table_to_csr_cases,
               "csr_to_block_table": reach_csr_to_block_table_cases,
               "append_slot_mapping": reach_append_slot_mapping_cases,
               "arena_layout": reach_arena_layout_cases,
               "slot_mapping_from_arena": reach_slot_mapping_from_arena_cases,
               "page_table_step": reach_page_table_step_cases}
