"""Adapter for the recurrent kernels: the reference's preconditions, NumPy <-> torch, launches.

Each function has the contract of the reference op of the same name (spec/recurrent.md) and returns
the reference's NamedTuple: outputs float32, the new pool in the pool's dtype. Validation reuses the
reference's own helpers, so a malformed call fails with the oracle's message before any launch.
Inputs travel in their own dtype (float64/32/16, bfloat16; float8 is upcast exactly to float32) and
are converted inside the kernels; the pool is copied once and updated in place by the kernels, so the
op stays pure (RS-4). state_indices / cu_seqlens keep their offsets and strides (convert.metadata).
"""
from __future__ import annotations

import numpy as np

from kvconform.reference import dtypes
from kvconform.reference.recurrent.args import bool_flag, optional_float
from kvconform.reference.recurrent.slots import initial_flags, pool_input, slot_indices
from kvconform.reference.recurrent.varlen import cu_seqlens_input
from kvconform.reference.validation import check_shape, float_input, int_scalar, require

from ..convert import metadata, to_numpy, to_torch

_NATIVE = ("float64", "float32", "float16", "bfloat16")


def _t(a, dev):
    """A float input as a torch tensor in its own dtype (float8: exact upcast to float32)."""
    if a is None:
        return None
    a = np.asarray(a)
    if dtypes.dtype_name(a.dtype) not in _NATIVE:
        a = a.astype(np.float32)
    return to_torch(a, dev)


def _idx(state_indices, dev):
    return None if state_indices is None else metadata(state_indices, dev)


