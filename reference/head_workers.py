"""Spread the KV heads of a large attention call over the CPUs (speed only: no value changes).

The heads sharing one KV head are computed independently of the other KV heads (PA-12), so they can run
in parallel threads (NumPy releases the GIL in its loops and in BLAS). Why threads over heads rather than
BLAS's own threads: the reference's products are mid-sized ([512, 128] x [128, 2048] on the standard
shape of benchmarks/reference_attention.py), and a multi-threaded BLAS hands work between its threads
inside every one of them; on a busy 2-core machine each hand-off can wait for a scheduler slice, and the
idle BLAS thread spins while NumPy's single-threaded exp runs. Measured there, one BLAS thread per head
and two heads at a time did the standard shape's prefill in ~60% of the time of two BLAS threads per
product. Calls below `_MIN_LOGITS` (the conformance suite's) run inline with BLAS untouched.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

__all__ = ["head_map"]

_MIN_LOGITS = 1 << 22  # logits in a call (rows x query heads x keys) from which threads pay off


@contextmanager
def head_map(num_logits: int, num_heads: int) -> Iterator[Callable[[Callable, Iterable], Iterable]]:
    """Yield a `map(fn, items)` whose results come back in the order of `items`.

    num_logits: rows x query heads x keys summed over the call's sequences; num_heads: Hkv.
    Large calls get a thread pool of min(num_heads, usable CPUs) workers, and BLAS is held to one thread
    per product while the pool lives (process-wide: threadpoolctl sets it on the loaded BLAS library).
    """
    workers = min(num_heads, _usable_cpus())
    if num_logits < _MIN_LOGITS or workers < 2:
        yield map
        return
    with _blas_controller().limit(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        yield pool.map


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # scans the loaded libraries once, after NumPy's BLAS
    return ThreadpoolController()
