"""Strategies and comparison contract for the paged-KV metadata family (spec/metadata.md).

Ops: `block_table_to_csr`, `csr_to_block_table`, `append_slot_mapping` (MD-1 .. MD-7), `arena_layout`,
`slot_mapping_from_arena` (MD-8 .. MD-10) and `page_table_step` (the manager, MD-11 .. MD-21). Every
output is integer: class E, compared exactly (spec/numerics.md), the block-table padding of MD-6 masked.

Page tables are drawn with distinct page ids from a shuffled pool (so a page read from the wrong sequence
shows), empty sequences included (MD-4), lengths that fill their last page exactly included (MD-3).
Don't-care inputs are declared as poison regions: block-table padding and rows past `num_seqs` (MD-6) and
the arena bytes outside the arrays (MD-9, MD-10). The arena of `slot_mapping_from_arena` always starts its
first array at a non-zero aligned offset and holds random garbage bytes elsewhere. Manager cases replay
a short random history of valid commands through the reference, then draw one more valid command.

Two reach columns per op (spec/metadata.md, "Reach: sizes and values drawn"): `long` draws decode
batches of 256 rows, block tables wider than one 64- or 128-page tile, a sequence past 2^15 tokens,
prefill chunks past one 64-token block, hundreds of arena arrays, and manager states over thousands of
pages with hundreds of sequences; `range` draws the int32 limits: page ids and slots up to INT32_MAX,
kv_len up to INT32_MAX (page sizes of 2^20 and more keep the tables small), arena sizes and offsets past
2 GiB up to the 2^40 bound, sequence ids and lengths near INT32_MAX. Reach states of the manager are
built directly (valid by MD-11, MD-12), not replayed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import FEATURES, OpClaims

from kvconform.conformance.engine import strided, tolerance
from kvconform.conformance.engine.case import Case, PoisonRegion

from . import dimension_reach as dr
from .values import pick, sampled_from, seeds

I32 = np.int32
DEFAULT_PAGE_SIZES = (2, 1, 3, 4)
ALIGNMENTS = (16, 4, 8, 32, 64, 256, 1, 2)
NUM_PAGES = 12          # manager pool: large enough for the drawn histories
PADDING = -1            # poison for integer don't-care entries (an invalid page id: reading it fails)


# --- reach (spec/metadata.md "Reach: sizes and values drawn"; sources there) ----------------------
REACH = ("long", "range")
INT32_MAX = 2 ** 31 - 1
#: long: serving page sizes (vLLM/FlashInfer 16, TPU 128)
LONG_PAGE_SIZES = (16, 128, 64)
#: sequences of a long batch: a decode batch of 256 rows (past 255, a byte's worth)
LONG_NUM_SEQS = (256, 3, 64)
#: pages of the longest sequence: past a 128-page tile; 2100 pages of 16 tokens pass 2^15 positions
LONG_WIDEST = (130, 2100, 70)
#: the other sequences' pages at most, and the one prefill chunk (past one 64-token block)
LONG_OTHER_PAGES, LONG_PREFILL = 40, 100
#: range: page sizes that bring kv_len to INT32_MAX with a few hundred pages (none is a serving size;
#: they reach the int32 arithmetic of lengths and slots); 3 * 2^20 is no power of two
RANGE_PAGE_SIZES = (1 << 24, 3 << 20, 16)
LONG_ARRAYS = (300, 64)                 # arena_layout: arrays of a long arena (per-sequence arrays)
RANGE_NBYTES = (1 << 40) - 1            # far past int32 offsets (MD-22 allows any size whose layout ends before 2^63)
LONG_POOL = (3000, 300)                 # manager: pages of a long pool
LONG_BUDGET = 0.05                      # share of the profile's examples (ci: 1, thorough: 12)
RANGE_BUDGET = 0.12                     # ci: 3, thorough: 30
BUDGETS = {"long": LONG_BUDGET, "range": RANGE_BUDGET}
#: the generated reach columns (strategies/dimension_reach.py): `reach_<dimension>` for each dimension with
#: threshold mutants, that dimension at its tail size (cheap: up to 2^17), the others small; ids and offsets
#: reach INT32_MAX in the range column already
DIM_PREFIX = "reach_"
DIM_BUDGET = LONG_BUDGET


def reach_columns(op: str) -> tuple[str, ...]:
    """The reach columns of `op`: long, range and the generated ones."""
    return REACH + tuple(DIM_PREFIX + d for d in dr.columns(op, ids=False))


def budget(reach: str) -> float:
    return BUDGETS.get(reach, DIM_BUDGET)


@dataclass(frozen=True)
class Column:
    """The metadata strategies have no features-matrix columns: one plain column per op."""
    name: str
    features: tuple[str, ...] = ()


BASE = Column("base")


def _page_size(draw, claims: OpClaims) -> int:
    return pick(draw, claims.page_sizes or DEFAULT_PAGE_SIZES, "page size")


@st.composite
def page_tables(draw, P: int, *, max_seqs: int = 3, max_pages: int = 3):
    """(page_indices i32[S_max, W], kv_lens i32[S_max], num_seqs, pages i64[S]): distinct page ids."""
    S = draw(st.integers(1, max_seqs))
    extra = draw(st.integers(0, 1))                     # rows past num_seqs (MD-6)
    W = draw(st.integers(1, max_pages))
    lens = [draw(st.integers(0, W * P)) for _ in range(S)]
    pool = draw(st.permutations(range((S + extra) * W + 2)))
    table = np.array(pool[:(S + extra) * W], I32).reshape(S + extra, W)
    lens_all = np.array(lens + [draw(st.integers(0, W * P)) for _ in range(extra)], I32)
    pages = np.array([-(-n // P) for n in lens], np.int64)
    return table, lens_all, S, pages


def _padding_regions(table, pages, S) -> tuple[PoisonRegion, ...]:
    pad = np.arange(table.shape[1])[None, :] >= np.concatenate([pages, np.zeros(table.shape[0] - S, np.int64)])[:, None]
    pad[S:] = True
    return (PoisonRegion("padding", "page_indices", pad, clause="MD-6", what="block-table padding and rows "
                         "past num_seqs", value=PADDING),)


@st.composite
def block_table_to_csr_cases(draw, claims: OpClaims):
    P = _page_size(draw, claims)
    table, lens, S, pages = draw(page_tables(P))
    inputs = dict(page_indices=table, kv_lens=lens, num_seqs=S, page_size=P)
    params = dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=S, tokens=int(lens[:S].sum()))
    return Case("block_table_to_csr", inputs, params, poison=_padding_regions(table, pages, S))


@st.composite
def csr_tables(draw, P: int):
    """A valid CSR page table (MD-2 .. MD-4) and the widest row it needs."""
    table, lens, S, pages = draw(page_tables(P))
    csr = reference.block_table_to_csr(table, lens, S, P)
    return csr, max(1, int(pages.max()) if pages.size else 1)


@st.composite
def csr_to_block_table_cases(draw, claims: OpClaims):
    P = _page_size(draw, claims)
    csr, width = draw(csr_tables(P))
    W = width + draw(st.integers(0, 1))
    inputs = dict(kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices, kv_last_page_len=csr.kv_last_page_len,
                  page_size=P, pages_per_seq=W)
    S = csr.kv_last_page_len.shape[0]
    tokens = int(reference.csr_to_block_table(*csr, P, W).kv_lens.sum())
    return Case("csr_to_block_table", inputs, dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=S,
                                                    tokens=tokens))


@st.composite
def append_inputs(draw, P: int):
    """(qo_indptr, CsrPageTable): q_len_i in [0, kv_len_i] (MD-7)."""
    csr, _ = draw(csr_tables(P))
    indptr, last = csr.kv_indptr, csr.kv_last_page_len
    kv = [(int(indptr[i + 1] - indptr[i]) - 1) * P + int(last[i]) if indptr[i + 1] > indptr[i] else 0
          for i in range(last.shape[0])]
    q = [draw(st.integers(0, n)) for n in kv]
    return np.concatenate([[0], np.cumsum(q)]).astype(I32), csr


@st.composite
def append_slot_mapping_cases(draw, claims: OpClaims):
    P = _page_size(draw, claims)
    qo, csr = draw(append_inputs(P))
    inputs = dict(qo_indptr=qo, kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices,
                  kv_last_page_len=csr.kv_last_page_len, page_size=P)
    return Case("append_slot_mapping", inputs, dict(dtype="int32", kv_dtype="int32", page_size=P,
                                                     num_seqs=int(qo.shape[0] - 1), tokens=int(qo[-1])))


@st.composite
def arena_layout_cases(draw, claims: OpClaims):
    n = draw(st.integers(0, 5))
    nbytes = np.array([draw(st.integers(0, 40)) for _ in range(n)], np.int64)
    A = draw(sampled_from(ALIGNMENTS))
    start = draw(st.integers(0, 40))
    return Case("arena_layout", dict(nbytes=nbytes, alignment=A, start=start),
                dict(dtype="int64", kv_dtype="int64", arrays=n, alignment=A, start=start, tokens=0))


@st.composite
def slot_mapping_from_arena_cases(draw, claims: OpClaims):
    """MD-7's arrays packed (MD-8) at a non-zero first offset into an arena of random garbage."""
    P = _page_size(draw, claims)
    qo, csr = draw(append_inputs(P))
    A = draw(sampled_from((16, 4, 8, 32, 64)))
    start = draw(st.integers(1, 64))
    seed = draw(seeds)
    arrays = [qo, csr.kv_indptr, csr.kv_indices, csr.kv_last_page_len]
    arena, offsets = reference.pack_arena(arrays, A, start=start, rng=np.random.default_rng(seed))
    garbage = np.ones(arena.shape[0], bool)
    for a, o in zip(arrays, offsets):
        garbage[int(o):int(o) + a.nbytes] = False
    S = int(qo.shape[0] - 1)
    inputs = dict(arena=arena, offsets=offsets.astype(np.int64), num_seqs=S, page_size=P)
    params = dict(dtype="int32", kv_dtype="uint8", page_size=P, num_seqs=S, tokens=int(qo[-1]), alignment=A,
                  offsets=[int(o) for o in offsets])
    return Case("slot_mapping_from_arena", inputs, params, seed,
                poison=(PoisonRegion("garbage", "arena", garbage, clause="MD-10",
                                     what="arena bytes outside the four arrays", value=0xFF),))


