"""Spread the independent heads of a large call over the CPUs, one BLAS thread each (speed only: no value
changes). Used by paged attention (KV heads), the chunked SSD scan and RWKV6 (blocks of heads).

The query heads sharing one KV head are computed independently of the other KV heads (PA-12), and each
head of a recurrent op has its own state and sums (RS-8), so heads can run in parallel threads (NumPy
releases the GIL in its loops and in BLAS). Why threads over heads rather than BLAS's own threads: the
reference's products are small or mid-sized ([4, 128] x [128, L] for a decode row, [512, 128] x [128, 2048]
for a 128-row prefill chunk, [64, 128] x [128, 64] per head and chunk of the SSD scan), and a
multi-threaded BLAS hands work between its threads inside every one of them; on a busy 2-core machine
each hand-off can wait for a scheduler slice, and the idle BLAS thread spins while NumPy's single-threaded
exp runs. Measured there (issue 16): 8 decode-sized products took 0.1-0.35 s with 2 BLAS threads against
2-3 ms with one, and the standard shape's prefill took ~60% of the time with two heads at a time on one
BLAS thread each. On the shapes of benchmarks/reference_recurrent.py, the code before and after the SSD
scan and RWKV6 took two blocks of 16 heads (and RWKV6 its in-place update), alternated in one process, best
of 3: SSD 298-314 -> 134-138 ms, RWKV6 448-460 -> 265-309 ms.

threadpoolctl is optional (extra `fast`, part of `all`): without it every call runs inline on BLAS's own
threads, so the oracle still needs nothing but NumPy and ml_dtypes, only slower on large calls.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

__all__ = ["head_map", "head_blocks", "pool_size"]

# Work (elements, see head_map) from which a thread pool pays for its start (~1 ms).
_MIN_WORK = 1 << 20
# Each worker holds one KV head's float64 keys, values and a logit block (~200 MiB at 32k keys, measured
# 407 MiB peak with 2 workers); 4 workers keep a 32k-key call under 1 GiB of extra memory.
_MAX_WORKERS = 4


@contextmanager
def head_map(work: int, num_heads: int) -> Iterator[Callable[[Callable, Iterable], Iterable]]:
    """Yield a `map(fn, items)` whose results come back in the order of `items`, with BLAS held to one
    thread while it lives (process-wide: threadpoolctl sets it on the loaded BLAS libraries, ~13 us).

    work: the call's size in elements of its largest intermediate (attention: rows x query heads x keys
    summed over the sequences; the SSD scan: tokens x H x P x N); num_heads: how many independent heads.
    The map runs on `pool_size(work, num_heads)` threads; with fewer than two it runs inline.
    """
    if _blas_controller() is None:      # no threadpoolctl: threads would fight BLAS's own threads
        yield map
        return
    with _one_blas_thread():
        workers = pool_size(work, num_heads)
        if workers < 2:
            yield map
            return
        with ThreadPoolExecutor(workers) as pool:
            yield pool.map


def pool_size(work: int, num_heads: int) -> int:
    """Threads `head_map` runs on: min(num_heads, usable CPUs, _MAX_WORKERS) from `_MIN_WORK` elements of
    work on, where threadpoolctl is installed; else 1 (inline)."""
    if _blas_controller() is None or work < _MIN_WORK:
        return 1
    return max(1, min(num_heads, _usable_cpus(), _MAX_WORKERS))


def head_blocks(work: int, num_heads: int, groups: int = 1) -> list[tuple[int, slice]]:
    """(group, heads) blocks for `head_map`: the heads of each of `groups` equal groups cut into contiguous
    ranges, about `pool_size(work, num_heads)` blocks in all (one per group at least), so that a block's
    heads share their group's inputs (the SSD scan's B and C, RS-16)."""
    per_group = num_heads // groups
    pieces = max(1, min(per_group, -(-pool_size(work, num_heads) // groups)))
    cuts = [per_group * i // pieces for i in range(pieces + 1)]
    return [(g, slice(g * per_group + a, g * per_group + b)) for g in range(groups)
            for a, b in zip(cuts[:-1], cuts[1:])]


_lock = threading.Lock()
_holders = 0      # calls inside _one_blas_thread, from any thread
_limiter = None   # threadpoolctl's record of the thread counts to restore


@contextmanager
def _one_blas_thread():
    """Hold BLAS to one thread; the first of overlapping calls (from several threads) sets the limit and
    the last restores the original counts, so concurrent callers cannot leave BLAS at one thread."""
    global _holders, _limiter
    with _lock:
        if _holders == 0:
            _limiter = _blas_controller().limit(limits=1, user_api="blas")
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _limiter.restore_original_limits()


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def _blas_controller():
    """threadpoolctl's controller of the loaded BLAS libraries (scanned once, after NumPy's BLAS is
    loaded), or None where threadpoolctl is not installed."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
