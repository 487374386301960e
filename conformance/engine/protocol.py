"""What a backend returns, as the engine reads it (the protocol of backends/base.py), and the purity checks.

A backend op returns an array or a tuple of arrays in the reference's field order (a NamedTuple, with any
field names, or a plain tuple). An array is anything `kvconform.adapters.to_numpy` converts exactly: a
NumPy array or scalar, a torch tensor of any dtype on any device (bfloat16 and float8 included), a jax
array, an object with `__array__`, `__array_interface__` or `__dlpack__`. `protocol_outputs` is the one
conversion (the worker, `replay --no-isolation` and `check-backend` all call it): a result outside the
protocol, or an array that cannot be converted, is a `ProtocolViolation` whose message says so in words
("returned a list, ...", "returned a torch.bfloat16 tensor on cuda:0 that could not be converted: ..."),
never a NumPy error charged to the kernel as "backend raised".

Purity (backends/base.py: ops never modify their inputs and return fresh arrays) is checked through any
array-like too: `InputSnapshot` compares the bits of every input after the call with a copy taken before,
and `aliased_inputs` finds outputs sharing memory with an input through their host memory, whatever wraps
it (a torch tensor from `torch.from_numpy(input)`, a view with a bit-reinterpreted dtype, a DLPack or
`__array_interface__` export). Both run where the backend ran, before pickling loses the sharing.
"""
from __future__ import annotations

import functools
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvconform.adapters.arrays import ConversionError, describe_array, host_view, is_torch_tensor, to_numpy

__all__ = ["ProtocolViolation", "Outputs", "protocol_outputs", "structure_problem", "InputSnapshot",
           "aliased_inputs", "ALIAS"]

_PROTOCOL = "protocol: backends/base.py"

#: marks an entry of a call's `mutated` list that reports aliasing rather than mutation
ALIAS = " aliases input "


class ProtocolViolation(Exception):
    """The backend returned something outside the protocol, or an array the engine cannot convert; the
    message starts with "returned ..." and completes a sentence whose subject is the backend."""


@dataclass(frozen=True)
class Outputs:
    """A backend's result after conversion, as it travels from the worker (any NamedTuple type pickles).

    arrays: the NumPy arrays in the backend's order; fields: a NamedTuple's field names, None for a plain
    tuple; single: the backend returned one array (not a tuple)."""
    arrays: tuple[np.ndarray, ...]
    fields: tuple[str, ...] | None = None
    single: bool = False

    def value(self) -> Any:
        """The result as the engine compares it: an array, a NamedTuple with the backend's field names, or a
        plain tuple."""
        if self.single:
            return self.arrays[0]
        if self.fields is not None:
            return _result_type(self.fields)(*self.arrays)
        return tuple(self.arrays)


@functools.lru_cache(maxsize=None)
def _result_type(fields: tuple[str, ...]):
    return namedtuple("Result", fields, rename=True)


def protocol_outputs(result: Any) -> Outputs:
    """`result` converted to NumPy (`kvconform.adapters.to_numpy`), or ProtocolViolation saying what is wrong.

    An array, or a tuple / NamedTuple of arrays (see the module docstring). Python containers and
    iterators are violations: a list of two pools would silently stack into one array."""
    if isinstance(result, tuple):
        fields = tuple(result._fields) if hasattr(result, "_fields") else None
        names = [f"field {f}" for f in fields] if fields is not None else [f"element {i}" for i in range(len(result))]
        return Outputs(tuple(_converted(part, f"a tuple whose {name} is ") for name, part in zip(names, result)),
                       fields)
    return Outputs((_converted(result, ""),), single=True)


def _converted(value: Any, where: str) -> np.ndarray:
    """`value` as a NumPy array; `where` ("a tuple whose field scores is ") places it in the message."""
    if not _array_like(value):
        expected = "arrays" if where else "an array (NumPy, torch, jax) or a tuple of arrays"
        raise ProtocolViolation(f"returned {where}{_kind(value)}, expected {expected} ({_PROTOCOL})")
    try:
        arr = to_numpy(value)
    except ConversionError as exc:
        what = describe_array(value)
        detail = str(exc).removeprefix(f"{what} could not be converted: ")
        raise ProtocolViolation(f"returned {where}{what} that could not be converted: {detail}") from None
    if arr.dtype == object:
        raise ProtocolViolation(f"returned {where}{describe_array(value)} that converts to an object array, "
                                f"not numbers ({_PROTOCOL})")
    return arr


def _array_like(value: Any) -> bool:
    return (isinstance(value, (np.ndarray, np.generic)) or is_torch_tensor(value)
            or any(hasattr(value, a) for a in ("__array__", "__array_interface__", "__array_struct__", "__dlpack__")))


def _kind(value: Any) -> str:
    """'a list', 'an int', 'None': what a value is, in words."""
    if value is None:
        return "None"
    noun = type(value).__name__
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def structure_problem(actual: dict, expected: dict) -> str | None:
    """Why a result's fields cannot be compared with the expectation's, or None (the same count: fields are
    matched by name, else by position). actual, expected: {field: array} (harness.as_fields)."""
    if len(actual) == len(expected):
        return None
    return f"returned {_count(actual, names=False)}, the reference returns {_count(expected)}"


def _count(fields: dict, names: bool = True) -> str:
    if len(fields) == 1:
        return "one array"
    listed = f" ({', '.join(fields)})" if names and fields else ""
    return f"{len(fields)} fields{listed}"


# --- purity -----------------------------------------------------------------------------------------------

class InputSnapshot:
    """Bit copies of a call's array inputs, taken before the call: `mutated(inputs)` names those whose bits
    changed (NaN payloads included), however they were written (NumPy, a torch view of the same memory,
    ctypes). Inputs in device memory, if any, are not snapshotted."""

    def __init__(self, inputs: dict):
        self._before = {}
        for name, value in inputs.items():
            view = host_view(value)
            if view is not None:
                self._before[name] = (view.shape, view.dtype, view.tobytes())

    def mutated(self, inputs: dict) -> list[str]:
        changed = []
        for name, (shape, dtype, bits) in self._before.items():
            view = host_view(inputs.get(name))
            if view is None or view.shape != shape or view.dtype != dtype or view.tobytes() != bits:
                changed.append(name)
        return changed


def aliased_inputs(result: Any, inputs: dict) -> list[str]:
    """'<output> aliases input <name>' for every output sharing memory with an array input.

    result: the backend's raw result (before conversion, which may copy); outputs are named by their
    NamedTuple field, `output<i>` in a plain tuple, `out` alone. Any array-like whose memory lies in host
    memory is inspected (`kvconform.adapters.host_view`)."""
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        outputs = dict(zip(result._fields, result))
    elif isinstance(result, tuple):
        outputs = {f"output{i}": r for i, r in enumerate(result)}
    else:
        outputs = {"out": result}
    views = {name: host_view(arr) for name, arr in inputs.items()}
    found = []
    for out_name, out in outputs.items():
        out_view = host_view(out)
        if out_view is None:
            continue
        for in_name, in_view in views.items():
            if in_view is not None and np.may_share_memory(out_view, in_view) and _shares(out_view, in_view):
                found.append(f"{out_name}{ALIAS}{in_name}")
    return found


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.shares_memory(a, b, max_work=1_000_000))
    except np.exceptions.TooHardError:
        return True
