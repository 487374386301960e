"""Eviction planning as Pallas TPU kernels (spec/eviction.md EV-3 .. EV-16), one sequence per call.

The state is float64 (EV-3) and its arithmetic is pinned bit for bit (NU-EV1, NU-EV2), which a TPU has no
float unit for: every float64 travels as its two 32-bit words and is added, divided by a count and
compared with integer vector operations (`float64_words`). Two kernels:

- `accumulate_kernel` (EV-4, EV-5): tokens laid out [R, 128] (token t at row t // 128, lane t % 128), grid
  over blocks of 8 rows (BlockSpec-pipelined into VMEM); per token one float64 addition
  `acc_t + step_t` (acc_t = +0 for a new token, exactly the spec's `[acc, 0 x k] + step`) and the count
  `counts_t + k` or `L_new - t`.
- `plan_kernel` (EV-6 .. EV-15): the state in the block layout [NB, BP] (row b = logical block b, lane j =
  token b*B + j; padding lanes and rows hold acc +0 and count 1, which add exactly +0 to a block score), all
  of it one VMEM block. In order:
  1. block scores reduced per block in VMEM (EV-6, EV-7): tau = acc / count (norm_sum) for every token at
     once, then beta_b summed over the lanes j = 0, 1, ..., B-1 left to right from +0, one float64
     addition per lane, as EV-7 pins the order;
  2. selection (EV-10) without a sort: the rank of candidate i is #{candidate j : (beta_j, j) < (beta_i, i)},
     a strict total order (ties to the lower logical index), so "rank < k" picks exactly the k smallest.
     The [NB, W] comparison runs in lane chunks of W <= 128 candidates j, each chunk's scores moved from
     the sublane to the lane axis by a select against the identity and a sublane sum (exact: one nonzero
     word per column);
  3. delta(b) = evicted blocks before b (EV-14), the same way: an evicted block's place in the ascending
     list (EV-12), a survivor's destination b - delta(b) (EV-13); a moved survivor's place in the rotation
     plan (EV-14) is the count of moved survivors before it. Each output position then picks the one block
     whose place it is (a select and a sublane sum per lane chunk, exact), with no scalar loop;
  4. each surviving block's state row goes to row b - delta(b) (EV-15) as a one-hot product per chunk of
     destination rows, the 32-bit words through the MXU as 16-bit halves in float32 (exact: one nonzero
     term per output). A scalar loop of one step per block cost ~8 ms a block in interpret mode (a
     thousand-block plan ran 8.6 s, now 0.34 s; measured on 2 shared cores).
  Inputs are never written (EV-16). The adapter skips the call when k = 0 (EV-9: nothing moves).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import float64_words as f64
from .tiling import LANES, SUBLANES

#: plan meta (SMEM): number of blocks, block size B, evictable range [first, last), k, aggregation (1: norm_sum)
_NB, _B, _FIRST, _LAST, _K, _NORM = range(6)
#: candidates compared per lane chunk of the selection
_CHUNK = LANES


def accumulate_kernel(acc_hi, acc_lo, counts, step_hi, step_lo, meta, *, interpret):
    """EV-4, EV-5 on word arrays.

    acc_hi, acc_lo, step_hi, step_lo, counts: i32[R, 128] (R a multiple of 8; token t at [t // 128, t % 128];
    acc and counts past L_old and step past L_new are never used); meta: i32[2] = (L_old, L_new).
    Returns (acc' hi, acc' lo, counts') i32[R, 128]; entries of tokens >= L_new are unspecified."""
    R = acc_hi.shape[0]
    if acc_hi.shape[1] != LANES or R % SUBLANES:
        raise ValueError(f"token arrays must be [R, {LANES}] with R a multiple of {SUBLANES}, got {acc_hi.shape}")
    block = pl.BlockSpec((SUBLANES, LANES), lambda r, *_: (r, 0))
    grid_spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(R // SUBLANES,), in_specs=[block] * 5,
                                             out_specs=[block] * 3)
    out = jax.ShapeDtypeStruct((R, LANES), jnp.int32)
    call = pl.pallas_call(_accumulate, grid_spec=grid_spec, out_shape=[out] * 3, interpret=interpret,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))
    return call(meta, acc_hi, acc_lo, counts, step_hi, step_lo)


def _accumulate(meta_ref, acc_hi, acc_lo, counts, step_hi, step_lo, out_hi, out_lo, out_counts):
    n_old, n_new = meta_ref[0], meta_ref[1]
    shape = (SUBLANES, LANES)
    t = (pl.program_id(0) * SUBLANES + lax.broadcasted_iota(jnp.int32, shape, 0)) * LANES \
        + lax.broadcasted_iota(jnp.int32, shape, 1)
    old = t < n_old
    hi, lo = f64.add(jnp.where(old, acc_hi[...], 0), jnp.where(old, acc_lo[...], 0), step_hi[...], step_lo[...])
    out_hi[...], out_lo[...] = hi, lo
    out_counts[...] = jnp.where(old, counts[...] + (n_new - n_old), n_new - t)      # EV-5


def plan_kernel(table, acc_hi, acc_lo, counts, meta, *, interpret):
    """EV-6 .. EV-15 on the block layout.

    table: i32[NB] physical pages of the logical blocks (entries >= num_blocks unused);
    acc_hi, acc_lo, counts: i32[NB, BP] (row b: tokens b*B .. b*B+B-1 in lanes 0 .. B-1; every other entry
    acc +0, count 1); meta: i32[6] = (num_blocks, B, first, last, k, norm_sum); NB a multiple of 8 and of
    the chunk or at most 128, k >= 1 (the adapter handles k = 0).
    Returns (evicted i32[NB], table' i32[NB], rotated pages i32[NB], rotation deltas i32[NB], moved i32[1],
    acc' hi, acc' lo, counts' i32[NB, BP]): the first k, num_blocks - k, moved, moved entries and the first
    num_blocks - k state rows are the plan; the rest is unspecified."""
    NB, BP = acc_hi.shape
    chunk = min(NB, _CHUNK)
    if NB % SUBLANES or NB % chunk:
        raise ValueError(f"block rows NB={NB} must be a multiple of {SUBLANES} and of {chunk}")
    vmem = pl.BlockSpec((NB, BP), lambda *_: (0, 0))
    column = pl.BlockSpec((NB, 1), lambda *_: (0, 0))
    row = pl.BlockSpec((1, NB), lambda *_: (0, 0))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(), in_specs=[column] + [vmem] * 3,
        out_specs=[row] * 4 + [pl.BlockSpec((1, LANES), lambda *_: (0, 0))] + [vmem] * 3,
        scratch_shapes=[pltpu.VMEM((1, NB), jnp.int32)])
    ints = jax.ShapeDtypeStruct((1, NB), jnp.int32)
    state = jax.ShapeDtypeStruct((NB, BP), jnp.int32)
    call = pl.pallas_call(functools.partial(_plan, chunk=chunk), grid_spec=grid_spec, interpret=interpret,
                          out_shape=[ints] * 4 + [jax.ShapeDtypeStruct((1, LANES), jnp.int32)] + [state] * 3)
    evicted, table_out, rot_idx, rot_delta, moved, *rest = call(meta, table.reshape(NB, 1), acc_hi, acc_lo, counts)
    return (evicted.reshape(NB), table_out.reshape(NB), rot_idx.reshape(NB), rot_delta.reshape(NB),
            moved[0, :1], *rest)