# --- reach columns (long, range) -------------------------------------------------------------------

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
    pages = pages.astype(np.int64)
    lens = np.where(pages > 0, pages * P - rng.integers(0, P, size=pages.shape[0]), 0)
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
    assume(step(state, P, cmd) is not None)
    return Case("page_table_step", dict(state, page_size=P, **cmd),
                dict(_reach_params(reach, P, len(state["seq_ids"]),
                                   tokens=int(np.asarray(state["seq_lens"], np.int64).sum())), **cmd))


REACH_CASES = {"block_table_to_csr": reach_block_table_to_csr_cases,
               "csr_to_block_table": reach_csr_to_block_table_cases,
               "append_slot_mapping": reach_append_slot_mapping_cases,
               "arena_layout": reach_arena_layout_cases,
               "slot_mapping_from_arena": reach_slot_mapping_from_arena_cases,
               "page_table_step": reach_page_table_step_cases}


# --- the manager ----------------------------------------------------------------------------------

def state_of(out) -> dict:
    """The state keywords of `page_table_step` from its result (MD-11)."""
    return {k: np.asarray(getattr(out, k)) for k in reference.empty_page_table(1)}


def live(state: dict) -> list[int]:
    return [int(s) for s in state["seq_ids"]]


@st.composite
def commands(draw, state: dict, P: int, *, max_append: int = 5):
    """One valid command for `state` (MD-13 .. MD-21) as keywords of page_table_step."""
    ids = live(state)
    lens = dict(zip(ids, (int(n) for n in state["seq_lens"])))
    sinks = dict(zip(ids, (int(n) for n in state["sinks"])))
    windows = dict(zip(ids, (int(n) for n in state["windows"])))
    new_id = draw(st.integers(0, 6).filter(lambda s: s not in ids)) if len(ids) < 7 else None
    # weighted: appends and forks grow the shared structure the manager clauses are about
    options = (["add"] if new_id is not None else []) + \
        (["append", "fork", "append", "fork", "pop", "remove", "window", "append"] if ids else [])
    if new_id is None:
        options = [o for o in options if o != "fork"]
    command = draw(sampled_from(options))
    if command == "add":
        return dict(command="add", seq=new_id)
    seq = draw(sampled_from(ids))
    if command == "append":
        return dict(command="append", seq=seq, n=draw(st.integers(0, max_append)))
    if command == "pop":
        return dict(command="pop", seq=seq, n=draw(st.integers(0, lens[seq])))
    if command == "remove":
        return dict(command="remove", seq=seq)
    if command == "fork":
        top = sinks[seq] if windows[seq] else lens[seq]
        top = min(top, lens[seq])
        return dict(command="fork", seq=new_id, parent=seq, pos=top - draw(st.integers(0, top)))
    window = draw(st.integers(1, 2 * P + 2))
    return dict(command="window", seq=seq, window=window, sink=draw(st.integers(0, window - 1)))


