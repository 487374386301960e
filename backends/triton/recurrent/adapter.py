"""Adapter for the recurrent kernels: the reference's preconditions, NumPy <-> torch, launches.

Each function has the contract of the reference op of the same name (spec/recurrent.md) and returns
the reference's NamedTuple: outputs float32, the new pool in the pool's dtype. Validation is the
reference's public `validate_*` function of the op, so a malformed call fails with the oracle's message
before any launch.
Inputs travel in their own dtype (float64/32/16, bfloat16; float8 is upcast exactly to float32) and
are converted inside the kernels; the pool is copied once and updated in place by the kernels, so the
op stays pure (RS-4). state_indices / cu_seqlens keep their offsets and strides (convert.metadata).
"""
from __future__ import annotations

import numpy as np

from kvconform.reference import dtypes
from kvconform.reference.recurrent import (WKV6, ConvUpdate, GatedDeltaScan, GatedDeltaUpdate,
                                           SelectiveStateUpdate, SSDScan, validate_causal_conv1d_update,
                                           validate_gated_delta_rule_chunked, validate_gated_delta_rule_update,
                                           validate_rwkv6_wkv, validate_selective_state_update,
                                           validate_ssd_chunked_scan)

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
    from . import conv1d as kern
    call = validate_causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                         state_indices=state_indices)
    xt = _t(x, dev)
    x3 = xt[:, None, :] if call.single else xt
    st = to_torch(call.conv_state, dev, copy=True)
    out = torch.empty(x3.shape, dtype=torch.float32, device=dev)
    kern.conv1d_update_(x3, st, _t(weight, dev), _t(bias, dev), _idx(state_indices, dev), out,
                        silu=call.activation == "silu")
    out = to_numpy(out)
    return ConvUpdate(out[:, 0] if call.single else out, to_numpy(st))


def selective_state_update(dev, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_indices=None):
    """RS-14 .. RS-16; see reference.selective_state_update. Returns SelectiveStateUpdate(out float32,
    new pool). Mamba1 runs as one head of P = D channels (views only, no data movement)."""
    import torch
    from . import selective_state as kern
    call = validate_selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                           dt_softplus=dt_softplus, state_indices=state_indices)
    pool, batch = call.state, call.state_indices.shape[0]
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
                                 dt_softplus=call.dt_softplus)
    out = to_numpy(out)
    return SelectiveStateUpdate(out[:, 0] if pool.ndim == 3 else out, to_numpy(st))


def _flags(has_initial_state, dev):
    """has_initial_state (already validated) as a uint8 view (same offset/strides, no copy), or None
    (all True)."""
    if has_initial_state is None:
        return None
    return to_torch(np.asarray(has_initial_state).view(np.uint8), dev)


def ssd_chunked_scan(dev, state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                     has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False, num_snapshots=0):
    """RS-17 .. RS-19; see reference.ssd_chunked_scan. Returns SSDScan(out float32 [T, H, P], new pool,
    snapshots [S, K, H, P, N] in the pool dtype; r > L_s and padding sequences are zeros)."""
    import torch
    from . import ssd_scan as kern
    call = validate_ssd_chunked_scan(
        state, x, dt, A, B, C, cu_seqlens, chunk_size=chunk_size, state_indices=state_indices,
        has_initial_state=has_initial_state, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
        num_snapshots=num_snapshots)
    pool = call.state
    tokens, seqs = call.x.shape[0], call.cu_seqlens.shape[0] - 1
    _, heads, p, n = pool.shape
    st = to_torch(pool, dev, copy=True)
    out = torch.empty((tokens, heads, p), dtype=torch.float32, device=dev)
    snaps = torch.zeros((seqs, call.num_snapshots, heads, p, n), dtype=st.dtype, device=dev)
    kern.ssd_chunked_scan_(st, *(_t(a, dev) for a in (x, dt, A, B, C)), metadata(cu_seqlens, dev),
                           _idx(state_indices, dev), _flags(has_initial_state, dev), _t(D, dev),
                           _t(z, dev), _t(dt_bias, dev), out, snaps, chunk_size=call.chunk_size,
                           dt_softplus=call.dt_softplus)
    return SSDScan(to_numpy(out), to_numpy(st), to_numpy(snaps))


