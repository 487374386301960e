"""Claims and layout conversion for jax's `ragged_paged_attention` kernel (see the package docstring).

Limits of the kernel, each a claim (spec/paged_attention.md clauses in brackets):
- head_dim a multiple of 128: the running max/sum scratch is 128 lanes wide and is broadcast to the head
  dim by whole copies (kernel.py:570, an assertion in `broadcast_to_shape`, otherwise);
- KV heads: 2*Hkv must tile whole (packed) sublanes ("Not implemented: ... can not be XLA fully tiled",
  kernel.py:697-698 in `get_min_heads_per_blk`): Hkv in {1, 2, 4} or a multiple of 4 for float32 pages
  (of 8 for bfloat16 pages); claimed as {1, 2, 4, 8, 16, 32} [PA-12, PA-47];
- float32 pages only here: bfloat16 pages are loaded through a bitcast of the reshaped VMEM ref, a third
  construct Pallas TPU interpret mode cannot run (and `interpreter_patches` does not emulate), so they are
  not claimed; on a TPU they would be;
- no sinks, no per-token scores [PA-17, PA-21]; quantized KV is not claimed: its scales are static Python
  floats (one per tensor) and 8-bit pages need an even Hkv, which cannot share one head-count claim with
  Hkv = 1 of the float caches;
- no limit on query rows or keys per sequence: the kernel's own input check allows any `q_len <= kv_len`
  per sequence, 0 and 0 included (`dynamic_validate_inputs`, kernel.py:206-212), and its reference
  (`ref_ragged_paged_attention`, kernel.py:73-148) computes such a sequence as an empty slice. What the kernel
  gets wrong inside that contract is an expected failure, not a claim (ci/expectations/jax_thirdparty.toml:
  a sequence with no keys followed by another corrupts that one's output);
- a call whose q has no row at all (T = 0) is not given to the kernel off a TPU: Pallas TPU interpret mode
  cannot read back a zero-size output ("Out-of-bounds read ... buffer has shape (0, ...)" from `get`,
  jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py:653-664, in the final read of the outputs at
  :2488), a bug of the interpreter, not of the kernel, so the adapter returns the empty output itself; on
  a TPU the kernel is called;
- block sizes: off a TPU the kernel's tuned table refuses to answer ("TPU version must be 4 or higher"),
  (tuned_block_sizes.py:1456), so the adapter passes `num_queries_per_block` and `num_kv_pages_per_block`
  itself (tuning, not semantics).
"""
from __future__ import annotations

import numpy as np

from ...reference import kv_layouts
from ...reference import paged_attention as ref_attention
from ..base import Availability, Backend, OpClaims
from ..pallas import runtime

JAX_VERSION = "0.10.2"
UPSTREAM = "jax/experimental/pallas/ops/tpu/ragged_paged_attention/kernel.py"
#: KV head counts the kernel tiles for both float32 and bfloat16 pages
KV_HEADS = (1, 2, 4, 8, 16, 32)
QUERIES_PER_BLOCK = 8
MAX_PAGES_PER_BLOCK = 4


def jax_availability(upstream: str) -> Availability:
    """Shared by the jax adapters: jax with Pallas TPU importable, at the pinned version."""
    ok, reason, device = runtime.jax_status()
    if not ok:
        return Availability(ok=False, reason=reason)
    import jax
    if jax.__version__ != JAX_VERSION:
        return Availability(ok=False, reason=f"the adapter is pinned to jax {JAX_VERSION} ({upstream}); "
                                             f"found jax {jax.__version__} (pip install kvconform[thirdparty])")
    return Availability(ok=True, device=device)


class RaggedPagedAttentionBackend(Backend):
    name = "jax-ragged-paged-attention"
    version = f"jax-{JAX_VERSION}"

    def availability(self) -> Availability:
        return jax_availability(UPSTREAM)

    def capabilities(self) -> dict[str, OpClaims]:
        return {"ragged_paged_attention": OpClaims(
            dtypes=("float32", "bfloat16"), kv_dtypes=("float32",), page_sizes=None, head_dims=None,
            layouts=("combined",), features=("sliding_window", "soft_cap", "gqa"),
            limits={"head_dim": {"multiple_of": 128}, "num_kv_heads": {"values": list(KV_HEADS)}})}

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, return_scores=False, kv_layout="separate"):
        """Same contract as reference.ragged_paged_attention; out in q's dtype (the kernel's)."""
        call = ref_attention.validate_ragged_paged_attention(
            q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
            return_scores=return_scores, kv_layout=kv_layout)
        for arg, value in (("sinks", sinks), ("k_scale", k_scale), ("return_scores", return_scores or None)):
            if value is not None:
                raise NotImplementedError(f"{arg}: not supported by {UPSTREAM} (not claimed)")
        kv = (np.asarray(k_pages) if kv_layout == "combined"
              else kv_layouts.combine_kv_heads(call.k_pages, call.v_pages))
        pages_per_seq = call.page_indices.shape[1]
        if call.q.shape[0] == 0 and runtime.interpret_params() is not None:
            return np.zeros(call.q.shape, np.asarray(q).dtype)   # the interpreter's zero-size read (above)
        from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention
        from ..pallas import interpreter_patches
        interpreter_patches.apply()
        runtime.release_if_needed()
        with runtime.interpret_context():
            out = ragged_paged_attention(
                np.asarray(q), kv, np.asarray(kv_lens, np.int32), np.asarray(page_indices, np.int32),
                np.asarray(cu_q_lens, np.int32), np.array([call.num_seqs], np.int32),
                sm_scale=float(call.sm_scale), sliding_window=call.sliding_window, soft_cap=call.soft_cap,
                num_queries_per_block=QUERIES_PER_BLOCK,
                num_kv_pages_per_block=min(pages_per_seq, MAX_PAGES_PER_BLOCK))
        return np.asarray(out)
