"""Hand-worked golden cases as data (the runner is harness/goldens.py): each golden says what it needs from a backend, and that is checked
against what its case uses.

A suite module declares its goldens as `GOLDENS`, a tuple of `Golden`; the family's strategy module
declares `USES[op](case) -> (features, space)`: the feature names a case uses (state_indices given,
a -1 among them, D given, ...) and its dimensions under the claim names `kvc.require` and
`strategies/constraints.py:outside` judge (dtype, kv_dtype, sizes, conventions). `run` then restates the
golden in the subset of its optional features the backend claims, requires exactly the space the case
uses, and compares with the hand-worked value; `tests/engine/test_golden_requirements.py` builds every
restatement of every golden and checks that each feature its case uses is one it requires (issue 31: a
golden listed with no features yet passing D, z and dt_softplus failed every backend that rightly claims
none of them as "claims more than it supports").
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvconform.conformance.engine.case import Case


@dataclass(frozen=True)
class Golden:
    """One hand-worked case of `op`.

    build:    options -> (case, expected): the case with the optional features in `options` turned on,
              and its value worked out by hand (in the builder, never by the reference)
    features: the features every restatement uses (required of the backend)
    options:  features a restatement may use: each subset is a restatement whose values stay exact;
              a run uses the ones the backend claims
    """
    name: str
    op: str
    build: Callable[[frozenset], tuple[Case, Any]]
    clauses: tuple[str, ...]
    features: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def restatements(self) -> list[frozenset]:
        """Every subset of the options (each a restatement)."""
        return [frozenset(c) for r in range(len(self.options) + 1) for c in itertools.combinations(self.options, r)]

    def __str__(self) -> str:
        return self.name


def fixed(build: Callable[[], tuple[Case, Any]]) -> Callable[[frozenset], tuple[Case, Any]]:
    """The `build` of a golden without options, from a builder that takes none."""
    return lambda options: build()


def at_end(arr, shape, fill: float = 0.0) -> Any:
    """`arr` restated inside an array of `shape` (same rank, no axis smaller): its values at the far end of
    every grown axis, `fill` (zeros) elsewhere, except that a leading-axis row of `arr` that is all NaN (a canary
    pool row, which must come back bit for bit) stays all NaN. A golden restated this way at real head
    and state sizes keeps its hand-worked values: the added channels, keys and state entries hold zeros,
    which add nothing, and the values sit where a kernel's last tile (and its masking) handles them."""
    arr = np.asarray(arr)
    out = np.full(shape, fill, dtype=arr.dtype)
    out[tuple(slice(n - m, n) for n, m in zip(shape, arr.shape))] = arr
    if arr.ndim and np.issubdtype(arr.dtype, np.floating):
        for i in np.flatnonzero(np.isnan(arr.reshape(arr.shape[0], -1)).all(axis=1) if arr.size else []):
            out[shape[0] - arr.shape[0] + i] = np.nan
    return out


def restated_at(golden: Golden, name: str, shapes: dict, fills: dict | None = None) -> Golden:
    """`golden` at larger dimensions (`at_end`): `shapes` maps input names and fields of the expected
    result to their new shapes (a missing name keeps its shape); `fills` the value an input's added entries
    hold instead of 0 (e.g. a decay multiplier of 1, which leaves a zero state zero)."""
    fills = fills or {}

    def build(options):
        case, expected = golden.build(options)
        inputs = {k: (at_end(v, shapes[k], fills.get(k, 0.0)) if k in shapes and v is not None else v)
                  for k, v in case.inputs.items()}
        fields = expected._asdict() if hasattr(expected, "_asdict") else None
        if fields is not None:
            expected = type(expected)(**{k: (at_end(v, shapes[k]) if k in shapes else v) for k, v in fields.items()})
        return Case(case.op, inputs, dict(case.params), case.seed), expected
    return dataclasses.replace(golden, name=name, build=build)
