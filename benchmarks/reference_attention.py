"""Speed and memory of the NumPy reference `ragged_paged_attention` (not a test; issue 2).

Standard shape: 16 sequences, all at kv_len 2048 — 12 decode rows and 4 prefill chunks of 128 rows —
with Hq 32, Hkv 8, D 128, page size 16 and float32 inputs. Reports the reference's time, its FLOP rate
as a fraction of this machine's float64 matrix-multiply rate measured in the same run, and its peak extra
memory (tracemalloc: NumPy reports its buffers to it). Goals: >= 40 % of the matmul rate, < 1 GiB.

    .venv/bin/python benchmarks/reference_attention.py [--repeats 5] [--threads N] [--json]

The matmul rate and the reference are timed alternately (best of each), so that a transient load on the
machine affects both alike; the load average is printed because a busy machine lowers the fraction
(many small BLAS calls suffer more from contention than one large one). `--threads N` re-runs the
script with OPENBLAS_NUM_THREADS=N (and OMP_NUM_THREADS=N) for both measurements.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc

import numpy as np

from kvconform.reference import ragged_paged_attention

NUM_DECODE, NUM_PREFILL, PREFILL_LEN, KV_LEN = 12, 4, 128, 2048
HQ, HKV, D, PAGE_SIZE = 32, 8, 128, 16


def standard_inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    q_lens = [1] * NUM_DECODE + [PREFILL_LEN] * NUM_PREFILL
    S = len(q_lens)
    pages_per_seq = KV_LEN // PAGE_SIZE
    num_pages = S * pages_per_seq
    cu_q_lens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    return dict(
        q=rng.standard_normal((int(cu_q_lens[-1]), HQ, D), dtype=np.float32),
        k_pages=rng.standard_normal((num_pages, PAGE_SIZE, HKV, D), dtype=np.float32),
        v_pages=rng.standard_normal((num_pages, PAGE_SIZE, HKV, D), dtype=np.float32),
        kv_lens=np.full(S, KV_LEN, dtype=np.int32),
        page_indices=rng.permutation(num_pages).reshape(S, pages_per_seq).astype(np.int32),
        cu_q_lens=cu_q_lens,
        num_seqs=S,
    )


def attention_flops(q_lens, kv_len: int) -> float:
    """Multiply-adds of QK^T and PV over visible (causal) keys only, counted as 2 FLOPs each."""
    visible = sum(sum(kv_len - q_len + t + 1 for t in range(q_len)) for q_len in q_lens)
    return 2 * 2 * visible * HQ * D


def gemm_seconds(a: np.ndarray, b: np.ndarray, calls: int = 4) -> float:
    """Seconds per float64 GEMM of a @ b, best of `calls`."""
    best = np.inf
    for _ in range(calls):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (re-executes the script)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.threads is not None and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)

    inputs = standard_inputs()
    flops = attention_flops([1] * NUM_DECODE + [PREFILL_LEN] * NUM_PREFILL, KV_LEN)
    n = 1024
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    gemm_seconds(a, b, 1)  # warm-up: thread pool, page faults
    ragged_paged_attention(**inputs)

    best_gemm, best_ref = np.inf, np.inf
    for _ in range(args.repeats):  # alternate, so both see the same machine state
        best_gemm = min(best_gemm, gemm_seconds(a, b))
        t0 = time.perf_counter()
        ragged_paged_attention(**inputs)
        best_ref = min(best_ref, time.perf_counter() - t0)
    gemm_rate = 2 * n ** 3 / best_gemm

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ragged_paged_attention(**inputs)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()

    input_bytes = sum(v.nbytes for v in inputs.values() if isinstance(v, np.ndarray))
    result = {
        "shape": f"{NUM_DECODE} decode + {NUM_PREFILL}x{PREFILL_LEN} prefill, kv_len {KV_LEN}, "
                 f"Hq {HQ}, Hkv {HKV}, D {D}, page {PAGE_SIZE}, float32",
        "reference_seconds": best_ref,
        "reference_gflops": flops / best_ref / 1e9,
        "matmul_f64_gflops": gemm_rate / 1e9,
        "fraction_of_matmul": flops / best_ref / gemm_rate,
        "peak_extra_mib": peak / 2 ** 20,
        "input_mib": input_bytes / 2 ** 20,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"shape: {result['shape']}")
    print(f"reference: {best_ref * 1e3:.0f} ms (best of {args.repeats}), "
          f"{result['reference_gflops']:.1f} GFLOP/s (visible-key matmul FLOPs)")
    print(f"float64 matmul (1024^3): {result['matmul_f64_gflops']:.1f} GFLOP/s -> reference at "
          f"{100 * result['fraction_of_matmul']:.0f}% (goal >= 40%)")
    print(f"peak extra memory: {result['peak_extra_mib']:.0f} MiB (goal < 1024 MiB; inputs "
          f"{result['input_mib']:.0f} MiB)")
    print(f"machine: {result['cpus']} CPUs, BLAS threads {result['blas_threads']}, "
          f"load average {result['load_average_1min']:.1f}")


if __name__ == "__main__":
    main()
