"""Launch-parameter sweep of the Triton attention kernels on a GPU (issues 17 and 30). Not a test.

    python benchmarks/triton/sweep_attention.py --out sweep.json [--quick] [--only prefill,decode,decode_b1,mla]
    python benchmarks/triton/sweep_attention.py --list          # the configurations, no GPU needed

For the shapes of bench_kernels.py (bf16, Hq 32, Hkv 8, D 128, page 16; prefill 4 x 2048 causal, decode
64 x 4096 and 1 x 32768; MLA at DeepSeek-V3's dims, 64 x 4096 keys) time every configuration of a small
grid with triton.testing.do_bench and print the best few of each, as ratios to the copy bandwidth / SDPA
time measured in the same run:
  prefill (paged_prefill.prefill_kernel): rows per tile (block_q x GROUP_PAD), block_n, num_warps, num_stages;
  decode / decode_b1 (the decode kernel): block_n, num_splits, num_warps, num_stages;
  mla: block_h, block_n, num_splits, num_warps, num_stages.
The launch rules (attention_launch.launch_defaults, mla.launch_defaults) take their constants from these
tables; benchmarks/triton/results/ keeps the runs. Every row is also appended to OUT.jsonl as it is timed,
so a sweep cut off by a time limit keeps what it measured.
"""
from __future__ import annotations

import argparse
import itertools
import json

HQ, HKV, D, PAGE = 32, 8, 128, 16
GROUP_PAD = HQ // HKV


