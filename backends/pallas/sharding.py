"""Head-sharded ragged paged attention: the Pallas kernel under `shard_map` over one mesh axis (PA-49).

Serving shards attention heads across chips (a 70B model with 8 KV heads on 8 chips leaves one KV head
per chip). Each device holds Hq/n query heads and the Hkv/n KV heads they read, and runs the unsharded
kernel on its slice; nothing crosses devices except the per-token scores, which sum over heads (PA-21)
and so are reduced with one psum. Because the combined layout interleaves K and V per head (K at 2h,
V at 2h+1), a contiguous 1/n slice of the combined axis is exactly the K/V pairs of a contiguous 1/n
slice of KV heads, and query head h = kv_head * group + g keeps its KV head (PA-12). What is per head
travels with its heads: sinks with the query heads (PA-17), the K/V scales beside quantized pages
[P, 2*Hkv, page_size] with the KV heads, split along their head rows like the combined pool (PA-48).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .tiling import kv_heads_per_block

AXIS = "heads"


def sharded_attention(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams, token_scales=None, *,
                      num_shards: int, pages_per_seq: int, cfg, interpret):
    """`ragged_paged_attention_kernel`'s call (kernel layout, same arguments and results) with the heads
    split over the first `num_shards` devices.

    q:        [T_pad, Hq, Dp];  kv_pages: [P, page_size, 2*Hkv, Dp] combined heads
    fparams:  f32[4 + Hq] = (4 scalars, sinks[Hq])
    token_scales: f32[P, 2*Hkv, page_size] with cfg.token_scales (PA-48), else None
    cfg:      the unsharded AttentionConfig; each shard's head block is chosen for its own head counts
              (PA-47), since Hq/n and Hkv/n tile differently from Hq and Hkv.
    Hkv must be a multiple of `num_shards` (the reference's validation has said so already)."""
    hq, hkv = q.shape[1], kv_pages.shape[2] // 2
    local = dataclasses.replace(cfg, kv_heads_per_block=kv_heads_per_block(
        hq // num_shards, hkv // num_shards, q.dtype, kv_pages.dtype))
    fparams = np.asarray(fparams, np.float32)
    parts = np.split(fparams, [4])     # scalars, sinks
    run = _sharded(num_shards, pages_per_seq, local, interpret)
    return run(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, token_scales, *parts)


@functools.lru_cache(maxsize=64)
def _sharded(num_shards: int, pages_per_seq: int, cfg, interpret):
    """The jitted shard_map of the kernel over a `num_shards`-device mesh (cached: one trace per config)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as Spec

    from .paged_attention import ragged_paged_attention_kernel

    devices = jax.devices()
    if len(devices) < num_shards:
        raise RuntimeError(f"num_shards={num_shards} needs {num_shards} devices, jax has {len(devices)}")
    mesh = Mesh(np.array(devices[:num_shards]), (AXIS,))

    def per_device(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, token_scales, scalars, sinks):
        fparams = jnp.concatenate([scalars, sinks])
        result = ragged_paged_attention_kernel(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams,
                                               token_scales, pages_per_seq=pages_per_seq, cfg=cfg,
                                               interpret=interpret)
        if cfg.return_scores:
            return result[0], jax.lax.psum(result[1], AXIS)
        return (result[0],)

    rep, heads = Spec(), Spec(AXIS)
    out_specs = (Spec(None, AXIS, None),) + ((rep,) if cfg.return_scores else ())
    return jax.jit(jax.shard_map(
        per_device, mesh=mesh, check_vma=False,
        in_specs=(Spec(None, AXIS, None), Spec(None, None, AXIS, None), rep, rep, rep, rep,
                  Spec(None, AXIS, None) if cfg.token_scales else None, rep, heads),
        out_specs=out_specs))
