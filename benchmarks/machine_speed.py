"""How fast this machine is right now, in two fixed workloads (issue 16: timings need a yardstick).

The same 2-core machine ran the CI gate in 5.6 min on one day and in 11.7 min on another with the same
code (2026-11-25; every op 1.8-2.7x slower, uniformly): the host, not the suite, changed. So the CI prints
this line first, and the README quotes it beside every wall time it gives. A time measured at another
reading scales roughly with the Python rate (the gate is interpreter- and compiler-bound, one thread per
worker).

  python:  a fixed pure-Python loop (integer and float arithmetic, a dict, a list), one thread,
           in millions of loop iterations per second (best of 5; it varies by tens of percent from one
           second to the next on a shared host, which is why the CI reads it before and after);
  matmul:  float64 GEMM of 1024 x 1024 matrices with one BLAS thread, GFLOP/s (best of 3).

    .venv/bin/python benchmarks/machine_speed.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import time

ITERATIONS = 2_000_000
GEMM_N = 1024


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


def matmul_rate() -> float:
    """float64 GEMM GFLOP/s with one BLAS thread (threadpoolctl when installed, else the env as is)."""
    import numpy as np
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # the rate then uses however many threads BLAS was started with
        import contextlib
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(1, user_api="blas")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((GEMM_N, GEMM_N)), rng.standard_normal((GEMM_N, GEMM_N))
    best = float("inf")
    with limits:
        a @ b
        for _ in range(3):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return 2 * GEMM_N ** 3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    reading = {"python_mits": round(python_rate(), 2), "matmul_gflops_1thread": round(matmul_rate(), 1),
               "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(reading))
    else:
        print(f"machine speed: python {reading['python_mits']:.1f} M loop iterations/s, float64 matmul "
              f"{reading['matmul_gflops_1thread']:.1f} GFLOP/s (1 thread), {reading['cpus']} CPUs, "
              f"load average {reading['load_average_1min']:.1f}")


if __name__ == "__main__":
    main()
