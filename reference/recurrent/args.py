"""Small argument checks used by several recurrent kernels (messages name the argument)."""
from __future__ import annotations

import numpy as np

from ..validation import check_shape, float_input


def bool_flag(name: str, value) -> bool:
    """A Python or NumPy bool (no truthy ints or arrays)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def optional_float(name: str, value, shape: tuple, layout: str):
    """None, or a float input of exactly `shape`, upcast to float64."""
    if value is None:
        return None
    arr = float_input(name, value, len(shape), layout)
    check_shape(name, arr, shape, layout)
    return arr
