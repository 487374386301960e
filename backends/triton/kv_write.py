"""KV write kernel (spec/paged_attention.md, PA-40 .. PA-46): scatter new tokens into the page pools.

One program stores BLOCK_T tokens x BLOCK_E elements (of the flattened Hkv * D row) of K and of V.
Token t goes to page slot // page_size, offset slot % page_size; a negative slot stores nothing
(masked, so padding tokens never touch the pool). Quantized pools get the pinned rule
saturate(rne(fl32(x) / fl32(scale))) with an exact IEEE division and integer-bit rounding
(`storage.encode`), so results are bit-exact under the interpreter and on GPUs.
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .storage import encode, storage_code, storage_view  # noqa: E402


@triton.jit
def _write_kv_kernel(k_ptr, v_ptr, kp_ptr, vp_ptr, slot_ptr, n_tokens, page_size, k_scale, v_scale,
                     stride_kt, stride_kh, stride_kd, stride_vt, stride_vh, stride_vd,
                     stride_kpp, stride_kps, stride_kph, stride_kpd,
                     stride_vpp, stride_vps, stride_vph, stride_vpd, stride_slot,
                     D: tl.constexpr, HD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                     CODE: tl.constexpr, QUANTIZED: tl.constexpr):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    slot = tl.load(slot_ptr + t * stride_slot, mask=t < n_tokens, other=-1).to(tl.int64)
    keep = (slot >= 0)[:, None] & (e < HD)[None, :]  # PA-41: slot < 0 skips the token
    page = tl.where(slot >= 0, slot // page_size, 0)
    off = tl.where(slot >= 0, slot % page_size, 0)
    h = e // D
    d = e % D
    t64 = t.to(tl.int64)
    x = tl.load(k_ptr + t64[:, None] * stride_kt + (h * stride_kh + d * stride_kd)[None, :], mask=keep)
    y = tl.load(v_ptr + t64[:, None] * stride_vt + (h * stride_vh + d * stride_vd)[None, :], mask=keep)
    x = x.to(tl.float32)
    y = y.to(tl.float32)
    if QUANTIZED:  # PA-44: correctly rounded float32 division, never a reciprocal multiply
        x = tl.math.div_rn(x, tl.full(x.shape, k_scale, tl.float32))
        y = tl.math.div_rn(y, tl.full(y.shape, v_scale, tl.float32))
    dst_k = (page * stride_kpp + off * stride_kps)[:, None] + (h * stride_kph + d * stride_kpd)[None, :]
    dst_v = (page * stride_vpp + off * stride_vps)[:, None] + (h * stride_vph + d * stride_vpd)[None, :]
    tl.store(kp_ptr + dst_k, encode(x, CODE), mask=keep)
    tl.store(vp_ptr + dst_v, encode(y, CODE), mask=keep)


def write_kv_(k_pages, v_pages, k, v, slot_mapping, k_scale=None, v_scale=None):
    """In place: store k, v ([N, Hkv, D], float32/16 or bf16 tensors) into the pools through
    slot_mapping (int32/int64 [N], any stride). Pools keep their dtype; scales are floats or None."""
    n, hkv, d = k.shape
    if n == 0:
        return
    code = storage_code(k_pages.dtype)
    kp, vp = storage_view(k_pages), storage_view(v_pages)
    hd = hkv * d
    block_e = min(triton.next_power_of_2(hd), 1024)
    block_t = max(1, min(64, 4096 // block_e, triton.next_power_of_2(n)))
    grid = (triton.cdiv(n, block_t), triton.cdiv(hd, block_e))
    _write_kv_kernel[grid](
        k, v, kp, vp, slot_mapping, n, k_pages.shape[1],
        1.0 if k_scale is None else float(k_scale), 1.0 if v_scale is None else float(v_scale),
        *k.stride(), *v.stride(), *kp.stride(), *vp.stride(), slot_mapping.stride(0),
        D=d, HD=hd, BLOCK_T=block_t, BLOCK_E=block_e, CODE=code, QUANTIZED=k_scale is not None)
