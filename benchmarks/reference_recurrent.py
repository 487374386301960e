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
same run (benchmarks/matmul_ratio.py), and the peak extra memory. Then the same for the op's matrix
products alone ("products alone"): the GEMMs its chunked form makes, with the reference's shapes, chunk
sizes and head blocks on the same threads, on random data, nothing else. That is the rate the op could not
beat with any elementwise work made free; the gap between the two lines is the op's elementwise work (the
copies, decays, masks, the guard), not BLAS.

    .venv/bin/python benchmarks/reference_recurrent.py [--ops ssd,rwkv6] [--repeats 2] [--threads N] [--json]
"""
from __future__ import annotations

import numpy as np

from matmul_ratio import measure, parse_args, print_result, report_machine

from kvconform.reference.head_workers import head_blocks, head_map
from kvconform.reference.recurrent import rwkv6, rwkv6_wkv, ssd_chunked_scan

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


def ssd_products():
    """The SSD scan's products alone, per chunk and block of a group's heads (reference/recurrent/ssd_scan.py
    `_chunk`): C B^T [Q, N] x [N, Q], weights x [Hb, Q, Q] x [Hb, Q, P], C S^T [Q, N] x [Hb, N, P] and the
    absorbed B^T (w x) [N, Q] x [Hb, Q, P]."""
    T, H, P, N, Q = (SSD[k] for k in ("T", "H", "P", "N", "chunk"))
    work = T * H * P * N
    blocks = head_blocks(work, H, SSD["G"])
    rng = np.random.default_rng(0)

    def operands(heads):
        return (rng.standard_normal((Q, N)), rng.standard_normal((Q, N)), rng.standard_normal((heads, Q, Q)),
                rng.standard_normal((heads, Q, P)), rng.standard_normal((heads, N, P)))

    data = [operands(h.stop - h.start) for _, h in blocks]

    def block(i):
        C, B, weights, x, S_T = data[i]
        for _ in range(T // Q):
            C @ B.T
            weights @ x
            C @ S_T
            B.T @ x

    def run():
        with head_map(work, H) as map_blocks:
            for _ in map_blocks(block, range(len(blocks))):
                pass
    return run


def rwkv6_products():
    """RWKV6's products alone, per segment and block of heads (reference/recurrent/rwkv6.py `_chunks`):
    scores [Hb, C, Q, K] x [Hb, C, K, Q] and y [Hb, C, Q, Q] x [Hb, C, Q, V] per segment of C chunks, then
    per chunk the state's read [Hb, Q, K] x [Hb, K, V] and update [Hb, K, Q] x [Hb, Q, V]."""
    T, H, K, V = (RWKV6[k] for k in ("T", "H", "K", "V"))
    Q, C = rwkv6._CHUNK, rwkv6._SEGMENT
    work = T * H * K * V
    blocks = [h for _, h in head_blocks(work, H)]
    rng = np.random.default_rng(0)
    data = [[rng.standard_normal(shape) for shape in ((h.stop - h.start, C, Q, K), (h.stop - h.start, C, Q, V),
                                                      (h.stop - h.start, K, V))] for h in blocks]

    def block(i):
        rk, v, S = data[i]
        for _ in range(T // (C * Q)):
            scores = rk @ rk.transpose(0, 1, 3, 2)
            scores @ v
            for c in range(C):
                rk[:, c] @ S
                rk[:, c].transpose(0, 2, 1) @ v[:, c]

    def run():
        with head_map(work, H) as map_blocks:
            for _ in map_blocks(block, range(len(blocks))):
                pass
    return run


CASES = {"ssd": ("ssd_chunked_scan", ssd_case, ssd_products), "rwkv6": ("rwkv6_wkv", rwkv6_case, rwkv6_products)}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "ops", ",".join(CASES), repeats=2)
    results = {}
    for key in args.ops.split(","):
        name, case, products = CASES[key]
        run, flops, shape = case()
        result = measure(run, flops, args.repeats)
        result["shape"] = shape
        alone = measure(products(), flops, args.repeats)
        result["products_alone"] = {k: alone[k] for k in ("seconds", "matmul_f64_gflops", "fraction_of_matmul")}
        results[name] = result
        if not args.json:
            print_result(name, shape, result, args.repeats)
            print(f"  products alone: {alone['seconds'] * 1e3:.0f} ms, {100 * alone['fraction_of_matmul']:.0f}% of "
                  f"the matmul ({alone['matmul_f64_gflops']:.1f} GFLOP/s in their run): the call spends "
                  f"{100 * (1 - alone['seconds'] / result['seconds']):.0f}% of its time outside its products")
    report_machine(results, args.json)


if __name__ == "__main__":
    main()
