"""Speed of the Triton kernels as ratios measured in one run (issue 6). Not a test.

    python benchmarks/triton/bench_kernels.py            # full issue-6 shapes (needs a CUDA GPU)
    python benchmarks/triton/bench_kernels.py --smoke    # tiny shapes; runs under the interpreter on CPU

Reported, each against a number measured in the same process:
- decode: KV bytes read per second / device-to-device copy bandwidth (goal >= 0.70)
  bf16 q and KV, Hq 32, Hkv 8, D 128, page 16, 64 sequences x 4096 tokens, and 1 sequence x 32768
  tokens (split-KV);
- prefill: kernel time / torch SDPA time on the same data laid out contiguously (goal <= 1.5)
  4 sequences x 2048 new tokens, causal, no cached prefix (SDPA with is_causal=True), same heads;
- rotation (per-block deltas, every page of the decode cache's keys): bytes read+written per second /
  copy bandwidth (goal >= 0.60);
- selective state update (Mamba2: 128 rows, H 64, P 64, N 128, float32 state pool): state bytes read +
  written per second / copy bandwidth (goal >= 0.60).
`--out PATH` writes the figures as JSON with the device, driver and library versions.
Copy bandwidth counts read + write bytes of a large `torch.Tensor.copy_`.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kvconform.backends.triton import _runtime


def _timer(device):
    import torch

    def run(fn, iters):
        fn()  # warm-up / compile
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters
    return run


#: (result key, goal, comparison) -- issue 17's goals; reported, never asserted.
GOALS = (("decode_vs_copy", 0.70, lambda r, g: r >= g), ("decode_b1_vs_copy", 0.70, lambda r, g: r >= g),
         ("prefill_vs_sdpa", 1.5, lambda r, g: r <= g), ("rotation_vs_copy", 0.60, lambda r, g: r >= g),
         ("ssu_vs_copy", 0.60, lambda r, g: r >= g))


def _driver() -> str | None:
    """The NVIDIA driver version (from /proc; None when unreadable)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
    except OSError:
        return None
    m = [w for w in line.split() if w.count(".") >= 1 and w.replace(".", "").isdigit()]
    return m[0] if m else line.strip()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (CPU interpreter smoke run)")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON to this path")
    args = ap.parse_args(argv)
    rt = _runtime.configure()
    if not rt.ok:
        raise SystemExit(f"triton backend unavailable: {rt.reason}")
    import torch
    from kvconform.backends.triton import paged_attention as pa, rotation as rot
    from kvconform.backends.triton.recurrent import selective_state as ssu
    from kvconform.reference import rotation as rref

    dev, run = rt.device, _timer(rt.device)
    iters = args.iters or (1 if args.smoke else 20)
    if args.smoke:
        S, L, Hq, Hkv, D, ps, S_pre, new, cached = 2, 64, 4, 2, 32, 16, 1, 32, 0
    else:
        S, L, Hq, Hkv, D, ps, S_pre, new, cached = 64, 4096, 32, 8, 128, 16, 4, 2048, 0
    dt = torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    import triton
    results = {"device": rt.description, "smoke": args.smoke, "torch": torch.__version__,
               "triton": triton.__version__, "cuda": torch.version.cuda,
               "driver": _driver() if dev == "cuda" else None}

    # Copy bandwidth (read + write bytes per second).
    n_copy = (1 << 20) if args.smoke else (1 << 28)
    src = torch.empty(n_copy, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t_copy = run(lambda: dst.copy_(src), iters)
    copy_bw = 2 * n_copy / t_copy
    results["copy_GBps"] = copy_bw / 1e9

    # Decode: 64 x 4096 and 1 x 32768 (smoke: 2 x 64 and 1 x 256).
    def decode(S, L, tag):
        pps = L // ps
        P = S * pps
        k = torch.randn((P, ps, Hkv, D), generator=gen, device=dev).to(dt)
        v = torch.randn((P, ps, Hkv, D), generator=gen, device=dev).to(dt)
        pages = torch.randperm(P, generator=gen, device=dev).to(torch.int32).reshape(S, pps)
        kv_lens = torch.full((S,), L, dtype=torch.int32, device=dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=dev)
        q = torch.randn((S, Hq, D), generator=gen, device=dev).to(dt)
        # the backend's own launch choice
        launch = pa.launch_defaults(S, 1, L, Hkv, Hq // Hkv, split_min_kv=pa.split_threshold(rt.interpret),
                                    interpret=rt.interpret)
        splits = launch["num_splits"]
        dec = lambda: pa.ragged_paged_attention(q, k, v, kv_lens, pages, cu, S, sm_scale=D ** -0.5,  # noqa: E731
                                                interpret=rt.interpret, **launch)
        t_dec = run(dec, iters)
        kv_bytes = 2 * S * L * Hkv * D * k.element_size()
        results.update({f"{tag}_s": t_dec, f"{tag}_GBps": kv_bytes / t_dec / 1e9,
                        f"{tag}_vs_copy": kv_bytes / t_dec / copy_bw, f"{tag}_num_splits": splits})
        return k, P

    k, P = decode(S, L, "decode")
    decode(1, 256 if args.smoke else 32768, "decode_b1")

    # Prefill vs SDPA.
    tot = new + cached
    pps2 = tot // ps
    P2 = S_pre * pps2
    k2 = torch.randn((P2, ps, Hkv, D), generator=gen, device=dev).to(dt)
    v2 = torch.randn((P2, ps, Hkv, D), generator=gen, device=dev).to(dt)
    pages2 = torch.arange(P2, dtype=torch.int32, device=dev).reshape(S_pre, pps2)
    q2 = torch.randn((S_pre * new, Hq, D), generator=gen, device=dev).to(dt)
    kv2 = torch.full((S_pre,), tot, dtype=torch.int32, device=dev)
    cu2 = torch.arange(S_pre + 1, dtype=torch.int32, device=dev) * new
    launch2 = pa.launch_defaults(S_pre, new, tot, Hkv, Hq // Hkv, split_min_kv=pa.split_threshold(rt.interpret),
                                 interpret=rt.interpret)
    pre = lambda: pa.ragged_paged_attention(q2, k2, v2, kv2, pages2, cu2, S_pre, sm_scale=D ** -0.5,  # noqa: E731
                                            interpret=rt.interpret, **launch2)
    t_pre = run(pre, iters)
    # SDPA on contiguous [S, H, len, D] data, GQA expanded, bottom-right causal mask (cached prefix visible).
    qs = q2.reshape(S_pre, new, Hq, D).transpose(1, 2)
    ks = k2.reshape(S_pre, tot, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    vs = v2.reshape(S_pre, tot, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    if cached == 0:   # plain causal: lets SDPA pick its flash kernel
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)  # noqa: E731
    else:
        mask = torch.ones((new, tot), dtype=torch.bool, device=dev).tril(diagonal=cached)
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)  # noqa: E731
    t_sdpa = run(sdpa, iters)
    results.update(prefill_s=t_pre, sdpa_s=t_sdpa, prefill_vs_sdpa=t_pre / t_sdpa)

    # Rotation: every page of the decode key cache, one delta per block.
    lut = torch.from_numpy(rref.rerotation_lut(8, D, theta=10000.0, block_size=ps).astype(np.float32)).to(dev)
    idx = torch.arange(P, dtype=torch.int32, device=dev)
    deltas = (torch.arange(P, dtype=torch.int32, device=dev) % 8).reshape(P, 1)
    rotate = lambda: rot.rotate_(k, idx, deltas, rotary_dim=D, layout="half", trig_lut=lut)  # noqa: E731
    t_rot = run(rotate, iters)
    rot_bytes = 2 * k.numel() * k.element_size()
    results.update(rotation_s=t_rot, rotation_vs_copy=rot_bytes / t_rot / copy_bw)

    # Selective state update (Mamba2 layout): every row updates its own slot of a float32 pool.
    Bs, H, Pd, N, G = (2, 2, 16, 16, 1) if args.smoke else (128, 64, 64, 128, 8)
    state = torch.randn((Bs, H, Pd, N), generator=gen, device=dev)
    xs = torch.randn((Bs, H, Pd), generator=gen, device=dev).to(dt)
    dts = torch.rand((Bs, H), generator=gen, device=dev)[:, :, None].expand(Bs, H, Pd)
    A = -torch.rand((H,), generator=gen, device=dev)[:, None, None].expand(H, Pd, N)
    Bm = torch.randn((Bs, G, N), generator=gen, device=dev).to(dt)
    Cm = torch.randn((Bs, G, N), generator=gen, device=dev).to(dt)
    slots = torch.arange(Bs, dtype=torch.int32, device=dev)
    out = torch.empty((Bs, H, Pd), dtype=torch.float32, device=dev)
    ssu_fn = lambda: ssu.selective_state_update_(state, xs, dts, A, Bm, Cm, None, None, None, slots, out,  # noqa: E731
                                                 dt_softplus=True)
    t_ssu = run(ssu_fn, iters)
    ssu_bytes = 2 * state.numel() * state.element_size()
    results.update(ssu_s=t_ssu, ssu_vs_copy=ssu_bytes / t_ssu / copy_bw)
    results["goals"] = {name: {"goal": goal, "met": bool(cmp(results[name], goal))}
                        for name, goal, cmp in GOALS}
    print(json.dumps(results, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
