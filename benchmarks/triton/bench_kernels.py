"""Speed of the Triton kernels as ratios measured in one run (issues 17 and 30). Not a test.

    python benchmarks/triton/bench_kernels.py --out results/h100_bench_DATE.json   # needs a CUDA GPU
    python benchmarks/triton/bench_kernels.py --smoke                               # tiny shapes, any machine

The `goals` table of the JSON (issue 30), each against a number measured in the same process:

| key                | figure                                                                      | goal    |
|--------------------|-----------------------------------------------------------------------------|---------|
| prefill_vs_sdpa    | paged prefill time / `scaled_dot_product_attention(is_causal=True)` time,   | <= 1.3  |
|                    | 4 x 2048 causal, bf16, Hq 32, Hkv 8, D 128, page 16 (SDPA on the same data   |         |
|                    | laid out densely, KV heads repeated)                                        |         |
| decode_vs_copy     | KV bytes read / s over copy bandwidth, 64 x 4096 keys, same heads           | >= 0.75 |
| decode_b1_vs_copy  | the same, 1 x 32768 keys (split-KV)                                         | >= 0.6  |
| ssu_vs_copy        | Mamba2 selective state update (128 rows, H 64, P 64, N 128, float32 pool):  | >= 0.65 |
|                    | state bytes read + written / s over copy bandwidth                          |         |
| mla_decode_vs_copy | absorbed MLA decode, DeepSeek-V3 dims (H 128, d_c 512, d_r 64, page 64,     | >= 0.6  |
|                    | bf16), 64 x 4096 keys: latent cache bytes read / s over copy bandwidth      |         |
| gdn_chunked_vs_fla | gated delta rule chunked prefill time / flash-linear-attention's            | <= 1.5  |
|                    | `chunk_gated_delta_rule` time, Qwen3-Next heads (Hk 16, Hv 32, K = V = 128),|         |
|                    | 4 x 4096 tokens varlen, bf16, L2-normalised q/k                              |         |

Each entry holds `figure`, `goal`, `met` (`figure` and `met` are null when not measured, with the reason in
`why`). Copy bandwidth counts the read and the written bytes of a large device-to-device copy. Times come
from triton.testing.do_bench (CUDA events, L2 flushed between runs). fla-core is not a pinned dependency:
the harness imports it when it is installed (`pip install fla-core`; carried to a GPU machine as a wheel,
benchmarks/triton/native_check.sh) and says why not otherwise; without it the gated delta rule is measured
against the copy bandwidth instead (`figures.gdn_chunked_vs_copy`). The harness also reports how far our
outputs are from fla's (`figures.gdn_vs_fla_max_rel`).

`--smoke` runs every measurement at tiny shapes (under the Triton interpreter on a machine without a GPU)
to check that the harness works; its timings are kept under `smoke` and never fill the goals table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import numpy as np

from kvconform.backends.triton import _runtime

#: (key, goal, direction): ">=" a ratio to the copy bandwidth, "<=" a time ratio to another kernel
GOALS = (("prefill_vs_sdpa", 1.3, "<="), ("decode_vs_copy", 0.75, ">="), ("decode_b1_vs_copy", 0.6, ">="),
         ("ssu_vs_copy", 0.65, ">="), ("mla_decode_vs_copy", 0.6, ">="), ("gdn_chunked_vs_fla", 1.5, "<="))

#: the benchmark shapes: full (issue 30) and smoke (interpreter-sized)
SHAPES = {
    False: dict(heads=(32, 8, 128), page=16, decode=(64, 4096), decode_b1=(1, 32768), prefill=(4, 2048),
                ssu=(128, 64, 64, 128, 8), mla=(64, 4096, 128, 512, 64, 64), gdn=(4, 4096, 16, 32, 128, 128),
                copy_bytes=1 << 28),
    True: dict(heads=(4, 2, 32), page=16, decode=(2, 48), decode_b1=(1, 260), prefill=(1, 40),
               ssu=(2, 2, 16, 16, 1), mla=(1, 40, 16, 32, 16, 16), gdn=(1, 16, 1, 2, 16, 16),
               copy_bytes=1 << 20),
}


def _driver() -> str | None:
    """The NVIDIA driver version (from /proc; None when unreadable)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
    except OSError:
        return None
    m = [w for w in line.split() if w.count(".") >= 1 and w.replace(".", "").isdigit()]
    return m[0] if m else line.strip()


