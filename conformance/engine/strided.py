"""The strided column (spec/numerics.md NU-14): a case's array arguments handed as non-contiguous views.

Serving stacks hand kernels views, not fresh arrays: q, k and v split from one fused projection
(`qkv.split([q_size, kv_size, kv_size], dim=-1)`), slot indices as one column of a wider table, one half of
a combined K/V cache, a conv state read through `.transpose(-1, -2)`. A kernel that computes its offsets
from the shape instead of the strides passes every contiguous test. A strided case carries, in
`params["strided"]`, the layout of each array argument ({argument: layout}); the views are built where
the backend runs (`StridedInputs`, in the worker right before the call: pickling would make them
contiguous again), each over a buffer of its own whose gaps hold poison, and the gaps must come back
untouched (a kernel writing with wrong strides).

Layouts of an argument of shape (n0, ..., nk), `pad` = 16 bytes' worth of elements (at least 1):

- `rows`: each leading index is one row of a wider table [n0, n1*...*nk + 2*pad], the view its middle
  (q/k/v split from a fused projection; one half of a combined cache): only the first stride is wider.
- `inner`: the last axis is the middle of a wider last axis [..., nk + 2*pad] (a slice of a wider head or
  feature dimension): every stride but the last is wider.
- `transposed`: the two last axes stored swapped, the view's second-last axis the middle of a wider one,
  [..., nk, n(k-1) + 2*pad].swapaxes(-1, -2) (a state read through `.transpose(-1, -2)`): the last stride
  is not 1.
- `column`: a 1-D argument is one column of a table [n0, 1 + 2*pad] (slot indices of a speculative-
  decoding batch, one column of the engine's wider metadata table).

Gaps hold NaN (float formats), -128 (int8), 2**30 (other integers: an index far out of any pool), 0xFF
(uint8) or True (bool), so a kernel reading a gap returns a visibly wrong result. Strides stay positive and
multiples of the item size (the forms torch and jax can hold).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvconform.reference import dtypes

#: layouts of arguments with two or more axes, in the order a case assigns them (`assign`)
LAYOUTS = ("rows", "inner", "transposed")
#: the layout of one-axis arguments
COLUMN = "column"
#: case.params key holding {argument: layout}
PARAM = "strided"
#: bytes of gap on each side of a view's rows (16: alignment stays that of a fresh allocation)
GAP_BYTES = 16
#: the integer a gap holds (int16 .. int64): far out of range of any pool, page or length
INT_GAP = 2 ** 30


@dataclass(frozen=True)
class Column:
    """A column the strided test draws its cases from (a family's `STRIDED[op]` entry): the features it
    turns on (all must be claimed), `cases(claims)` its strategy of Cases, and the arguments it hands
    contiguous (`contiguous`, each with its reason in the family module)."""
    features: tuple[str, ...]
    cases: Callable[[Any], Any]
    contiguous: tuple[str, ...] = ()


def columns(strategy: Callable, *variants, contiguous: tuple[str, ...] = ()) -> tuple[Column, ...]:
    """Columns of a family strategy `strategy(claims, variant)` for each of `variants`, richest first;
    without variants the strategy takes the claims alone."""
    if not variants:
        return (Column((), strategy, contiguous),)
    return tuple(Column(tuple(v.features), functools.partial(strategy, variant=v), contiguous) for v in variants)


def named(variants, *names: str) -> tuple:
    """The variants of a family called `names`, in that order (a family's STRIDED entry picks its columns)."""
    by_name = {v.name: v for v in variants}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"no variant named {', '.join(missing)} (variants: {', '.join(by_name)})")
    return tuple(by_name[n] for n in names)


def pad_elements(dtype: np.dtype) -> int:
    return max(1, GAP_BYTES // np.dtype(dtype).itemsize)


def layouts_for(inputs: dict, first: int = 0, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """{argument: layout} for every array argument with at least one axis (not those in `keep`): one-axis
    arguments are columns; the others take LAYOUTS in turn from `first`, in argument order (so a case with
    three or more of them holds every layout), each skipping to the next layout that makes its view
    non-contiguous when its own is not (an axis of one element has no stride that matters: a [1, 1, D]
    argument cannot be strided as `rows`, but can be `transposed`)."""
    chosen, turn = {}, first
    for name, value in inputs.items():
        if not isinstance(value, np.ndarray) or value.ndim == 0 or name in keep:
            continue
        if value.ndim == 1:
            chosen[name] = COLUMN
            continue
        order = [LAYOUTS[(turn + j) % len(LAYOUTS)] for j in range(len(LAYOUTS))]
        chosen[name] = next((lay for lay in order if not contiguous_in(value.shape, lay)), order[0])
        turn += 1
    return chosen


def contiguous_in(shape: tuple[int, ...], layout: str) -> bool:
    """Whether a view of `shape` in `layout` is C-contiguous after all (NumPy's rule: only the strides of
    axes longer than one matter), i.e. no different from a fresh array to a kernel reading it."""
    return bool(_view(np.zeros(_buffer_shape(tuple(shape), layout, 1), dtype=bool), tuple(shape), layout, 1)
                .flags.c_contiguous)


def strided_share(case) -> float:
    """The share of a strided case's arguments whose views are not contiguous (1.0 without arguments)."""
    layouts = layouts_of(case) or {}
    if not layouts:
        return 1.0
    live = [name for name, lay in layouts.items() if not contiguous_in(np.shape(case.inputs[name]), lay)]
    return len(live) / len(layouts)


def layouts_of(case) -> dict[str, str] | None:
    """The layouts a case's arguments are handed in (its `params["strided"]`), None for a contiguous case."""
    return case.params.get(PARAM) or None


def gap_value(dtype: np.dtype):
    """What the gaps of a buffer of `dtype` hold (module docstring)."""
    dt = np.dtype(dtype)
    if dtypes.is_float_dtype(dt):
        return np.array(np.nan, dtype=np.float32).astype(dt)
    if dt == np.int8:
        return np.int8(-128)
    if dt == np.uint8:
        return np.uint8(0xFF)
    if dt == np.bool_:
        return True
    if dt.kind in "iu":
        return dt.type(INT_GAP)
    raise ValueError(f"no gap value for dtype {dt}")


def _buffer_shape(shape: tuple[int, ...], layout: str, pad: int) -> tuple[int, ...]:
    if layout == COLUMN:
        return (shape[0], 1 + 2 * pad)
    if layout == "rows":
        return (shape[0], int(np.prod(shape[1:])) + 2 * pad)
    if layout == "inner":
        return shape[:-1] + (shape[-1] + 2 * pad,)
    if layout == "transposed":
        return shape[:-2] + (shape[-1], shape[-2] + 2 * pad)
    raise ValueError(f"unknown strided layout {layout!r} (layouts: {', '.join(LAYOUTS + (COLUMN,))})")


def _view(buffer: np.ndarray, shape: tuple[int, ...], layout: str, pad: int) -> np.ndarray:
    """The view of `shape` into `buffer` (built by `_buffer_shape`) that `layout` describes; the same
    slicing applied to a boolean buffer marks the elements the view covers."""
    if layout == COLUMN:
        return buffer[:, pad]
    if layout == "rows":
        # as_strided over unsigned words of the same size: it cannot make ml_dtypes arrays (bfloat16, float8)
        middle = buffer[:, pad:buffer.shape[1] - pad]
        words = middle.view(np.dtype(f"u{middle.itemsize}")) if middle.dtype != np.bool_ else middle
        rows = np.lib.stride_tricks.as_strided(words, shape, (middle.strides[0],) + _c_strides(shape[1:], middle),
                                               writeable=True)
        return rows.view(middle.dtype)
    if layout == "inner":
        return buffer[..., pad:pad + shape[-1]]
    return buffer[..., pad:pad + shape[-2]].swapaxes(-1, -2)


def _c_strides(shape: tuple[int, ...], like: np.ndarray) -> tuple[int, ...]:
    """Byte strides of a C-contiguous block of `shape` with `like`'s item size."""
    strides, step = [], like.itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def embed(array: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(view, buffer): a copy of `array` as a non-contiguous view of `layout` into a fresh buffer whose
    other elements (the gaps) hold `gap_value`."""
    array = np.asarray(array)
    pad = pad_elements(array.dtype)
    buffer = np.empty(_buffer_shape(array.shape, layout, pad), dtype=array.dtype)
    buffer[...] = gap_value(array.dtype)
    view = _view(buffer, array.shape, layout, pad)
    view[...] = array
    return view, buffer


def gap_mask(shape: tuple[int, ...], layout: str, pad: int) -> np.ndarray:
    """True at the gaps of a buffer built for a view of `shape` in `layout`."""
    covered = np.zeros(_buffer_shape(shape, layout, pad), dtype=bool)
    _view(covered, shape, layout, pad)[...] = True
    return ~covered


class StridedInputs:
    """A call's inputs with the arguments named in `layouts` replaced by strided views (`embed`), built in
    the process that calls the backend. `touched()` after the call names the arguments whose gaps changed.
    `layouts` None or empty: the inputs as they are."""

    def __init__(self, inputs: dict, layouts: dict[str, str] | None):
        self.inputs = dict(inputs)
        self._buffers: dict[str, tuple[np.ndarray, np.ndarray, bytes]] = {}
        for name, layout in (layouts or {}).items():
            value = self.inputs.get(name)
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                continue   # an argument a diagnosis variation removed or made a scalar
            view, buffer = embed(value, layout)
            gaps = gap_mask(value.shape, layout, pad_elements(value.dtype))
            self._buffers[name] = (buffer, gaps, buffer[gaps].tobytes())
            self.inputs[name] = view

    def touched(self) -> list[str]:
        """'<argument> (the gaps around its strided view)' for every argument whose gaps changed."""
        return [f"{name} (the gaps around its strided view)" for name, (buffer, gaps, bits) in self._buffers.items()
                if buffer[gaps].tobytes() != bits]


def with_layouts(case, layouts: dict[str, str]):
    """`case` handed with `layouts` (a copy; an empty dict: contiguous)."""
    params = dict(case.params)
    params.pop(PARAM, None)
    if layouts:
        params[PARAM] = dict(layouts)
    return dataclasses.replace(case, params=params)


def diagnosis_variations(case) -> list:
    """(label, case) pairs a failure of a strided case is re-run with: every argument contiguous, then each
    argument alone strided, so the diagnosis names the argument whose strides the backend ignores."""
    layouts = layouts_of(case)
    if not layouts:
        return []
    found = [("all inputs contiguous", with_layouts(case, {}))]
    if len(layouts) > 1:
        found += [(f"only {name} strided ({layout})", with_layouts(case, {name: layout}))
                  for name, layout in layouts.items()]
    return found
