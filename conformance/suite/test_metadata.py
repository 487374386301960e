"""Conformance suite for spec/metadata.md: page-table conversions, the packed arena, the manager.

Layers: hand-worked golden cases (expected values from the arithmetic written here), Hypothesis
differential tests against the reference, oracle-free properties through the backend (round trips of the
two page-table forms, don't-care padding and arena garbage, the packed arena equal to separate arrays
wherever it is placed, layout invariants), a stateful machine that drives `page_table_step` through
add / append / fork / pop / remove / window with every step's metadata compared exactly and invalid
commands rejected, and error inputs (MD-22, each rule broken alone).
"""
from __future__ import annotations

import numpy as np
import pytest

from kvconform import reference
from kvconform.conformance.harness import goldens
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.goldens import Golden
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import malformed
from kvconform.conformance.strategies import metadata as md
from kvconform.conformance.strategies import goldens as attention_goldens
from kvconform.conformance.strategies import paged_attention as pa
from kvconform.conformance.strategies.malformed import metadata as md_bad
from kvconform.reference.metadata import ArenaLayout, BlockTable, CsrPageTable

SUITE_OPS = ('append_slot_mapping', 'arena_layout', 'block_table_to_csr', 'csr_to_block_table', 'page_table_step',
             'ragged_paged_attention_csr', 'slot_mapping_from_arena')

I32, I64 = np.int32, np.int64


def a(*v, dtype=I32):
    return np.array(v, dtype=dtype)


def _params(op, P=None, **kw):
    return dict(dtype="int32", kv_dtype="int32", **({"page_size": P} if P else {}), **kw)


# --- golden cases ----------------------------------------------------------------------------------

def golden_block_table_to_csr():
    """P = 2; kv_lens 5, 0, 2 own 3, 0, 1 pages; last lengths 5 - 4 = 1, 0 (empty), 2 (full page);
    -1 entries are padding and row 3 lies past num_seqs (MD-6)."""
    table = np.array([[3, 1, 9], [-1, -1, -1], [7, -1, -1], [5, 5, 5]], I32)
    case = Case("block_table_to_csr", dict(page_indices=table, kv_lens=a(5, 0, 2, 6), num_seqs=3, page_size=2),
                _params("block_table_to_csr", 2, num_seqs=3, tokens=7))
    return case, CsrPageTable(a(0, 3, 3, 4), a(3, 1, 9, 7), a(1, 0, 2))


def golden_block_table_to_csr_16():
    """P = 16: kv_lens 70, 0, 32 own cdiv = 5, 0, 2 pages; last lengths 70 - 64 = 6, 0, 32 - 16 = 16 (a full
    page, never 0: MD-3); the rest of each row and row 3 are padding (MD-6)."""
    table = np.array([[3, 1, 9, 12, 0, -1], [-1] * 6, [7, 5, -1, -1, -1, -1], [2] * 6], I32)
    case = Case("block_table_to_csr", dict(page_indices=table, kv_lens=a(70, 0, 32, 90), num_seqs=3, page_size=16),
                _params("block_table_to_csr", 16, num_seqs=3, tokens=102))
    return case, CsrPageTable(a(0, 5, 5, 7), a(3, 1, 9, 12, 0, 7, 5), a(6, 0, 16))


def golden_csr_to_block_table():
    """The CSR table above back: kv_lens (3-1)*2+1 = 5, 0, 2; rows start with each sequence's pages."""
    case = Case("csr_to_block_table", dict(kv_indptr=a(0, 3, 3, 4), kv_indices=a(3, 1, 9, 7),
                                           kv_last_page_len=a(1, 0, 2), page_size=2, pages_per_seq=4),
                _params("csr_to_block_table", 2, num_seqs=3, tokens=7))
    table = np.zeros((3, 4), I32)
    table[0, :3], table[2, 0] = (3, 1, 9), 7
    return case, BlockTable(table, a(5, 0, 2))


