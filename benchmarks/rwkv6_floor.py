"""A floor for the NumPy reference's RWKV6 on benchmarks/reference_recurrent.py's shape (issue 16; not a test).

The closed form of reference/recurrent/rwkv6.py cannot do without these elementwise passes: the running
products of w, the float64 head-major copies of r, k, v and P, the factors r P[t-1] and k / P, the bonus
sum(r u k) and the copy of the outputs; nor without its four products (scores, y, the state's read and
update). This script runs exactly those, per block of 16 heads on its own thread (one BLAS thread each, as
reference/head_workers.py does), with no guard, no mask, no state check and no validation, and prints the
time and FLOP rate (6 K V per token and head, as the benchmark counts) of: passes and products together,
each alone, and the float64 matmul measured in the same run. Together they take about the sum of the two
alone or more (they do not overlap), so that sum is the best the reference could do with this form in
NumPy.

    .venv/bin/python benchmarks/rwkv6_floor.py
"""
from __future__ import annotations

import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

T, H, K, V, Q, C, HB = 2048, 32, 64, 64, 32, 4, 16     # the benchmark's shape; chunks of Q, segments of C


def inputs():
    rng = np.random.default_rng(0)
    r, k, v = (rng.standard_normal((T, H, K), dtype=np.float32) for _ in range(3))
    return r, k, v, rng.uniform(0.9, 1, (T, H, K)).astype(np.float32), rng.standard_normal((H, K))


def block(h, data, out, passes=True, products=True):
    r, k, v, w, u = data
    hs = slice(h * HB, (h + 1) * HB)
    R, Kk, Vv, P, Rd, Ki, scratch = (np.zeros((HB, C, Q, K)) for _ in range(7))
    Pt, scores, y = np.zeros((C, Q, HB, K)), np.zeros((HB, C, Q, Q)), np.zeros((HB, C, Q, V))
    S, read, write = np.zeros((HB, K, V)), np.zeros((HB, Q, V)), np.zeros((HB, K, V))
    for seg in range(T // (C * Q)):
        tokens = slice(seg * C * Q, (seg + 1) * C * Q)
        if passes:
            wc = w[tokens, hs].reshape(C, Q, HB, K)
            Pt[:, 0] = wc[:, 0]
            for t in range(1, Q):
                np.multiply(Pt[:, t - 1], wc[:, t], out=Pt[:, t])
            for dst, x in ((R, r), (Kk, k), (Vv, v)):
                np.copyto(dst, x[tokens, hs].reshape(C, Q, HB, -1).transpose(2, 0, 1, 3))
            np.copyto(P, Pt.transpose(2, 0, 1, 3))
            np.multiply(R[:, :, 1:], P[:, :, :-1], out=Rd[:, :, 1:])
            np.divide(Kk, P, out=Ki)
            np.multiply(R, u[hs, None, None, :], out=scratch)
            scratch *= Kk
            scratch.sum(axis=3)
        if products:
            np.matmul(Rd, Ki.transpose(0, 1, 3, 2), out=scores)
            np.matmul(scores, Vv, out=y)
            for c in range(C):
                y[:, c] += np.matmul(Rd[:, c], S, out=read)
                S += np.matmul(Ki[:, c].transpose(0, 2, 1), Vv[:, c], out=write)
        if passes:
            np.copyto(out[tokens, hs].reshape(C, Q, HB, -1), y.transpose(1, 2, 0, 3))


def seconds(data, out, **parts) -> float:
    threads = [threading.Thread(target=block, args=(h, data, out), kwargs=parts) for h in range(H // HB)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - t0


def main() -> None:
    data, out = inputs(), np.zeros((T, H, V))
    flops = 6 * T * H * K * V
    with threadpool_limits(1):
        seconds(data, out)
        for name, parts in (("passes and products", {}), ("passes alone", {"products": False}),
                            ("products alone", {"passes": False})):
            best = min(seconds(data, out, **parts) for _ in range(7))
            print(f"{name:20s} {best * 1e3:6.1f} ms  {flops / best / 1e9:5.1f} GFLOP/s")
    a = np.random.default_rng(1).standard_normal((1024, 1024))
    with threadpool_limits(2):
        a @ a
        best = np.inf
        for _ in range(5):
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
    print(f"float64 matmul 1024^3 with 2 threads: {2 * 1024 ** 3 / best / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
