"""The page-table manager's cases (spec/metadata.md MD-11 .. MD-22): histories of commands over one state."""
from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.conformance.engine.case import Case

from ..values import sampled_from
from .tables import NUM_PAGES, _page_size, shortest


def state_of(out) -> dict:
    """The state keywords of `page_table_step` from its result (MD-11)."""
    return {k: np.asarray(getattr(out, k)) for k in reference.empty_page_table(1)}


def live(state: dict) -> list[int]:
    return [int(s) for s in state["seq_ids"]]


@st.composite
def commands(draw, state: dict, P: int, *, max_append: int = 5, low: int = 0):
    """One valid command for `state` (MD-13 .. MD-21) as keywords of page_table_step; with `low` > 0 (a
    claimed `seq_len` minimum, MD-24) none that leaves a sequence shorter: no "add", no pop or fork below."""
    ids = live(state)
    lens = dict(zip(ids, (int(n) for n in state["seq_lens"])))
    sinks = dict(zip(ids, (int(n) for n in state["sinks"])))
    windows = dict(zip(ids, (int(n) for n in state["windows"])))
    new_id = draw(st.integers(0, 6).filter(lambda s: s not in ids)) if len(ids) < 7 else None
    # weighted: appends and forks grow the shared structure the manager clauses are about
    options = (["add"] if new_id is not None and not low else []) + \
        (["append", "fork", "append", "fork", "pop", "remove", "window", "append"] if ids else [])
    if new_id is None:
        options = [o for o in options if o != "fork"]
    assume(options)             # under MD-24 a state without sequences has no command (no "add")
    command = draw(sampled_from(options))
    if command == "add":
        return dict(command="add", seq=new_id)
    seq = draw(sampled_from(ids))
    if command == "append":
        return dict(command="append", seq=seq, n=draw(st.integers(0, max_append)))
    if command == "pop":
        assume(lens[seq] >= low)
        return dict(command="pop", seq=seq, n=draw(st.integers(0, lens[seq] - low)))
    if command == "remove":
        return dict(command="remove", seq=seq)
    if command == "fork":
        top = sinks[seq] if windows[seq] else lens[seq]
        top = min(top, lens[seq])
        assume(top >= low)
        return dict(command="fork", seq=new_id, parent=seq, pos=top - draw(st.integers(0, top - low)))
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
    low = shortest(claims)      # MD-24: a claimed seq_len minimum; the history (the reference's) may pass
    if low or draw(st.booleans()):      # most histories start from one sequence with tokens
        state = state_of(step(state, P, dict(command="add", seq=0)))
        state = state_of(step(state, P, dict(command="append", seq=0, n=draw(st.integers(1, 3 * P)))))
    for _ in range(draw(st.integers(min_history, 8))):
        out = step(state, P, draw(commands(state, P)))
        assume(out is not None)
        state = state_of(out)
    for seq, n in zip(live(state), [int(n) for n in state["seq_lens"]]):     # below it, the case may not
        if n < low:
            out = step(state, P, dict(command="append", seq=seq, n=low - n))
            assume(out is not None)
            state = state_of(out)
    cmd = draw(commands(state, P, low=low))
    out = step(state, P, cmd)
    assume(out is not None and admitted_step(state, out, low))
    return step_case(state, P, cmd)


def admitted_step(state: dict, out, low: int) -> bool:
    """MD-24: every sequence of the state handed over and of the state returned has at least `low` tokens."""
    return all(int(n) >= low for n in list(state["seq_lens"]) + list(np.asarray(out.seq_lens)))
