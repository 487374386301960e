"""The serving stacks' cache layouts, to and from the spec's canonical ones, exact (elements move, bits stay).

Canonical (spec/paged_attention.md PA-35, spec/recurrent.md RS-1, RS-28):
    k_pages, v_pages   [P, page_size, Hkv, D]
    conv_state         [R, C, W-1]        (causal-conv1d's `conv_state: (batch, dim, state_len)`)
    gated delta state  [R, H, K, V]

Stacks (each function names its source; upstream files read at the commit given):
    vLLM, FlashAttention backend   [2, num_blocks, block_size, Hkv, D]; HND: the same logical shape over
                                   memory ordered [2, num_blocks, Hkv, block_size, D]   to_vllm_kv_cache
    FlashInfer                     [P, 2, page_size, Hkv, D] (NHD) or [P, 2, Hkv, page_size, D] (HND), or a
                                   (k, v) tuple of [P, page_size, Hkv, D] / [P, Hkv, page_size, D]
                                                                          to_flashinfer_kv_cache
    sglang                         token-major [(P + 1) * page_size, Hkv, D], page 0 reserved for padded
                                   tokens                                  to_sglang_kv_buffer
    vLLM Mamba / GDN conv state    [R, W-1, C] ("SD", the default) or [R, C, W-1] ("DS")
                                                                          to_vllm_conv_state
    vLLM gated delta rule state    [R, H, V, K]                            to_vllm_gdn_state
vLLM's per-tensor cache (`kv_cache[0]`, `kv_cache[1]`), FlashInfer's NHD tuple and the Mamba SSM states
(vLLM `[R, D, N]`, `[R, H, P, N]`) are the canonical layouts themselves.

Every function takes NumPy arrays or torch tensors (on any device) and returns the same kind: convert
with `kvconform.adapters.to_torch` first to rearrange on the device. Results are new arrays, never views
of the input (a kernel writing its cache in place must not write the caller's), except `to_vllm_kv_cache`
with layout "HND", which returns the permuted view of a fresh buffer that vLLM itself allocates.
`sequence_kv` gathers one sequence's keys or values from canonical pages.
"""
from __future__ import annotations

import numpy as np

from kvconform.reference.kv_write import KVPages
from kvconform.reference.validation import require

from .arrays import is_torch_tensor

__all__ = ["to_vllm_kv_cache", "from_vllm_kv_cache", "to_flashinfer_kv_cache", "from_flashinfer_kv_cache",
           "to_sglang_kv_buffer", "from_sglang_kv_buffer", "to_vllm_conv_state", "from_vllm_conv_state",
           "to_vllm_gdn_state", "from_vllm_gdn_state", "sequence_kv", "KV_LAYOUTS", "CONV_LAYOUTS"]

#: FlashInfer's `kv_layout` and vLLM's `get_kv_cache_layout()` values
KV_LAYOUTS = ("NHD", "HND")
#: vLLM's `get_conv_state_layout()` values
CONV_LAYOUTS = ("SD", "DS")


# --- the few array operations needed, for NumPy and torch alike ------------------------------------------

def _stack(arrays, axis: int):
    if is_torch_tensor(arrays[0]):
        import torch
        return torch.stack(arrays, dim=axis)
    return np.stack(arrays, axis=axis)


def _permuted(x, axes):
    """A contiguous copy of x with its axes permuted."""
    if is_torch_tensor(x):
        return x.permute(*axes).contiguous().clone()
    return np.ascontiguousarray(np.transpose(x, axes)).copy()


def _fresh(x):
    """A contiguous copy of x (never a view of it)."""
    if is_torch_tensor(x):
        return x.contiguous().clone()
    return np.array(x, order="C", copy=True)


def _view_permuted(x, axes):
    return x.permute(*axes) if is_torch_tensor(x) else np.transpose(x, axes)


def _zeros(x, shape):
    if is_torch_tensor(x):
        import torch
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    return np.zeros(shape, dtype=x.dtype)


def _concat(arrays, axis: int):
    if is_torch_tensor(arrays[0]):
        import torch
        return torch.cat(arrays, dim=axis)
    return np.concatenate(arrays, axis=axis)


def _check_pages(k_pages, v_pages) -> None:
    require(k_pages.ndim == 4, f"k_pages must have rank 4 [P, page_size, Hkv, D], got shape {tuple(k_pages.shape)}")
    require(tuple(v_pages.shape) == tuple(k_pages.shape),
            f"v_pages must have the shape of k_pages {tuple(k_pages.shape)}, got {tuple(v_pages.shape)}")
    require(v_pages.dtype == k_pages.dtype, f"v_pages must have the dtype of k_pages ({k_pages.dtype}), "
                                            f"got {v_pages.dtype}")


def _check_layout(layout: str, known: tuple[str, ...]) -> None:
    require(layout in known, f"layout must be one of {', '.join(map(repr, known))}, got {layout!r}")


