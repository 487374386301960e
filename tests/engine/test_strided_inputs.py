"""The strided column's machinery (conformance/strided.py, spec/numerics.md NU-14): views with gaps, built
in the worker, gap writes found, every op registered."""
from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

from kvconform import reference
from kvconform.backends.base import OPS
from kvconform.conformance.engine import strided
from kvconform.conformance.engine.call_errors import BackendError
from kvconform.conformance.engine.worker import InProcess, Worker

DTYPES = (np.float64, np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int64, np.int32, np.int8,
          np.uint8, np.bool_)
SHAPES = ((5,), (3, 2), (2, 3, 4), (0, 3, 2), (4, 2, 3, 5))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_views_hold_the_values_between_poisoned_gaps(dtype):
    for shape in SHAPES:
        a = (np.arange(int(np.prod(shape))).reshape(shape) % 5 + 1).astype(dtype)
        for layout in (strided.COLUMN,) if len(shape) == 1 else strided.LAYOUTS:
            view, buffer = strided.embed(a, layout)
            assert view.shape == a.shape and view.dtype == a.dtype
            assert view.tobytes() == a.tobytes(), (layout, shape)
            assert view.size == 0 or (np.shares_memory(view, buffer) and not view.flags.c_contiguous), (layout, shape)
            assert view.size == 0 or all(s > 0 and s % a.itemsize == 0 for s in view.strides)
            gaps = buffer[strided.gap_mask(a.shape, layout, strided.pad_elements(a.dtype))]
            assert gaps.size == buffer.size - a.size
            gap = np.asarray(strided.gap_value(a.dtype), a.dtype)
            assert (gaps.size or not buffer.size) and gaps.tobytes() == np.full(gaps.shape, gap).tobytes()


def test_layouts_take_turns_and_avoid_contiguous_views():
    inputs = dict(q=np.zeros((3, 2, 4)), k=np.zeros((3, 2, 4)), v=np.zeros((3, 2, 4)), one=np.zeros((1, 1, 4)),
                  slots=np.zeros(3, np.int32), n=3, scalar=np.float32(1))
    chosen = strided.layouts_for(inputs, first=1)
    assert chosen == {"q": "inner", "k": "transposed", "v": "rows", "one": "transposed", "slots": "column"}
    # a [1, 1, D] argument has no stride that matters as `rows` or `inner`: it is transposed instead
    assert strided.contiguous_in((1, 1, 4), "rows") and strided.contiguous_in((1, 1, 4), "inner")
    assert not strided.contiguous_in((1, 1, 4), "transposed")
    assert strided.layouts_for(inputs, keep=("q", "slots")).keys() == {"k", "v", "one"}


def test_every_op_has_strided_columns():
    for op, family in OPS.items():
        columns = importlib.import_module(f"kvconform.conformance.strategies.{family}").STRIDED[op]
        assert columns and all(isinstance(c, strided.Column) for c in columns), op


def _write_case():
    rng = np.random.default_rng(0)
    k_pages, v_pages = rng.standard_normal((2, 3, 4, 2, 8)).astype(np.float32)
    k, v = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    inputs = dict(k_pages=k_pages, v_pages=v_pages, k=k, v=v, slot_mapping=np.array([5, -1, 0], np.int32))
    return inputs, strided.layouts_for(inputs)


def test_views_are_built_in_the_worker():
    """Pickling to the worker makes arrays contiguous: the views must be built there (the backend refuses
    non-contiguous arrays, so it answers only the contiguous call), and give the reference's result."""
    inputs, layouts = _write_case()
    worker = Worker("strided_backends:ContiguousOnly", timeout=60)
    try:
        plain, mutated = worker.call("write_kv", inputs)
        assert not mutated and plain[0].tobytes() == reference.write_kv(**inputs)[0].tobytes()
        with pytest.raises(BackendError, match="is not contiguous"):
            worker.call("write_kv", inputs, layouts=layouts)
    finally:
        worker.stop()
    result, mutated = InProcess("numpy").call("write_kv", inputs, layouts=layouts)
    assert not mutated and all(a.tobytes() == b.tobytes() for a, b in zip(result, reference.write_kv(**inputs)))


@pytest.mark.parametrize("isolated", [True, False], ids=["worker", "in-process"])
def test_a_write_into_the_gaps_is_found(isolated):
    inputs, layouts = _write_case()
    worker = Worker("strided_backends:GapWriter", timeout=60) if isolated else InProcess("strided_backends:GapWriter")
    try:
        _, mutated = worker.call("write_kv", inputs, layouts=layouts)
        assert mutated == ["k (the gaps around its strided view)"]
        _, mutated = worker.call("write_kv", inputs)     # contiguous: no gaps to write
        assert mutated == []
    finally:
        worker.stop()