def grids(quick: bool) -> dict:
    """{tag: [config dict]} of every sweep."""
    rows = (64, 128) if quick else (64, 128, 256)
    prefill = [dict(block_q=r // GROUP_PAD, block_n=n, warps=w, stages=s)
               for r, n, w, s in itertools.product(rows, (32, 64) if quick else (32, 64, 128), (4, 8),
                                                   (2, 3) if quick else (1, 2, 3, 4))]
    bn = (32, 64) if quick else (32, 64, 128)
    warps = (4,) if quick else (4, 8)
    stages = (3,) if quick else (2, 3, 4)
    decode = [dict(block_n=n, splits=sp, warps=w, stages=s)
              for n, sp, w, s in itertools.product(bn, (1, 2) if quick else (1, 2, 4), warps, stages)]
    decode_b1 = [dict(block_n=n, splits=sp, warps=w, stages=s)
                 for n, sp, w, s in itertools.product(bn[-2:], (16, 32, 64) if quick else (16, 32, 48, 64, 128),
                                                      warps, stages)]
    mla = [dict(block_h=h, block_n=n, splits=sp, warps=w, stages=s)
           for h, n, sp, w, s in itertools.product((32, 64) if quick else (16, 32, 64), (16, 32) if quick else (16, 32, 64),
                                                   (1, 2, 4), (4, 8), (1, 2) if quick else (1, 2, 3))]
    return {"prefill": prefill, "decode": decode, "decode_b1": decode_b1, "mla": mla}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="JSON of every timing (also appended line by line to OUT.jsonl)")
    ap.add_argument("--quick", action="store_true", help="a smaller grid")
    ap.add_argument("--only", default=None, help="comma-separated sweeps: prefill,decode,decode_b1,mla")
    ap.add_argument("--list", action="store_true", help="print the configurations and exit (no GPU needed)")
    args = ap.parse_args(argv)
    table = grids(args.quick)
    chosen = [x.strip() for x in args.only.split(",")] if args.only else list(table)
    unknown = [x for x in chosen if x not in table]
    if unknown:
        ap.error(f"--only: unknown sweep(s) {', '.join(unknown)} (known: {', '.join(table)})")
    if args.list:
        listing = {tag: table[tag] for tag in chosen}
        print(json.dumps({tag: len(rows) for tag, rows in listing.items()}))
        return listing
    from kvconform.backends.triton import _runtime
    rt = _runtime.configure()
    if rt.interpret:
        raise SystemExit("the sweep needs a CUDA GPU (timings under the interpreter mean nothing; --list shows "
                         "the grid)")
    import numpy as np
    import torch
    import triton
    from triton.testing import do_bench
    from kvconform.backends.triton import mla as tmla
    from kvconform.backends.triton import paged_attention as pa

    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    src = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_bw = 2 * src.numel() / (do_bench(lambda: dst.copy_(src)) * 1e-3)
    out = {"device": rt.description, "torch": torch.__version__, "triton": triton.__version__,
           "copy_GBps": copy_bw / 1e9, **{tag: [] for tag in chosen}}
    log = open(args.out + ".jsonl", "a") if args.out else None

    def record(tag, config, ms=None, error=None, **ratio):
        row = dict(config, ms=ms, **ratio) if error is None else dict(config, error=error)
        out[tag].append(row)
        if log:
            log.write(json.dumps({"tag": tag, **row}) + "\n")
            log.flush()

    def timed(tag, config, fn, ratio):
        try:
            ms = do_bench(fn)
        except Exception as e:   # e.g. out of shared memory for a large tile
            record(tag, config, error=type(e).__name__)
            return
        record(tag, config, ms, **ratio(ms))

    def cache(S, L, contiguous=False):
        pps = -(-L // PAGE)
        P = S * pps
        k = torch.randn((P, PAGE, HKV, D), generator=gen, device=dev).to(dt)
        v = torch.randn((P, PAGE, HKV, D), generator=gen, device=dev).to(dt)
        order = torch.arange(P, device=dev) if contiguous else torch.randperm(P, generator=gen, device=dev)
        return k, v, order.to(torch.int32).reshape(S, pps)

    common = dict(sm_scale=D ** -0.5, out_dtype=dt)
    if "prefill" in chosen:    # first: its gap to SDPA is the widest
        S, n = 4, 2048
        k, v, pages = cache(S, n, contiguous=True)
        q = torch.randn((S * n, HQ, D), generator=gen, device=dev).to(dt)
        kv = torch.full((S,), n, dtype=torch.int32, device=dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=dev) * n
        qs = q.reshape(S, n, HQ, D).transpose(1, 2)
        ks = k.reshape(S, n, HKV, D).transpose(1, 2).repeat_interleave(GROUP_PAD, dim=1)
        vs = v.reshape(S, n, HKV, D).transpose(1, 2).repeat_interleave(GROUP_PAD, dim=1)
        sdpa_ms = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
        out["sdpa_ms"] = sdpa_ms
        for c in table["prefill"]:
            fn = lambda c=c: pa.ragged_paged_attention(  # noqa: E731
                q, k, v, kv, pages, cu, S, decode_max_q=0, run_decode=False, run_prefill=True,
                prefill_block_q=c["block_q"], prefill_block_n=c["block_n"], prefill_warps=c["warps"],
                prefill_stages=c["stages"], **common)
            timed("prefill", c, fn, lambda ms: {"vs_sdpa": ms / sdpa_ms})

    for tag, (S, L) in (("decode", (64, 4096)), ("decode_b1", (1, 32768))):
        if tag not in chosen:
            continue
        k, v, pages = cache(S, L)
        kv_lens = torch.full((S,), L, dtype=torch.int32, device=dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=dev)
        q = torch.randn((S, HQ, D), generator=gen, device=dev).to(dt)
        kv_bytes = 2 * S * L * HKV * D * k.element_size()
        for c in table[tag]:
            fn = lambda c=c: pa.ragged_paged_attention(  # noqa: E731
                q, k, v, kv_lens, pages, cu, S, num_splits=c["splits"], block_n=c["block_n"], num_warps=c["warps"],
                num_stages=c["stages"], **common)
            timed(tag, c, fn, lambda ms: {"vs_copy": kv_bytes / (ms * 1e-3) / copy_bw})

    if "mla" in chosen:
        S, L, H, dc, dr, ps = 64, 4096, 128, 512, 64, 64
        pps = L // ps
        c_kv = torch.randn((S * pps, ps, dc), generator=gen, device=dev).to(dt)
        k_pe = torch.randn((S * pps, ps, dr), generator=gen, device=dev).to(dt)
        pages = torch.randperm(S * pps, generator=gen, device=dev).to(torch.int32).reshape(S, pps)
        qn = torch.randn((S, H, dc), generator=gen, device=dev).to(dt)
        qp = torch.randn((S, H, dr), generator=gen, device=dev).to(dt)
        plan = tuple(torch.from_numpy(a).to(dev) for a in tmla.row_plan(np.full(S, L), np.arange(S + 1), S))
        nbytes = S * L * (dc + dr) * c_kv.element_size()
        for c in table["mla"]:
            fn = lambda c=c: tmla.mla_paged_attention(  # noqa: E731
                qn, qp, c_kv, k_pe, pages, plan, sm_scale=(dc + dr) ** -0.5, block_h=c["block_h"],
                block_n=c["block_n"], num_splits=c["splits"], num_warps=c["warps"], num_stages=c["stages"], out_dtype=dt)
            timed("mla", c, fn, lambda ms: {"vs_copy": nbytes / (ms * 1e-3) / copy_bw})

    for tag in chosen:
        key, best_first = ("vs_sdpa", False) if tag == "prefill" else ("vs_copy", True)
        rows = sorted((r for r in out[tag] if r.get("ms") is not None), key=lambda r: r[key], reverse=best_first)
        print(f"== {tag}: best of {len(rows)} ({sum('error' in r for r in out[tag])} did not run)")
        for r in rows[:6]:
            print("  ", r)
    print(f"copy {copy_bw / 1e9:.0f} GB/s" + (f"; sdpa {out['sdpa_ms']:.3f} ms" if "sdpa_ms" in out else ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
