"""Malformed inputs for spec/eviction.md: the errors EV-17 lists, for `accumulate_scores` and
`plan_eviction`.

A config that breaks EV-1 cannot reach an op: `EvictionConfig` rejects it at construction (tested with
the reference in tests/reference). What an op must reject is a config that is not an `EvictionConfig` at
all (here: the same fields as a plain dict, the mistake of a caller that serialised it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from .. import eviction as ev
from ..values import sampled_from
from . import as_float, index, need, rule


@dataclass(frozen=True)
class Column:
    """The eviction strategies have no features-matrix columns: one plain column per op."""
    name: str
    features: tuple[str, ...] = ()


BASE = Column("base")
VARIANTS = {"accumulate_scores": (BASE,), "plan_eviction": (BASE,)}
INT32_MAX = 2 ** 31 - 1


def valid(op: str, claims: OpClaims, variant):
    return ev.accumulate_cases(claims) if op == "accumulate_scores" else ev.plan_cases(claims)


def _set(x: dict, name: str, where, value) -> dict:
    arr = np.array(x[name], copy=True)
    arr[where] = value
    return {name: arr}


def _acc_not_float(draw, x, claims):
    return {"acc": np.asarray(x["acc"]).astype(np.int64)}


def _counts_not_integer(draw, x, claims):
    return {"counts": np.asarray(x["counts"]).astype(np.float64)}


def _acc_rank(draw, x, claims):
    return {"acc": np.asarray(x["acc"])[None]}


def _counts_shape(draw, x, claims):
    counts = np.asarray(x["counts"])
    if counts.shape[0] and draw(st.booleans()):
        return {"counts": counts[:-1]}
    return {"counts": np.concatenate([counts, np.ones(1, counts.dtype)])}


def _acc_not_finite(draw, x, claims):
    L = np.asarray(x["acc"]).shape[0]
    need(L >= 1)
    return _set(x, "acc", index(draw, L), draw(sampled_from((np.inf, -np.inf, np.nan))))


def _count_below_one(draw, x, claims):
    L = np.asarray(x["counts"]).shape[0]
    need(L >= 1)
    return _set(x, "counts", index(draw, L), draw(sampled_from((0, -1))))


def _step_not_finite(draw, x, claims):
    n = np.asarray(x["step_scores"]).shape[0]
    need(n >= 1)
    return _set(x, "step_scores", index(draw, n), draw(sampled_from((np.nan, np.inf, -np.inf))))


def _step_too_short(draw, x, claims):
    L = np.asarray(x["acc"]).shape[0]
    need(L >= 1)
    return {"step_scores": np.asarray(x["step_scores"])[:L - draw(st.integers(1, L))]}


def _step_rank(draw, x, claims):
    return {"step_scores": np.asarray(x["step_scores"])[None]}


def _counts_overflow(draw, x, claims):
    counts, step = np.asarray(x["counts"]), np.asarray(x["step_scores"])
    need(counts.shape[0] >= 1)
    edit = _set(x, "counts", index(draw, counts.shape[0]), INT32_MAX)   # valid alone: int32 holds it
    if step.shape[0] == counts.shape[0]:      # at least one new token, so that the count must grow
        edit["step_scores"] = np.concatenate([step, step[:1]])
    return edit


ACCUMULATE_RULES = (
    rule("acc_not_float", ("EV-17", "EV-3"), "acc", "acc must have a floating dtype", _acc_not_float),
    rule("counts_not_integer", ("EV-17", "EV-3"), "counts", "counts must have an integer dtype",
         _counts_not_integer),
    rule("acc_rank", ("EV-17", "EV-3"), "acc", "acc must have rank 1 [L]", _acc_rank),
    rule("counts_shape", ("EV-17", "EV-3"), ("counts", "acc"), "counts must have the shape of acc",
         _counts_shape),
    rule("acc_not_finite", ("EV-17", "EV-3"), "acc", "acc must be finite", _acc_not_finite),
    rule("count_below_one", ("EV-17", "EV-3"), "counts", "every count must be >= 1", _count_below_one),
    rule("step_scores_not_finite", ("EV-17", "EV-4"), "step_scores", "step_scores must be finite",
         _step_not_finite),
    rule("step_scores_too_short", ("EV-17", "EV-4"), "step_scores",
         "step_scores must cover every tracked token (L_new >= L)", _step_too_short),
    rule("step_scores_rank", ("EV-17", "EV-4"), "step_scores", "step_scores must have rank 1 [L_new]",
         _step_rank),
    rule("counts_overflow", ("EV-17", "EV-5"), "counts", "counts must not overflow int32", _counts_overflow),
)


def _config_not_a_config(draw, x, claims):
    return {"config": dataclasses.asdict(x["config"])}


def _table_not_integer(draw, x, claims):
    return {"block_table": as_float(x["block_table"])}


def _table_length(draw, x, claims):
    table = np.asarray(x["block_table"])
    if table.shape[0] and draw(st.booleans()):
        return {"block_table": table[:-1]}
    fresh = int(table.max()) + 1 if table.size else 0       # unique and >= 0: only the length is wrong
    return {"block_table": np.concatenate([table, np.asarray([fresh], table.dtype)])}


def _table_negative(draw, x, claims):
    n = np.asarray(x["block_table"]).shape[0]
    need(n >= 1)
    return _set(x, "block_table", index(draw, n), -draw(st.integers(1, 3)))


def _table_duplicate(draw, x, claims):
    table = np.array(x["block_table"], copy=True)
    need(table.shape[0] >= 2)
    i = index(draw, table.shape[0])
    j = draw(st.integers(0, table.shape[0] - 2))
    table[j if j < i else j + 1] = table[i]
    return {"block_table": table}


PLAN_RULES = (
    rule("config_not_a_config", ("EV-17", "EV-1"), "config", "config must be an EvictionConfig",
         _config_not_a_config),
    rule("block_table_not_integer", ("EV-17",), "block_table", "block_table must have an integer dtype",
         _table_not_integer),
    rule("block_table_length", ("EV-17",), "block_table", "block_table must have cdiv(L, block_size) entries",
         _table_length),
    rule("block_table_negative", ("EV-17",), "block_table", "block_table pages must be >= 0", _table_negative),
    rule("block_table_duplicate", ("EV-17",), "block_table", "block_table pages must be unique",
         _table_duplicate),
    rule("counts_shape", ("EV-17", "EV-3"), ("counts", "acc"), "counts must have the shape of acc",
         _counts_shape),
    rule("count_below_one", ("EV-17", "EV-3"), "counts", "every count must be >= 1", _count_below_one),
    rule("acc_not_finite", ("EV-17", "EV-3"), "acc", "acc must be finite", _acc_not_finite),
)

RULES = {"accumulate_scores": ACCUMULATE_RULES, "plan_eviction": PLAN_RULES}
