"""Backends whose outputs lie to the comparison (issue: hostile backends, round two; not part of the package).

Each returns rotate_keys' output as something that is not a plain array of its values: an ndarray subclass
whose ufuncs answer "equal" (every element is 7.0), an object whose `__array__` hands back that subclass,
and one whose dtype carries an object in its metadata. Their class lives in this module: when the run's
process unpickles one of them, it imports this module, which leaves a mark (`IMPORTED_BY`, a file named
by the environment variable KVCONFORM_TEST_IMPORT_MARK) naming the importing process, so a test can tell
whether the backend's code ran outside its worker.
"""
import os

import numpy as np

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend

_MARK = os.environ.get("KVCONFORM_TEST_IMPORT_MARK")
if _MARK:
    with open(_MARK, "a") as fh:
        fh.write(f"{os.getpid()} {os.getppid()}\n")


class AlwaysEqual(np.ndarray):
    """An array whose every ufunc (subtract, isclose's, isnan, abs, comparisons) answers as if it were
    the reference: comparisons are all True, arithmetic all zeros."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        shape = np.broadcast_shapes(*(np.shape(i) for i in inputs if hasattr(i, "shape")))
        if ufunc.nout == 1 and ufunc.types and ufunc.types[0].endswith("?"):
            return np.ones(shape, bool)
        return np.zeros(shape, np.float64)

    def __array_function__(self, func, types, args, kwargs):
        return func(*(np.asarray(a).view(np.ndarray) if isinstance(a, AlwaysEqual) else a for a in args),
                    **kwargs)


class ExportsAlwaysEqual:
    """Only `__array__`, which returns the lying subclass."""

    def __init__(self, values):
        self._values = values

    def __array__(self, dtype=None, copy=None):
        return self._values.view(AlwaysEqual)


class _OnlyRotateKeys(NumpyBackend):
    def capabilities(self):
        return {"rotate_keys": super().capabilities()["rotate_keys"]}

    def sevens(self, **kw) -> np.ndarray:
        return np.full_like(reference.rotate_keys(**kw), 7.0)


class LiesBySubclass(_OnlyRotateKeys):
    name = "lies-by-subclass"

    def rotate_keys(self, **kw):
        return self.sevens(**kw).view(AlwaysEqual)


class LiesByArrayMethod(_OnlyRotateKeys):
    name = "lies-by-array-method"

    def rotate_keys(self, **kw):
        return ExportsAlwaysEqual(self.sevens(**kw))


class Marker:
    """An object of this module, hidden in a dtype's metadata."""


class LiesByDtypeMetadata(_OnlyRotateKeys):
    """Right values, with a dtype whose metadata holds an object of this module: comparable once the
    metadata is gone, but pickling it as it is imports this module where it is unpickled."""
    name = "lies-by-dtype-metadata"

    def rotate_keys(self, **kw):
        out = reference.rotate_keys(**kw)
        return out.view(np.dtype(out.dtype, metadata={"marker": Marker()}))


class MessageText(str):
    """A str subclass of this module, as an exception message and a NamedTuple field name."""


class RaisesWithOwnText(_OnlyRotateKeys):
    name = "raises-with-own-text"

    def rotate_keys(self, **kw):
        raise ValueError(MessageText("rotation failed"))


class SkipsInOp(_OnlyRotateKeys):
    """Calls pytest.skip() inside the op (a BaseException): the backend's raise, not a dead worker."""
    name = "skips-in-op"

    def rotate_keys(self, **kw):
        import pytest
        pytest.skip("no kernel for this shape")


class NumpyIntegerClaims(NumpyBackend):
    """Claims written with NumPy integers (page sizes from an array): valid claims, as the same Python ints."""
    name = "numpy-integer-claims"

    def capabilities(self):
        import dataclasses
        claims = super().capabilities()["write_kv"]
        return {"write_kv": dataclasses.replace(claims, page_sizes=tuple(np.array([4, 16], np.int64)))}


def make_subclass():
    return LiesBySubclass()


def make_array_method():
    return LiesByArrayMethod()


def make_dtype_metadata():
    return LiesByDtypeMetadata()


def make_own_text():
    return RaisesWithOwnText()


def make_skips_in_op():
    return SkipsInOp()


def make_numpy_integer_claims():
    return NumpyIntegerClaims()
