"""NumPy <-> kernel layouts for the recurrent Pallas kernels (spec/recurrent.md RS-2 .. RS-20).

Each function takes the reference's validated call (`validate_<op>` of kvconform.reference.recurrent:
one rule, one message) plus what only a TPU kernel needs, pads every axis to its bucket (see
`..bucketing`), converts to the kernel layout, runs the kernel and takes the real rows back out. Pools
are float32 on the kernel side (float64 pools are not claimed) and come back in the caller's dtype; rows
no call addresses are copied through float32 unchanged (RS-6).
"""
from __future__ import annotations

import numpy as np

from ....reference.recurrent.conv1d import ConvUpdate, ConvUpdateCall
from ....reference.recurrent.gated_delta import GatedDeltaCall, GatedDeltaScan, GatedDeltaUpdate
from ....reference.recurrent.rwkv6 import WKV6, WKV6Call
from ....reference.recurrent.selective_state import SelectiveStateCall, SelectiveStateUpdate
from ....reference.recurrent.ssd_scan import SSDScan, SSDScanCall
from ....reference.validation import require
from ..bucketing import HeadBuckets, embed, pow2, sublanes
from ..runtime import interpret_params, kernel

F32 = np.float32
#: VMEM budget of one head block's working set (bytes); the head block is the largest that fits
HEAD_BLOCK_BYTES = 2 ** 20
#: floors of the count buckets: Hypothesis' batches and sequence counts (1..3) all share one bucket, and
#: pools of up to 8 slots one pool shape. The pool is aliased to the new pool and only the rows of live
#: slots are DMA'd, so padding slots cost the copy into the padded array, not kernel work.
MIN_ROWS, MIN_TOKENS, MIN_SLOTS = 4, 128, 8


def _slots(idx: np.ndarray, rows: int) -> np.ndarray:
    """Slot per padded row: the real ones, then -1 (padding rows issue no DMA, RS-3)."""
    return embed(idx, (rows,), fill=-1, dtype=np.int32)


def _head_block(per_group: int, bytes_per_head: int) -> int:
    """Largest divisor of the per-group head count whose working set fits HEAD_BLOCK_BYTES (at least 1)."""
    return max(d for d in range(1, per_group + 1)
               if per_group % d == 0 and (d == 1 or d * bytes_per_head <= HEAD_BLOCK_BYTES))


def _sequences(cu: np.ndarray, idx: np.ndarray, from_state: np.ndarray, tokens: int):
    """Packed-sequence metadata padded to pow2(S, MIN_ROWS) entries of length 0 and slot -1 (RS-3, RS-17)."""
    seqs = cu.shape[0] - 1
    s_pad = pow2(seqs, MIN_ROWS)
    cu_k = np.full(s_pad + 1, tokens, np.int32)
    cu_k[:seqs + 1] = cu
    return s_pad, cu_k, _slots(idx, s_pad), embed(from_state.astype(np.int32), (s_pad,), dtype=np.int32)


def _unpack(per_seq: np.ndarray, cu: np.ndarray) -> np.ndarray:
    """[S_pad, L_pad, ...] per-sequence rows -> the packed [T, ...] token rows of the real sequences."""
    lengths = np.diff(cu)
    seq_of = np.repeat(np.arange(lengths.shape[0]), lengths)
    return per_seq[seq_of, np.arange(int(cu[-1])) - cu[seq_of]]


def causal_conv1d_update(call: ConvUpdateCall) -> ConvUpdate:
    """RS-10 .. RS-12. Pads batch rows to pow2(B, 4), channels to 8-row tiles, slots to a power of two >= MIN_SLOTS;
    padded channels have zero taps and bias. The kernel DMAs a [C, W-1] state row per slot, so W >= 2."""
    pool = call.conv_state
    B, T, C = call.x.shape
    width = call.weight.shape[1]
    require(width >= 2, f"weight must have W >= 2 taps for the Pallas kernel (a [C, W-1] state row "
                        f"is DMA'd per slot), got shape {call.weight.shape}")
    rows, channels, slots = pow2(B, MIN_ROWS), sublanes(C), pow2(pool.shape[0], MIN_SLOTS)
    bias = np.zeros(C) if call.bias is None else call.bias
    out, new_pool = kernel("conv1d")(
        embed(call.x, (rows, T, channels)), embed(pool, (slots, channels, width - 1)),
        embed(call.weight, (channels, width)), embed(bias[None], (1, channels)), _slots(call.state_indices, rows),
        silu=call.activation == "silu", interpret=interpret_params())
    out = np.asarray(out)[:B, :, :C]
    new_pool = np.asarray(new_pool)[:pool.shape[0], :C].astype(pool.dtype)
    return ConvUpdate(out[:, 0] if call.single else out, new_pool)


