"""Selective state update, one token per row: Mamba1 and multi-head Mamba2 (RS-14 … RS-16)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_shape, float_input, require
from .args import bool_flag, mamba2_inputs, mamba2_options, optional_float
from .activations import silu, softplus
from .reductions import ordered_sum
from .slots import gather_rows, pool_input, scatter_rows, slot_indices


class SelectiveStateUpdate(NamedTuple):
    out: np.ndarray    # Mamba1 [B, D], Mamba2 [B, H, P]; float64
    state: np.ndarray  # the new pool, the pool's dtype


class SelectiveStateCall(NamedTuple):
    """The arguments of one ``selective_state_update`` call after validation (RS-14 .. RS-16).

    The form follows the pool's rank: Mamba1 when state.ndim == 3, Mamba2 when state.ndim == 4.
    state:         Mamba1 [num_slots, D, N] | Mamba2 [num_slots, H, P, N], float32|float64, the
                   caller's array (not copied, RS-6)
    x:             float64 Mamba1 [B, D] | Mamba2 [B, H, P]
    dt:            float64 Mamba1 [B, D] | Mamba2 [B, H]
    A:             float64 Mamba1 [D, N] | Mamba2 [H]
    B, C:          float64 Mamba1 [B, N] | Mamba2 [B, G, N], G divides H (RS-16)
    D, dt_bias:    float64 Mamba1 [D] | Mamba2 [H], or None
    z:             float64 shaped like x, or None
    dt_softplus:   bool (RS-14)
    state_indices: int64[B], slots in [-1, num_slots), -1 = padding, distinct otherwise (RS-2, RS-3)
    """
    state: np.ndarray
    x: np.ndarray
    dt: np.ndarray
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray | None
    z: np.ndarray | None
    dt_bias: np.ndarray | None
    dt_softplus: bool
    state_indices: np.ndarray


def effective_dt(dt: np.ndarray, dt_bias, dt_softplus: bool) -> np.ndarray:
    """dt' = softplus?(dt + dt_bias) (RS-14); no clamp (dt_limit is not part of the op)."""
    d = dt if dt_bias is None else dt + dt_bias
    return softplus(d) if dt_softplus else d


def head_groups(num_heads: int, num_groups: int) -> np.ndarray:
    """Group of each head: h // (H // G) (RS-16)."""
    return np.arange(num_heads) // (num_heads // num_groups)


def ssm_step(S, x, dt, A, Bh, Ch, D, z):
    """One token of the recurrence in the general form (RS-15, RS-16), float64.

    S: [B, H, P, N]; x, dt: [B, H, P] (dt already dt'); A: [H, P, N]; Bh, Ch: [B, H, N] (per head);
    D: [H, P] or None; z: [B, H, P] or None. Returns (y [B, H, P], S_new).
    """
    S_new = S * np.exp(dt[..., None] * A[None]) + (dt * x)[..., None] * Bh[:, :, None, :]
    y = ordered_sum(S_new * Ch[:, :, None, :], axis=3)
    if D is not None:
        y = y + D[None] * x
    if z is not None:
        y = y * silu(z)
    return y, S_new


