"""kvconform.adapters.cache_layouts: each serving stack's documented shape, where every element lands, exact
round trips (NaN payloads included), fresh arrays, and the same results on torch tensors as on NumPy."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kvconform.adapters import (from_flashinfer_kv_cache, from_sglang_kv_buffer, from_vllm_conv_state,
                                from_vllm_gdn_state, from_vllm_kv_cache, sequence_kv, to_flashinfer_kv_cache,
                                to_numpy, to_sglang_kv_buffer, to_torch, to_vllm_conv_state, to_vllm_gdn_state,
                                to_vllm_kv_cache)

P, PS, H, D = 3, 4, 2, 5


def _bits(shape, dtype=ml_dtypes.bfloat16, seed=0):
    """Every element distinct, NaNs with payloads and -0.0 among them."""
    n = int(np.prod(shape))
    raw = np.random.default_rng(seed).permutation(1 << 16)[:n].astype(np.uint16)
    return raw.view(dtype).reshape(shape)


def _same(a, b) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


K, V = _bits((P, PS, H, D), seed=1), _bits((P, PS, H, D), seed=2)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_vllm_stacked_cache(layout):
    """vllm/v1/attention/backends/flash_attn.py: get_kv_cache_shape (2, num_blocks, block_size, Hkv, D);
    get_kv_cache_stride_order (0, 1, 3, 2, 4) for HND: memory in [2, num_blocks, Hkv, block_size, D] order."""
    kv = to_vllm_kv_cache(K, V, layout=layout)
    assert kv.shape == (2, P, PS, H, D)
    assert _same(kv[0], K) and _same(kv[1], V)
    memory_order = (0, 1, 2, 3, 4) if layout == "NHD" else (0, 1, 3, 2, 4)
    assert np.transpose(kv, memory_order).flags.c_contiguous
    assert not np.shares_memory(kv, K) and not np.shares_memory(kv, V)
    pools = from_vllm_kv_cache(kv)
    assert _same(pools.k_pages, K) and _same(pools.v_pages, V) and pools.k_pages.flags.c_contiguous


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_flashinfer_cache(layout):
    """flashinfer docs/tutorials/kv_layout.rst: [max_num_pages, 2, page_size, num_heads, head_dim] (NHD),
    [max_num_pages, 2, num_heads, page_size, head_dim] (HND), or a (k, v) tuple of the 4-D forms."""
    cache = to_flashinfer_kv_cache(K, V, layout=layout)
    p, s, h = 2, 3, 1
    if layout == "NHD":
        assert cache.shape == (P, 2, PS, H, D)
        assert _same(cache[p, 0, s, h], K[p, s, h]) and _same(cache[p, 1, s, h], V[p, s, h])
    else:
        assert cache.shape == (P, 2, H, PS, D)
        assert _same(cache[p, 0, h, s], K[p, s, h]) and _same(cache[p, 1, h, s], V[p, s, h])
    k, v = to_flashinfer_kv_cache(K, V, layout=layout, as_tuple=True)
    assert k.shape == ((P, PS, H, D) if layout == "NHD" else (P, H, PS, D)) and _same(k, cache[:, 0])
    for form in (cache, (k, v)):
        pools = from_flashinfer_kv_cache(form, layout=layout)
        assert _same(pools.k_pages, K) and _same(pools.v_pages, V)
    assert not np.shares_memory(k, K)


def test_sglang_token_major_buffer():
    """sglang memory_pool.py MHATokenToKVPool: (size + page_size, head_num, head_dim), the first page for
    padded tokens; canonical page p is sglang page p + 1."""
    buf = to_sglang_kv_buffer(K)
    assert buf.shape == ((P + 1) * PS, H, D)
    assert not np.any(buf[:PS].view(np.uint16))
    assert _same(buf[(2 + 1) * PS + 3], K[2, 3])
    assert _same(from_sglang_kv_buffer(buf, PS), K)


@pytest.mark.parametrize("layout", ["SD", "DS"])
def test_vllm_conv_state(layout):
    """vllm mamba_utils.py get_conv_state_layout: SD = (state_len, dim) per slot (the default), DS = (dim,
    state_len), canonical [R, C, W-1] (causal-conv1d's (batch, dim, state_len))."""
    conv = _bits((4, 6, 3), np.float16)
    state = to_vllm_conv_state(conv, layout=layout)
    if layout == "SD":
        assert state.shape == (4, 3, 6) and _same(state[1, 2, 5], conv[1, 5, 2])
        assert state.flags.c_contiguous       # the channels contiguous, as vLLM allocates it
    else:
        assert _same(state, conv) and not np.shares_memory(state, conv)
    assert _same(from_vllm_conv_state(state, layout=layout), conv)


def test_vllm_gated_delta_state():
    """vllm mamba_utils.py gated_delta_net_state_shape: temporal (num_v_heads, head_v_dim, head_k_dim)."""
    state = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)     # [R, H, K, V]
    theirs = to_vllm_gdn_state(state)
    assert theirs.shape == (2, 3, 5, 4) and theirs[1, 2, 4, 3] == state[1, 2, 3, 4]
    assert _same(from_vllm_gdn_state(theirs), state)


def test_torch_tensors_rearrange_like_numpy():
    torch = pytest.importorskip("torch")
    kt, vt = to_torch(K), to_torch(V)
    assert _same(to_vllm_kv_cache(kt, vt, layout="HND"), to_vllm_kv_cache(K, V, layout="HND"))
    assert to_vllm_kv_cache(kt, vt, layout="HND").permute(0, 1, 3, 2, 4).is_contiguous()
    assert _same(to_flashinfer_kv_cache(kt, vt, layout="HND"), to_flashinfer_kv_cache(K, V, layout="HND"))
    assert _same(from_flashinfer_kv_cache(to_flashinfer_kv_cache(kt, vt), layout="NHD").v_pages, V)
    assert _same(to_sglang_kv_buffer(kt), to_sglang_kv_buffer(K))
    assert _same(from_sglang_kv_buffer(to_sglang_kv_buffer(kt), PS), K)
    conv = to_torch(np.arange(24, dtype=np.float32).reshape(2, 4, 3))
    assert _same(to_vllm_conv_state(conv), to_vllm_conv_state(to_numpy(conv)))
    pages = np.array([2, 0], np.int64)
    assert _same(sequence_kv(kt, pages, 6), sequence_kv(K, pages, 6))
    assert isinstance(sequence_kv(kt, pages, 6), torch.Tensor)


def test_sequence_kv_reads_only_the_slots_in_use():
    poisoned = K.copy()
    poisoned[0, 2:] = np.nan        # past kv_len = 4 + 2 in the sequence's second page
    poisoned[1] = np.nan            # a page the sequence does not own
    keys = sequence_kv(poisoned, np.array([2, 0, 1]), PS + 2)
    assert keys.shape == (PS + 2, H, D)
    assert _same(keys, np.concatenate([K[2], K[0, :2]]))


@pytest.mark.parametrize("call, message", [
    (lambda: to_vllm_kv_cache(K, V[:1]), "v_pages must have the shape of k_pages"),
    (lambda: to_flashinfer_kv_cache(K, V, layout="NDH"), "layout must be one of 'NHD', 'HND'"),
    (lambda: from_vllm_kv_cache(K), "kv_cache must have shape [2, num_blocks"),
    (lambda: from_sglang_kv_buffer(np.zeros((7, 1, 1)), 4), "buffer must have shape [(P + 1) * page_size"),
    (lambda: to_vllm_conv_state(np.zeros((2, 3)), layout="SD"), "conv_state must have rank 3"),
])
def test_bad_input_is_one_line_naming_the_argument(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
