"""Selective state update, one token per row: Mamba1 and multi-head Mamba2 (RS-14 … RS-16)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..validation import check_shape, float_input, require
from .args import bool_flag, optional_float
from .activations import silu, softplus
from .reductions import ordered_sum
from .slots import gather_rows, pool_input, scatter_rows, slot_indices


class SelectiveStateUpdate(NamedTuple):
    out: np.ndarray    # Mamba1 [B, D], Mamba2 [B, H, P]; float64
    state: np.ndarray  # the new pool, the pool's dtype


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
        # Mamba1 is the general form with one head of P = D channels.
        x4, dt4, A4 = xa[:, None], effective_dt(dta, bias, dt_softplus)[:, None], Aa[None]
        Bh, Ch = Ba[:, None], Ca[:, None]
        D4 = None if Da is None else Da[None]
        z4 = None if za is None else za[:, None]
    else:
        _, heads, p, n = pool.shape
        xa = float_input("x", x, 3, "[B, H, P]")
        batch = xa.shape[0]
        check_shape("x", xa, (batch, heads, p), "[B, H, P]")
        dta = float_input("dt", dt, 2, "[B, H]")
        check_shape("dt", dta, (batch, heads), "[B, H]")
        Aa = float_input("A", A, 1, "[H]")
        check_shape("A", Aa, (heads,), "[H]")
        Ba = float_input("B", B, 3, "[B, G, N]")
        groups = Ba.shape[1]
        check_shape("B", Ba, (batch, groups, n), "[B, G, N]")
        require(groups >= 1 and heads % groups == 0,
                f"B must have a group count G that divides H = {heads}, got G = {groups}")
        Ca = float_input("C", C, 3, "[B, G, N]")
        check_shape("C", Ca, (batch, groups, n), "[B, G, N]")
        Da = optional_float("D", D, (heads,), "[H]")
        za = optional_float("z", z, (batch, heads, p), "[B, H, P]")
        bias = optional_float("dt_bias", dt_bias, (heads,), "[H]")
        g = head_groups(heads, groups)
        x4 = xa
        dt4 = np.broadcast_to(effective_dt(dta, bias, dt_softplus)[..., None], xa.shape)
        A4 = np.broadcast_to(Aa[:, None, None], (heads, p, n))
        Bh, Ch = Ba[:, g], Ca[:, g]
        D4 = None if Da is None else np.broadcast_to(Da[:, None], (heads, p))
        z4 = za
    idx = slot_indices("state_indices", state_indices, batch, pool.shape[0])
    S = gather_rows(pool, idx, np.ones(batch, dtype=bool))
    S4 = S[:, None] if pool.ndim == 3 else S
    y, S_new = ssm_step(S4, x4, dt4, A4, Bh, Ch, D4, z4)
    if pool.ndim == 3:
        y, S_new = y[:, 0], S_new[:, 0]
    y[idx < 0] = 0.0
    return SelectiveStateUpdate(y, scatter_rows(pool, idx, S_new))
