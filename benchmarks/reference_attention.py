"""Speed and memory of the NumPy reference `ragged_paged_attention` (not a test; issues 2 and 16).

Two shapes, both with Hq 32, Hkv 8, D 128, page size 16:
  standard: 16 sequences at kv_len 2048 (12 decode rows and 4 prefill chunks of 128 rows), float32 q/k/v;
  long:     8 sequences at kv_len 32768, the same mix (3 decode rows per 128-row prefill chunk: 6 and 2),
            float32 q and bfloat16 k/v pages (1 GiB of cache; the reference upcasts any float dtype
            exactly, PA-20).
For each: the reference's time, its FLOP rate as a fraction of this machine's float64 matrix-multiply
rate measured in the same run (benchmarks/matmul_ratio.py), and its peak extra memory. Goals: >= 40 % of
the matmul rate, < 1 GiB.

    .venv/bin/python benchmarks/reference_attention.py [--shapes standard,long] [--repeats 3] [--threads N] [--json]

The load average is printed because a busy machine lowers the fraction. `--threads N` re-runs the
script with OPENBLAS_NUM_THREADS=N (and OMP_NUM_THREADS=N) for both measurements.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from matmul_ratio import measure, parse_args, print_result, report_machine

from kvconform.reference import ragged_paged_attention

HQ, HKV, D, PAGE_SIZE = 32, 8, 128, 16
SHAPES = {  # name: (decode rows, prefill chunks, rows per chunk, kv_len, k/v page dtype)
    "standard": (12, 4, 128, 2048, np.float32),
    "long": (6, 2, 128, 32768, ml_dtypes.bfloat16),
}


def attention_inputs(num_decode: int, num_prefill: int, prefill_len: int, kv_len: int, kv_dtype,
                     seed: int = 0) -> dict:
    """Arguments of one call: decode sequences first, then prefill chunks, all at kv_len keys."""
    rng = np.random.default_rng(seed)
    q_lens = [1] * num_decode + [prefill_len] * num_prefill
    S = len(q_lens)
    pages_per_seq = kv_len // PAGE_SIZE
    num_pages = S * pages_per_seq
    cu_q_lens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)

    def pages():  # drawn in float32 and rounded, so a 1 GiB bfloat16 cache needs no 4 GiB float64 temporary
        return rng.standard_normal((num_pages, PAGE_SIZE, HKV, D), dtype=np.float32).astype(kv_dtype)

    return dict(
        q=rng.standard_normal((int(cu_q_lens[-1]), HQ, D), dtype=np.float32),
        k_pages=pages(),
        v_pages=pages(),
        kv_lens=np.full(S, kv_len, dtype=np.int32),
        page_indices=rng.permutation(num_pages).reshape(S, pages_per_seq).astype(np.int32),
        cu_q_lens=cu_q_lens,
        num_seqs=S,
    )


def standard_inputs(seed: int = 0) -> dict:
    return attention_inputs(*SHAPES["standard"], seed=seed)


def attention_flops(q_lens, kv_len: int) -> float:
    """Multiply-adds of QK^T and PV over visible (causal) keys only, counted as 2 FLOPs each."""
    visible = sum(sum(kv_len - q_len + t + 1 for t in range(q_len)) for q_len in q_lens)
    return 2 * 2 * visible * HQ * D


def describe(name: str) -> str:
    num_decode, num_prefill, prefill_len, kv_len, kv_dtype = SHAPES[name]
    return (f"{num_decode} decode + {num_prefill}x{prefill_len} prefill, kv_len {kv_len}, Hq {HQ}, "
            f"Hkv {HKV}, D {D}, page {PAGE_SIZE}, q float32, k/v {np.dtype(kv_dtype).name}")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "shapes", ",".join(SHAPES), repeats=3)

    results = {}
    for name in args.shapes.split(","):
        num_decode, num_prefill, prefill_len, kv_len, _ = SHAPES[name]
        inputs = attention_inputs(*SHAPES[name])
        flops = attention_flops([1] * num_decode + [prefill_len] * num_prefill, kv_len)
        result = measure(lambda: ragged_paged_attention(**inputs), flops, args.repeats)
        result["shape"] = describe(name)
        result["input_mib"] = sum(v.nbytes for v in inputs.values() if isinstance(v, np.ndarray)) / 2 ** 20
        results[name] = result
        del inputs
        if not args.json:
            print_result(name, result["shape"], result, args.repeats, goal=" (goal >= 40%)")
            print(f"  inputs {result['input_mib']:.0f} MiB (memory goal < 1024 MiB extra)")
    report_machine(results, args.json)


if __name__ == "__main__":
    main()