def step(state: dict, P: int, cmd: dict):
    """The reference step, or None where the pool runs out of pages (MD-12; never drawn as valid)."""
    try:
        return reference.page_table_step(**state, page_size=P, **cmd)
    except ValueError as exc:
        if "out of pages" in str(exc):
            return None
        raise


def step_case(state: dict, P: int, cmd: dict, **params) -> Case:
    tokens = int(np.asarray(state["seq_lens"]).sum())
    return Case("page_table_step", dict(state, page_size=P, **cmd),
                dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=len(live(state)), tokens=tokens,
                     **{k: v for k, v in cmd.items()}, **params))


@st.composite
def page_table_step_cases(draw, claims: OpClaims, *, min_history: int = 0):
    """A state reached by a few valid reference steps from empty, and one more valid command."""
    P = _page_size(draw, claims)
    state = reference.empty_page_table(NUM_PAGES)
    if draw(st.booleans()):     # most histories start from one sequence with tokens
        state = state_of(step(state, P, dict(command="add", seq=0)))
        state = state_of(step(state, P, dict(command="append", seq=0, n=draw(st.integers(1, 3 * P)))))
    for _ in range(draw(st.integers(min_history, 8))):
        out = step(state, P, draw(commands(state, P)))
        assume(out is not None)
        state = state_of(out)
    cmd = draw(commands(state, P))
    assume(step(state, P, cmd) is not None)
    return step_case(state, P, cmd)


