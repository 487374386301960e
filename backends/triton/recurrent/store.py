"""Row moves of the recurrent-state store on the device (spec/recurrent.md RS-21 .. RS-27).

The store's metadata (which sequence owns which slot, positions, reference sharing) is planned on the
host by `validate_recurrent_store_step`, as a serving engine's cache manager does; what touches the pools is
this one kernel, run once per pool kind. Every pool row is handled as 32-bit words, so a move is a bit copy
whatever the pool dtype (float64 rows are two words per value): NaN payloads, -0.0 and float64 values
come through unchanged, which RS-22/RS-25/RS-26 require ("bit for bit").

Kernel: grid (move m, block of BLOCK words). Move m writes row `dst[m]` of the target from
    src[m] >= 0    row src[m] of the pool            (copy on write, RS-23 via RS-22; checkpoint, RS-25)
    src[m] == -1   exact zero words (+0.0)            (a fresh sequence, RS-5: set, never multiplied)
    src[m] <= -2   row -src[m]-2 of the given rows    (restore / rollback, RS-25 / RS-26)
No destination is also a source (RowMoves' contract), so programs run in any order.
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: words per program; rows are small (a conv window or one SSM state), so one or a few blocks each
BLOCK = 1024


@triton.jit
def _move_rows_kernel(target_ptr, pool_ptr, rows_ptr, src_ptr, dst_ptr, R, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < R
    src = tl.load(src_ptr + m).to(tl.int64)
    dst = tl.load(dst_ptr + m).to(tl.int64)
    # both sources are read at a valid row (clamped) and the right one selected: no scalar masks
    from_pool = tl.load(pool_ptr + tl.maximum(src, 0) * R + offs, mask=ok, other=0)
    from_rows = tl.load(rows_ptr + tl.maximum(-src - 2, 0) * R + offs, mask=ok, other=0)
    # integer words: the select copies bits, and the zero of a fresh row is +0.0 in every float dtype
    word = tl.where(src >= 0, from_pool, tl.where(src <= -2, from_rows, 0))
    tl.store(target_ptr + dst * R + offs, word, mask=ok)


def move_rows(target, pool, rows, src, dst) -> None:
    """target: i32[n_target, R] (written in place); pool: i32[num_slots, R]; rows: i32[k, R] (k >= 1);
    src, dst: i32[m] on the same device. Applies the moves described in the module docstring."""
    m, R = int(dst.shape[0]), int(target.shape[1])
    if m == 0 or R == 0:
        return
    _move_rows_kernel[(m, triton.cdiv(R, BLOCK))](target, pool, rows, src, dst, R, BLOCK=BLOCK)
