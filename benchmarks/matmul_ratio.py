"""Time a NumPy reference op against this machine's float64 matmul rate, in the same run (issue 16).

Used by benchmarks/reference_attention.py and benchmarks/reference_recurrent.py; not a test. The matmul
and the op are timed alternately (best of each), so a transient load on the machine affects both alike;
the peak extra memory of one call is measured with tracemalloc (NumPy reports its buffers to it).
On a shared machine the fraction is noisy: an 80 ms matmul can catch a quiet moment that a 10 s call
never sees (the best matmul then reads high and the fraction low), so run twice and quote both.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc

import numpy as np

GEMM_N = 1024
#: pause between the GEMM and the op, for BLAS's spinning threads to go idle (see measure)
SETTLE_SECONDS = 0.3


def parse_args(description: str, choice: str, default: str, repeats: int) -> argparse.Namespace:
    """The benchmarks' command line: `--<choice>` (comma-separated names), --repeats, --threads, --json.
    Pins BLAS threads before returning (re-executing the script if --threads asks for it)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(f"--{choice}", default=default, help=f"comma-separated: {default.replace(',', ', ')}")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (re-executes the script)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    known = default.split(",")
    for name in getattr(args, choice).split(","):
        if name not in known:
            parser.error(f"--{choice}: unknown name {name!r}; choose from {', '.join(known)}")
    pin_blas_threads(args.threads)
    return args


def report_machine(results: dict, as_json: bool) -> None:
    """Add the machine's facts to `results`; print them all as one JSON object or the machine line."""
    results["machine"] = m = machine()
    if as_json:
        print(json.dumps(results))
    else:
        print(f"machine: {m['cpus']} CPUs, BLAS threads {m['blas_threads']}, "
              f"load average {m['load_average_1min']:.1f}")


def pin_blas_threads(threads: int | None) -> None:
    """Re-execute this script with OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=threads (BLAS reads them at load)."""
    if threads is not None and os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def gemm_seconds(a: np.ndarray, b: np.ndarray, calls: int = 4) -> float:
    """Seconds per float64 GEMM of a @ b, best of `calls`."""
    best = np.inf
    for _ in range(calls):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


def measure(run, flops: float, repeats: int) -> dict:
    """Best time of run() over `repeats` calls, its rate as a fraction of the float64 matmul rate measured
    alternately with it, and the peak extra memory of one call.

    run: a no-argument callable doing one call of the op; flops: the op's useful FLOPs per call.
    """
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((GEMM_N, GEMM_N)), rng.standard_normal((GEMM_N, GEMM_N))
    gemm_seconds(a, b, 1)  # warm-up: thread pool, page faults
    run()
    best_gemm, best_op = np.inf, np.inf
    for _ in range(repeats):  # alternate, so both see the same machine state
        best_gemm = min(best_gemm, gemm_seconds(a, b))
        # OpenBLAS's worker threads spin for a while after a multi-threaded call before they sleep (its
        # thread timeout) and would take a core from an op that starts at once: the SSD scan measured
        # 176-180 ms straight after the GEMM, 139-143 ms after this pause (issue 16).
        time.sleep(SETTLE_SECONDS)
        t0 = time.perf_counter()
        run()
        best_op = min(best_op, time.perf_counter() - t0)
    gemm_rate = 2 * GEMM_N ** 3 / best_gemm

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    run()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {
        "seconds": best_op,
        "gflops": flops / best_op / 1e9,
        "matmul_f64_gflops": gemm_rate / 1e9,
        "fraction_of_matmul": flops / best_op / gemm_rate,
        "peak_extra_mib": peak / 2 ** 20,
    }


def machine() -> dict:
    return {
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }


def print_result(name: str, shape: str, result: dict, repeats: int, goal: str = "") -> None:
    print(f"{name}: {shape}")
    print(f"  {result['seconds'] * 1e3:.0f} ms (best of {repeats}), {result['gflops']:.1f} GFLOP/s; "
          f"float64 matmul ({GEMM_N}^3) {result['matmul_f64_gflops']:.1f} GFLOP/s -> "
          f"{100 * result['fraction_of_matmul']:.0f}% of it{goal}; "
          f"peak extra memory {result['peak_extra_mib']:.0f} MiB")
