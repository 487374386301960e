"""Malformed inputs for spec/metadata.md: the errors MD-22 lists, one rule broken at a time."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform import reference

from .. import constraints
from .. import metadata as md
from ..values import sampled_from
from . import as_float, index, need, rule

VARIANTS = {op: (md.BASE,) for op in ("block_table_to_csr", "csr_to_block_table", "append_slot_mapping",
                                      "arena_layout", "slot_mapping_from_arena", "page_table_step")}

_VALID = {"block_table_to_csr": md.block_table_to_csr_cases, "csr_to_block_table": md.csr_to_block_table_cases,
          "append_slot_mapping": md.append_slot_mapping_cases, "arena_layout": md.arena_layout_cases,
          "slot_mapping_from_arena": md.slot_mapping_from_arena_cases}


VARIANTS["ragged_paged_attention_csr"] = md.csr_attention_variants()


def valid(op: str, claims, variant):
    if op == "ragged_paged_attention_csr":
        return md.attention_csr_cases(claims, variant)
    if op == "page_table_step":
        return md.page_table_step_cases(claims, min_history=2)
    return _VALID[op](claims)


def _set(x, name, where, value):
    arr = np.array(x[name], copy=True)
    arr[where] = value
    return {name: arr}


# --- block_table_to_csr -----------------------------------------------------------------------------

def _kv_len_too_long(draw, x, claims):
    W, P = x["page_indices"].shape[1], x["page_size"]
    return _set(x, "kv_lens", index(draw, x["num_seqs"]), W * P + 1)


def _num_seqs_past(draw, x, claims):
    return {"num_seqs": int(x["kv_lens"].shape[0]) + 1}


def _page_size_zero(draw, x, claims):
    return {"page_size": 0}


def _float_table(draw, x, claims):
    return {"page_indices": as_float(x["page_indices"])}


# --- CSR arrays -------------------------------------------------------------------------------------

def _indptr_start(draw, x, claims):
    ip = np.array(x["kv_indptr"], copy=True)
    return {"kv_indptr": ip + 1, "kv_indices": np.concatenate([x["kv_indices"], np.zeros(1, np.int32)])}


def _indptr_decreasing(draw, x, claims):
    ip = x["kv_indptr"]
    need(ip.shape[0] >= 3)
    i = index(draw, ip.shape[0] - 2) + 1            # an inner entry, made larger than the next one
    return _set(x, "kv_indptr", i, int(ip[i + 1]) + 1)


def _indptr_end(draw, x, claims):
    return {"kv_indices": np.concatenate([x["kv_indices"], np.zeros(1, np.int32)])}


def _negative_page(draw, x, claims):
    need(x["kv_indices"].shape[0] >= 1)
    return _set(x, "kv_indices", index(draw, x["kv_indices"].shape[0]), -1)


def _seqs_with(x, pages: bool):
    return [i for i in range(x["kv_last_page_len"].shape[0])
            if (x["kv_indptr"][i + 1] > x["kv_indptr"][i]) == pages]


def _last_zero(draw, x, claims):
    s = _seqs_with(x, True)
    need(s)
    return _set(x, "kv_last_page_len", draw(sampled_from(s)), 0)


def _last_over(draw, x, claims):
    s = _seqs_with(x, True)
    need(s)
    P = x["page_size"] if "page_size" in x else x["k_pages"].shape[1]    # the attention op takes it from k_pages
    return _set(x, "kv_last_page_len", draw(sampled_from(s)), P + 1)


def _empty_nonzero(draw, x, claims):
    if not constraints.admits(claims.limits.get("seq_len"), 0):     # MD-24: it takes no empty sequence
        pytest.skip(f"unsupported: the rule needs an empty sequence, outside the claimed limit "
                    f"seq_len={claims.limits['seq_len']!r}")
    s = _seqs_with(x, False)
    need(s)
    return _set(x, "kv_last_page_len", draw(sampled_from(s)), 1)


def _narrow_rows(draw, x, claims):
    pages = int(np.diff(x["kv_indptr"]).max())
    need(pages >= 2)
    return {"pages_per_seq": pages - 1}


def _csr_rules(extra=()):
    return (
        rule("indptr_not_from_zero", ("MD-2", "MD-22"), "kv_indptr", "kv_indptr[0] must be 0", _indptr_start),
        rule("indptr_decreasing", ("MD-2", "MD-22"), "kv_indptr", "kv_indptr must be non-decreasing",
             _indptr_decreasing),
        rule("indptr_end_mismatch", ("MD-2", "MD-22"), ("kv_indptr", "kv_indices"),
             "kv_indptr[S] must equal len(kv_indices)", _indptr_end),
        rule("negative_page", ("MD-2", "MD-22"), "kv_indices", "page ids are >= 0", _negative_page),
        rule("last_page_len_zero", ("MD-3", "MD-22"), "kv_last_page_len",
             "a sequence with pages has kv_last_page_len in [1, page_size]", _last_zero),
        rule("last_page_len_over", ("MD-3", "MD-22"), "kv_last_page_len",
             "a sequence with pages has kv_last_page_len in [1, page_size]", _last_over),
        rule("empty_sequence_nonzero_last", ("MD-4", "MD-22"), "kv_last_page_len",
             "an empty sequence has kv_last_page_len 0", _empty_nonzero),
    ) + extra


# --- append_slot_mapping ---------------------------------------------------------------------------

def _q_longer(draw, x, claims):
    qo = np.array(x["qo_indptr"], copy=True)
    ip, last, P = x["kv_indptr"], x["kv_last_page_len"], x["page_size"]
    i = index(draw, qo.shape[0] - 1)
    pages = int(ip[i + 1] - ip[i])
    kv = (pages - 1) * P + int(last[i]) if pages else 0
    q = int(qo[i + 1] - qo[i])
    qo[i + 1:] += kv + 1 - q
    return {"qo_indptr": qo}


def _qo_start(draw, x, claims):
    return {"qo_indptr": np.array(x["qo_indptr"]) + 1}


# --- arena ----------------------------------------------------------------------------------------

def _alignment_not_pow2(draw, x, claims):
    return {"alignment": draw(sampled_from((3, 12, 24)))}


def _negative_nbytes(draw, x, claims):
    need(x["nbytes"].shape[0] >= 1)
    return _set(x, "nbytes", index(draw, x["nbytes"].shape[0]), -4)


def _negative_start(draw, x, claims):
    return {"start": -1}


def _misaligned_offset(draw, x, claims):
    return _set(x, "offsets", index(draw, 4), int(x["offsets"][0]) + 2)


def _offset_past_end(draw, x, claims):
    return _set(x, "offsets", index(draw, 4), int(x["arena"].shape[0]) + 4)


def _arena_not_bytes(draw, x, claims):
    arena = x["arena"]
    need(arena.shape[0] % 4 == 0)
    return {"arena": arena.view(np.int32)}


# --- page_table_step --------------------------------------------------------------------------------

def _unknown_command(draw, x, claims):
    return {"command": "truncate"}


def _ids(x):
    return [int(s) for s in x["seq_ids"]]


def _add_existing(draw, x, claims):
    need(_ids(x))
    return {"command": "add", "seq": draw(sampled_from(_ids(x)))}


def _not_live(draw, x, claims):
    missing = max(_ids(x) + [0]) + 1
    return {"command": draw(sampled_from(("append", "pop", "remove"))), "seq": missing, "n": 0}


def _pop_too_many(draw, x, claims):
    need(_ids(x))
    i = index(draw, len(_ids(x)))
    return {"command": "pop", "seq": _ids(x)[i], "n": int(x["seq_lens"][i]) + 1}


def _fork_pos_past_len(draw, x, claims):
    need(_ids(x))
    i = index(draw, len(_ids(x)))
    need(not x["windows"][i])
    return {"command": "fork", "seq": max(_ids(x)) + 1, "parent": _ids(x)[i], "pos": int(x["seq_lens"][i]) + 1}


def _fork_past_sink(draw, x, claims):
    """Give a sequence with tokens a window (len + 1, sink 0: nothing trimmed), then fork it at pos >= 1."""
    cand = [i for i in range(len(_ids(x))) if x["seq_lens"][i] >= 1]
    need(cand)
    i = draw(sampled_from(cand))
    L, P = int(x["seq_lens"][i]), x["page_size"]
    state = {k: x[k] for k in reference.empty_page_table(1)}
    out = reference.page_table_step(**state, page_size=P, command="window", seq=_ids(x)[i], window=L + 1, sink=0)
    return dict(md.state_of(out), command="fork", seq=max(_ids(x)) + 1, parent=_ids(x)[i],
                pos=draw(st.integers(1, L)))


def _sink_ge_window(draw, x, claims):
    need(_ids(x))
    w = draw(st.integers(1, 4))
    return {"command": "window", "seq": draw(sampled_from(_ids(x))), "window": w, "sink": w}


def _bad_ref_counts(draw, x, claims):
    return _set(x, "ref_counts", index(draw, x["ref_counts"].shape[0]), int(x["ref_counts"].max()) + 1)


def _negative_n(draw, x, claims):
    need(_ids(x))
    return {"command": "append", "seq": _ids(x)[0], "n": -1}


RULES = {
    "block_table_to_csr": (
        rule("kv_len_past_row", ("MD-5", "MD-22"), "kv_lens", "kv_lens <= pages_per_seq * page_size",
             _kv_len_too_long),
        rule("num_seqs_past_kv_lens", ("MD-5", "MD-22"), "num_seqs", "num_seqs <= len(kv_lens)", _num_seqs_past),
        rule("page_size_zero", ("MD-1", "MD-22"), "page_size", "page_size >= 1", _page_size_zero),
        rule("float_page_indices", ("MD-1", "MD-22"), "page_indices", "page_indices is an integer array",
             _float_table),
    ),
    "csr_to_block_table": _csr_rules((
        rule("pages_per_seq_too_small", ("MD-5", "MD-22"), "pages_per_seq",
             "pages_per_seq >= the largest page count", _narrow_rows),)),
    "append_slot_mapping": _csr_rules((
        rule("q_longer_than_kv", ("MD-7", "MD-22"), "qo_indptr", "0 <= q_len <= kv_len", _q_longer),
        rule("qo_indptr_not_from_zero", ("MD-7", "MD-22"), "qo_indptr", "qo_indptr[0] must be 0", _qo_start),
    )),
    "arena_layout": (
        rule("alignment_not_power_of_two", ("MD-8", "MD-22"), "alignment", "alignment is a power of two",
             _alignment_not_pow2),
        rule("negative_nbytes", ("MD-8", "MD-22"), "nbytes", "byte sizes are >= 0", _negative_nbytes),
        rule("negative_start", ("MD-8", "MD-22"), "start", "start >= 0", _negative_start),
    ),
    "slot_mapping_from_arena": (
        rule("misaligned_offset", ("MD-10", "MD-22"), "offsets", "offsets are multiples of 4", _misaligned_offset),
        rule("offset_past_end", ("MD-10", "MD-22"), "offsets", "arrays lie inside the arena", _offset_past_end),
        rule("arena_not_bytes", ("MD-10", "MD-22"), "arena", "arena is a uint8 byte buffer", _arena_not_bytes),
    ),
    "ragged_paged_attention_csr": _csr_rules((
        rule("qo_indptr_length", ("MD-23", "MD-22"), "qo_indptr", "qo_indptr has S+1 entries like kv_indptr",
             lambda draw, x, claims: {"qo_indptr": np.concatenate([x["qo_indptr"], x["qo_indptr"][-1:]])}),)),
    "page_table_step": (
        rule("unknown_command", ("MD-11", "MD-22"), "command", "command is one of the MD-13..MD-19 commands",
             _unknown_command),
        rule("add_existing", ("MD-13", "MD-22"), "seq", "add needs a new sequence id", _add_existing),
        rule("sequence_not_live", ("MD-14", "MD-17", "MD-18", "MD-22"), "seq", "the sequence must be live",
             _not_live),
        rule("pop_past_length", ("MD-17", "MD-22"), "n", "pop n <= the length", _pop_too_many),
        rule("fork_past_length", ("MD-15", "MD-22"), "pos", "fork pos <= the parent's length", _fork_pos_past_len),
        rule("fork_past_sink", ("MD-21", "MD-22"), "pos", "a windowed sequence forks only inside its sink",
             _fork_past_sink),
        rule("sink_not_below_window", ("MD-19", "MD-22"), "sink", "0 <= sink < window", _sink_ge_window),
        rule("ref_counts_inconsistent", ("MD-12", "MD-22"), "ref_counts",
             "ref_counts counts the sequences holding each page", _bad_ref_counts),
        rule("negative_n", ("MD-14", "MD-22"), "n", "n >= 0", _negative_n),
    ),
}