def fla_chunked():
    """(flash-linear-attention's chunk_gated_delta_rule, its version) or (None, why not)."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        import fla
    except ImportError as exc:
        return None, (f"fla-core is not installed ({exc}); pip install fla-core (not pinned in "
                      f"ci/constraints.txt: a GPU-only comparison)")
    except Exception as exc:   # fla imports triton kernels; a broken install must not end the harness
        return None, f"fla-core failed to import: {type(exc).__name__}: {exc}"
    return chunk_gated_delta_rule, getattr(fla, "__version__", "unknown")


class Bench:
    """One run: the device, the timer, the copy bandwidth, the figures."""

    def __init__(self, smoke: bool, iters: int | None):
        self.rt = _runtime.configure()
        if not self.rt.ok:
            raise SystemExit(f"triton backend unavailable: {self.rt.reason}")
        import torch
        import triton
        self.torch, self.dev, self.smoke = torch, self.rt.device, smoke
        self.native = not self.rt.interpret
        self.iters = iters
        self.shapes = SHAPES[smoke]
        self.gen = torch.Generator(device=self.dev).manual_seed(0)
        self.results = {"device": self.rt.description, "smoke": smoke, "python": sys.version.split()[0],
                        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                        "driver": _driver() if self.native else None, "figures": {}, "errors": {}}
        if self.native:
            self.results["gpu"] = torch.cuda.get_device_name(0)
            self.results["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count

    def time(self, fn) -> float:
        """Seconds per call: do_bench natively; under the interpreter (nothing to warm up, and the
        figure means nothing) the mean of --iters calls, default one."""
        if self.native:
            from triton.testing import do_bench
            return do_bench(fn) * 1e-3
        t0 = time.perf_counter()
        n = self.iters or 1
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    def randn(self, shape, dtype=None):
        x = self.torch.randn(shape, generator=self.gen, device=self.dev)
        return x.to(dtype) if dtype is not None else x

    def put(self, **figures):
        self.results["figures"].update(figures)

    def run(self, name, fn):
        """Run one measurement; an exception is recorded, never the end of the run (a short GPU lease
        must keep what the other measurements found)."""
        try:
            fn()
        except Exception as exc:
            self.results["errors"][name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()

    # --- measurements ------------------------------------------------------------------------------
    def copy(self):
        n = self.shapes["copy_bytes"]
        src = self.torch.empty(n, dtype=self.torch.uint8, device=self.dev)
        dst = self.torch.empty_like(src)
        self.copy_bw = 2 * n / self.time(lambda: dst.copy_(src))
        self.put(copy_GBps=self.copy_bw / 1e9)

    def _paged(self, S, L, *, contiguous=False):
        hq, hkv, d = self.shapes["heads"]
        ps = self.shapes["page"]
        pps = -(-L // ps)
        P = S * pps
        k = self.randn((P, ps, hkv, d), self.torch.bfloat16)
        v = self.randn((P, ps, hkv, d), self.torch.bfloat16)
        order = self.torch.arange(P, device=self.dev) if contiguous else self.torch.randperm(P, generator=self.gen,
                                                                                             device=self.dev)
        return k, v, order.to(self.torch.int32).reshape(S, pps)

    def decode(self, tag, S, L):
        from kvconform.backends.triton import paged_attention as pa
        hq, hkv, d = self.shapes["heads"]
        k, v, pages = self._paged(S, L)
        kv_lens = self.torch.full((S,), L, dtype=self.torch.int32, device=self.dev)
        cu = self.torch.arange(S + 1, dtype=self.torch.int32, device=self.dev)
        q = self.randn((S, hq, d), self.torch.bfloat16)
        launch = pa.launch_defaults([1] * S, [L] * S, hkv, hq // hkv, d, split_min_kv=pa.split_threshold(not self.native),
                                    interpret=not self.native, sm_count=self.results.get("sm_count"))
        out_dtype = self.torch.bfloat16 if self.native else self.torch.float32
        t = self.time(lambda: pa.ragged_paged_attention(q, k, v, kv_lens, pages, cu, S, sm_scale=d ** -0.5,
                                                        out_dtype=out_dtype, interpret=not self.native, **launch))
        kv_bytes = 2 * S * L * hkv * d * k.element_size()
        self.put(**{f"{tag}_s": t, f"{tag}_GBps": kv_bytes / t / 1e9, f"{tag}_vs_copy": kv_bytes / t / self.copy_bw,
                    f"{tag}_num_splits": launch["num_splits"]})

    def prefill(self):
        from kvconform.backends.triton import paged_attention as pa
        torch = self.torch
        hq, hkv, d = self.shapes["heads"]
        S, n = self.shapes["prefill"]
        k, v, pages = self._paged(S, n, contiguous=True)
        q = self.randn((S * n, hq, d), torch.bfloat16)
        kv = torch.full((S,), n, dtype=torch.int32, device=self.dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=self.dev) * n
        launch = pa.launch_defaults([n] * S, [n] * S, hkv, hq // hkv, d, split_min_kv=pa.split_threshold(not self.native),
                                    interpret=not self.native, sm_count=self.results.get("sm_count"))
        out_dtype = torch.bfloat16 if self.native else torch.float32
        ours = lambda: pa.ragged_paged_attention(q, k, v, kv, pages, cu, S, sm_scale=d ** -0.5,  # noqa: E731
                                                 out_dtype=out_dtype, interpret=not self.native, **launch)
        t = self.time(ours)
        qs = q.reshape(S, n, hq, d).transpose(1, 2)
        ks = k.reshape(S, -1, hkv, d)[:, :n].transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        vs = v.reshape(S, -1, hkv, d)[:, :n].transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        t_sdpa = self.time(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
        ref = torch.nn.functional.scaled_dot_product_attention(qs.float(), ks.float(), vs.float(), is_causal=True)
        got = ours()[0].float().reshape(S, n, hq, d).transpose(1, 2)
        self.put(prefill_s=t, sdpa_s=t_sdpa, prefill_vs_sdpa=t / t_sdpa,
                 prefill_max_abs_vs_float32_sdpa=float((got - ref).abs().max()))

    def ssu(self):
        from kvconform.backends.triton.recurrent import selective_state as ssu
        torch = self.torch
        B, H, P, N, G = self.shapes["ssu"]
        state = self.randn((B, H, P, N))
        x = self.randn((B, H, P), torch.bfloat16)
        dt = torch.rand((B, H), generator=self.gen, device=self.dev)[:, :, None].expand(B, H, P)
        A = -torch.rand((H,), generator=self.gen, device=self.dev)[:, None, None].expand(H, P, N)
        Bm, Cm = self.randn((B, G, N), torch.bfloat16), self.randn((B, G, N), torch.bfloat16)
        slots = torch.arange(B, dtype=torch.int32, device=self.dev)
        out = torch.empty((B, H, P), dtype=torch.float32, device=self.dev)
        t = self.time(lambda: ssu.selective_state_update_(state, x, dt, A, Bm, Cm, None, None, None, slots, out,
                                                          dt_softplus=True))
        nbytes = 2 * state.numel() * state.element_size()
        self.put(ssu_s=t, ssu_vs_copy=nbytes / t / self.copy_bw)

    def mla(self):
        from kvconform.backends.triton import mla
        torch = self.torch
        S, L, H, dc, dr, ps = self.shapes["mla"]
        pps = -(-L // ps)
        c = self.randn((S * pps, ps, dc), torch.bfloat16)
        r = self.randn((S * pps, ps, dr), torch.bfloat16)
        pages = torch.randperm(S * pps, generator=self.gen, device=self.dev).to(torch.int32).reshape(S, pps)
        qn, qp = self.randn((S, H, dc), torch.bfloat16), self.randn((S, H, dr), torch.bfloat16)
        plan = tuple(torch.from_numpy(a).to(self.dev) for a in mla.row_plan(np.full(S, L), np.arange(S + 1), S))
        launch = mla.launch_defaults(S, H, dc, L, interpret=not self.native, sm_count=self.results.get("sm_count"))
        out_dtype = torch.bfloat16 if self.native else torch.float32
        t = self.time(lambda: mla.mla_paged_attention(qn, qp, c, r, pages, plan, sm_scale=(dc + dr) ** -0.5,
                                                      interpret=not self.native, out_dtype=out_dtype, **launch))
        nbytes = S * L * (dc + dr) * c.element_size()
        self.put(mla_decode_s=t, mla_decode_vs_copy=nbytes / t / self.copy_bw, mla_num_splits=launch["num_splits"],
                 mla_block_h=launch["block_h"])

    def gdn(self):
        from kvconform.backends.triton.recurrent import gated_delta as gdn
        torch = self.torch
        S, L, Hk, Hv, K, V = self.shapes["gdn"]
        T = S * L
        q, k = self.randn((T, Hk, K), torch.bfloat16), self.randn((T, Hk, K), torch.bfloat16)
        v = self.randn((T, Hv, V), torch.bfloat16)
        g = -torch.rand((T, Hv), generator=self.gen, device=self.dev) * 0.1        # log decays
        beta = torch.rand((T, Hv), generator=self.gen, device=self.dev)
        cu = torch.arange(S + 1, dtype=torch.int32, device=self.dev) * L
        state0 = self.randn((S, Hv, K, V)) * 0.1
        state = state0.clone()
        out = torch.empty((T, Hv, V), dtype=torch.float32, device=self.dev)
        scale = K ** -0.5

        def ours():
            state.copy_(state0)
            gdn.gated_delta_rule_chunked_(state, q, k, v, g, beta, cu, None, None, out, scale=scale, chunk_size=64,
                                          norm=True)
        t = self.time(ours)
        nbytes = sum(a.numel() * a.element_size() for a in (q, k, v, g, beta, out)) + 2 * state.numel() * 4
        self.put(gdn_chunked_s=t, gdn_chunked_vs_copy=nbytes / t / self.copy_bw)
        fn, version = fla_chunked()
        if fn is None:
            self.results["gdn_fla"] = {"available": False, "why": version}
            return
        if not self.native:
            self.results["gdn_fla"] = {"available": False, "version": version,
                                       "why": "no CUDA GPU: fla's chunked kernels run natively only (their autotune "
                                              "configs cannot run under the Triton interpreter)"}
            return
        args = dict(q=q[None], k=k[None], v=v[None], g=g[None], beta=beta.to(torch.bfloat16)[None], scale=scale,
                    initial_state=state0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                    cu_seqlens=cu.to(torch.long))
        t_fla = self.time(lambda: fn(**args))
        o_fla, _ = fn(**args)
        ours()
        rel = float((out - o_fla[0].float()).abs().max() / o_fla.float().abs().max().clamp_min(1e-30))
        self.results["gdn_fla"] = {"available": True, "version": version}
        self.put(gdn_fla_s=t_fla, gdn_chunked_vs_fla=t / t_fla, gdn_vs_fla_max_rel=rel)

    def rotation(self):
        """Key re-rotation (per-block deltas) of every page of the decode cache's keys: bytes read + written
        over copy bandwidth (issue 17's figure; no goal of issue 30)."""
        from kvconform.backends.triton import rotation as rot
        from kvconform.reference import rotation as rref
        torch = self.torch
        hq, hkv, d = self.shapes["heads"]
        ps = self.shapes["page"]
        k, _, _ = self._paged(*self.shapes["decode"])
        P = k.shape[0]
        lut = torch.from_numpy(rref.rerotation_lut(8, d, theta=10000.0, block_size=ps).astype(np.float32)).to(self.dev)
        idx = torch.arange(P, dtype=torch.int32, device=self.dev)
        deltas = (torch.arange(P, dtype=torch.int32, device=self.dev) % 8).reshape(P, 1)
        t = self.time(lambda: rot.rotate_(k, idx, deltas, rotary_dim=d, layout="half", trig_lut=lut))
        self.put(rotation_s=t, rotation_vs_copy=2 * k.numel() * k.element_size() / t / self.copy_bw)

    def goals(self):
        table = {}
        for key, goal, direction in GOALS:
            figure = None if self.smoke else self.results["figures"].get(key)
            entry = {"figure": figure, "goal": goal, "direction": direction,
                     "met": None if figure is None else bool(figure >= goal if direction == ">=" else figure <= goal)}
            if figure is None:
                entry["why"] = ("smoke run (tiny shapes" + (", Triton interpreter" if not self.native else "") +
                                "): not a measurement of the goal" if self.smoke else
                                self.results["errors"].get(key.split("_vs_")[0], "not measured"))
                if key == "gdn_chunked_vs_fla" and not self.smoke and "gdn_fla" in self.results \
                        and not self.results["gdn_fla"].get("available"):
                    entry["why"] = self.results["gdn_fla"]["why"]
            table[key] = entry
        self.results["goals"] = table


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (checks the harness; no goal figures)")
    ap.add_argument("--iters", type=int, default=None, help="calls per timing under the interpreter")
    ap.add_argument("--only", default=None, help="comma-separated measurements: copy is always run; "
                                                 "decode,decode_b1,prefill,ssu,mla,gdn,rotation")
    ap.add_argument("--out", default=None, help="write the results as JSON to this path")
    args = ap.parse_args(argv)
    b = Bench(args.smoke, args.iters)
    s = b.shapes
    steps = {"decode": lambda: b.decode("decode", *s["decode"]),
             "decode_b1": lambda: b.decode("decode_b1", *s["decode_b1"]),
             "prefill": b.prefill, "ssu": b.ssu, "mla": b.mla, "gdn": b.gdn, "rotation": b.rotation}
    chosen = [x.strip() for x in args.only.split(",")] if args.only else list(steps)
    unknown = [x for x in chosen if x not in steps]
    if unknown:
        ap.error(f"--only: unknown measurement(s) {', '.join(unknown)} (known: {', '.join(steps)})")
    b.run("copy", b.copy)
    for name in chosen:
        b.run(name, steps[name])
    b.goals()
    if args.smoke:   # interpreter timings are not measurements: kept apart from the goals' figures
        b.results["smoke_figures"] = b.results.pop("figures")
        b.results["figures"] = {}
    text = json.dumps(b.results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return b.results


if __name__ == "__main__":
    main()