# --- vLLM attention ---------------------------------------------------------------------------------------

def to_vllm_kv_cache(k_pages, v_pages, *, layout: str = "NHD"):
    """Canonical pages -> vLLM's stacked cache kv_cache[2, num_blocks, block_size, Hkv, D], K at [0], V at [1].

    k_pages, v_pages: [P, page_size, Hkv, D], any dtype. Source: vllm/v1/attention/backends/flash_attn.py,
    FlashAttentionBackend.get_kv_cache_shape returns (2, num_blocks, block_size, num_kv_heads, head_size)
    (L80-88 at vllm-project/vllm@0084b78). layout "HND": get_kv_cache_stride_order (0, 1, 3, 2, 4) puts
    the memory in [2, num_blocks, Hkv, block_size, D] order under the same logical shape; the result is
    then that permuted view of a fresh contiguous buffer (its strides are the point: pass it on with
    `to_torch(..., keep_strides=True)` when converting a NumPy one)."""
    _check_pages(k_pages, v_pages)
    _check_layout(layout, KV_LAYOUTS)
    if layout == "NHD":
        return _stack([k_pages, v_pages], 0)
    physical = _stack([_permuted(k_pages, (0, 2, 1, 3)), _permuted(v_pages, (0, 2, 1, 3))], 0)
    return _view_permuted(physical, (0, 1, 3, 2, 4))


def from_vllm_kv_cache(kv_cache) -> KVPages:
    """vLLM's kv_cache[2, num_blocks, block_size, Hkv, D] (either stride order) -> KVPages of canonical
    [P, page_size, Hkv, D] pages (fresh contiguous arrays)."""
    require(kv_cache.ndim == 5 and kv_cache.shape[0] == 2,
            f"kv_cache must have shape [2, num_blocks, block_size, Hkv, D], got {tuple(kv_cache.shape)}")
    return KVPages(_fresh(kv_cache[0]), _fresh(kv_cache[1]))


# --- FlashInfer ---------------------------------------------------------------------------------------------

def to_flashinfer_kv_cache(k_pages, v_pages, *, layout: str = "NHD", as_tuple: bool = False):
    """Canonical pages -> FlashInfer's paged_kv_cache.

    One 5-D tensor [P, 2, page_size, Hkv, D] (layout "NHD") or [P, 2, Hkv, page_size, D] ("HND"), K at
    [:, 0] and V at [:, 1]; with as_tuple, (k_cache, v_cache) of [P, page_size, Hkv, D] or
    [P, Hkv, page_size, D]. Source: flashinfer docs/tutorials/kv_layout.rst L128-136 and
    flashinfer/page.py append_paged_kv_cache's docstring (flashinfer-ai/flashinfer@fb28d72)."""
    _check_pages(k_pages, v_pages)
    _check_layout(layout, KV_LAYOUTS)
    if layout == "NHD":
        k, v = _fresh(k_pages), _fresh(v_pages)
    else:
        k, v = _permuted(k_pages, (0, 2, 1, 3)), _permuted(v_pages, (0, 2, 1, 3))
    return (k, v) if as_tuple else _stack([k, v], 1)


def from_flashinfer_kv_cache(paged_kv_cache, *, layout: str = "NHD") -> KVPages:
    """FlashInfer's paged_kv_cache (the 5-D tensor or the (k, v) tuple, in `layout`) -> KVPages of canonical
    [P, page_size, Hkv, D] pages."""
    _check_layout(layout, KV_LAYOUTS)
    if isinstance(paged_kv_cache, tuple):
        require(len(paged_kv_cache) == 2, f"paged_kv_cache as a tuple must be (k_cache, v_cache), got "
                                          f"{len(paged_kv_cache)} elements")
        k, v = paged_kv_cache
    else:
        require(paged_kv_cache.ndim == 5 and paged_kv_cache.shape[1] == 2,
                f"paged_kv_cache must have shape [P, 2, ...] (5-D, K and V on axis 1), got "
                f"{tuple(paged_kv_cache.shape)}")
        k, v = paged_kv_cache[:, 0], paged_kv_cache[:, 1]
    if layout == "NHD":
        return KVPages(_fresh(k), _fresh(v))
    return KVPages(_permuted(k, (0, 2, 1, 3)), _permuted(v, (0, 2, 1, 3)))


# --- sglang ------------------------------------------------------------------------------------------------

