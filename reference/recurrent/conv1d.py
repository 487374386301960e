"""Causal depthwise conv1d update over a slot pool of conv windows (spec/recurrent.md RS-10 … RS-12)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_shape, float_input, require
from .activations import silu
from .reductions import ordered_sum
from .slots import gather_rows, pool_input, scatter_rows, slot_indices

ACTIVATIONS = (None, "silu")


class ConvUpdate(NamedTuple):
    out: np.ndarray         # float64, the shape of x
    conv_state: np.ndarray  # [num_slots, C, W-1], the pool's dtype


class ConvUpdateCall(NamedTuple):
    """The arguments of one ``causal_conv1d_update`` call after validation (RS-2 .. RS-6, RS-10).

    x:             float64[B, T, C]; a [B, C] input is given here as [B, 1, C] (see `single`)
    single:        True when x was [B, C] (one token per row): the output drops the T axis again
    conv_state:    [num_slots, C, W-1] float32|float64, the caller's array (not copied, RS-6)
    weight:        float64[C, W], W >= 1
    bias:          float64[C] or None
    activation:    None or "silu"
    state_indices: int64[B], slots in [-1, num_slots), -1 = padding, distinct otherwise (RS-2, RS-3)
    """
    x: np.ndarray
    single: bool
    conv_state: np.ndarray
    weight: np.ndarray
    bias: np.ndarray | None
    activation: str | None
    state_indices: np.ndarray


def causal_conv1d_update(x, conv_state, weight, bias=None, *, activation=None, state_indices=None
                         ) -> ConvUpdate:
    """Run T new tokens of each row through a causal depthwise conv of width W (RS-10 … RS-12).

    x:             [B, C] (one token per row) or [B, T, C] float
    conv_state:    [num_slots, C, W-1] float32|float64 — the last W-1 pre-conv inputs, oldest first
    weight:        [C, W] float; tap W-1 multiplies the newest input
    bias:          [C] float or None
    activation:    None or "silu"
    state_indices: i32[B] slot of each row, -1 = padding row (RS-2, RS-3); None = row b uses slot b

    Returns ConvUpdate(out float64 shaped like x, conv_state = new pool). Row b's window is
    win = [c, x_0, ..., x_{T-1}] (width W-1+T); out_t = act(sum_j weight[:, j] * win[:, t+j] + bias);
    the new row is win[:, T:] (RS-12). Padding rows give out = 0 and leave the pool untouched.
    """
    call = validate_causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                         state_indices=state_indices)
    x3, w, b, pool, idx = call.x, call.weight, call.bias, call.conv_state, call.state_indices
    batch, steps, _ = x3.shape
    width = w.shape[1]

    start = gather_rows(pool, idx, np.ones(batch, dtype=bool))      # [B, C, W-1]
    win = np.concatenate([start, np.swapaxes(x3, 1, 2)], axis=2)      # [B, C, W-1+T]
    out = np.zeros_like(x3)
    for t in range(steps):
        acc = ordered_sum(win[:, :, t:t + width] * w[None], axis=2)  # [B, C]
        if b is not None:
            acc = acc + b
        out[:, t] = silu(acc) if call.activation == "silu" else acc
    out[idx < 0] = 0.0
    new_pool = scatter_rows(pool, idx, win[:, :, steps:])
    return ConvUpdate(out[:, 0] if call.single else out, new_pool)


def validate_causal_conv1d_update(x, conv_state, weight, bias=None, *, activation=None, state_indices=None
                                  ) -> ConvUpdateCall:
    """Check every argument of `causal_conv1d_update` (RS-2 .. RS-6, RS-10) and return them normalised.

    Takes the op's arguments (see `causal_conv1d_update`). Raises ValueError, or TypeError for a wrong
    type or dtype, naming the argument and the broken rule.
    """
    xa = float_input("x", x)
    require(xa.ndim in (2, 3), f"x must have rank 2 [B, C] or rank 3 [B, T, C], got shape {xa.shape}")
    single = xa.ndim == 2
    x3 = xa[:, None, :] if single else xa
    batch, _, channels = x3.shape
    w = float_input("weight", weight, 2, "[C, W]")
    check_shape("weight", w, (channels, None), "[C, W]")
    width = w.shape[1]
    require(width >= 1, f"weight must have at least one tap (W >= 1), got shape {w.shape}")
    pool = pool_input("conv_state", conv_state, 3, "[num_slots, C, W-1]")
    check_shape("conv_state", pool, (None, channels, width - 1), "[num_slots, C, W-1]")
    b = None
    if bias is not None:
        b = float_input("bias", bias, 1, "[C]")
        check_shape("bias", b, (channels,), "[C]")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    idx = slot_indices("state_indices", state_indices, batch, pool.shape[0])
    return ConvUpdateCall(x3, single, pool, w, b, activation, idx)

