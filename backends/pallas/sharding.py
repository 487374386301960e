"""Head-sharded ragged paged attention: the Pallas kernel under `shard_map` over one mesh axis.

Serving shards attention heads across chips (a 70B model with 8 KV heads on 8 chips leaves one KV head
per chip). Each device holds Hq/n query heads and the Hkv/n KV heads they read, and runs the unsharded
kernel on its slice; nothing crosses devices except the per-token scores, which sum over heads (PA-21)
and so are reduced with one psum. Because the combined layout interleaves K and V per head (K at 2h,
V at 2h+1), a contiguous 1/n slice of the combined axis is exactly the K/V pairs of a contiguous 1/n
slice of KV heads, and query head h = kv_head * group + g keeps its KV head (PA-12).
"""
from __future__ import annotations

import dataclasses

import numpy as np


def shard_attention(mesh, axis: str, *, pages_per_seq: int, cfg, interpret):
    """A function with the arguments of `ragged_paged_attention_kernel` (kernel layout) that runs it
    sharded over `axis` of `mesh` on the head axes. Hkv must be a multiple of the axis size."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as Spec

    from .paged_attention import ragged_paged_attention_kernel

    n = mesh.shape[axis]

    def per_device(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, scalars, sinks):
        local_cfg = dataclasses.replace(cfg, kv_heads_per_block=kv_pages.shape[2] // 2)
        fparams = jnp.concatenate([scalars, sinks])
        result = ragged_paged_attention_kernel(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams,
                                               pages_per_seq=pages_per_seq, cfg=local_cfg,
                                               interpret=interpret)
        if cfg.return_scores:
            return result[0], jax.lax.psum(result[1], axis)
        return (result[0],)

    rep = Spec()
    out_specs = (Spec(None, axis, None),) + ((rep,) if cfg.return_scores else ())
    sharded = jax.shard_map(
        per_device, mesh=mesh, check_vma=False,
        in_specs=(Spec(None, axis, None), Spec(None, None, axis, None), rep, rep, rep, rep, rep, Spec(axis)),
        out_specs=out_specs)

    def run(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams):
        hkv = kv_pages.shape[2] // 2
        if hkv % n:
            raise ValueError(f"Hkv={hkv} KV heads cannot be split evenly over mesh axis {axis!r} of size {n}")
        fparams = np.asarray(fparams, np.float32)
        hq = q.shape[1]
        sinks = fparams[4:] if fparams.shape[0] > 4 else np.zeros(hq, np.float32)
        return jax.jit(sharded)(q, kv_pages, kv_lens, page_table, cu_q_lens, meta, fparams[:4], sinks)

    return run