def selective_state_update(call: SelectiveStateCall) -> SelectiveStateUpdate:
    """RS-14 .. RS-16. Mamba1 runs as one head of P = D channels with per-channel dt and A (the kernel's
    broadcastable layouts); batch rows pad to pow2(B, 4), heads per group and groups to powers of two,
    P and N to 8-row tiles."""
    pool = call.state
    num_slots = pool.shape[0]
    batch = call.x.shape[0]
    mamba1 = pool.ndim == 3
    if mamba1:
        _, p, n = pool.shape
        heads = HeadBuckets(1)
        x, z = call.x[:, None], None if call.z is None else call.z[:, None]      # [B, 1, D]
        dt = call.dt[:, None]                                                    # [B, 1, D]: per channel
        A = call.A[None]                                                         # [1, D, N]
        Bm, Cm = call.B[:, None], call.C[:, None]                                # [B, 1, N]
        per_head = lambda a: None if a is None else a[None]                     # noqa: E731  [1, D]
    else:
        _, h, p, n = pool.shape
        heads = HeadBuckets(h, call.B.shape[1])
        x, z, Bm, Cm = call.x, call.z, call.B, call.C
        dt = call.dt[:, :, None]                                                 # [B, H, 1]: per head
        A = call.A[:, None, None]                                                # [H, 1, 1]
        per_head = lambda a: None if a is None else a[:, None]                  # noqa: E731  [H, 1]
    rows, pp, nn, hp = pow2(batch, MIN_ROWS), sublanes(p), sublanes(n), heads.padded_heads
    pd = pp if mamba1 else 1          # dt, dt_bias and D: per channel (Mamba1) or per head (Mamba2)

    def tokens(a, tail):  # [B, H, *] -> [rows, H', *tail]
        return embed(heads.pad(a, 1), (rows, hp) + tail)

    def params(a, tail):  # [H, *] -> [H', *tail], zeros when absent
        return np.zeros((hp,) + tail, F32) if a is None else embed(heads.pad(a, 0), (hp,) + tail)

    pool4 = pool.reshape(num_slots, -1, p, n)
    slots = pow2(num_slots, MIN_SLOTS)
    pool_k = embed(heads.pad(pool4, 1), (slots, hp, pp, nn))
    hb = _head_block(heads.padded_per_group, pp * nn * 4)
    out, new_pool = kernel("selective_state")(
        tokens(x, (pp,)), tokens(dt, (pd,)), params(per_head(call.dt_bias), (pd,)),
        params(A, (pp, nn) if mamba1 else (1, 1)),
        embed(heads.pad(Bm, 1, per_group=True), (rows, heads.padded_groups, nn)),
        embed(heads.pad(Cm, 1, per_group=True), (rows, heads.padded_groups, nn)),
        params(per_head(call.D), (pd,)), tokens(x if z is None else z, (pp,)), pool_k,
        _slots(call.state_indices, rows),
        heads_per_block=hb, softplus_dt=call.dt_softplus, gate=z is not None, interpret=interpret_params())
    out = heads.unpad(np.asarray(out)[:batch, :, :p], 1)
    new_pool = heads.unpad(np.asarray(new_pool)[:num_slots, :, :p, :n], 1).reshape(pool.shape)
    return SelectiveStateUpdate(out[:, 0] if mamba1 else out, new_pool.astype(pool.dtype))


