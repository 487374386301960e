"""How fast this machine is right now, in two fixed workloads (issue 16: timings need a yardstick).

On 2026-11-25 the same 2-core machine ran the CI gate of the same engine in 11.7 min in the afternoon (a
fresh clone of 99f2022) and in 5.6 min that evening (988a4f7, which differs only in docs, tests and two
small checks), every op 1.3-2.7x faster: the host changed, not the suite. So the CI prints this line before
its tests and after its gate, and the README quotes it beside the wall times it gives. A time measured at
another reading scales roughly with the Python rate (the gate is interpreter- and compiler-bound, one
thread per worker).

  python:  a fixed pure-Python loop (integer and float arithmetic, a dict, a list), one thread,
           in millions of loop iterations per second (best of 5; it varies by tens of percent from one
           second to the next on a shared host, which is why the CI reads it before and after);
  matmul:  float64 GEMM of 1024 x 1024 matrices with one BLAS thread (threadpoolctl; without it, BLAS's
           default threads, and the line says so), GFLOP/s (best of 3).

    .venv/bin/python benchmarks/machine_speed.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import time

ITERATIONS = 2_000_000


def python_rate(iterations: int = ITERATIONS) -> float:
    """Millions of iterations per second of a small loop mixing what the engine's Python does."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        table, items, acc = {}, [], 0.0
        for i in range(iterations):
            acc += (i % 7) * 0.5
            table[i & 1023] = acc
            if i & 4095 == 0:
                items.append(table.get(i & 511, 0.0))
        best = min(best, time.perf_counter() - t0)
    return iterations / best / 1e6


def matmul_rate() -> tuple[float, bool]:
    """(float64 GEMM GFLOP/s, whether BLAS was held to one thread): one thread through threadpoolctl when
    it is installed, else however many threads BLAS started with."""
    import contextlib

    import numpy as np

    from matmul_ratio import GEMM_N, gemm_seconds
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        limits, one_thread = contextlib.nullcontext(), False
    else:
        limits, one_thread = threadpool_limits(1, user_api="blas"), True
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((GEMM_N, GEMM_N)), rng.standard_normal((GEMM_N, GEMM_N))
    with limits:
        gemm_seconds(a, b, 1)  # warm-up
        best = gemm_seconds(a, b, 3)
    return 2 * GEMM_N ** 3 / best / 1e9, one_thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    gflops, one_thread = matmul_rate()
    reading = {"python_mits": round(python_rate(), 2), "matmul_gflops": round(gflops, 1),
               "matmul_one_thread": one_thread, "cpus": os.cpu_count(),
               "load_average_1min": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(reading))
    else:
        threads = "1 thread" if one_thread else "BLAS's default threads"
        print(f"machine speed: python {reading['python_mits']:.1f} M loop iterations/s, float64 matmul "
              f"{reading['matmul_gflops']:.1f} GFLOP/s ({threads}), {reading['cpus']} CPUs, "
              f"load average {reading['load_average_1min']:.1f}")


if __name__ == "__main__":
    main()
