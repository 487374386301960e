"""Small argument checks used by several recurrent kernels (messages name the argument)."""
from __future__ import annotations

import numpy as np

from ..validation import check_shape, float_array, float_input, require


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


def mamba2_inputs(rows: str, heads: int, p: int, n: int, x, dt, A, B, C, *, upcast_x=True):
    """The per-token inputs of the Mamba2 recurrence (RS-16, RS-17), upcast to float64 (x: only with
    upcast_x; otherwise checked alike and left in its own float dtype, for a caller that converts it
    chunk by chunk).

    `rows` names the leading axis in messages: "B" (one token per batch row, selective_state_update) or
    "T" (packed tokens, ssd_chunked_scan); heads H, head dim P and state size N come from the state pool.
        x: [R, H, P]   dt: [R, H]   A: [H]   B, C: [R, G, N] with G >= 1 dividing H
    Returns (x, dt, A, B, C) as float64 arrays.
    """
    xa = (float_input if upcast_x else float_array)("x", x, 3, f"[{rows}, H, P]")
    count = xa.shape[0]
    check_shape("x", xa, (count, heads, p), f"[{rows}, H, P]")
    dta = float_input("dt", dt, 2, f"[{rows}, H]")
    check_shape("dt", dta, (count, heads), f"[{rows}, H]")
    Aa = float_input("A", A, 1, "[H]")
    check_shape("A", Aa, (heads,), "[H]")
    Ba = float_input("B", B, 3, f"[{rows}, G, N]")
    groups = Ba.shape[1]
    check_shape("B", Ba, (count, groups, n), f"[{rows}, G, N]")
    require(groups >= 1 and heads % groups == 0,
            f"B must have a group count G that divides H = {heads}, got G = {groups}")
    Ca = float_input("C", C, 3, f"[{rows}, G, N]")
    check_shape("C", Ca, (count, groups, n), f"[{rows}, G, N]")
    return xa, dta, Aa, Ba, Ca


def mamba2_options(rows: str, count: int, heads: int, p: int, D, z, dt_bias):
    """The optional Mamba2 inputs (RS-14, RS-16): D [H], z [R, H, P], dt_bias [H], each None or float64."""
    return (optional_float("D", D, (heads,), "[H]"),
            optional_float("z", z, (count, heads, p), f"[{rows}, H, P]"),
            optional_float("dt_bias", dt_bias, (heads,), "[H]"))