def golden_csr_to_block_table_16():
    """The P = 16 table above back: kv_lens (5 - 1) * 16 + 6 = 70, 0, (2 - 1) * 16 + 16 = 32."""
    case = Case("csr_to_block_table", dict(kv_indptr=a(0, 5, 5, 7), kv_indices=a(3, 1, 9, 12, 0, 7, 5),
                                           kv_last_page_len=a(6, 0, 16), page_size=16, pages_per_seq=6),
                _params("csr_to_block_table", 16, num_seqs=3, tokens=102))
    table = np.zeros((3, 6), I32)
    table[0, :5], table[2, :2] = (3, 1, 9, 12, 0), (7, 5)
    return case, BlockTable(table, a(70, 0, 32))


def golden_block_table_to_csr_no_empty():
    """No empty sequence (a kernel claiming MD-24 runs it), P = 4: kv_lens 9, 4, 1 own cdiv = 3, 1, 1 pages;
    last lengths 9 - 8 = 1, 4 (a full page), 1; row 3 lies past num_seqs (MD-6)."""
    table = np.array([[8, 3, 11], [2, -1, -1], [0, -1, -1], [5, 5, 5]], I32)
    case = Case("block_table_to_csr", dict(page_indices=table, kv_lens=a(9, 4, 1, 0), num_seqs=3, page_size=4),
                _params("block_table_to_csr", 4, num_seqs=3, tokens=14))
    return case, CsrPageTable(a(0, 3, 4, 5), a(8, 3, 11, 2, 0), a(1, 4, 1))


def golden_csr_to_block_table_no_empty():
    """The table above back: kv_lens (3 - 1) * 4 + 1 = 9, 4, 1; padding entries unspecified (MD-6)."""
    case = Case("csr_to_block_table", dict(kv_indptr=a(0, 3, 4, 5), kv_indices=a(8, 3, 11, 2, 0),
                                           kv_last_page_len=a(1, 4, 1), page_size=4, pages_per_seq=3),
                _params("csr_to_block_table", 4, num_seqs=3, tokens=14))
    table = np.zeros((3, 3), I32)
    table[0], table[1, 0], table[2, 0] = (8, 3, 11), 2, 0
    return case, BlockTable(table, a(9, 4, 1))


APPEND_GOLDEN = dict(qo_indptr=a(0, 2, 3, 3), kv_indptr=a(0, 2, 3, 3), kv_indices=a(6, 2, 5),
                     kv_last_page_len=a(3, 1, 0), page_size=4)
# P = 4. seq 0: pages [6, 2], kv_len 4 + 3 = 7, q_len 2: positions 5, 6 in page 2: slots 9, 10.
# seq 1: page [5], kv_len 1, q_len 1: position 0: slot 20. seq 2: empty, q_len 0.
APPEND_SLOTS = a(9, 10, 20)
APPEND_GOLDEN_16 = dict(qo_indptr=a(0, 6, 22, 22), kv_indptr=a(0, 3, 4, 4), kv_indices=a(6, 2, 9, 5),
                        kv_last_page_len=a(5, 16, 0), page_size=16)
# P = 16. seq 0: pages [6, 2, 9], kv_len 2 * 16 + 5 = 37, q_len 6: positions 31 .. 36; 31 is slot 15 of
# page 2 (2 * 16 + 15 = 47), 32 .. 36 slots 0 .. 4 of page 9 (144 .. 148), across a page boundary.
# seq 1: page [5], kv_len 16 (a full page), q_len 16: the whole page, slots 80 .. 95. seq 2: empty.
APPEND_SLOTS_16 = np.concatenate([a(47, 144, 145, 146, 147, 148), np.arange(80, 96, dtype=I32)])
APPEND_GOLDEN_NO_EMPTY = dict(qo_indptr=a(0, 2, 3, 4), kv_indptr=a(0, 3, 4, 5), kv_indices=a(8, 3, 11, 2, 0),
                              kv_last_page_len=a(1, 4, 1), page_size=4)
