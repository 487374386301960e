"""Eviction planning on device (spec/eviction.md, EV-*): score accumulation, block scores, selection,
compaction of the block table, rotation plan and compacted score state.

Kernels (all on one sequence, EV intro; L = tokens, B = block_size, nb = cdiv(L, B)):

- `_accumulate_kernel`: EV-4/EV-5, one float64 addition per token (`acc_t + step_t`, with acc_t = +0.0
  for new tokens exactly as the spec's `[acc, 0 x k] + step`, so -0.0 steps give +0.0 like NumPy), and
  the counts `[counts + k, k, ..., 1]` in int32. Bit-exact by construction (NU-EV2).
- `_block_score_kernel`: EV-6/EV-7, one lane per block, a loop over the B token offsets so that the
  float64 sum runs left to right starting from +0.0 (a tree reduction such as tl.sum would reorder it).
  The norm_sum division is an IEEE float64 division (fdiv double: correctly rounded in the interpreter
  and on NVIDIA GPUs, where only float32 division has an approximate default).
- `_select_kernel`: EV-10 without any sort: the rank of candidate i is #{candidate j : (beta_j, j) <
  (beta_i, i)} -- a strict total order, so ranks are a permutation of 0..n-1 and "rank < k" picks exactly
  the k smallest with ties to the lower index. torch.topk/sort promise no order among ties, hence this.
  O(n^2 / tiles) comparisons, trivially parallel; n is the number of evictable blocks of one sequence.
- `_compact_blocks_kernel`: one program scanning the eviction flags in tiles with tl.cumsum and a
  running offset: evicted indices (EV-12), compacted table (EV-13, destination b - delta(b)), rotation
  plan (EV-14, delta(b) = evicted blocks before b, physical pages of moved survivors) and delta per block.
- `_compact_tokens_kernel`: EV-15, each kept token copied to t - delta(t // B) * B (values unchanged).

Inputs are read through their strides (metadata may be views into larger buffers) and never written
(EV-16). All integer outputs are int32 tensors.
"""
from ._runtime import configure

configure()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

_TOKENS = 1024    # tokens per program (accumulate, token compaction)
_BLOCKS = 128     # blocks per program (block scores, selection rows)
_BLOCKS_J = 128   # candidate columns compared per selection step
_SCAN = 1024      # blocks per scan step of the single-program compaction


@triton.jit
def _accumulate_kernel(acc_ptr, cnt_ptr, step_ptr, acc_out, cnt_out, n_old, n_new,
                       s_acc, s_cnt, s_step, BLOCK: tl.constexpr):
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    t64 = t.to(tl.int64)
    live = t < n_new
    old = t < n_old
    a = tl.load(acc_ptr + t64 * s_acc, mask=old, other=0.0).to(tl.float64)    # new tokens: +0.0 (EV-4)
    s = tl.load(step_ptr + t64 * s_step, mask=live, other=0.0).to(tl.float64)
    tl.store(acc_out + t64, a + s, mask=live)                                  # one float64 addition
    c = tl.load(cnt_ptr + t64 * s_cnt, mask=old, other=0).to(tl.int32)
    new = n_new - n_old
    tl.store(cnt_out + t64, tl.where(old, c + new, n_new - t), mask=live)     # EV-5