def to_sglang_kv_buffer(pages):
    """Canonical pages [P, page_size, Hkv, D] -> sglang's token-major buffer [(P + 1) * page_size, Hkv, D].

    Token location `loc` is row `loc` (page loc // page_size); sglang reserves its first page for the
    writes of padded tokens and allocates pages from 1, so canonical page p is sglang page p + 1 and the
    first page_size rows are zeros here (sglang allocates with torch.zeros). Slots and tables convert with
    `page_tables.sglang_out_cache_loc` / `sglang_req_to_token`. Source: sglang
    python/sglang/srt/mem_cache/memory_pool.py MHATokenToKVPool._create_buffers ((size + page_size,
    head_num, head_dim) per layer, "The padded slot 0 is used for writing dummy outputs from padded
    tokens", sgl-project/sglang@000ccdb) and allocator.py PagedTokenToKVPoolAllocator.clear (free pages
    start at 1)."""
    require(pages.ndim == 4, f"pages must have rank 4 [P, page_size, Hkv, D], got shape {tuple(pages.shape)}")
    P, page_size, Hkv, D = pages.shape
    return _concat([_zeros(pages, (page_size, Hkv, D)), pages.reshape(P * page_size, Hkv, D)], 0)


def from_sglang_kv_buffer(buffer, page_size: int):
    """sglang's token-major buffer [(P + 1) * page_size, Hkv, D] -> canonical pages [P, page_size, Hkv, D]
    (its reserved first page dropped)."""
    require(isinstance(page_size, (int, np.integer)) and page_size >= 1,
            f"page_size must be an integer >= 1, got {page_size!r}")
    require(buffer.ndim == 3 and buffer.shape[0] % page_size == 0 and buffer.shape[0] >= page_size,
            f"buffer must have shape [(P + 1) * page_size, Hkv, D] with page_size={page_size}, got "
            f"{tuple(buffer.shape)}")
    rows, Hkv, D = buffer.shape
    return _fresh(buffer[page_size:].reshape(rows // page_size - 1, page_size, Hkv, D))


# --- recurrent state pools ----------------------------------------------------------------------------------

def to_vllm_conv_state(conv_state, *, layout: str = "SD"):
    """Canonical conv windows [R, C, W-1] (RS-1) -> vLLM's conv state pool: [R, W-1, C] for "SD" (vLLM's
    default, the channels contiguous) or [R, C, W-1] for "DS".

    Source: vllm/model_executor/layers/mamba/mamba_utils.py get_conv_state_layout ("SD = (state_len,
    dim)", the default) and MambaStateShapeCalculator._orient_conv_shape (vllm-project/vllm@02d7108). vLLM's
    kernels read an SD pool through `.transpose(-1, -2)`, a [R, C, W-1] view with strides (.., 1, C): to
    hand a kernel that view, transpose the result and convert with `to_torch(..., keep_strides=True)`.
    vLLM widens the window to W-1+num_spec columns under speculative decoding: not modelled here."""
    _check_layout(layout, CONV_LAYOUTS)
    require(conv_state.ndim == 3, f"conv_state must have rank 3 [R, C, W-1], got shape {tuple(conv_state.shape)}")
    return _permuted(conv_state, (0, 2, 1)) if layout == "SD" else _fresh(conv_state)


def from_vllm_conv_state(state, *, layout: str = "SD"):
    """vLLM's conv state pool ([R, W-1, C] for "SD", [R, C, W-1] for "DS") -> canonical [R, C, W-1]."""
    _check_layout(layout, CONV_LAYOUTS)
    require(state.ndim == 3, f"state must have rank 3, got shape {tuple(state.shape)}")
    return _permuted(state, (0, 2, 1)) if layout == "SD" else _fresh(state)


def to_vllm_gdn_state(state):
    """Canonical gated delta rule state [R, H, K, V] (RS-28) -> vLLM's [R, H, V, K].

    Source: vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.
    gated_delta_net_state_shape, temporal_state_shape = (num_v_heads, head_v_dim, head_k_dim)
    (vllm-project/vllm@02d7108)."""
    require(state.ndim == 4, f"state must have rank 4 [R, H, K, V], got shape {tuple(state.shape)}")
    return _permuted(state, (0, 1, 3, 2))


def from_vllm_gdn_state(state):
    """vLLM's gated delta rule state [R, H, V, K] -> canonical [R, H, K, V]."""
    require(state.ndim == 4, f"state must have rank 4 [R, H, V, K], got shape {tuple(state.shape)}")
    return _permuted(state, (0, 1, 3, 2))


# --- one sequence out of the pages ---------------------------------------------------------------------------

def sequence_kv(pages, seq_pages, kv_len: int):
    """The first kv_len slots of one sequence, gathered: [kv_len, Hkv, D] from pages [P, page_size, Hkv, D].

    seq_pages: the sequence's pages in logical order (`page_tables.sequence_spans(...)[i].pages`, int64);
    only the cdiv(kv_len, page_size) pages in use are read, and only kv_len slots of them returned, so
    slots past kv_len (poisoned with NaN by the suite, PA-24) never reach a kernel. NumPy or torch
    (torch indexes with the NumPy page ids on any device)."""
    page_size = pages.shape[1]
    used = seq_pages[: -(-kv_len // page_size)]
    if is_torch_tensor(pages):
        import torch
        used = torch.as_tensor(np.asarray(used, dtype=np.int64), device=pages.device)
    return pages[used].reshape(-1, *pages.shape[2:])[:kv_len]