# --- MD-23: attention over the CSR layout ----------------------------------------------------------

#: the attention columns the CSR form draws (per-token scores are not part of MD-23)
def csr_attention_variants():
    """The block-table attention columns whose features MD-23 has (no per-token scores, no head sharding)
    and that hand the cache in the canonical layout. Of the size-reach columns, those that reach the page
    table CSR encodes: hundreds of keys, page lists past one 64-entry tile, pages that are not powers of two
    (heads, head dims and the 129-sequence decode batch run the block-table op's code in both shipped
    backends and cost seconds per call under the interpreters: spec/paged_attention.md PA-51)."""
    from . import paged_attention as pa
    allowed = set(FEATURES["ragged_paged_attention_csr"])
    return tuple(v for v in pa.ATTENTION_VARIANTS if set(v.features) <= allowed and not v.layout
                 and (v.reach in ("", "keys", "pages", "page_size") or v.reach.startswith(pa.DIM_REACH)))


def block_table_inputs(x: dict) -> dict:
    """The block-table call (spec/paged_attention.md) equal to a CSR attention call (MD-23, MD-5)."""
    indptr = np.asarray(x["kv_indptr"])
    S = indptr.shape[0] - 1
    P = int(np.asarray(x["k_pages"]).shape[1])
    width = max(1, int(np.diff(indptr).max()) if S else 1)
    table = reference.csr_to_block_table(x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"], P, width)
    options = {k: v for k, v in x.items() if k not in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len")}
    return dict(options, kv_lens=table.kv_lens, page_indices=table.page_indices,
                cu_q_lens=np.asarray(x["qo_indptr"], I32), num_seqs=S)


@st.composite
def attention_csr_cases(draw, claims: OpClaims, variant):
    """A drawn block-table attention case (strategies/paged_attention.py) in CSR form (MD-23)."""
    from . import paged_attention as pa
    case = draw(pa.attention_cases(claims, variant))
    x = dict(case.inputs)
    n = int(x.pop("num_seqs"))
    P = int(x["k_pages"].shape[1])
    csr = reference.block_table_to_csr(x.pop("page_indices"), x.pop("kv_lens"), n, P)
    cu = np.asarray(x.pop("cu_q_lens"))[:n + 1].astype(I32)
    inputs = dict(x, qo_indptr=cu, kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices,
                  kv_last_page_len=csr.kv_last_page_len)
    keep = tuple(r for r in getattr(case, "poison", ()) if r.input in inputs)
    return Case("ragged_paged_attention_csr", inputs, dict(case.params, layout="csr"), case.seed, poison=keep)


def attention_csr_checks(case: Case, expected: dict, actual: dict) -> dict:
    """The block-table call's contract (NU-PA1 on the valid rows), on the equivalent block-table case."""
    from . import paged_attention as pa
    shadow = Case("ragged_paged_attention", block_table_inputs(case.inputs), case.params, case.seed)
    return pa.attention_checks(shadow, expected, actual)


def uses(case: Case) -> tuple[set, dict]:
    """What a metadata case's inputs use (conformance/goldens.py): no features, the page size where the op
    takes one."""
    x = case.inputs
    return set(), ({"page_size": int(x["page_size"])} if "page_size" in x else {})


#: what a case uses, per op (conformance/goldens.py)
USES = {op: uses for op in ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "arena_layout",
                            "slot_mapping_from_arena", "page_table_step")}


# --- comparison contract (spec/numerics.md: class E) ------------------------------------------------

def exact_checks(case: Case, expected: dict, actual: dict) -> dict:
    """Every field exact: integer metadata (class E)."""
    return {name: (tolerance.exact("class E: integer metadata (spec/metadata.md)"), None) for name in expected}


def block_table_checks(case: Case, expected: dict, actual: dict) -> dict:
    """kv_lens exact; page_indices exact on the pages each sequence owns, padding unspecified (MD-6)."""
    x = case.inputs
    pages = np.diff(np.asarray(x["kv_indptr"], np.int64))
    mask = np.arange(int(x["pages_per_seq"]))[None, :] < pages[:, None]
    exact = tolerance.exact("class E: integer metadata (spec/metadata.md)")
    return {"page_indices": (exact, mask), "kv_lens": (exact, None)}


CHECKS = {"block_table_to_csr": exact_checks, "csr_to_block_table": block_table_checks,
          "append_slot_mapping": exact_checks, "arena_layout": exact_checks,
          "slot_mapping_from_arena": exact_checks, "page_table_step": exact_checks,
          "ragged_paged_attention_csr": attention_csr_checks}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
# Host-side bookkeeping ops get strided inputs too: an engine's page tables and lengths are slices and
# columns of its wider, preallocated tables. One exception: the arena of slot_mapping_from_arena stays
# contiguous, since MD-8 .. MD-10 define it as one packed byte buffer read at byte offsets (a strided byte
# view has no byte offsets); its offsets array is strided.
STRIDED = {op: strided.columns(strategy) for op, strategy in (
    ("block_table_to_csr", block_table_to_csr_cases), ("csr_to_block_table", csr_to_block_table_cases),
    ("append_slot_mapping", append_slot_mapping_cases), ("arena_layout", arena_layout_cases),
    ("page_table_step", page_table_step_cases))}
STRIDED["slot_mapping_from_arena"] = strided.columns(slot_mapping_from_arena_cases, contiguous=("arena",))
STRIDED["ragged_paged_attention_csr"] = strided.columns(
    attention_csr_cases, *strided.named(csr_attention_variants(), "combined", "base"))
