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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import FEATURES, OpClaims

from .. import tolerance
from ..case import Case, PoisonRegion
from .values import pick, sampled_from, seeds

I32 = np.int32
DEFAULT_PAGE_SIZES = (2, 1, 3, 4)
ALIGNMENTS = (16, 4, 8, 32, 64, 256, 1, 2)
NUM_PAGES = 12          # manager pool: large enough for the drawn histories
PADDING = -1            # poison for integer don't-care entries (an invalid page id: reading it fails)


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
                 and v.reach in ("", "keys", "pages", "page_size"))


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
