"""Launch-parameter sweep of the Triton paged-attention kernel on a GPU (issue 17). Not a test.

    python benchmarks/triton/sweep_attention.py --out sweep.json

For the decode shapes of bench_kernels.py (bf16, Hq 32, Hkv 8, D 128, page 16; 64 x 4096 and 1 x 32768)
and the prefill shape (4 x 2048, causal), time every (block_q, block_n, num_splits, num_warps,
num_stages) in a small grid with triton.testing.do_bench and print the best few of each, as ratios to
the copy bandwidth / SDPA time measured in the same run. The backend's defaults are chosen from this
table (backends/triton/paged_attention.py: default_launch); benchmarks/triton/results/ keeps the runs.
"""
from __future__ import annotations

import argparse
import itertools
import json

from kvconform.backends.triton import _runtime


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="JSON of every timing (also appended line by line to OUT.jsonl)")
    ap.add_argument("--quick", action="store_true", help="a handful of configurations")
    args = ap.parse_args(argv)
    rt = _runtime.configure()
    if rt.interpret:
        raise SystemExit("the sweep needs a CUDA GPU (timings under the interpreter mean nothing)")
    import torch
    import triton
    from triton.testing import do_bench
    from kvconform.backends.triton import paged_attention as pa

    dev, dt = "cuda", torch.bfloat16
    Hq, Hkv, D, ps = 32, 8, 128, 16
    gen = torch.Generator(device=dev).manual_seed(0)
    src = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_bw = 2 * src.numel() / (do_bench(lambda: dst.copy_(src)) * 1e-3)
    out = {"device": rt.description, "torch": torch.__version__, "triton": triton.__version__,
           "copy_GBps": copy_bw / 1e9, "decode": [], "decode_b1": [], "prefill": []}

    log = open(args.out + ".jsonl", "a") if args.out else None

    def record(tag, row):
        out[tag].append(row)
        if log:   # line by line: a sweep cut off by a time limit keeps what it measured
            log.write(json.dumps({"tag": tag, **row}) + "\n")
            log.flush()

    def cache(S, L):
        pps = L // ps
        P = S * pps
        k = torch.randn((P, ps, Hkv, D), generator=gen, device=dev).to(dt)
        v = torch.randn((P, ps, Hkv, D), generator=gen, device=dev).to(dt)
        pages = torch.randperm(P, generator=gen, device=dev).to(torch.int32).reshape(S, pps)
        return k, v, pages

    def time_decode(tag, S, L, grid):
        k, v, pages = cache(S, L)
        kv_lens = torch.full((S,), L, dtype=torch.int32, device=dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=dev)
        q = torch.randn((S, Hq, D), generator=gen, device=dev).to(dt)
        kv_bytes = 2 * S * L * Hkv * D * k.element_size()
        for block_n, splits, warps, stages in grid:
            fn = lambda: pa.ragged_paged_attention(  # noqa: E731
                q, k, v, kv_lens, pages, cu, S, sm_scale=D ** -0.5, num_splits=splits, block_n=block_n,
                num_warps=warps, num_stages=stages)
            try:
                ms = do_bench(fn)
            except Exception as e:   # e.g. out of shared memory for a large tile
                record(tag, {"block_n": block_n, "splits": splits, "warps": warps, "stages": stages,
                             "error": type(e).__name__})
                continue
            record(tag, {"block_n": block_n, "splits": splits, "warps": warps, "stages": stages,
                         "ms": ms, "vs_copy": kv_bytes / (ms * 1e-3) / copy_bw})

    # prefill first: its gap to SDPA is the widest, and a sweep cut off by a time limit keeps what it timed
    S, new = 4, 2048
    k, v, pages = cache(S, new)
    pages = torch.arange(pages.numel(), dtype=torch.int32, device=dev).reshape(S, -1)
    q = torch.randn((S * new, Hq, D), generator=gen, device=dev).to(dt)
    kv = torch.full((S,), new, dtype=torch.int32, device=dev)
    cu = torch.arange(S + 1, dtype=torch.int32, device=dev) * new
    qs = q.reshape(S, new, Hq, D).transpose(1, 2)
    ks = k.reshape(S, new, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    vs = v.reshape(S, new, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    sdpa_ms = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
    out["sdpa_ms"] = sdpa_ms
    grid = itertools.product((16,) if args.quick else (8, 16, 32), (32, 64), (4,) if args.quick else (4, 8), (3,))
    for block_q, block_n, w, s in grid:
        fn = lambda: pa.ragged_paged_attention(  # noqa: E731
            q, k, v, kv, pages, cu, S, sm_scale=D ** -0.5, block_q=block_q, block_n=block_n,
            num_warps=w, num_stages=s)
        try:
            ms = do_bench(fn)
        except Exception as e:
            record("prefill", {"block_q": block_q, "block_n": block_n, "warps": w, "stages": s,
                               "error": type(e).__name__})
            continue
        record("prefill", {"block_q": block_q, "block_n": block_n, "warps": w, "stages": s,
                           "ms": ms, "vs_sdpa": ms / sdpa_ms})

    bn = (32, 64) if args.quick else (32, 64, 128)
    warps = (4,) if args.quick else (4, 8)
    time_decode("decode", 64, 4096, itertools.product(bn, (1, 2) if args.quick else (1, 2, 4), warps, (3,)))
    time_decode("decode_b1", 1, 32768, itertools.product(bn[-2:], (32, 64) if args.quick else (32, 64, 128),
                                                         (4,), (3,)))

    for tag, key, best_first in (("decode", "vs_copy", True), ("decode_b1", "vs_copy", True),
                                 ("prefill", "vs_sdpa", False)):
        rows = sorted((r for r in out[tag] if "ms" in r), key=lambda r: r[key], reverse=best_first)
        print(f"== {tag}: best of {len(rows)} ({sum('error' in r for r in out[tag])} did not run)")
        for r in rows[:6]:
            print("  ", r)
    print(f"copy {copy_bw / 1e9:.0f} GB/s; sdpa {sdpa_ms:.3f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