# P = 4, no empty sequence (MD-24). seq 0: pages [8, 3, 11], kv_len 9, q_len 2: positions 7 (page 3, slot 3:
# 15) and 8 (page 11, slot 0: 44). seq 1: page [2], kv_len 4, q_len 1: position 3, slot 11. seq 2: page [0],
# kv_len 1, q_len 1: position 0, slot 0.
APPEND_SLOTS_NO_EMPTY = a(15, 44, 11, 0)


def _append(x, slots, P):
    return Case("append_slot_mapping", dict(x), _params("append_slot_mapping", P, num_seqs=3,
                                                         tokens=int(x["qo_indptr"][-1]))), slots


def _from_arena(x, slots, P):
    """The append arrays packed at 16-byte alignment from byte 8 (offsets 16, 32, 48, 64 for P = 4) in an
    arena of 0xAB garbage: the same slots (MD-8, MD-10)."""
    arena, offsets = reference.pack_arena([x["qo_indptr"], x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"]],
                                          16, start=8, fill=0xAB)
    case = Case("slot_mapping_from_arena", dict(arena=arena, offsets=offsets, num_seqs=3, page_size=P),
                dict(dtype="int32", kv_dtype="uint8", page_size=P, num_seqs=3, tokens=int(x["qo_indptr"][-1])))
    return case, slots


def golden_arena_layout():
    """Alignment 16 from start 4: 16; 16 + 8 = 24 -> 32; 32 + 12 = 44 -> 48; the empty array at 48;
    copy to 48 + 4 = 52, arena 64 bytes (TVM #16831's packing, not 256-byte slots)."""
    case = Case("arena_layout", dict(nbytes=a(8, 12, 0, 4, dtype=I64), alignment=16, start=4),
                dict(dtype="int64", kv_dtype="int64", arrays=4, tokens=0))
    return case, ArenaLayout(a(16, 32, 48, 48, dtype=I64), np.array(52, I64), np.array(64, I64))


_MD = ("MD-1", "MD-2", "MD-3", "MD-4", "MD-6")
#: every golden requires exactly what its case uses (md.USES: the page size where the op takes one;
#: tests/engine/test_golden_requirements.py checks); the CSR attention golden is the attention family's
#: (test_attention_csr_golden below, strategies/goldens.py)
GOLDENS = (
    Golden("block_table_to_csr", "block_table_to_csr", goldens.fixed(golden_block_table_to_csr), _MD),
    Golden("block_table_to_csr_16", "block_table_to_csr", goldens.fixed(golden_block_table_to_csr_16), _MD),
    Golden("csr_to_block_table", "csr_to_block_table", goldens.fixed(golden_csr_to_block_table),
           ("MD-3", "MD-4", "MD-5")),
    Golden("csr_to_block_table_16", "csr_to_block_table", goldens.fixed(golden_csr_to_block_table_16),
           ("MD-3", "MD-4", "MD-5")),
    Golden("block_table_to_csr_no_empty", "block_table_to_csr", goldens.fixed(golden_block_table_to_csr_no_empty),
           _MD),
    Golden("csr_to_block_table_no_empty", "csr_to_block_table", goldens.fixed(golden_csr_to_block_table_no_empty),
           ("MD-3", "MD-4", "MD-5")),
    Golden("append_no_empty", "append_slot_mapping",
           goldens.fixed(lambda: _append(APPEND_GOLDEN_NO_EMPTY, APPEND_SLOTS_NO_EMPTY, 4)), ("MD-7",)),
    Golden("from_arena_no_empty", "slot_mapping_from_arena",
           goldens.fixed(lambda: _from_arena(APPEND_GOLDEN_NO_EMPTY, APPEND_SLOTS_NO_EMPTY, 4)), ("MD-8", "MD-10")),
    Golden("append", "append_slot_mapping", goldens.fixed(lambda: _append(APPEND_GOLDEN, APPEND_SLOTS, 4)), ("MD-7",)),
    Golden("append_16", "append_slot_mapping",
           goldens.fixed(lambda: _append(APPEND_GOLDEN_16, APPEND_SLOTS_16, 16)), ("MD-7",)),
    Golden("arena_layout", "arena_layout", goldens.fixed(golden_arena_layout), ("MD-8", "MD-9")),
    Golden("from_arena", "slot_mapping_from_arena", goldens.fixed(lambda: _from_arena(APPEND_GOLDEN, APPEND_SLOTS, 4)),
           ("MD-8", "MD-10")),
    Golden("from_arena_16", "slot_mapping_from_arena",
           goldens.fixed(lambda: _from_arena(APPEND_GOLDEN_16, APPEND_SLOTS_16, 16)), ("MD-8", "MD-10")),
)

test_block_table_to_csr_golden = goldens.suite_test("block_table_to_csr", GOLDENS, md.USES["block_table_to_csr"])
test_csr_to_block_table_golden = goldens.suite_test("csr_to_block_table", GOLDENS, md.USES["csr_to_block_table"])
test_append_slot_mapping_golden = goldens.suite_test("append_slot_mapping", GOLDENS, md.USES["append_slot_mapping"])
test_arena_layout_golden = goldens.suite_test("arena_layout", GOLDENS, md.USES["arena_layout"])
test_slot_mapping_from_arena_golden = goldens.suite_test("slot_mapping_from_arena", GOLDENS,
                                                         md.USES["slot_mapping_from_arena"])



def _manager_script():
    """(command keywords, expected fields) with P = 4 and 8 pages, worked by hand (MD-12 .. MD-18)."""
    z = np.zeros(0, I32)
    return 4, 8, [
        (dict(command="add", seq=5), dict(seq_ids=a(5), kv_indptr=a(0, 0), ref_counts=a(0, 0, 0, 0, 0, 0, 0, 0),
                                          kv_last_page_len=a(0))),
        # positions 0..5: pages 0, 1 (lowest free first)
        (dict(command="append", seq=5, n=6), dict(kv_indices=a(0, 1), slots=a(0, 1, 2, 3, 4, 5),
                                                  ref_counts=a(1, 1, 0, 0, 0, 0, 0, 0), kv_last_page_len=a(2))),
        # fork at 5: page 0 shared (count 2), 1 token of page 1 copied to page 2
        (dict(command="fork", seq=2, parent=5, pos=5),
         dict(seq_ids=a(2, 5), seq_lens=a(5, 6), kv_indptr=a(0, 2, 4), kv_indices=a(0, 2, 0, 1),
              ref_counts=a(2, 1, 1, 0, 0, 0, 0, 0), copies=a(1, 2, 1).reshape(1, 3), kv_last_page_len=a(1, 2))),
        # page-aligned fork at 4: nothing copied, page 0 count 3
        (dict(command="fork", seq=9, parent=5, pos=4),
         dict(ref_counts=a(3, 1, 1, 0, 0, 0, 0, 0), copies=z.reshape(0, 3), kv_last_page_len=a(1, 2, 4))),
        # pop 2 of 6: the whole last page 1 is freed (TVM #16871)
        (dict(command="pop", seq=5, n=2), dict(ref_counts=a(3, 0, 1, 0, 0, 0, 0, 0), kv_last_page_len=a(1, 4, 4))),
        # pop 1 of 4: shared page 0 becomes partial: copy on write into page 1 (lowest free)
        (dict(command="pop", seq=5, n=1), dict(copies=a(0, 1, 3).reshape(1, 3), ref_counts=a(2, 1, 1, 0, 0, 0, 0, 0),
                                               kv_indices=a(0, 2, 1, 0))),
        # remove the first fork while its parent and sibling live (any order, TVM #17045)
        (dict(command="remove", seq=2), dict(seq_ids=a(5, 9), ref_counts=a(1, 1, 0, 0, 0, 0, 0, 0))),
        # append 1 to seq 9 (length 4, full page): a new page, lowest free is 2
        (dict(command="append", seq=9, n=1), dict(slots=a(8), kv_indices=a(1, 0, 2))),
        # window 3 with sink 1 on seq 9 (length 5, pages 0, 2): keep_from 3, drop pages [1, 1): none
        (dict(command="window", seq=9, window=3, sink=1), dict(kv_indices=a(1, 0, 2), sinks=a(0, 1), windows=a(0, 3))),
        # append 5: positions 5..7 in page 2, 8..9 in new page 3 (slots 12, 13); length 10, keep_from 8:
        # logical pages [cdiv(1, 4), 8 // 4) = [1, 2): page 2 dropped, length 6, pages [0, 3]
        (dict(command="append", seq=9, n=5), dict(slots=a(9, 10, 11, 12, 13), kv_indices=a(1, 0, 3),
                                                  seq_lens=a(3, 6), ref_counts=a(1, 1, 0, 1, 0, 0, 0, 0))),
        # fork inside the sink (pos 1 <= sink 1): page 0 is partial at 1: copied to page 2
        (dict(command="fork", seq=7, parent=9, pos=1), dict(copies=a(0, 2, 1).reshape(1, 3), seq_ids=a(5, 7, 9))),
        (dict(command="remove", seq=5), dict(ref_counts=a(1, 0, 1, 1, 0, 0, 0, 0))),
    ]


def _manager_script_16():
    """(command keywords, expected fields) with P = 16 and 6 pages, worked by hand (MD-12 .. MD-18)."""
    return 16, 6, [
        (dict(command="add", seq=3), dict(seq_ids=a(3), kv_indptr=a(0, 0), ref_counts=a(0, 0, 0, 0, 0, 0))),
        # positions 0..19: page 0 holds 0..15 (slots 0..15), page 1 holds 16..19 (slots 16..19)
        (dict(command="append", seq=3, n=20), dict(kv_indices=a(0, 1), slots=np.arange(20, dtype=I32),
                                                   ref_counts=a(1, 1, 0, 0, 0, 0), kv_last_page_len=a(4))),
        # fork at 18: page 0 shared (count 2); 18 % 16 = 2 tokens of page 1 copied to page 2 (MD-16)
        (dict(command="fork", seq=8, parent=3, pos=18),
         dict(seq_ids=a(3, 8), seq_lens=a(20, 18), kv_indices=a(0, 1, 0, 2), ref_counts=a(2, 1, 1, 0, 0, 0),
              copies=a(1, 2, 2).reshape(1, 3), kv_last_page_len=a(4, 2))),
        # append 15 to seq 8: positions 18..31 fill page 2 (slots 34..47), position 32 opens page 3 (slot 48)
        (dict(command="append", seq=8, n=15),
         dict(slots=np.arange(34, 49, dtype=I32), kv_indices=a(0, 1, 0, 2, 3), ref_counts=a(2, 1, 1, 1, 0, 0),
              kv_last_page_len=a(4, 1))),
        # pop 14 of seq 3's 20: page 1 freed; shared page 0 now partial at 6: copied into page 1 (MD-17)
        (dict(command="pop", seq=3, n=14),
         dict(seq_lens=a(6, 33), kv_indices=a(1, 0, 2, 3), copies=a(0, 1, 6).reshape(1, 3),
              ref_counts=a(1, 1, 1, 1, 0, 0), kv_last_page_len=a(6, 1))),
        (dict(command="remove", seq=8), dict(seq_ids=a(3), kv_indices=a(1), ref_counts=a(0, 1, 0, 0, 0, 0))),
    ]


MANAGER_CLAUSES = ("MD-11", "MD-12", "MD-13", "MD-14", "MD-15", "MD-16", "MD-17", "MD-18", "MD-19", "MD-20",
                   "MD-21")
#: name -> script builder: a script of calls, each carrying the backend's state on, so not one `Golden`
#: (goldens.py); each requires what its first call uses (md.USES: its page size)
MANAGER_GOLDENS = {"script": _manager_script, "script_16": _manager_script_16}


@conformance_test(op="page_table_step", layer="golden", clauses=MANAGER_CLAUSES)
@pytest.mark.parametrize("name", list(MANAGER_GOLDENS))
def test_page_table_step_golden(kvc, name):
    """A hand-worked script; each step compares the fields worked out here, then the whole step with the
    reference, and carries the backend's own state forward."""
    P, pages, script = MANAGER_GOLDENS[name]()
    state = reference.empty_page_table(pages)
    kvc.require(kvc.claims(), **md.USES["page_table_step"](md.step_case(state, P, script[0][0], step=0))[1])
    for i, (cmd, fields) in enumerate(script):
        case = md.step_case(state, P, cmd, step=i)
        out = kvc.call(case)
        expected = reference.page_table_step(**case.inputs)
        kvc.expect(case, out, expected._replace(**fields), what=f"hand-worked step {i} ({cmd['command']})")
        state = md.state_of(out)


# --- differential ----------------------------------------------------------------------------------

DIFFERENTIAL = {
    "block_table_to_csr": (md.block_table_to_csr_cases, ("MD-1", "MD-2", "MD-3", "MD-4", "MD-5")),
    "csr_to_block_table": (md.csr_to_block_table_cases, ("MD-3", "MD-4", "MD-5", "MD-6")),
    "append_slot_mapping": (md.append_slot_mapping_cases, ("MD-7",)),
    "arena_layout": (md.arena_layout_cases, ("MD-8", "MD-9")),
    "slot_mapping_from_arena": (md.slot_mapping_from_arena_cases, ("MD-7", "MD-8", "MD-10")),
    "page_table_step": (md.page_table_step_cases, MANAGER_CLAUSES),
}


def _differential(op):
    strategy, clauses = DIFFERENTIAL[op]

    @conformance_test(op=op, layer="differential", clauses=clauses)
    def test(kvc):
        kvc.for_all(strategy(kvc.claims()), kvc.check)
    test.__name__ = f"test_{op}_differential"
    return test


test_block_table_to_csr_differential = _differential("block_table_to_csr")
test_csr_to_block_table_differential = _differential("csr_to_block_table")
test_append_slot_mapping_differential = _differential("append_slot_mapping")
test_arena_layout_differential = _differential("arena_layout")
test_slot_mapping_from_arena_differential = _differential("slot_mapping_from_arena")
test_page_table_step_differential = _differential("page_table_step")


def _reach(op):
    _, clauses = DIFFERENTIAL[op]

    @conformance_test(op=op, layer="differential", clauses=clauses)
    @pytest.mark.parametrize("reach", md.reach_columns(op))
    def test(kvc, reach):
        kvc.for_all(md.REACH_CASES[op](kvc.claims(), reach), kvc.check, budget=md.budget(reach))
    test.__name__ = f"test_{op}_reach"
    test.__doc__ = f"The reach columns of {op} (spec/metadata.md \"Reach: sizes and values drawn\")."
    return test


test_block_table_to_csr_reach = _reach("block_table_to_csr")
test_csr_to_block_table_reach = _reach("csr_to_block_table")
test_append_slot_mapping_reach = _reach("append_slot_mapping")
test_arena_layout_reach = _reach("arena_layout")
test_slot_mapping_from_arena_reach = _reach("slot_mapping_from_arena")
test_page_table_step_reach = _reach("page_table_step")


# --- errors: malformed input is rejected (MD-22) ---------------------------------------------------

def _errors(op):
    rules = md_bad.RULES[op]

    @conformance_test(op=op, layer="errors", clauses=malformed.clauses_of(rules))
    @pytest.mark.parametrize("rule", rules, ids=str)
    def test(kvc, rule):
        malformed.check_rejects(kvc, md_bad, op, rule)
    test.__name__ = f"test_{op}_rejects"
    return test


test_block_table_to_csr_rejects = _errors("block_table_to_csr")
test_csr_to_block_table_rejects = _errors("csr_to_block_table")
test_append_slot_mapping_rejects = _errors("append_slot_mapping")
test_arena_layout_rejects = _errors("arena_layout")
test_slot_mapping_from_arena_rejects = _errors("slot_mapping_from_arena")
test_page_table_step_rejects = _errors("page_table_step")


# --- MD-23: attention over the CSR layout ------------------------------------------------------------

def csr_golden(page_size: int = 2, head_dim: int = 2, *, empty: bool = True) -> Case:
    """One KV head; values in the first two dims (the rest 0). Sequence 0 holds 3 keys with v = [3,0],
    [0,3], [3,3] on its pages in reverse physical order (page_size 2: pages [1, 0], last-page length 1;
    a page of 3 or more: one page, length 3); the slot after the last key holds 100 and must not be read.
    One query row at position 2 with q = 0: equal weights, out = mean(v) = [2, 2]. With `empty`, a sequence
    with no rows and no pages follows (MD-4)."""
    values = ((3, 0), (0, 3), (3, 3))
    pages = -(-len(values) // page_size)
    k = np.zeros((pages, page_size, 1, head_dim), np.float32)
    v = np.zeros_like(k)
    for j, row in enumerate(values):
        v[pages - 1 - j // page_size, j % page_size, 0, :2] = row
    last = len(values) - (pages - 1) * page_size
    if last < page_size:
        v[0, last, 0, :2] = (100, 100)
    tail = 1 if empty else 0
    return Case("ragged_paged_attention_csr",
                dict(q=np.zeros((1, 1, head_dim), np.float32), k_pages=k, v_pages=v, qo_indptr=a(0, 1, *[1] * tail),
                     kv_indptr=a(0, pages, *[pages] * tail), kv_indices=a(*range(pages - 1, -1, -1)),
                     kv_last_page_len=a(last, *[0] * tail)),
                dict(dtype="float32", kv_dtype="float32", page_size=page_size, head_dim=head_dim, hq=1,
                     num_seqs=1 + tail, layout="csr"))


@conformance_test(op="ragged_paged_attention_csr", layer="golden", clauses=("MD-3", "MD-23"))
@pytest.mark.parametrize("form", ("small", "real"))
def test_attention_csr_golden(kvc, form):
    """csr_golden at page size 2 and head dim 2, and at the real head dim and page size of the block-table
    goldens (strategies/goldens.py REAL_HEAD_DIM, REAL_PAGE_SIZE; without the empty sequence, so that kernels that take
    none run it too): the mean of three values on CSR-listed pages."""
    claims = kvc.claims()
    case = csr_golden() if form == "small" else csr_golden(attention_goldens.REAL_PAGE_SIZE, attention_goldens.REAL_HEAD_DIM, empty=False)
    kvc.require(claims, **attention_goldens.golden_space(case))
    kvc.expect(case, kvc.call(case), attention_goldens.expected_rows(case, [[[2.0, 2.0]]]), what="hand-worked value")


@conformance_test(op="ragged_paged_attention_csr", layer="differential", clauses=("MD-2", "MD-3", "MD-4", "MD-23"))
@pytest.mark.parametrize("variant", md.csr_attention_variants(), ids=str)
def test_attention_csr_differential(kvc, variant):
    claims = kvc.claims(features=variant.features)
    # the block-table column's example shares (test_paged_attention.py): long and many-head calls cost more
    kvc.for_all(md.attention_csr_cases(claims, variant), kvc.check, budget=pa.example_share(variant))


@conformance_test(op="ragged_paged_attention_csr", layer="property", clauses=("MD-5", "MD-23"))
def test_attention_csr_equals_block_table(kvc):
    """The backend's CSR call and its block-table call (ragged_paged_attention) on the same cache agree
    within the attention contract (MD-23)."""
    claims = kvc.claims()
    kvc.claims("ragged_paged_attention")
    kvc.claims("ragged_paged_attention_csr")

    def body(case):
        plain = Case("ragged_paged_attention", md.block_table_inputs(case.inputs), dict(case.params, layout="block"),
                     case.seed)
        kvc.expect(case, kvc.call(case), kvc.call(plain), what="the block-table call")
    kvc.for_all(md.attention_csr_cases(claims, md.csr_attention_variants()[0]), body, budget=0.5)
test_ragged_paged_attention_csr_rejects = _errors("ragged_paged_attention_csr")
