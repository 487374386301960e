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
def _write_kv_kernel(k_ptr, v_ptr, kp_ptr, vp_ptr, slot_ptr, ks_ptr, vs_ptr, n_tokens, page_size, k_scale,
                     v_scale, stride_sp, stride_ss, stride_sh,
                     stride_kt, stride_kh, stride_kd, stride_vt, stride_vh, stride_vd,
                     stride_kpp, stride_kps, stride_kph, stride_kpd,
                     stride_vpp, stride_vps, stride_vph, stride_vpd, stride_slot,
                     D: tl.constexpr, HD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                     CODE: tl.constexpr, QUANTIZED: tl.constexpr, SCALE_MODE: tl.constexpr,
                     OFFSET: tl.constexpr):
    """SCALE_MODE (PA-44, PA-48): 0 one scale per pool, 1 per KV head (ks_ptr/vs_ptr float32[Hkv]),
    2 the scale stored beside the destination slot (float32[P, page_size, Hkv]). OFFSET: the integer type
    of pool offsets (tl.int64: pools pass 2**31 elements; tl.int32 only in the offset mutant)."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    slot = tl.load(slot_ptr + t * stride_slot, mask=t < n_tokens, other=-1).to(OFFSET)
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
        if SCALE_MODE == 0:
            ks = tl.full(x.shape, k_scale, tl.float32)
            vs = tl.full(y.shape, v_scale, tl.float32)
        elif SCALE_MODE == 1:
            ks = tl.broadcast_to(tl.load(ks_ptr + h * stride_sh, mask=e < HD, other=1.0)[None, :], x.shape)
            vs = tl.broadcast_to(tl.load(vs_ptr + h * stride_sh, mask=e < HD, other=1.0)[None, :], y.shape)
        else:
            s_off = (page * stride_sp + off * stride_ss)[:, None] + (h * stride_sh)[None, :]
            ks = tl.load(ks_ptr + s_off, mask=keep, other=1.0)
            vs = tl.load(vs_ptr + s_off, mask=keep, other=1.0)
        x = tl.math.div_rn(x, ks)
        y = tl.math.div_rn(y, vs)
    dst_k = (page * stride_kpp + off * stride_kps)[:, None] + (h * stride_kph + d * stride_kpd)[None, :]
    dst_v = (page * stride_vpp + off * stride_vps)[:, None] + (h * stride_vph + d * stride_vpd)[None, :]
    tl.store(kp_ptr + dst_k, encode(x, CODE), mask=keep)
    tl.store(vp_ptr + dst_v, encode(y, CODE), mask=keep)


def write_kv_(k_pages, v_pages, k, v, slot_mapping, k_scale=None, v_scale=None, *, offset_bits: int = 64):
    """In place: store k, v ([N_k, Hkv, D], float32/16 or bf16 tensors) into the pools through
    slot_mapping (int32/int64 [N], any stride, N <= N_k: rows past N are padding, PA-50). Pools keep their
    dtype; scales are floats or None, or float32 tensors [Hkv] (per KV head) or [P, page_size, Hkv]
    (beside the slots), PA-48. offset_bits: 64, or 32 for the offset mutant (offset_mutant.py)."""
    _, hkv, d = k.shape
    n = slot_mapping.shape[0]   # the grid follows the slot mapping, never k's (padded) rows
    if n == 0:
        return
    code = storage_code(k_pages.dtype)
    kp, vp = storage_view(k_pages), storage_view(v_pages)
    hd = hkv * d
    block_e = min(triton.next_power_of_2(hd), 1024)
    block_t = max(1, min(64, 4096 // block_e, triton.next_power_of_2(n)))
    grid = (triton.cdiv(n, block_t), triton.cdiv(hd, block_e))
    mode = 0 if k_scale is None or isinstance(k_scale, float) else (1 if k_scale.dim() == 1 else 2)
    if mode:
        ks_t, vs_t, fk, fv = k_scale, v_scale, 1.0, 1.0
        strides = (k_scale.stride(0), k_scale.stride(1), k_scale.stride(2)) if mode == 2 else (0, 0, k_scale.stride(0))
    else:
        ks_t = vs_t = k   # never read
        fk, fv = (1.0 if k_scale is None else float(k_scale)), (1.0 if v_scale is None else float(v_scale))
        strides = (0, 0, 0)
    _write_kv_kernel[grid](
        k, v, kp, vp, slot_mapping, ks_t, vs_t, n, k_pages.shape[1], fk, fv, *strides,
        *k.stride(), *v.stride(), *kp.stride(), *vp.stride(), slot_mapping.stride(0),
        D=d, HD=hd, BLOCK_T=block_t, BLOCK_E=block_e, CODE=code, QUANTIZED=k_scale is not None,
        SCALE_MODE=mode, OFFSET=tl.int64 if offset_bits == 64 else tl.int32)