def rwkv6_wkv(dev, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
    """RS-20 (packing, indices and fresh state as RS-17, RS-5); see reference.rwkv6_wkv. Returns
    WKV6(out float32 [T, H, V], new pool [num_slots, H, K, V] in the pool dtype)."""
    import torch
    from . import rwkv6 as kern
    call = validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, state_indices=state_indices,
                              has_initial_state=has_initial_state)
    pool = call.state
    tokens, heads, dv = call.v.shape
    st = to_torch(pool, dev, copy=True)
    out = torch.empty((tokens, heads, dv), dtype=torch.float32, device=dev)
    kern.rwkv6_wkv_(st, *(_t(a, dev) for a in (r, k, v, w, u)), metadata(cu_seqlens, dev),
                    _idx(state_indices, dev), _flags(has_initial_state, dev), out)
    return WKV6(to_numpy(out), to_numpy(st))


def gated_delta_rule_update(dev, q, k, v, g, beta, state, *, scale=None, use_qk_l2norm=False, state_indices=None):
    """RS-28 .. RS-31; see reference.gated_delta_rule_update. Returns GatedDeltaUpdate(out float32
    [B, H, V], new pool [num_slots, H, K, V] in the pool dtype)."""
    import torch
    from . import gated_delta as kern
    call = validate_gated_delta_rule_update(q, k, v, g, beta, state, scale=scale, use_qk_l2norm=use_qk_l2norm,
                                            state_indices=state_indices)
    st = to_torch(call.state, dev, copy=True)
    out = torch.empty(call.v.shape, dtype=torch.float32, device=dev)
    kern.gated_delta_rule_update_(st, *(_t(a, dev) for a in (q, k, v, g, beta)), _idx(state_indices, dev), out,
                                  scale=call.scale, norm=call.use_qk_l2norm)
    return GatedDeltaUpdate(to_numpy(out), to_numpy(st))


def gated_delta_rule_chunked(dev, q, k, v, g, beta, state, cu_seqlens, *, chunk_size=64, scale=None,
                             use_qk_l2norm=False, state_indices=None, has_initial_state=None):
    """RS-32, RS-33 (packing, indices and fresh state as RS-17, RS-5); see
    reference.gated_delta_rule_chunked. Returns GatedDeltaScan(out float32 [T, H, V], new pool)."""
    import torch
    from . import gated_delta as kern
    call = validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, chunk_size=chunk_size,
                                             scale=scale, use_qk_l2norm=use_qk_l2norm,
                                             state_indices=state_indices, has_initial_state=has_initial_state)
    st = to_torch(call.state, dev, copy=True)
    out = torch.empty(call.v.shape, dtype=torch.float32, device=dev)
    kern.gated_delta_rule_chunked_(st, *(_t(a, dev) for a in (q, k, v, g, beta)), metadata(cu_seqlens, dev),
                                   _idx(state_indices, dev), _flags(has_initial_state, dev), out,
                                   scale=call.scale, chunk_size=call.chunk_size, norm=call.use_qk_l2norm)
    return GatedDeltaScan(to_numpy(out), to_numpy(st))


def recurrent_store_step(dev, seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs):
    """RS-21 .. RS-27; see reference.recurrent_store_step. The metadata is planned on the host (every check
    and refusal before any launch, RS-27); the pools are copied to the device once and their rows moved there
    by `store.move_rows` as 32-bit words (bit copies for float32 and float64 pools)."""
    import torch
    from kvconform.backends.store_moves import as_words, from_words, row_writes
    from kvconform.reference.recurrent.store_step import StoreStep, validate_recurrent_store_step
    from . import store as kern
    plan = validate_recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs)
    writes = row_writes(plan)
    src, dst = to_torch(writes.src, dev), to_torch(writes.dst, dev)
    pools, checkpoints = [], []
    for pool, rows in zip(plan.pool, writes.rows):
        words = to_torch(as_words(pool), dev, copy=True)
        taken = torch.zeros((writes.checkpoint_src.shape[0], words.shape[1]), dtype=torch.int32, device=dev)
        # the checkpoint reads the pool as it was (no command both checkpoints and moves rows)
        kern.move_rows(taken, words, words, to_torch(writes.checkpoint_src, dev),
                       torch.zeros_like(to_torch(writes.checkpoint_src, dev)))
        kern.move_rows(words, words, to_torch(rows, dev), src, dst)
        pools.append(from_words(to_numpy(words), pool))
        checkpoints.append(from_words(to_numpy(taken), pool))
    return StoreStep(plan.meta.seq_slot, plan.meta.seq_pos, pools[0], pools[1], plan.state_indices,
                     plan.has_initial_state, plan.checkpoint_pos, checkpoints[0], checkpoints[1])
