"""Speed of the NumPy reference recurrent ops on one long sequence (not a test; issue 16: measure only).

  ssd_chunked_scan: Mamba2 (SSD) prefill, T 4096 tokens, H 32 heads, P 64, N 128, G 1, chunk 64.
      FLOPs counted: the chunked closed form's products, 2 per multiply-add: C B^T (Q^2 G N, once per
      group: its heads share B and C), the intra-chunk output (Q^2 H P), the inter-chunk output C S
      (Q H P N) and the state update (Q H P N) per chunk of Q tokens. (Before issue 16's rewrite the
      reference formed C B^T per head and this counted Q^2 H N.) The reference forms C B^T once per
      block of heads it runs on one thread (reference/head_workers.py: two blocks of 16 heads on 2 CPUs),
      ~1% more work than counted.
  rwkv6_wkv: RWKV6 time mixing, T 2048 tokens, H 32 heads, K = V = 64.
      FLOPs counted: 6 K V per token and head (the outer product k v^T, the read r^T (S + diag(u) k v^T),
      the update diag(w) S + k v^T), 2 per multiply-add.
For each: the time, the FLOP rate as a fraction of this machine's float64 matmul rate measured in the
same run (benchmarks/matmul_ratio.py), and the peak extra memory.

    .venv/bin/python benchmarks/reference_recurrent.py [--ops ssd,rwkv6] [--repeats 2] [--threads N] [--json]
"""
from __future__ import annotations

import numpy as np

from matmul_ratio import measure, parse_args, print_result, report_machine

from kvconform.reference.recurrent import rwkv6_wkv, ssd_chunked_scan

SSD = dict(T=4096, H=32, P=64, N=128, G=1, chunk=64)
RWKV6 = dict(T=2048, H=32, K=64, V=64)


def ssd_case(seed: int = 0):
    T, H, P, N, G, Q = (SSD[k] for k in ("T", "H", "P", "N", "G", "chunk"))
    rng = np.random.default_rng(seed)
    args = dict(state=np.zeros((1, H, P, N), dtype=np.float32),
                x=rng.standard_normal((T, H, P), dtype=np.float32),
                dt=rng.uniform(0.001, 0.1, (T, H)).astype(np.float32),
                A=-rng.uniform(0.5, 2.0, H).astype(np.float32),
                B=rng.standard_normal((T, G, N), dtype=np.float32),
                C=rng.standard_normal((T, G, N), dtype=np.float32),
                cu_seqlens=np.array([0, T], dtype=np.int32), chunk_size=Q)
    chunks = -(-T // Q)
    flops = 2 * chunks * (Q * Q * (G * N + H * P) + 2 * Q * H * P * N)
    return (lambda: ssd_chunked_scan(**args)), flops, "T {T}, H {H}, P {P}, N {N}, G {G}, chunk {chunk}".format(**SSD)


def rwkv6_case(seed: int = 0):
    T, H, K, V = (RWKV6[k] for k in ("T", "H", "K", "V"))
    rng = np.random.default_rng(seed)
    args = dict(r=rng.standard_normal((T, H, K), dtype=np.float32),
                k=rng.standard_normal((T, H, K), dtype=np.float32),
                v=rng.standard_normal((T, H, V), dtype=np.float32),
                w=rng.uniform(0.9, 1.0, (T, H, K)).astype(np.float32),
                u=rng.standard_normal((H, K), dtype=np.float32),
                state=np.zeros((1, H, K, V), dtype=np.float32),
                cu_seqlens=np.array([0, T], dtype=np.int32))
    flops = 2 * 3 * T * H * K * V
    return (lambda: rwkv6_wkv(**args)), flops, "T {T}, H {H}, K {K}, V {V}".format(**RWKV6)


CASES = {"ssd": ("ssd_chunked_scan", ssd_case), "rwkv6": ("rwkv6_wkv", rwkv6_case)}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "ops", ",".join(CASES), repeats=2)
    results = {}
    for key in args.ops.split(","):
        name, case = CASES[key]
        run, flops, shape = case()
        result = measure(run, flops, args.repeats)
        result["shape"] = shape
        results[name] = result
        if not args.json:
            print_result(name, shape, result, args.repeats)
    report_machine(results, args.json)


if __name__ == "__main__":
    main()