@triton.jit
def _block_score_kernel(acc_ptr, cnt_ptr, score_ptr, n_tokens, n_blocks, block_size, s_acc, s_cnt,
                        NORM: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    first = b.to(tl.int64) * block_size
    total = tl.zeros([BLOCK_N], dtype=tl.float64)
    for j in range(0, block_size):                       # EV-7: t = 0, 1, ..., B-1, left to right
        t = first + j
        ok = t < n_tokens                                # a missing token adds +0.0, as in the reference
        tau = tl.load(acc_ptr + t * s_acc, mask=ok, other=0.0).to(tl.float64)
        if NORM:                                         # EV-6: fl64(acc / count)
            c = tl.load(cnt_ptr + t * s_cnt, mask=ok, other=1).to(tl.float64)
            tau = tau / c
        total = total + tau
    tl.store(score_ptr + b, total, mask=b < n_blocks)


@triton.jit
def _select_kernel(score_ptr, flag_ptr, b0, b1, n_evict, n_blocks,
                   BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    cand_i = (i >= b0) & (i < b1)                        # EV-8
    s_i = tl.load(score_ptr + i, mask=cand_i, other=0.0)
    rank = tl.zeros([BLOCK_I], dtype=tl.int32)
    for j0 in range(b0, b1, BLOCK_J):
        j = j0 + tl.arange(0, BLOCK_J)
        cand_j = j < b1
        s_j = tl.load(score_ptr + j, mask=cand_j, other=0.0)
        # EV-10: (s_j, j) < (s_i, i) lexicographically; exact float64 comparison
        before = (s_j[None, :] < s_i[:, None]) | ((s_j[None, :] == s_i[:, None]) & (j[None, :] < i[:, None]))
        rank += tl.sum((before & cand_j[None, :]).to(tl.int32), axis=1)
    evict = cand_i & (rank < n_evict)
    tl.store(flag_ptr + i, evict.to(tl.int32), mask=i < n_blocks)


@triton.jit
def _compact_blocks_kernel(flag_ptr, table_ptr, s_table, shift_ptr, evicted_ptr, table_out, rot_idx_ptr,
                           rot_delta_ptr, count_ptr, n_blocks, BLOCK: tl.constexpr):
    done_e = tl.full([], 0, tl.int32)   # evicted blocks in earlier tiles
    done_m = tl.full([], 0, tl.int32)   # moved survivors in earlier tiles
    for base in range(0, n_blocks, BLOCK):
        b = base + tl.arange(0, BLOCK)
        ok = b < n_blocks
        f = tl.load(flag_ptr + b, mask=ok, other=0)
        page = tl.load(table_ptr + b.to(tl.int64) * s_table, mask=ok, other=0).to(tl.int32)
        inc = tl.cumsum(f, 0)
        shift = done_e + inc - f                          # EV-14: evicted blocks < b
        gone = ok & (f != 0)
        keep = ok & (f == 0)
        moved = keep & (shift > 0)
        mv = moved.to(tl.int32)
        mpos = done_m + tl.cumsum(mv, 0) - mv
        tl.store(evicted_ptr + (done_e + inc - 1), b, mask=gone)        # EV-12: ascending
        tl.store(table_out + (b - shift), page, mask=keep)              # EV-13: order preserved
        tl.store(rot_idx_ptr + mpos, page, mask=moved)                  # EV-14: physical pages
        tl.store(rot_delta_ptr + mpos, shift, mask=moved)
        tl.store(shift_ptr + b, shift, mask=ok)
        done_e += tl.sum(f, 0)
        done_m += tl.sum(mv, 0)
    tl.store(count_ptr, done_m)


@triton.jit
def _compact_tokens_kernel(acc_ptr, cnt_ptr, s_acc, s_cnt, flag_ptr, shift_ptr, acc_out, cnt_out,
                           n_tokens, block_size, BLOCK: tl.constexpr):
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    ok = t < n_tokens
    blk = t // block_size
    keep = ok & (tl.load(flag_ptr + blk, mask=ok, other=1) == 0)
    dst = t - tl.load(shift_ptr + blk, mask=ok, other=0).to(tl.int64) * block_size   # EV-15
    a = tl.load(acc_ptr + t * s_acc, mask=keep, other=0.0)
    c = tl.load(cnt_ptr + t * s_cnt, mask=keep, other=0).to(tl.int32)
    tl.store(acc_out + dst, a, mask=keep)
    tl.store(cnt_out + dst, c, mask=keep)


def accumulate_scores(acc, counts, step_scores):
    """EV-4/EV-5. acc float64[L_old], counts int[L_old], step_scores float64[L_new] (L_new >= L_old;
    validated by the adapter). Returns (acc' float64[L_new], counts' int32[L_new]) as new tensors."""
    n_old, n_new = acc.shape[0], step_scores.shape[0]
    acc_out = torch.empty(n_new, dtype=torch.float64, device=step_scores.device)
    cnt_out = torch.empty(n_new, dtype=torch.int32, device=step_scores.device)
    if n_new:
        _accumulate_kernel[(triton.cdiv(n_new, _TOKENS),)](
            acc, counts, step_scores, acc_out, cnt_out, n_old, n_new,
            acc.stride(0), counts.stride(0), step_scores.stride(0), BLOCK=_TOKENS)
    return acc_out, cnt_out


def block_scores(acc, counts, block_size: int, norm: bool):
    """EV-6/EV-7: float64[cdiv(L, B)] block scores (exposed for tests and reports)."""
    n_tokens = acc.shape[0]
    n_blocks = triton.cdiv(n_tokens, block_size)
    scores = torch.empty(n_blocks, dtype=torch.float64, device=acc.device)
    if n_blocks:
        _block_score_kernel[(triton.cdiv(n_blocks, _BLOCKS),)](
            acc, counts, scores, n_tokens, n_blocks, block_size, acc.stride(0), counts.stride(0),
            NORM=norm, BLOCK_N=_BLOCKS)
    return scores


def plan_eviction(block_table, acc, counts, *, block_size: int, first: int, last: int, n_evict: int,
                  norm: bool):
    """EV-8 .. EV-15 for validated inputs: block_table int[nb], acc float64[L], counts int[L]; the
    evictable range [first, last) and n_evict = k come from the config (EV-8, EV-9; 0 <= k <= last-first).

    Returns (evicted i32[k], table i32[nb-k], rotated_block_indices i32[m], rotation_deltas i32[m, 1],
    acc float64[L-kB], counts i32[L-kB]), all new tensors (EV-16: inputs untouched)."""
    dev = acc.device
    n_tokens, n_blocks = acc.shape[0], block_table.shape[0]
    i32 = dict(dtype=torch.int32, device=dev)
    if n_evict == 0:   # the common step: nothing moves (EV-9), no launch needed
        return (torch.empty(0, **i32), block_table.to(torch.int32, copy=True), torch.empty(0, **i32),
                torch.empty((0, 1), **i32), acc.to(torch.float64, copy=True), counts.to(torch.int32, copy=True))
    scores = block_scores(acc, counts, block_size, norm)
    flags = torch.empty(n_blocks, **i32)
    _select_kernel[(triton.cdiv(n_blocks, _BLOCKS),)](
        scores, flags, first, last, n_evict, n_blocks, BLOCK_I=_BLOCKS, BLOCK_J=_BLOCKS_J)
    shift = torch.empty(n_blocks, **i32)
    evicted = torch.empty(n_evict, **i32)
    table = torch.empty(n_blocks - n_evict, **i32)
    rot_idx = torch.empty(n_blocks, **i32)        # m <= nb - k; trimmed below
    rot_delta = torch.empty(n_blocks, **i32)
    count = torch.zeros(1, **i32)
    _compact_blocks_kernel[(1,)](flags, block_table, block_table.stride(0), shift, evicted, table, rot_idx,
                                 rot_delta, count, n_blocks, BLOCK=min(_SCAN, triton.next_power_of_2(n_blocks)))
    kept = n_tokens - n_evict * block_size
    acc_out = torch.empty(kept, dtype=torch.float64, device=dev)
    cnt_out = torch.empty(kept, **i32)
    _compact_tokens_kernel[(triton.cdiv(n_tokens, _TOKENS),)](
        acc, counts, acc.stride(0), counts.stride(0), flags, shift, acc_out, cnt_out, n_tokens, block_size,
        BLOCK=_TOKENS)
    m = int(count.item())
    return evicted, table, rot_idx[:m].clone(), rot_delta[:m].clone().reshape(m, 1), acc_out, cnt_out
