"""Reference tests for spec/metadata.md: hand-worked goldens, round trips and error cases."""
from __future__ import annotations

import numpy as np
import pytest

from kvconform import reference as r

I32 = np.int32


def a(*v):
    return np.array(v, dtype=I32)


# --- MD-2 .. MD-6: conversions -------------------------------------------------------------------

def test_block_table_to_csr_golden():
    # P = 2: kv_lens 5, 0, 2 -> 3, 0, 1 pages; last lengths 5-4 = 1, 0 (empty, MD-4), 2 (full, MD-3).
    # Row 3 is past num_seqs and ignored; the 99s are padding (MD-6).
    table = np.array([[3, 1, 9], [99, 99, 99], [7, 99, 99], [5, 5, 5]], I32)
    csr = r.block_table_to_csr(table, a(5, 0, 2, 6), 3, 2)
    np.testing.assert_array_equal(csr.kv_indptr, a(0, 3, 3, 4))
    np.testing.assert_array_equal(csr.kv_indices, a(3, 1, 9, 7))
    np.testing.assert_array_equal(csr.kv_last_page_len, a(1, 0, 2))


def test_csr_to_block_table_golden():
    bt = r.csr_to_block_table(a(0, 3, 3, 4), a(3, 1, 9, 7), a(1, 0, 2), 2, 4)
    np.testing.assert_array_equal(bt.kv_lens, a(5, 0, 2))
    np.testing.assert_array_equal(bt.page_indices[0, :3], a(3, 1, 9))
    np.testing.assert_array_equal(bt.page_indices[2, :1], a(7))
    assert bt.page_indices.shape == (3, 4)


