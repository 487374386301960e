"""The metadata family's page tables and cases of the conversions, the slot mapping and the arena\n(spec/metadata.md MD-1 .. MD-10), its columns and the reach sizes ("Reach: sizes and values drawn")."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case, PoisonRegion

from .. import constraints
from .. import dimension_reach as dr
from ..values import pick, sampled_from, seeds, shuffled

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


def shortest(claims: OpClaims) -> int:
    """The shortest sequence (kv_len) the claimed `seq_len` limit admits (MD-24: {"min": 1}, no empty
    sequences); 0 without the limit."""
    limit = claims.limits.get("seq_len")
    return next((n for n in range(1 << 12) if constraints.admits(limit, n)), 0)


def admitted(claims: OpClaims, lens) -> bool:
    """Every counted sequence's length within the claimed `seq_len` limit (draws `assume` it)."""
    limit = claims.limits.get("seq_len")
    return all(constraints.admits(limit, int(n)) for n in lens)


@st.composite
def page_tables(draw, P: int, *, max_seqs: int = 3, max_pages: int = 3, min_len: int = 0):
    """(page_indices i32[S_max, W], kv_lens i32[S_max], num_seqs, pages i64[S]): distinct page ids; every
    counted sequence at least `min_len` long."""
    S = draw(st.integers(1, max_seqs))
    extra = draw(st.integers(0, 1))                     # rows past num_seqs (MD-6)
    W = max(draw(st.integers(1, max_pages)), -(-min_len // P))
    lens = [draw(st.integers(min_len, W * P)) for _ in range(S)]
    pool = shuffled(draw, (S + extra) * W + 2)
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
    table, lens, S, pages = draw(page_tables(P, min_len=shortest(claims)))
    assume(admitted(claims, lens[:S]))
    inputs = dict(page_indices=table, kv_lens=lens, num_seqs=S, page_size=P)
    params = dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=S, tokens=int(lens[:S].sum()))
    return Case("block_table_to_csr", inputs, params, poison=_padding_regions(table, pages, S))


@st.composite
def csr_tables(draw, P: int, claims: OpClaims | None = None):
    """A valid CSR page table (MD-2 .. MD-4) and the widest row it needs (sequences within `claims`' seq_len)."""
    claims = claims or OpClaims()
    table, lens, S, pages = draw(page_tables(P, min_len=shortest(claims)))
    assume(admitted(claims, lens[:S]))
    csr = reference.block_table_to_csr(table, lens, S, P)
    return csr, max(1, int(pages.max()) if pages.size else 1)


@st.composite
def csr_to_block_table_cases(draw, claims: OpClaims):
    P = _page_size(draw, claims)
    csr, width = draw(csr_tables(P, claims))
    W = width + draw(st.integers(0, 1))
    inputs = dict(kv_indptr=csr.kv_indptr, kv_indices=csr.kv_indices, kv_last_page_len=csr.kv_last_page_len,
                  page_size=P, pages_per_seq=W)
    S = csr.kv_last_page_len.shape[0]
    tokens = int(reference.csr_to_block_table(*csr, P, W).kv_lens.sum())
    return Case("csr_to_block_table", inputs, dict(dtype="int32", kv_dtype="int32", page_size=P, num_seqs=S,
                                                    tokens=tokens))


@st.composite
def append_inputs(draw, P: int, claims: OpClaims | None = None):
    """(qo_indptr, CsrPageTable): q_len_i in [0, kv_len_i] (MD-7)."""
    csr, _ = draw(csr_tables(P, claims))
    indptr, last = csr.kv_indptr, csr.kv_last_page_len
    kv = [(int(indptr[i + 1] - indptr[i]) - 1) * P + int(last[i]) if indptr[i + 1] > indptr[i] else 0
          for i in range(last.shape[0])]
    q = [draw(st.integers(0, n)) for n in kv]
    return np.concatenate([[0], np.cumsum(q)]).astype(I32), csr


@st.composite
def append_slot_mapping_cases(draw, claims: OpClaims):
    P = _page_size(draw, claims)
    qo, csr = draw(append_inputs(P, claims))
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
    qo, csr = draw(append_inputs(P, claims))
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