def causal_conv1d_update(dev, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
    """RS-10 .. RS-12; see reference.causal_conv1d_update. Returns ConvUpdate(out float32, new pool)."""
    import torch
    from kvconform.reference.recurrent.conv1d import ACTIVATIONS, ConvUpdate
    from . import conv1d as kern
    xa = float_input("x", x)
    require(xa.ndim in (2, 3), f"x must have rank 2 [B, C] or rank 3 [B, T, C], got shape {xa.shape}")
    single = xa.ndim == 2
    batch, channels = xa.shape[0], xa.shape[-1]
    w = float_input("weight", weight, 2, "[C, W]")
    check_shape("weight", w, (channels, None), "[C, W]")
    width = w.shape[1]
    require(width >= 1, f"weight must have at least one tap (W >= 1), got shape {w.shape}")
    pool = pool_input("conv_state", conv_state, 3, "[num_slots, C, W-1]")
    check_shape("conv_state", pool, (None, channels, width - 1), "[num_slots, C, W-1]")
    if bias is not None:
        check_shape("bias", float_input("bias", bias, 1, "[C]"), (channels,), "[C]")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    slot_indices("state_indices", state_indices, batch, pool.shape[0])
    xt = _t(x, dev)
    x3 = xt[:, None, :] if single else xt
    st = to_torch(pool, dev, copy=True)
    out = torch.empty(x3.shape, dtype=torch.float32, device=dev)
    kern.conv1d_update_(x3, st, _t(weight, dev), _t(bias, dev), _idx(state_indices, dev), out,
                        silu=activation == "silu")
    out = to_numpy(out)
    return ConvUpdate(out[:, 0] if single else out, to_numpy(st))


def selective_state_update(dev, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_indices=None):
    """RS-14 .. RS-16; see reference.selective_state_update. Returns SelectiveStateUpdate(out float32,
    new pool). Mamba1 runs as one head of P = D channels (views only, no data movement)."""
    import torch
    from kvconform.reference.recurrent.selective_state import SelectiveStateUpdate
    from . import selective_state as kern
    pool = pool_input("state", state, np.ndim(state), "")
    require(pool.ndim in (3, 4), f"state must have rank 3 [num_slots, D, N] (Mamba1) or rank 4 "
                                 f"[num_slots, H, P, N] (Mamba2), got shape {pool.shape}")
    softplus = bool_flag("dt_softplus", dt_softplus)
    if pool.ndim == 3:
        _, dim, n = pool.shape
        xa = float_input("x", x, 2, "[B, D]")
        batch = xa.shape[0]
        for name, arr, shape, lay in (("x", x, (batch, dim), "[B, D]"), ("dt", dt, (batch, dim), "[B, D]"),
                                      ("A", A, (dim, n), "[D, N]"), ("B", B, (batch, n), "[B, N]"),
                                      ("C", C, (batch, n), "[B, N]")):
            check_shape(name, float_input(name, arr, len(shape), lay), shape, lay)
        optional_float("D", D, (dim,), "[D]")
        optional_float("z", z, (batch, dim), "[B, D]")
        optional_float("dt_bias", dt_bias, (dim,), "[D]")
    else:
        _, heads, p, n = pool.shape
        xa = float_input("x", x, 3, "[B, H, P]")
        batch = xa.shape[0]
        check_shape("x", xa, (batch, heads, p), "[B, H, P]")
        check_shape("dt", float_input("dt", dt, 2, "[B, H]"), (batch, heads), "[B, H]")
        check_shape("A", float_input("A", A, 1, "[H]"), (heads,), "[H]")
        Ba = float_input("B", B, 3, "[B, G, N]")
        groups = Ba.shape[1]
        check_shape("B", Ba, (batch, groups, n), "[B, G, N]")
        require(groups >= 1 and heads % groups == 0,
                f"B must have a group count G that divides H = {heads}, got G = {groups}")
        check_shape("C", float_input("C", C, 3, "[B, G, N]"), (batch, groups, n), "[B, G, N]")
        optional_float("D", D, (heads,), "[H]")
        optional_float("z", z, (batch, heads, p), "[B, H, P]")
        optional_float("dt_bias", dt_bias, (heads,), "[H]")
    slot_indices("state_indices", state_indices, batch, pool.shape[0])

    st = to_torch(pool, dev, copy=True)
    xt, dtt, At, Bt, Ct = (_t(a, dev) for a in (x, dt, A, B, C))
    Dt, zt, bt = _t(D, dev), _t(z, dev), _t(dt_bias, dev)
    if pool.ndim == 3:   # one head of P = D channels: per-channel dt, A, D, dt_bias
        st4, x3, dt3, A3 = st[:, None], xt[:, None], dtt[:, None], At[None]
        B3, C3 = Bt[:, None], Ct[:, None]
        D2 = None if Dt is None else Dt[None]
        b2 = None if bt is None else bt[None]
        z3 = None if zt is None else zt[:, None]
    else:                # per-head scalars broadcast over P (and N) through stride-0 views
        _, heads, p, n = pool.shape
        st4, x3, B3, C3, z3 = st, xt, Bt, Ct, zt
        dt3 = dtt[:, :, None].expand(batch, heads, p)
        A3 = At[:, None, None].expand(heads, p, n)
        D2 = None if Dt is None else Dt[:, None].expand(heads, p)
        b2 = None if bt is None else bt[:, None].expand(heads, p)
    out = torch.empty(x3.shape, dtype=torch.float32, device=dev)
    kern.selective_state_update_(st4, x3, dt3, A3, B3, C3, D2, z3, b2, _idx(state_indices, dev), out,
                                 dt_softplus=softplus)
    out = to_numpy(out)
    return SelectiveStateUpdate(out[:, 0] if pool.ndim == 3 else out, to_numpy(st))


def _flags(has_initial_state, seqs, dev):
    """has_initial_state as a uint8 view (same offset/strides, no copy), or None (all True)."""
    initial_flags("has_initial_state", has_initial_state, seqs)
    if has_initial_state is None:
        return None
    return to_torch(np.asarray(has_initial_state).view(np.uint8), dev)


def ssd_chunked_scan(dev, state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                     has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False, num_snapshots=0):
    """RS-17 .. RS-19; see reference.ssd_chunked_scan. Returns SSDScan(out float32 [T, H, P], new pool,
    snapshots [S, K, H, P, N] in the pool dtype; r > L_s and padding sequences are zeros)."""
    import torch
    from kvconform.reference.recurrent.ssd_scan import SSDScan
    from . import ssd_scan as kern
    pool = pool_input("state", state, 4, "[num_slots, H, P, N]")
    num_slots, heads, p, n = pool.shape
    xa = float_input("x", x, 3, "[T, H, P]")
    tokens = xa.shape[0]
    check_shape("x", xa, (tokens, heads, p), "[T, H, P]")
    check_shape("dt", float_input("dt", dt, 2, "[T, H]"), (tokens, heads), "[T, H]")
    check_shape("A", float_input("A", A, 1, "[H]"), (heads,), "[H]")
    Ba = float_input("B", B, 3, "[T, G, N]")
    groups = Ba.shape[1]
    check_shape("B", Ba, (tokens, groups, n), "[T, G, N]")
    require(groups >= 1 and heads % groups == 0,
            f"B must have a group count G that divides H = {heads}, got G = {groups}")
    check_shape("C", float_input("C", C, 3, "[T, G, N]"), (tokens, groups, n), "[T, G, N]")
    cu = cu_seqlens_input(cu_seqlens, tokens)
    seqs = cu.shape[0] - 1
    chunk = int_scalar("chunk_size", chunk_size, minimum=1)
    k_snap = int_scalar("num_snapshots", num_snapshots, minimum=0)
    slot_indices("state_indices", state_indices, seqs, num_slots)
    flags = _flags(has_initial_state, seqs, dev)
    optional_float("D", D, (heads,), "[H]")
    optional_float("z", z, (tokens, heads, p), "[T, H, P]")
    optional_float("dt_bias", dt_bias, (heads,), "[H]")
    softplus = bool_flag("dt_softplus", dt_softplus)

    st = to_torch(pool, dev, copy=True)
    out = torch.empty((tokens, heads, p), dtype=torch.float32, device=dev)
    snaps = torch.zeros((seqs, k_snap, heads, p, n), dtype=st.dtype, device=dev)
    kern.ssd_chunked_scan_(st, *(_t(a, dev) for a in (x, dt, A, B, C)), metadata(cu_seqlens, dev),
                           _idx(state_indices, dev), flags, _t(D, dev), _t(z, dev), _t(dt_bias, dev), out,
                           snaps, chunk_size=chunk, dt_softplus=softplus)
    return SSDScan(to_numpy(out), to_numpy(st), to_numpy(snaps))


def rwkv6_wkv(dev, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
    """RS-20 (packing, indices and fresh state as RS-17, RS-5); see reference.rwkv6_wkv. Returns
    WKV6(out float32 [T, H, V], new pool [num_slots, H, K, V] in the pool dtype)."""
    import torch
    from kvconform.reference.recurrent.rwkv6 import WKV6
    from . import rwkv6 as kern
    pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
    num_slots, heads, dk, dv = pool.shape
    ra = float_input("r", r, 3, "[T, H, K]")
    tokens = ra.shape[0]
    check_shape("r", ra, (tokens, heads, dk), "[T, H, K]")
    check_shape("k", float_input("k", k, 3, "[T, H, K]"), (tokens, heads, dk), "[T, H, K]")
    check_shape("w", float_input("w", w, 3, "[T, H, K]"), (tokens, heads, dk), "[T, H, K]")
    check_shape("v", float_input("v", v, 3, "[T, H, V]"), (tokens, heads, dv), "[T, H, V]")
    check_shape("u", float_input("u", u, 2, "[H, K]"), (heads, dk), "[H, K]")
    cu = cu_seqlens_input(cu_seqlens, tokens)
    seqs = cu.shape[0] - 1
    slot_indices("state_indices", state_indices, seqs, num_slots)
    flags = _flags(has_initial_state, seqs, dev)

    st = to_torch(pool, dev, copy=True)
    out = torch.empty((tokens, heads, dv), dtype=torch.float32, device=dev)
    kern.rwkv6_wkv_(st, *(_t(a, dev) for a in (r, k, v, w, u)), metadata(cu_seqlens, dev),
                    _idx(state_indices, dev), flags, out)
    return WKV6(to_numpy(out), to_numpy(st))
