"""Key re-rotation with broadcast rotation deltas (spec/rotation.md, RO-*).

After eviction compacts a sequence, the RoPE-encoded keys of the blocks that moved must be re-encoded at
their new positions. Because RoPE is a rotation of each dimension pair by `position * inv_freq`, moving a
key from position p to p + delta is one more rotation by `delta * inv_freq`; the cache never needs the
pre-RoPE keys.

    k_pages:               float[P, page_size, Hkv, D]   key cache, canonical layout
    rotated_block_indices: i32[n]                        physical pages to rotate (unique)
    rotation_deltas:       i32[n, 1] or i32[n, page_size]  LUT row (rotate_keys) or token shift
                                                          (shift_keys), per block or per token
    trig_lut:              float[rows, rotary_dim]       row r = [cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}]

Everything is computed in float64 with the pinned angle arithmetic of RO-3 and the pinned pair update of
RO-5, so that the reference is reproducible bit for bit across machines with the same libm.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .validation import (check_index_range, check_unique, float_input, int_input, int_scalar,
                         positive_float, require)

__all__ = ["ROTARY_LAYOUTS", "RotateKeysCall", "ShiftKeysCall", "inverse_frequencies", "rope",
           "rerotation_lut", "rotate_keys", "shift_keys", "validate_rotate_keys", "validate_shift_keys"]

#: RO-2: "half" pairs (j, j + rotary_dim/2) (NeoX / rotate_half); "interleaved" pairs (2j, 2j+1) (GPT-J).
ROTARY_LAYOUTS = ("half", "interleaved")

_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def _layout(layout) -> str:
    require(isinstance(layout, str) and layout in ROTARY_LAYOUTS,
            f"layout must be one of {ROTARY_LAYOUTS}, got {layout!r}")
    return layout


def _rotary_dim(rotary_dim, head_dim: int) -> int:
    """RO-2: defaults to the head dim; even, 2 <= rotary_dim <= head_dim."""
    if rotary_dim is None:
        rotary_dim = head_dim
    value = int_scalar("rotary_dim", rotary_dim, minimum=2, maximum=head_dim)
    require(value % 2 == 0, f"rotary_dim must be even, got {value}")
    return value


def _pair_dims(layout: str, rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """RO-2: the (first, second) dimension of pair j, j < rotary_dim/2; pair j uses frequency j."""
    j = np.arange(rotary_dim // 2)
    if layout == "half":
        return j, j + rotary_dim // 2
    return 2 * j, 2 * j + 1


def _rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, rotary_dim: int) -> np.ndarray:
    """RO-5: (a, b) -> (a*c - b*s, a*s + b*c) on every pair; dims >= rotary_dim copied.

    x: float64[..., D]; cos, sin: float64 broadcastable to x[..., :rotary_dim/2]. Returns a new array.
    """
    first, second = _pair_dims(layout, rotary_dim)
    a, b = x[..., first], x[..., second]
    out = x.copy()
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out


def _int32_values(name: str, values: np.ndarray) -> None:
    check_index_range(name, values, _INT32_MIN, _INT32_MAX + 1, " (int32)")


def inverse_frequencies(rotary_dim: int, *, theta: float) -> np.ndarray:
    """RO-3: float64[rotary_dim/2], w_j = theta ** (-(2j) / rotary_dim) evaluated in float64."""
    theta = positive_float("theta", theta)
    rotary_dim = int_scalar("rotary_dim", rotary_dim, minimum=2)
    require(rotary_dim % 2 == 0, f"rotary_dim must be even, got {rotary_dim}")
    exponent = -(2.0 * np.arange(rotary_dim // 2, dtype=np.float64)) / np.float64(rotary_dim)
    return np.power(np.float64(theta), exponent)


def _angles(shifts: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """RO-3: fl64(float64(shift) * w_j); the integer is exact in float64, so this is one rounding."""
    return shifts.astype(np.float64)[..., None] * inv_freq


def rope(x, positions, *, theta: float, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    """RoPE-encode `x` at `positions` (RO-4): pair j of row t rotated by positions[t] * w_j.

    x: float[T, ..., D] (e.g. [T, H, D]); positions: int[T], any sign, int32 range (one position per
    leading row, shared by the middle dims). Returns float64[T, ..., D]; dims >= rotary_dim unchanged.
    """
    layout = _layout(layout)
    x = float_input("x", x)
    require(x.ndim >= 2, f"x must have rank >= 2 [T, ..., D], got shape {tuple(x.shape)}")
    rotary_dim = _rotary_dim(rotary_dim, x.shape[-1])
    positions = int_input("positions", positions, 1, "[T]")
    require(positions.shape[0] == x.shape[0],
            f"positions must have shape [T] = ({x.shape[0]},) matching x, got {tuple(positions.shape)}")
    _int32_values("positions", positions)
    angle = _angles(positions, inverse_frequencies(rotary_dim, theta=theta))   # [T, h]
    angle = angle.reshape((x.shape[0],) + (1,) * (x.ndim - 2) + (rotary_dim // 2,))
    return _rotate_pairs(x, np.cos(angle), np.sin(angle), layout, rotary_dim)


def rerotation_lut(num_rows: int, rotary_dim: int, *, theta: float, block_size: int) -> np.ndarray:
    """The re-rotation trig LUT (RO-6): float64[num_rows, rotary_dim].

    Row r = [cos(a_0) .. cos(a_{h-1}), -sin(a_0) .. -sin(a_{h-1})] with a_j = fl64((r*block_size) * w_j),
    h = rotary_dim/2: used by `rotate_keys` it moves a key back by r*block_size positions; row 0 is the
    identity.
    """
    num_rows = int_scalar("num_rows", num_rows, minimum=1)
    rotary_dim = int_scalar("rotary_dim", rotary_dim, minimum=2)
    require(rotary_dim % 2 == 0, f"rotary_dim must be even, got {rotary_dim}")
    block_size = int_scalar("block_size", block_size, minimum=1)
    require((num_rows - 1) * block_size <= _INT32_MAX,
            f"(num_rows - 1) * block_size must fit in int32, got {(num_rows - 1) * block_size}")
    angle = _angles(np.arange(num_rows, dtype=np.int64) * block_size,
                    inverse_frequencies(rotary_dim, theta=theta))
    return np.concatenate([np.cos(angle), -np.sin(angle)], axis=1)


class RotateKeysCall(NamedTuple):
    """The arguments of one ``rotate_keys`` call after validation (RO-12).

    layout:                "half" | "interleaved" (RO-2)
    k_pages:               float64[P, page_size, Hkv, D]  exact upcast of the key cache
    rotary_dim:            int, even, 2 <= rotary_dim <= D, the default D resolved (RO-2)
    rotated_block_indices: int64[n] in [0, P), unique (RO-8)
    rotation_deltas:       int64[n, 1] | int64[n, page_size], LUT rows in [0, rows) (RO-7, RO-9)
    trig_lut:              float64[rows, rotary_dim], rows >= 1, exact upcast (RO-9)
    """
    layout: str
    k_pages: np.ndarray
    rotary_dim: int
    rotated_block_indices: np.ndarray
    rotation_deltas: np.ndarray
    trig_lut: np.ndarray


class ShiftKeysCall(NamedTuple):
    """The arguments of one ``shift_keys`` call after validation (RO-12).

    layout:                "half" | "interleaved" (RO-2)
    k_pages:               float64[P, page_size, Hkv, D]  exact upcast of the key cache
    rotary_dim:            int, even, 2 <= rotary_dim <= D, the default D resolved (RO-2)
    rotated_block_indices: int64[n] in [0, P), unique (RO-8)
    position_deltas:       int64[n, 1] | int64[n, page_size], any sign, int32 range (RO-7, RO-10)
    inv_freq:              float64[rotary_dim/2]  w_j of theta, pinned as in RO-3
    """
    layout: str
    k_pages: np.ndarray
    rotary_dim: int
    rotated_block_indices: np.ndarray
    position_deltas: np.ndarray
    inv_freq: np.ndarray


def _check_blocks(k_pages, rotated_block_indices, deltas, deltas_name: str, layout, rotary_dim):
    """Checks shared by rotate_keys / shift_keys (RO-1, RO-2, RO-7, RO-8).

    Returns (layout, k float64[P, page_size, Hkv, D], rotary_dim, indices int64[n],
    deltas int64[n, 1] | int64[n, page_size]).
    """
    layout = _layout(layout)
    k = float_input("k_pages", k_pages, 4, "[P, page_size, Hkv, D]")
    num_pages, page_size, _, head_dim = k.shape
    rotary_dim = _rotary_dim(rotary_dim, head_dim)
    idx = int_input("rotated_block_indices", rotated_block_indices, 1, "[n]")
    check_index_range("rotated_block_indices", idx, 0, num_pages, f" (k_pages has P={num_pages} pages)")
    check_unique("rotated_block_indices", idx)
    d = int_input(deltas_name, deltas, 2, "[n, 1] or [n, page_size]")
    require(d.shape[0] == idx.shape[0],
            f"{deltas_name} must have one row per rotated block: shape[0] = {d.shape[0]}, "
            f"expected n = {idx.shape[0]}")
    require(d.shape[1] in (1, page_size),
            f"{deltas_name} must have shape [n, 1] (per block) or [n, page_size] = [n, {page_size}] "
            f"(per token), got {tuple(d.shape)}")
    return layout, k, rotary_dim, idx, d


def validate_rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout: str = "half",
                         rotary_dim: int | None = None) -> RotateKeysCall:
    """Check every argument of `rotate_keys` (RO-12) and return them normalised.

    Takes the op's arguments (see `rotate_keys`). On top of the block checks, trig_lut must have at
    least one row and width rotary_dim, and every rotation_deltas entry must name one of its rows.
    Raises ValueError, or TypeError for a wrong type or dtype, naming the argument.
    """
    layout, k, rotary_dim, idx, rows = _check_blocks(k_pages, rotated_block_indices, rotation_deltas,
                                                     "rotation_deltas", layout, rotary_dim)
    lut = float_input("trig_lut", trig_lut, 2, "[rows, rotary_dim]")
    require(lut.shape[0] >= 1, f"trig_lut must have at least one row, got shape {tuple(lut.shape)}")
    require(lut.shape[1] == rotary_dim,
            f"trig_lut must have width rotary_dim = {rotary_dim} ([cos | sin] halves), got {lut.shape[1]}")
    check_index_range("rotation_deltas", rows, 0, lut.shape[0], f" (trig_lut has {lut.shape[0]} rows)")
    return RotateKeysCall(layout, k, rotary_dim, idx, rows, lut)


def validate_shift_keys(k_pages, rotated_block_indices, position_deltas, *, theta: float,
                        layout: str = "half", rotary_dim: int | None = None) -> ShiftKeysCall:
    """Check every argument of `shift_keys` (RO-12) and return them normalised.

    Takes the op's arguments (see `shift_keys`). On top of the block checks, position_deltas must lie in
    the int32 range and theta must be finite and > 0 (it is resolved to inv_freq here, RO-3).
    Raises ValueError, or TypeError for a wrong type or dtype, naming the argument.
    """
    layout, k, rotary_dim, idx, deltas = _check_blocks(k_pages, rotated_block_indices, position_deltas,
                                                       "position_deltas", layout, rotary_dim)
    _int32_values("position_deltas", deltas)
    return ShiftKeysCall(layout, k, rotary_dim, idx, deltas, inverse_frequencies(rotary_dim, theta=theta))


def _per_token(deltas: np.ndarray, page_size: int) -> np.ndarray:
    """RO-7: [n, 1] is broadcast to every token of the block, so both forms select identical values."""
    return np.broadcast_to(deltas, (deltas.shape[0], page_size))


def rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout: str = "half",
                rotary_dim: int | None = None) -> np.ndarray:
    """Rotate the keys of the listed pages by LUT rows (RO-1, RO-2, RO-5, RO-7, RO-8, RO-9).

    k_pages: float[P, page_size, Hkv, D]; rotated_block_indices: i32[n] in [0, P), unique;
    rotation_deltas: i32[n, 1] or i32[n, page_size], LUT rows in [0, rows); trig_lut: float[rows,
    rotary_dim] (used at its given precision). rotary_dim defaults to D.
    Returns the new key cache, float64[P, page_size, Hkv, D]: token t of listed block i has every pair
    rotated by row r = rotation_deltas[i, 0 or t] (c = lut[r, j], s = lut[r, j + rotary_dim/2]), the
    same for every KV head; every other element is copied.
    """
    call = validate_rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, layout=layout,
                                rotary_dim=rotary_dim)
    k, idx, half = call.k_pages, call.rotated_block_indices, call.rotary_dim // 2
    rows = _per_token(call.rotation_deltas, k.shape[1])
    coeff = call.trig_lut[rows][:, :, None, :]       # [n, page_size, 1 (heads), rotary_dim]
    out = k.copy()
    out[idx] = _rotate_pairs(k[idx], coeff[..., :half], coeff[..., half:], call.layout, call.rotary_dim)
    return out


def shift_keys(k_pages, rotated_block_indices, position_deltas, *, theta: float, layout: str = "half",
               rotary_dim: int | None = None) -> np.ndarray:
    """Theta form of the re-rotation (RO-10): the key encoded at position p becomes the key at p + delta.

    k_pages: float[P, page_size, Hkv, D]; rotated_block_indices: i32[n] in [0, P), unique;
    position_deltas: i32[n, 1] or i32[n, page_size], in tokens, any sign (broadcast as in RO-7).
    Returns float64[P, page_size, Hkv, D]; pair j rotated by the angle fl64(delta * w_j) (RO-3).
    """
    call = validate_shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta, layout=layout,
                               rotary_dim=rotary_dim)
    k, idx = call.k_pages, call.rotated_block_indices
    angle = _angles(_per_token(call.position_deltas, k.shape[1]), call.inv_freq)[:, :, None, :]
    out = k.copy()
    out[idx] = _rotate_pairs(k[idx], np.cos(angle), np.sin(angle), call.layout, call.rotary_dim)
    return out