@pytest.mark.parametrize("seed", range(20))
def test_round_trips(seed):
    rng = np.random.default_rng(seed)
    P, S, W = int(rng.integers(1, 5)), int(rng.integers(0, 5)), int(rng.integers(1, 4))
    lens = rng.integers(0, W * P + 1, size=S).astype(I32)
    table = rng.integers(0, 50, size=(S, W)).astype(I32)
    csr = r.block_table_to_csr(table, lens, S, P)
    back = r.csr_to_block_table(*csr, P, W)
    np.testing.assert_array_equal(back.kv_lens, lens)                       # MD-5
    for i in range(S):
        n = -(-int(lens[i]) // P)
        np.testing.assert_array_equal(back.page_indices[i, :n], table[i, :n])
    again = r.block_table_to_csr(back.page_indices, back.kv_lens, S, P)     # CSR -> BT -> CSR identity
    for x, y in zip(csr, again):
        np.testing.assert_array_equal(x, y)
    assert np.all((csr.kv_last_page_len >= 1) == (np.diff(csr.kv_indptr) > 0))   # MD-3, MD-4
    assert np.all(csr.kv_last_page_len <= P)


@pytest.mark.parametrize("args, argument", [
    ((a(1, 2), a(0), a(1), 2, 2), "kv_indptr"),            # indptr[0] != 0
    ((a(0, 2, 1), a(0, 1), a(1, 1), 2, 2), "kv_indptr"),   # decreasing
    ((a(0, 2), a(0), a(1), 2, 2), "kv_indptr"),            # end != len(indices)
    ((a(0, 1), a(-1), a(1), 2, 2), "kv_indices"),
    ((a(0, 1), a(0), a(0), 2, 2), "kv_last_page_len"),     # 0 with a page (MD-3)
    ((a(0, 1), a(0), a(3), 2, 2), "kv_last_page_len"),     # > P
    ((a(0, 0), a(), a(1), 2, 2), "kv_last_page_len"),      # empty sequence must have 0 (MD-4)
    ((a(0, 3), a(0, 1, 2), a(1), 2, 2), "pages_per_seq"),
    ((a(0, 1), a(0), a(1), 0, 2), "page_size"),
])
def test_csr_errors(args, argument):
    with pytest.raises(ValueError, match=argument):
        r.csr_to_block_table(*args)


def test_block_table_errors():
    with pytest.raises(ValueError, match="kv_lens"):
        r.block_table_to_csr(np.zeros((1, 2), I32), a(5), 1, 2)
    with pytest.raises(ValueError, match="num_seqs"):
        r.block_table_to_csr(np.zeros((1, 2), I32), a(1), 2, 2)
    with pytest.raises(TypeError, match="page_indices"):
        r.block_table_to_csr(np.zeros((1, 2)), a(1), 1, 2)


# --- MD-7: append slot mapping ---------------------------------------------------------------------

def test_append_slot_mapping_golden():
    # P = 4; seq 0: pages [6, 2], kv_len 4 + 3 = 7, q_len 2 -> positions 5, 6 -> page 2 -> slots 9, 10.
    # seq 1: page [5], kv_len 1, q_len 1 -> position 0 -> slot 20. seq 2 empty, q_len 0.
    slots = r.append_slot_mapping(a(0, 2, 3, 3), a(0, 2, 3, 3), a(6, 2, 5), a(3, 1, 0), 4)
    np.testing.assert_array_equal(slots, a(9, 10, 20))


def test_append_slot_mapping_rejects_q_longer_than_kv():
    with pytest.raises(ValueError, match="qo_indptr"):
        r.append_slot_mapping(a(0, 3), a(0, 1), a(0), a(2), 4)


# --- MD-8 .. MD-10: the arena ------------------------------------------------------------------

def test_arena_layout_golden():
    # 16-byte alignment from start 4: 16; 16+8=24 -> 32; 32+12=44 -> 48; empty at 48; 48+4 = 52 end.
    lay = r.arena_layout(np.array([8, 12, 0, 4], np.int64), 16, 4)
    np.testing.assert_array_equal(lay.offsets, [16, 32, 48, 48])
    assert int(lay.copy_bytes) == 52 and int(lay.total_bytes) == 64
    lay = r.arena_layout(np.array([4, 4], np.int64), 1)          # alignment 1: back to back
    np.testing.assert_array_equal(lay.offsets, [0, 4])
    assert int(lay.copy_bytes) == 8 == int(lay.total_bytes)
    lay = r.arena_layout(np.zeros(0, np.int64), 8)
    assert lay.offsets.shape == (0,) and int(lay.copy_bytes) == 0


@pytest.mark.parametrize("nbytes, alignment, start, argument", [
    ([4], 12, 0, "alignment"), ([-4], 8, 0, "nbytes"), ([4], 8, -1, "start"), ([4], 0, 0, "alignment")])
def test_arena_layout_errors(nbytes, alignment, start, argument):
    with pytest.raises(ValueError, match=argument):
        r.arena_layout(np.array(nbytes, np.int64), alignment, start)


@pytest.mark.parametrize("seed", range(10))
def test_slot_mapping_from_arena_ignores_garbage(seed):
    rng = np.random.default_rng(seed)
    arrays = [a(0, 2, 3, 3), a(0, 2, 3, 3), a(6, 2, 5), a(3, 1, 0)]
    arena, offsets = r.pack_arena(arrays, 16, start=8, rng=rng)
    assert offsets[0] == 16 and all(o % 16 == 0 for o in offsets)
    views = r.arena_views(arena, offsets, [4, 4, 3, 3])
    for v, x in zip(views, arrays):
        np.testing.assert_array_equal(v, x)
        assert np.shares_memory(v, arena)
    np.testing.assert_array_equal(r.slot_mapping_from_arena(arena, offsets, 3, 4), a(9, 10, 20))


def test_arena_layout_sizes_are_limited_by_the_i64_range_only():
    """MD-8/MD-22: any size >= 0 whose layout fits the i64 offsets is legal (2**40 was refused by a rule
    the spec did not state); a layout ending past 2**63 - 1 bytes is a ValueError naming nbytes."""
    lay = r.arena_layout(np.array([2**40, 8], np.int64), 8)
    np.testing.assert_array_equal(lay.offsets, [0, 2**40])
    assert int(lay.copy_bytes) == 2**40 + 8 == int(lay.total_bytes)
    top = np.iinfo(np.int64).max - 7                          # the largest multiple of 8 in range
    assert int(r.arena_layout(np.array([top], np.int64), 8).total_bytes) == top
    with pytest.raises(ValueError, match=r"^nbytes: the layout of these sizes .* past 2\*\*63 - 1"):
        r.arena_layout(np.array([top + 1], np.int64), 8)      # rounds up past the range
    with pytest.raises(ValueError, match=r"^nbytes: "):
        r.arena_layout(np.array([2**62, 2**62], np.int64), 8)


def test_slot_mapping_from_arena_errors():
    arena, offsets = r.pack_arena([a(0, 1), a(0, 1), a(0), a(1)], 16)
    with pytest.raises(TypeError, match=r"^arena must be an array, got list"):   # not NumPy's own error
        r.slot_mapping_from_arena([[0, 1], [2]], offsets, 1, 4)
    with pytest.raises(ValueError, match="offsets"):
        r.slot_mapping_from_arena(arena, offsets + 2, 1, 4)
    with pytest.raises(ValueError, match="offsets"):
        r.slot_mapping_from_arena(arena, offsets + 4096, 1, 4)
    with pytest.raises(ValueError, match="arena"):
        r.slot_mapping_from_arena(arena.view(np.int8), offsets, 1, 4)


# --- MD-11 .. MD-21: the manager -------------------------------------------------------------------

class Pt:
    """Drives the reference manager, carrying the state forward."""

    def __init__(self, num_pages, P):
        self.state, self.P = r.empty_page_table(num_pages), P

    def __call__(self, command, seq, **kw):
        out = r.page_table_step(**self.state, page_size=self.P, command=command, seq=seq, **kw)
        self.state = {k: getattr(out, k) for k in self.state}
        return out


def _eq(x, *v):
    np.testing.assert_array_equal(np.asarray(x).reshape(-1), np.array(v, dtype=I32).reshape(-1))


def test_manager_golden_append_fork_pop_remove():
    m = Pt(8, 4)
    m("add", 5)
    out = m("append", 5, n=6)                    # positions 0..5: pages 0, 1 (lowest free, MD-12/14)
    _eq(out.slots, 0, 1, 2, 3, 4, 5)
    _eq(out.kv_indices, 0, 1); _eq(out.kv_last_page_len, 2); _eq(out.ref_counts, 1, 1, 0, 0, 0, 0, 0, 0)
    out = m("fork", 2, parent=5, pos=5)          # shares page 0; copies 1 token of page 1 to page 2
    _eq(out.seq_ids, 2, 5); _eq(out.seq_lens, 5, 6)
    _eq(out.kv_indptr, 0, 2, 4); _eq(out.kv_indices, 0, 2, 0, 1)
    _eq(out.ref_counts, 2, 1, 1, 0, 0, 0, 0, 0); _eq(out.copies, 1, 2, 1); _eq(out.kv_last_page_len, 1, 2)
    out = m("fork", 9, parent=5, pos=4)          # page-aligned fork: nothing copied (MD-15)
    _eq(out.ref_counts, 3, 1, 1, 0, 0, 0, 0, 0); assert out.copies.shape == (0, 3)
    _eq(out.kv_last_page_len, 1, 2, 4)
    out = m("pop", 5, n=2)                       # 6 -> 4: whole last page 1 freed (MD-17, TVM #16871)
    _eq(out.ref_counts, 3, 0, 1, 0, 0, 0, 0, 0); _eq(out.kv_last_page_len, 1, 4, 4)
    out = m("pop", 5, n=1)                       # 4 -> 3: page 0 shared by 3 -> copy on write to page 1
    _eq(out.copies, 0, 1, 3); _eq(out.ref_counts, 2, 1, 1, 0, 0, 0, 0, 0)
    _eq(out.kv_indices, 0, 2, 1, 0)
    out = m("remove", 2)                         # any order (MD-18, TVM #17045)
    _eq(out.ref_counts, 1, 1, 0, 0, 0, 0, 0, 0); _eq(out.seq_ids, 5, 9)
    out = m("append", 9, n=1)                    # 4 -> 5: new page, lowest free is 2
    _eq(out.slots, 8); _eq(out.kv_indices, 1, 0, 2)
    m("remove", 5); out = m("remove", 9)
    _eq(out.ref_counts, 0, 0, 0, 0, 0, 0, 0, 0); assert out.seq_ids.shape == (0,)


def test_manager_golden_window():
    m = Pt(8, 2)
    m("add", 0)
    m("append", 0, n=5)                          # pages 0, 1, 2; length 5
    out = m("window", 0, window=3, sink=1)       # keep_from = 5 - 2 = 3: drop pages [1, 1) -> none
    _eq(out.kv_indices, 0, 1, 2)
    out = m("append", 0, n=2)                    # length 7, page 3; keep_from 5: drop pages [1, 2) = page 1
    _eq(out.slots, 5, 6); _eq(out.kv_indices, 0, 2, 3); _eq(out.seq_lens, 5)
    _eq(out.ref_counts, 1, 0, 1, 1, 0, 0, 0, 0); _eq(out.sinks, 1); _eq(out.windows, 3)
    out = m("fork", 1, parent=0, pos=1)          # inside the sink: allowed (MD-21), copies 1 token
    _eq(out.copies, 0, 1, 1)
    with pytest.raises(ValueError, match="pos"):
        m("fork", 2, parent=0, pos=2)            # past the sink (MD-21, TVM #17127)


@pytest.mark.parametrize("command, kw, argument", [
    ("add", dict(seq=0), "seq"), ("append", dict(seq=3, n=1), "seq"), ("pop", dict(seq=0, n=5), "n"),
    ("fork", dict(seq=0, parent=0, pos=0), "seq"), ("fork", dict(seq=1, parent=7, pos=0), "parent"),
    ("fork", dict(seq=1, parent=0, pos=5), "pos"), ("window", dict(seq=0, window=2, sink=2), "sink"),
    ("append", dict(seq=0, n=100), "out of pages"), ("jump", dict(seq=0), "command"),
])
def test_manager_errors(command, kw, argument):
    m = Pt(4, 2)
    m("add", 0); m("append", 0, n=3)
    with pytest.raises(ValueError, match=argument):
        m(command, **kw)


def test_manager_rejects_inconsistent_state():
    m = Pt(4, 2)
    m("add", 0); m("append", 0, n=3)
    bad = dict(m.state, ref_counts=a(2, 1, 0, 0))
    with pytest.raises(ValueError, match="ref_counts"):
        r.page_table_step(**bad, page_size=2, command="add", seq=1)
    bad = dict(m.state, seq_lens=a(5))
    with pytest.raises(ValueError, match="seq_lens"):
        r.page_table_step(**bad, page_size=2, command="add", seq=1)


# --- MD-23: attention over the CSR layout ------------------------------------------------------------

def test_attention_csr_golden():
    # P = 2, D = 2, pages [1, 0], kv_len 3, q = 0: equal weights: out = mean of v over keys 0..2 = [2, 2];
    # slot 1 of page 0 (past the last-page length 1) holds 100 and is not read.
    k = np.zeros((2, 2, 1, 2), np.float32)
    v = np.zeros((2, 2, 1, 2), np.float32)
    v[1, 0, 0], v[1, 1, 0], v[0, 0, 0], v[0, 1, 0] = (3, 0), (0, 3), (3, 3), (100, 100)
    out = r.ragged_paged_attention_csr(np.zeros((1, 1, 2), np.float32), k, v, a(0, 1, 1), a(0, 2, 2), a(1, 0), a(1, 0))
    np.testing.assert_array_equal(out, [[[2.0, 2.0]]])


def test_attention_csr_rejects_bad_csr():
    k = np.zeros((2, 2, 1, 2), np.float32)
    with pytest.raises(ValueError, match="kv_last_page_len"):
        r.ragged_paged_attention_csr(np.zeros((1, 1, 2), np.float32), k, k, a(0, 1), a(0, 1), a(1), a(3))
    with pytest.raises(ValueError, match="qo_indptr"):
        r.ragged_paged_attention_csr(np.zeros((1, 1, 2), np.float32), k, k, a(0, 1, 1), a(0, 1), a(1), a(1))
    # a page id past the pool names kv_indices, the argument given (it named page_indices[0,1], which this
    # op does not have)
    with pytest.raises(ValueError, match=r"^kv_indices\[1\]=5 is out of range \[0, 2\) \(page ids index k_pages"):
        r.ragged_paged_attention_csr(np.zeros((1, 1, 2), np.float32), k, k, a(0, 1), a(0, 2), a(0, 5), a(1))


@pytest.mark.parametrize("op, args", [
    ("csr_to_block_table", (a(0, 1), a(0), a(3), 2, 2)),
    ("block_table_to_csr", (np.zeros((1, 2), I32), a(5), 1, 2)),
    ("append_slot_mapping", (a(0, 3), a(0, 1), a(0), a(2), 4)),
    ("arena_layout", (np.array([4], np.int64), 12, 0)),
    ("slot_mapping_from_arena", (np.zeros(64, np.uint8), np.array([2, 16, 32, 48], np.int64), 1, 4)),
])
def test_validators_raise_what_the_op_raises(op, args):
    with pytest.raises(ValueError) as from_op:
        getattr(r, op)(*args)
    with pytest.raises(ValueError) as from_validator:
        getattr(r, f"validate_{op}")(*args)
    assert str(from_op.value) == str(from_validator.value)


# --- int32 limits (spec/metadata.md "Reach") -----------------------------------------------------------

INT32_MAX = 2 ** 31 - 1


def test_page_id_int32_max_is_a_page_MD2():
    """2^31 - 1 is an int32 >= 0: a valid page id (the validators rejected it by an off-by-one)."""
    csr = r.block_table_to_csr(np.array([[INT32_MAX, 5]], I32), a(3), 1, 2)
    _eq(csr.kv_indices, INT32_MAX, 5)
    _eq(r.csr_to_block_table(*csr, 2, 2).page_indices, INT32_MAX, 5)


def test_append_slots_reach_int32_max_and_no_further_MD7():
    P = 1 << 24
    last_page = (INT32_MAX - P + 1) // P                  # its last slot is INT32_MAX
    slots = r.append_slot_mapping(a(0, 1), a(0, 1), a(last_page), a(P), P)
    _eq(slots, INT32_MAX)
    with pytest.raises(ValueError, match="kv_indices.*past int32"):
        r.append_slot_mapping(a(0, 1), a(0, 1), a(last_page + 1), a(1), P)   # slot 2^31: an error, not a wrap


def test_manager_append_past_int32_is_an_error_MD14():
    m = Pt(16, 1 << 27)                                    # 16 pages of 2^27: the last slot is INT32_MAX
    m("add", INT32_MAX)
    out = m("append", INT32_MAX, n=3)
    _eq(out.slots, 0, 1, 2)
    m.state["seq_lens"] = np.array([INT32_MAX - 1], I32)  # a length the pages hold: 16 pages
    m.state["kv_indptr"] = a(0, 16)
    m.state["kv_indices"] = np.arange(16, dtype=I32)
    m.state["ref_counts"] = np.ones(16, I32)
    out = m("append", INT32_MAX, n=1)                     # position 2^31 - 2: length INT32_MAX
    _eq(out.slots, INT32_MAX - 1)
    with pytest.raises(ValueError, match="n=1.*int32"):
        m("append", INT32_MAX, n=1)
