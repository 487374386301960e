"""What a metadata case uses (goldens) and the family's comparison contract (spec/numerics.md class E)."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case


def sequence_lengths(case: Case) -> list[int] | None:
    """The counted sequences' lengths (kv_len) of a block-table, CSR or arena case, or of a manager step's
    state before and after its command (MD-24 judges both; None: the op has none)."""
    x = case.inputs
    if case.op == "page_table_step":
        from kvconform import reference
        after = reference.page_table_step(**x).seq_lens
        return [int(n) for n in np.asarray(x["seq_lens"])] + [int(n) for n in np.asarray(after)]
    if "kv_lens" in x:
        return [int(n) for n in np.asarray(x["kv_lens"])[:int(x["num_seqs"])]]
    if "arena" in x:                     # MD-8: qo_indptr, kv_indptr, kv_indices, kv_last_page_len at offsets
        S, offsets = int(x["num_seqs"]), [int(o) for o in x["offsets"]]
        arena = np.asarray(x["arena"], np.uint8)
        indptr = np.frombuffer(arena.tobytes(), np.int32, count=S + 1, offset=offsets[1]).astype(np.int64)
        last = np.frombuffer(arena.tobytes(), np.int32, count=S, offset=offsets[3]).astype(np.int64)
    elif "kv_indptr" in x:
        indptr, last = np.asarray(x["kv_indptr"], np.int64), np.asarray(x["kv_last_page_len"], np.int64)
    else:
        return None
    P = int(x["page_size"])
    return [int((p - 1) * P + l) if p else 0 for p, l in zip(np.diff(indptr), last)]


def uses(case: Case) -> tuple[set, dict]:
    """What a metadata case's inputs use (conformance/goldens.py): no features, the page size where the op
    takes one, the sequences' lengths (`seq_len`, judged by the claimed limit, MD-24) where it has sequences."""
    x = case.inputs
    space = {"page_size": int(x["page_size"])} if "page_size" in x else {}
    lengths = sequence_lengths(case) if case.op in SEQUENCE_OPS else None
    if lengths:
        space["seq_len"] = lengths
    return set(), space


#: the ops whose claims may say `seq_len` (MD-24): the page-table conversions, the slot mappings, the manager
SEQUENCE_OPS = ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping", "slot_mapping_from_arena",
                "page_table_step")


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
