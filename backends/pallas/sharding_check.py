"""Sharded == unsharded check for the head-sharded Pallas attention (issue 7, multi-device).

Run as its own process, because the simulated device count must be fixed before jax is imported:
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m kvconform.backends.pallas.sharding_check
Prints one JSON line per case: the max |sharded - unsharded| of out (0: each device runs the same
per-head arithmetic) and of scores (float32 reassociation only: the psum adds per-device head sums in
another order), and the max error of the sharded result against the reference.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def _case(rng, hkv, group, n_dev, sinks):
    from jax.sharding import Mesh

    import jax

    from kvconform import reference
    from kvconform.backends.pallas import layout
    from kvconform.backends.pallas.runtime import interpret_params
    from kvconform.backends.pallas.paged_attention import AttentionConfig, ragged_paged_attention_kernel
    from kvconform.backends.pallas.sharding import shard_attention

    S, pps, ps, D, P = 3, 3, 4, 16, 12
    hq = hkv * group
    kv_lens = np.array([7, 12, 3], np.int32)
    cu = np.array([0, 1, 6, 9], np.int32)
    T = 16
    q = rng.standard_normal((T, hq, D)).astype(np.float32)
    k = rng.standard_normal((P, ps, hkv, D)).astype(np.float32)
    v = rng.standard_normal((P, ps, hkv, D)).astype(np.float32)
    table = rng.permutation(P)[:S * pps].reshape(S, pps).astype(np.int32)
    sink_vals = rng.standard_normal(hq).astype(np.float32) if sinks else None
    q_k, kv_k = layout.attention_inputs(q, k, v, t_pad=T, p_pad=16)
    fparams = np.zeros(4 + hq, np.float32)
    fparams[:4] = (D ** -0.5, 1.0, 1.0, 1.0)
    if sinks:
        fparams[4:] = sink_vals
    meta = np.array([S, 0], np.int32)
    cfg = AttentionConfig(block_q=8, kv_heads_per_block=hkv, soft_cap=False, sinks=sinks, quantized=False,
                          sliding_window=False, return_scores=True)
    args = (q_k, kv_k, kv_lens, table.reshape(-1), cu, meta, fparams)
    whole = ragged_paged_attention_kernel(*args, pages_per_seq=pps, cfg=cfg, interpret=interpret_params())
    mesh = Mesh(np.array(jax.devices()[:n_dev]), ("heads",))
    split = shard_attention(mesh, "heads", pages_per_seq=pps, cfg=cfg, interpret=interpret_params())(*args)
    ref = reference.ragged_paged_attention(q, k, v, kv_lens, table, cu, S, sinks=sink_vals, return_scores=True)
    out_w, out_s = np.asarray(whole[0])[:9, :, :D], np.asarray(split[0])[:9, :, :D]
    sc_w, sc_s = (np.asarray(x).reshape(S, -1) for x in (whole[1], split[1]))
    return {"hkv": hkv, "group": group, "devices": n_dev, "kv_heads_per_device": hkv // n_dev,
            "sinks": sinks, "out_diff": float(np.abs(out_w - out_s).max()),
            "scores_diff": float(np.abs(sc_w - sc_s).max()),
            "out_vs_reference": float(np.abs(out_s - ref.out[:9]).max()),
            "scores_vs_reference": float(np.abs(sc_s - ref.scores).max())}


def main() -> int:
    if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        print("set XLA_FLAGS=--xla_force_host_platform_device_count=8 before running", file=sys.stderr)
        return 2
    import jax
    print(json.dumps({"devices": len(jax.devices())}), flush=True)
    rng = np.random.default_rng(7)
    for hkv, group, n_dev, sinks in ((8, 2, 8, True), (4, 1, 2, False)):
        print(json.dumps(_case(rng, hkv, group, n_dev, sinks)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
