"""Rounding to storage dtypes inside kernels, exact under both the interpreter and native GPUs.

The Triton interpreter converts float32 to bfloat16 by truncation and can drop the carry of a float8
rounding (see the toolchain notes), so kernels never rely on a float -> bf16/fp8 conversion. They
compute the bit pattern of the round-to-nearest-even result with integer operations and store it
through an integer view of the destination (int16 for bfloat16, uint8 for float8). float16 and
float32 conversions are correct in both modes and are used directly.

The quantize rule is the pinned one of reference/dtypes.py: saturate(rne(fl32(x) / fl32(scale))).
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Storage codes (constexpr) shared by every kernel that writes stored data.
F32, F16, BF16, E4M3, E5M2, I8 = 0, 1, 2, 3, 4, 5

_MAGIC = 12582912.0  # 1.5 * 2**23: (x + M) - M rounds |x| < 2**22 to an integer, ties to even


@triton.jit
def rne_integer(x):
    """Round float32 to the nearest integer, ties to even (|x| < 2**22; larger values are integers)."""
    big = tl.abs(x) >= 4194304.0
    r = (x + 12582912.0) - 12582912.0
    return tl.where(big, x, r)


@triton.jit
def _pow2(e):
    """2.0 ** e as float32 for an int32 tensor e in the normal range."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def fp8_bits(v, MANT: tl.constexpr, EMIN: tl.constexpr, MAXV: tl.constexpr):
    """Bit pattern (int32 in [0, 255]) of saturate(rne(v)) in a float8 format with MANT mantissa bits,
    minimum normal exponent EMIN and largest finite value MAXV (e4m3fn: 3, -6, 448; e5m2: 2, -14, 57344).
    NaN maps to 0x7F with the sign of the input."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    a = tl.minimum(tl.abs(v), MAXV)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    ulp_e = tl.maximum(e, EMIN) - MANT
    r = rne_integer(a * _pow2(-ulp_e)) * _pow2(ulp_e)  # both scalings are exact powers of two
    rb = r.to(tl.int32, bitcast=True)
    normal = r >= _pow2(tl.full(r.shape, EMIN, tl.int32))
    expf = tl.where(normal, ((rb >> 23) & 0xFF) - 127 + (1 - EMIN), 0)
    sub_r = tl.minimum(r, 1.0)  # only subnormal results use it; keeps the int cast in range
    sub_mant = (sub_r * _pow2(tl.full(r.shape, MANT - EMIN, tl.int32))).to(tl.int32)
    mant = tl.where(normal, (rb >> (23 - MANT)) & ((1 << MANT) - 1), sub_mant)
    out = (sign << 7) | (expf << MANT) | mant
    return tl.where(v != v, (sign << 7) | 0x7F, out)


@triton.jit
def bf16_bits(x):
    """Bit pattern (int32, low 16 bits meaningful) of float32 x rounded to bfloat16, ties to even."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits >> 16 & 0x8000) | 0x7FC0
    return tl.where(x != x, nan, rounded) & 0xFFFF


@triton.jit
def encode(x, CODE: tl.constexpr):
    """float32 x -> the value to store through the storage view of CODE (see `storage_view`).

    F32/F16: a float of that dtype; BF16: int16 bits; E4M3/E5M2: uint8 bits; I8: int8 (rne, saturated).
    Quantized codes expect x already divided by the scale (use `tl.math.div_rn`)."""
    if CODE == 0:
        return x
    elif CODE == 1:
        return x.to(tl.float16)
    elif CODE == 2:
        return bf16_bits(x).to(tl.int16)
    elif CODE == 3:
        return fp8_bits(x, 3, -6, 448.0).to(tl.uint8)
    elif CODE == 4:
        return fp8_bits(x, 2, -14, 57344.0).to(tl.uint8)
    else:
        return rne_integer(tl.minimum(tl.maximum(x, -128.0), 127.0)).to(tl.int8)


def storage_code(torch_dtype) -> int:
    import torch
    codes = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16, torch.float8_e4m3fn: E4M3,
             torch.float8_e5m2: E5M2, torch.int8: I8}
    if torch_dtype not in codes:
        raise TypeError(f"unsupported storage dtype {torch_dtype}")
    return codes[torch_dtype]


def storage_view(t):
    """The integer view a kernel stores bit patterns through (identity for f32, f16 and int8)."""
    import torch
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8)
    return t