def _column(x, j):
    """x[:, j] of an i32[NB, BP] value as [NB, 1], for a traced lane j (select and a lane sum: exact)."""
    lane = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    return jnp.sum(jnp.where(lane == j, x, 0), axis=1, keepdims=True)


def _to_lanes(col, c0, chunk: int):
    """col[c0 : c0 + chunk] of an i32[NB, 1] value as a [1, chunk] row (select against the identity and a
    sublane sum: exact, one nonzero word per column)."""
    rows = lax.broadcasted_iota(jnp.int32, (col.shape[0], chunk), 0)
    cols = c0 + lax.broadcasted_iota(jnp.int32, (col.shape[0], chunk), 1)
    return jnp.sum(jnp.where(rows == cols, col, 0), axis=0, keepdims=True)


def _before(col, chunk: int):
    """Exclusive prefix count of an i32[NB, 1] 0/1 column: out[b] = col[0] + ... + col[b-1], by lane chunks."""
    NB = col.shape[0]
    index = lax.broadcasted_iota(jnp.int32, (NB, 1), 0)

    def body(c, acc):
        c0 = c * chunk
        j = c0 + lax.broadcasted_iota(jnp.int32, (1, chunk), 1)
        return acc + jnp.sum(jnp.where(j < index, _to_lanes(col, c0, chunk), 0), axis=1, keepdims=True)

    return lax.fori_loop(0, NB // chunk, body, jnp.zeros((NB, 1), jnp.int32))


def _gather_rows(one_hot, x):
    """one_hot f32[R, NB] (at most one 1 per row) times the i32[NB, BP] words x, exactly: the words go through
    the MXU as 16-bit halves in float32 (exact), and are put back together."""
    lo = (x & 0xFFFF).astype(jnp.float32)
    hi = lax.shift_right_logical(x, 16).astype(jnp.float32)
    dot = functools.partial(jnp.dot, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    return (dot(one_hot, hi).astype(jnp.int32) << 16) | dot(one_hot, lo).astype(jnp.int32)


def _plan(meta_ref, table, acc_hi, acc_lo, counts, evicted_ref, table_out, rot_idx, rot_delta, moved_ref,
          out_hi, out_lo, out_counts, dest_row, *, chunk: int):
    NB = acc_hi.shape[0]
    B, first, last, k = meta_ref[_B], meta_ref[_FIRST], meta_ref[_LAST], meta_ref[_K]

    # 1. EV-6, EV-7: tau per token, then beta_b = tau_{bB} + ... + tau_{bB+B-1} left to right from +0
    hi, lo = acc_hi[...], acc_lo[...]
    div_hi, div_lo = f64.div_count(hi, lo, counts[...])
    norm = meta_ref[_NORM] == 1
    tau_hi, tau_lo = jnp.where(norm, div_hi, hi), jnp.where(norm, div_lo, lo)

    def add_lane(j, beta):
        return f64.add(beta[0], beta[1], _column(tau_hi, j), _column(tau_lo, j))

    zeros = jnp.zeros((NB, 1), jnp.int32)
    beta_hi, beta_lo = lax.fori_loop(0, B, add_lane, (zeros, zeros))

    # 2. EV-10: rank among the candidates [first, last) under (beta, index); the k lowest go
    key_hi, key_lo = f64.order_key(beta_hi, beta_lo)
    index = lax.broadcasted_iota(jnp.int32, (NB, 1), 0)
    candidate = (index >= first) & (index < last)

    def rank_chunk(c, rank):
        c0 = c * chunk
        j = c0 + lax.broadcasted_iota(jnp.int32, (1, chunk), 1)
        jh, jl = _to_lanes(key_hi, c0, chunk), _to_lanes(key_lo, c0, chunk)
        ties = (jh == key_hi) & (jl == key_lo) & (j < index)
        before = f64.less(jh, jl, key_hi, key_lo) | ties
        return rank + jnp.sum((before & (j >= first) & (j < last)).astype(jnp.int32), axis=1, keepdims=True)

    rank = lax.fori_loop(0, NB // chunk, rank_chunk, zeros)
    evict = candidate & (rank < k)

    # 3. EV-12 .. EV-14, vectorized: delta(b) = evicted blocks before b is both an evicted block's place in
    # the ascending list (EV-12) and a survivor's shift (destination b - delta(b), EV-13, EV-14); a moved
    # survivor's place in the rotation plan is the number of moved survivors before it
    kept = ~evict & (index < meta_ref[_NB])
    delta = _before(evict.astype(jnp.int32), chunk)
    moves = kept & (delta > 0)
    place = _before(moves.astype(jnp.int32), chunk)
    dest = jnp.where(kept, index - delta, -1)
    pages = table[...]

    def scatter_chunk(c, carry):
        """Outputs c*chunk .. c*chunk + chunk - 1: each is the one block whose place is its position."""
        c0 = pl.multiple_of(c * chunk, chunk)
        r = c0 + lax.broadcasted_iota(jnp.int32, (1, chunk), 1)
        lanes = pl.ds(c0, chunk)

        def pick(sel, value):   # [NB, chunk] selection with at most one block per column -> [1, chunk]
            return jnp.sum(jnp.where(sel, value, 0), axis=0, keepdims=True)

        evicted_ref[:, lanes] = pick(evict & (delta == r), index)
        table_out[:, lanes] = pick(dest == r, pages)
        rot_idx[:, lanes] = pick(moves & (place == r), pages)
        rot_delta[:, lanes] = pick(moves & (place == r), delta)
        dest_row[:, lanes] = _to_lanes(dest, c0, chunk)
        return carry

    lax.fori_loop(0, NB // chunk, scatter_chunk, 0)
    moved_ref[...] = jnp.broadcast_to(jnp.sum(moves.astype(jnp.int32), axis=0, keepdims=True), (1, LANES))

    # 4. EV-15: survivor b's state row to row dest(b), as a one-hot product per chunk of destination rows
    def gather_chunk(c, carry):
        c0 = pl.multiple_of(c * chunk, chunk)
        r = c0 + lax.broadcasted_iota(jnp.int32, (chunk, 1), 0)
        one_hot = (dest_row[...] == r).astype(jnp.float32)                  # [chunk, NB]
        rows = pl.ds(c0, chunk)
        for src, dst in ((acc_hi, out_hi), (acc_lo, out_lo), (counts, out_counts)):
            dst[rows, :] = _gather_rows(one_hot, src[...])
        return carry

    lax.fori_loop(0, NB // chunk, gather_chunk, 0)