def ssd_chunked_scan(call: SSDScanCall) -> SSDScan:
    """RS-17 .. RS-19. chunk_size is a hint (RS-18): the kernel uses Q = its power-of-two ceiling clamped
    to [8, 64] (one sublane tile at least, VMEM-sized at most). Token arrays go head-major with zero rows
    past T (at least Q of them, so every chunk window DMA is in bounds); the chunk-major output is unpacked
    here. K snapshots pad to a power of two >= 4 (extra ones are dropped)."""
    pool = call.state
    num_slots, h, p, n = pool.shape
    tokens = call.x.shape[0]
    heads = HeadBuckets(h, call.B.shape[1])
    cu = call.cu_seqlens
    lengths = np.diff(cu)
    Q = min(max(pow2(call.chunk_size), 8), 64)
    nc = pow2(-(-int(lengths.max(initial=0)) // Q))
    t_pad = pow2(tokens + Q, MIN_TOKENS)
    pp, nn, hp = sublanes(p), sublanes(n), heads.padded_heads
    K = pow2(call.num_snapshots, 4) if call.num_snapshots else 0
    s_pad, cu_k, slots, init = _sequences(cu, call.state_indices, call.has_initial_state, tokens)

    def head_major(a, tail, per_group=False):  # [T, H (or G), *] -> [H' (or G'), t_pad, *tail]
        width = heads.padded_groups if per_group else hp
        return np.swapaxes(embed(heads.pad(a, 1, per_group=per_group), (t_pad, width) + tail), 0, 1)

    def column(a):  # [H] -> [H', 1]
        return np.zeros((hp, 1), F32) if a is None else embed(heads.pad(a, 0)[:, None], (hp, 1))

    x_k = head_major(call.x, (pp,))
    hb = _head_block(heads.padded_per_group, (pp * nn + Q * Q + 2 * Q * pp) * 4)
    result = kernel("ssd_scan")(
        x_k, head_major(call.dt, ()), head_major(call.B, (nn,), True), head_major(call.C, (nn,), True),
        x_k if call.z is None else head_major(call.z, (pp,)), column(call.A), column(call.dt_bias),
        column(call.D), embed(heads.pad(pool, 1), (pow2(num_slots, MIN_SLOTS), hp, pp, nn)), cu_k, slots, init,
        np.array([call.z is not None, call.dt_softplus], np.int32),
        chunk=Q, num_chunks=nc, heads_per_block=hb, num_snapshots=K, interpret=interpret_params())
    # chunk-major [S' * nc, H', Q, P'] -> per sequence [S', nc * Q, H', P'] -> packed tokens
    per_seq = np.asarray(result[0]).reshape(s_pad, nc, hp, Q, pp).transpose(0, 1, 3, 2, 4)
    out = heads.unpad(_unpack(per_seq.reshape(s_pad, nc * Q, hp, pp), cu)[:, :, :p], 1)
    new_pool = heads.unpad(np.asarray(result[1])[:num_slots, :, :p, :n], 1).astype(pool.dtype)
    seqs = cu.shape[0] - 1
    if K:
        snaps = np.asarray(result[2])[:seqs, :call.num_snapshots, :, :p, :n]
        snaps = heads.unpad(snaps, 2).astype(pool.dtype)
    else:
        snaps = np.zeros((seqs, 0, h, p, n), pool.dtype)
    return SSDScan(out, new_pool, snaps)


def rwkv6_wkv(call: WKV6Call) -> WKV6:
    """RS-20 over packed sequences (RS-17). Token windows of Q = the power-of-two ceiling of the longest
    sequence, clamped to [8, 64]; heads pad to a power of two, K and V to 8-row tiles (padded k and v are
    zero, so padded state rows and columns stay zero); token arrays get zero rows past T (at least Q)."""
    pool = call.state
    num_slots, h, dk, dv = pool.shape
    tokens = call.r.shape[0]
    heads = HeadBuckets(h)
    cu = call.cu_seqlens
    max_len = int(np.diff(cu).max(initial=0))
    Q = min(pow2(max_len, 8), 64)
    nc = pow2(-(-max_len // Q))
    t_pad = pow2(tokens + Q, MIN_TOKENS)
    kk, vv, hp = sublanes(dk), sublanes(dv), heads.padded_heads
    s_pad, cu_k, slots, init = _sequences(cu, call.state_indices, call.has_initial_state, tokens)

    def padded(a, width):  # [T, H, *] -> [t_pad, H', width]
        return embed(heads.pad(a, 1), (t_pad, hp, width))

    hb = _head_block(hp, kk * vv * 4)
    out, new_pool = kernel("rwkv6")(
        padded(call.r, kk), padded(call.k, kk), padded(call.v, vv), padded(call.w, kk),
        embed(heads.pad(call.u, 0), (hp, kk)), embed(heads.pad(pool, 1), (pow2(num_slots, MIN_SLOTS), hp, kk, vv)),
        cu_k, slots, init, window=Q, num_windows=nc, heads_per_block=hb, interpret=interpret_params())
    per_seq = np.asarray(out).reshape(s_pad, nc * Q, hp, vv)
    out = heads.unpad(_unpack(per_seq, cu)[:, :, :dv], 1)
    new_pool = heads.unpad(np.asarray(new_pool)[:num_slots, :, :dk, :dv], 1).astype(pool.dtype)
    return WKV6(out, new_pool)


def gated_delta_rule_update(call: GatedDeltaCall) -> GatedDeltaUpdate:
    """RS-28 .. RS-31. Batch rows pad to pow2(B, 4); state heads pad per q/k group (HeadBuckets with the
    q/k heads as groups, so head h keeps reading q/k head h // (H // Hk)); K and V to 8-row tiles
    (padded k, v are zero, so padded state rows and columns stay zero and add nothing to a real output)."""
    pool = call.state
    num_slots, h, dk, dv = pool.shape
    batch = call.v.shape[0]
    heads = HeadBuckets(h, call.q.shape[1])
    rows, kk, vv, hp = pow2(batch, MIN_ROWS), sublanes(dk), sublanes(dv), heads.padded_heads

    def qk(a):  # [B, Hk, K] -> [rows, Hk', K']
        return embed(heads.pad(a, 1, per_group=True), (rows, heads.padded_groups, kk))

    def per_head(a, tail):  # [B, H, *] -> [rows, H', *tail]
        return embed(heads.pad(a, 1), (rows, hp) + tail)

    hb = _head_block(heads.padded_per_group, kk * vv * 4)
    out, new_pool = kernel("gated_delta_update")(
        qk(call.q), qk(call.k), per_head(call.v, (vv,)), per_head(call.g[:, :, None], (1,)),
        per_head(call.beta[:, :, None], (1,)), np.full((1, 1), call.scale, F32),
        embed(heads.pad(pool, 1), (pow2(num_slots, MIN_SLOTS), hp, kk, vv)), _slots(call.state_indices, rows),
        heads_per_block=hb, norm=call.use_qk_l2norm, interpret=interpret_params())
    out = heads.unpad(np.asarray(out)[:batch, :, :dv], 1)
    new_pool = heads.unpad(np.asarray(new_pool)[:num_slots, :, :dk, :dv], 1).astype(pool.dtype)
    return GatedDeltaUpdate(out, new_pool)


def gated_delta_rule_chunked(call: GatedDeltaCall) -> GatedDeltaScan:
    """RS-32, RS-33 over packed sequences (RS-17). chunk_size is a hint (RS-33): the kernel's chunks are
    Q = its power-of-two ceiling clamped to [8, 64]. Token arrays stay token-major with zero rows past T
    (at least Q of them, so every chunk window DMA is in bounds); heads pad per q/k group, K and V to
    8-row tiles; the chunk-major output is unpacked here."""
    pool = call.state
    num_slots, h, dk, dv = pool.shape
    tokens = call.v.shape[0]
    heads = HeadBuckets(h, call.q.shape[1])
    cu = call.cu_seqlens
    lengths = np.diff(cu)
    Q = min(max(pow2(call.chunk_size), 8), 64)
    nc = pow2(-(-int(lengths.max(initial=0)) // Q))
    t_pad = pow2(tokens + Q, MIN_TOKENS)
    kk, vv, hp = sublanes(dk), sublanes(dv), heads.padded_heads
    s_pad, cu_k, slots, init = _sequences(cu, call.state_indices, call.has_initial_state, tokens)

    def qk(a):  # [T, Hk, K] -> [t_pad, Hk', K']
        return embed(heads.pad(a, 1, per_group=True), (t_pad, heads.padded_groups, kk))

    def per_head(a, tail):  # [T, H, *] -> [t_pad, H', *tail]
        return embed(heads.pad(a, 1), (t_pad, hp) + tail)

    hb = _head_block(heads.padded_per_group, (kk * vv + 3 * Q * Q + 2 * Q * vv) * 4)
    out, new_pool = kernel("gated_delta_chunked")(
        qk(call.q), qk(call.k), per_head(call.v, (vv,)), per_head(call.g, ()), per_head(call.beta, ()),
        np.full((1, 1), call.scale, F32), embed(heads.pad(pool, 1), (pow2(num_slots, MIN_SLOTS), hp, kk, vv)),
        cu_k, slots, init, chunk=Q, num_chunks=nc, heads_per_block=hb, norm=call.use_qk_l2norm,
        interpret=interpret_params())
    per_seq = np.asarray(out).reshape(s_pad, nc * Q, hp, vv)
    out = heads.unpad(_unpack(per_seq, cu)[:, :, :dv], 1)
    new_pool = heads.unpad(np.asarray(new_pool)[:num_slots, :, :dk, :dv], 1).astype(pool.dtype)
    return GatedDeltaScan(out, new_pool)


def recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs):
    """RS-21 .. RS-27; see reference.recurrent_store_step. The metadata is planned on the host (every check
    and refusal before any launch, RS-27); pool rows move on the device as 32-bit words (`store` kernel).

    Buckets, so that a run compiles few kernels: rows of words are padded to a power of two (>= 128 lanes),
    pool rows to a power of two (>= 8) plus one spare row, and the write list to a power of two (>= 4);
    padding writes zero the spare row, which is cut off with the other padding."""
    from kvconform.backends.store_moves import as_words, from_words, row_writes
    from kvconform.reference.recurrent.store_step import StoreStep, validate_recurrent_store_step
    plan = validate_recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs)
    writes = row_writes(plan)
    pools, checkpoints = [], []
    for pool, rows in zip(plan.pool, writes.rows):
        words = as_words(pool)
        lanes = pow2(words.shape[1], 128)
        padded_pool = embed(words, (pow2(words.shape[0], 8) + 1, lanes), dtype=np.int32)
        given = embed(rows, (pow2(rows.shape[0], 8), lanes), dtype=np.int32)
        new = _move_rows(padded_pool, padded_pool, given, writes.src, writes.dst)
        taken = _move_rows(np.zeros((2, lanes), np.int32), padded_pool, given, writes.checkpoint_src,
                           np.zeros_like(writes.checkpoint_src))
        n, R = words.shape
        pools.append(from_words(new[:n, :R], pool))
        checkpoints.append(from_words(taken[:writes.checkpoint_src.shape[0], :R], pool))
    return StoreStep(plan.meta.seq_slot, plan.meta.seq_pos, pools[0], pools[1], plan.state_indices,
                     plan.has_initial_state, plan.checkpoint_pos, checkpoints[0], checkpoints[1])


def _move_rows(target: np.ndarray, pool: np.ndarray, rows: np.ndarray, src: np.ndarray, dst: np.ndarray):
    """The store kernel on padded word arrays; target's last row is the spare that padding writes zero."""
    if src.shape[0] == 0:
        return target
    m = pow2(src.shape[0], 4)
    spare = target.shape[0] - 1
    src_k = embed(src, (m,), fill=-1, dtype=np.int32)
    dst_k = embed(dst, (m,), fill=spare, dtype=np.int32)
    out = kernel("store_rows")(target, pool, rows, src_k, dst_k, interpret=interpret_params())
    return np.asarray(out)
