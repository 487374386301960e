"""In-place key re-rotation kernels (spec/rotation.md, RO-*): trig-LUT form and theta form.

One program rotates BLOCK_T token slots (all KV heads) of one listed page. Rows of the tile are
(token, head) pairs; columns are the rotary pairs j < rotary_dim/2, whose two dims are (j, j + h) for
layout "half" and (2j, 2j+1) for "interleaved". The per-token delta is read through a stride that is 0
for `[n, 1]` deltas, so the broadcast form runs exactly the same arithmetic as its repeat (RO-7, bit for
bit). Dims past rotary_dim, unlisted pages and the V cache are never touched (the adapter passes a copy
of the cache, so the op stays pure). Pair updates run in float32 and are stored through
`storage.encode` (exact round-to-nearest-even for bfloat16 under the interpreter too).

Theta form (RO-10): the angle fl64(delta * w_j) is formed in float64 as RO-3 pins it, reduced modulo
2*pi in float64 with a two-constant (Cody-Waite) split, and only the reduced angle goes through float32
cos/sin, so int32-sized deltas keep full float32 accuracy.
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .storage import encode, storage_code, storage_view  # noqa: E402

# constexpr: a compiled kernel may read no other module global (the interpreter does not enforce this)
_TWO_PI_HI = tl.constexpr(6.28125)                    # 201/32: k * _TWO_PI_HI is exact for |k| < 2**44
_TWO_PI_LO = tl.constexpr(0.0019353071795864769253)   # 2*pi - _TWO_PI_HI


@triton.jit
def _rotate_kernel(k_ptr, kout_ptr, idx_ptr, delta_ptr, lut_ptr, freq_ptr, page_size, n_heads,
                   stride_kp, stride_ks, stride_kh, stride_kd, stride_idx, stride_dn, stride_dt,
                   stride_lr, stride_lc,
                   HALF: tl.constexpr, HALF_PAD: tl.constexpr, H_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
                   INTERLEAVED: tl.constexpr, THETA: tl.constexpr, CODE: tl.constexpr):
    i = tl.program_id(0)
    page = tl.load(idx_ptr + i * stride_idx).to(tl.int64)
    r = tl.arange(0, BLOCK_T * H_PAD)
    t = tl.program_id(1) * BLOCK_T + r // H_PAD
    h = r % H_PAD
    j = tl.arange(0, HALF_PAD)
    row_ok = (t < page_size) & (h < n_heads)
    col_ok = j < HALF
    ok = row_ok[:, None] & col_ok[None, :]
    delta = tl.load(delta_ptr + i * stride_dn + t * stride_dt, mask=row_ok, other=0)  # stride_dt = 0: [n, 1]
    if THETA:
        w = tl.load(freq_ptr + j, mask=col_ok, other=0.0)                      # float64 w_j
        angle = delta.to(tl.float64)[:, None] * w[None, :]                     # RO-3, one float64 rounding
        # float64 constants: a bare Python float in a kernel is typed float32, which would round _TWO_PI_LO
        hi = tl.full([], _TWO_PI_HI, tl.float64)
        lo = tl.full([], _TWO_PI_LO, tl.float64)
        k = tl.floor(angle / (hi + lo) + 0.5)
        red = ((angle - k * hi) - k * lo).to(tl.float32)
        c = tl.cos(red)
        s = tl.sin(red)
    else:
        row = delta.to(tl.int64) * stride_lr
        c = tl.load(lut_ptr + row[:, None] + j[None, :] * stride_lc, mask=ok, other=1.0).to(tl.float32)
        s = tl.load(lut_ptr + row[:, None] + (j + HALF)[None, :] * stride_lc, mask=ok, other=0.0).to(tl.float32)
    if INTERLEAVED:
        d0 = 2 * j
        d1 = 2 * j + 1
    else:
        d0 = j
        d1 = j + HALF
    base = page * stride_kp + t.to(tl.int64) * stride_ks + h * stride_kh
    p0 = base[:, None] + (d0 * stride_kd)[None, :]
    p1 = base[:, None] + (d1 * stride_kd)[None, :]
    x = tl.load(k_ptr + p0, mask=ok, other=0.0).to(tl.float32)
    y = tl.load(k_ptr + p1, mask=ok, other=0.0).to(tl.float32)
    tl.store(kout_ptr + p0, encode(x * c - y * s, CODE), mask=ok)   # RO-5
    tl.store(kout_ptr + p1, encode(x * s + y * c, CODE), mask=ok)


def rotate_(k_pages, block_indices, deltas, *, rotary_dim, layout, trig_lut=None, inv_freq=None):
    """In place on k_pages [P, page_size, Hkv, D] (float32/16 or bf16 tensor): rotate the listed pages.

    block_indices int[n]; deltas int[n, 1] or [n, page_size] (LUT rows, or token shifts with inv_freq);
    exactly one of trig_lut float[rows, rotary_dim] / inv_freq float64[rotary_dim / 2] is given."""
    n = block_indices.shape[0]
    if n == 0:
        return
    P, page_size, hkv, _ = k_pages.shape
    half = rotary_dim // 2
    h_pad = triton.next_power_of_2(hkv)
    block_t = max(1, min(triton.next_power_of_2(page_size), 4096 // (h_pad * triton.next_power_of_2(half))))
    view = storage_view(k_pages)
    theta = inv_freq is not None
    lut = inv_freq if theta else trig_lut
    stride_dt = deltas.stride(1) if deltas.shape[1] != 1 else 0
    grid = (n, triton.cdiv(page_size, block_t))
    _rotate_kernel[grid](
        k_pages, view, block_indices, deltas, lut, lut, page_size, hkv,
        *k_pages.stride(), block_indices.stride(0), deltas.stride(0), stride_dt,
        0 if theta else lut.stride(0), 0 if theta else lut.stride(1),
        HALF=half, HALF_PAD=triton.next_power_of_2(half), H_PAD=h_pad, BLOCK_T=block_t,
        INTERLEAVED=layout == "interleaved", THETA=theta, CODE=storage_code(k_pages.dtype))