def selective_state_update(state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_indices=None) -> SelectiveStateUpdate:
    """Advance each addressed state row by one token and read it out (RS-14 … RS-16).

    Mamba1 (state rank 3):  state [num_slots, Dm, N]; x, dt, z [B, Dm]; A [Dm, N]; B, C [B, N];
                            D, dt_bias [Dm].
    Mamba2 (state rank 4):  state [num_slots, H, P, N]; x, z [B, H, P]; dt [B, H]; A, D, dt_bias [H];
                            B, C [B, G, N] with G dividing H; head h reads group h // (H // G).
    state is float32|float64; the other inputs any float dtype; state_indices i32[B] (-1 = padding).

    dt' = softplus?(dt + dt_bias); S <- S * exp(dt' A) + (dt' x) B^T; y = S C + D x; y <- y * silu(z).
    Returns SelectiveStateUpdate(out float64, state = new pool); padding rows: out 0, pool untouched.
    """
    call = validate_selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                           dt_softplus=dt_softplus, state_indices=state_indices)
    pool, idx = call.state, call.state_indices
    batch = idx.shape[0]
    dtp = effective_dt(call.dt, call.dt_bias, call.dt_softplus)
    if pool.ndim == 3:
        # Mamba1 is the general form with one head of P = D channels.
        x4, dt4, A4 = call.x[:, None], dtp[:, None], call.A[None]
        Bh, Ch = call.B[:, None], call.C[:, None]
        D4 = None if call.D is None else call.D[None]
        z4 = None if call.z is None else call.z[:, None]
    else:
        _, heads, p, n = pool.shape
        g = head_groups(heads, call.B.shape[1])
        x4 = call.x
        dt4 = np.broadcast_to(dtp[..., None], call.x.shape)
        A4 = np.broadcast_to(call.A[:, None, None], (heads, p, n))
        Bh, Ch = call.B[:, g], call.C[:, g]
        D4 = None if call.D is None else np.broadcast_to(call.D[:, None], (heads, p))
        z4 = call.z
    S = gather_rows(pool, idx, np.ones(batch, dtype=bool))
    S4 = S[:, None] if pool.ndim == 3 else S
    y, S_new = ssm_step(S4, x4, dt4, A4, Bh, Ch, D4, z4)
    if pool.ndim == 3:
        y, S_new = y[:, 0], S_new[:, 0]
    y[idx < 0] = 0.0
    return SelectiveStateUpdate(y, scatter_rows(pool, idx, S_new))


def validate_selective_state_update(state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None,
                                    dt_softplus=False, state_indices=None) -> SelectiveStateCall:
    """Check every argument of `selective_state_update` (RS-2 .. RS-6, RS-14 .. RS-16) and return them
    normalised.

    Takes the op's arguments (see `selective_state_update` for both forms). Raises ValueError, or
    TypeError for a wrong type or dtype, naming the argument and the broken rule.
    """
    pool = pool_input("state", state, np.ndim(state), "")
    require(pool.ndim in (3, 4), f"state must have rank 3 [num_slots, D, N] (Mamba1) or rank 4 "
                                 f"[num_slots, H, P, N] (Mamba2), got shape {pool.shape}")
    dt_softplus = bool_flag("dt_softplus", dt_softplus)
    if pool.ndim == 3:
        _, dim, n = pool.shape
        xa = float_input("x", x, 2, "[B, D]")
        batch = xa.shape[0]
        check_shape("x", xa, (batch, dim), "[B, D]")
        dta = float_input("dt", dt, 2, "[B, D]")
        check_shape("dt", dta, (batch, dim), "[B, D]")
        Aa = float_input("A", A, 2, "[D, N]")
        check_shape("A", Aa, (dim, n), "[D, N]")
        Ba = float_input("B", B, 2, "[B, N]")
        check_shape("B", Ba, (batch, n), "[B, N]")
        Ca = float_input("C", C, 2, "[B, N]")
        check_shape("C", Ca, (batch, n), "[B, N]")
        Da = optional_float("D", D, (dim,), "[D]")
        za = optional_float("z", z, (batch, dim), "[B, D]")
        bias = optional_float("dt_bias", dt_bias, (dim,), "[D]")
    else:
        _, heads, p, n = pool.shape
        xa, dta, Aa, Ba, Ca = mamba2_inputs("B", heads, p, n, x, dt, A, B, C)
        batch = xa.shape[0]
        Da, za, bias = mamba2_options("B", batch, heads, p, D, z, dt_bias)
    idx = slot_indices("state_indices", state_indices, batch, pool.shape[0])
    return SelectiveStateCall(pool, xa, dta, Aa, Ba, Ca, Da, za, bias, dt_softplus, idx)
