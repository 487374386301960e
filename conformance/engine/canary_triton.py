"""The Triton interpreter's canaries: tiny kernels whose exact answers are known (canaries.py runs them in a
subprocess under TRITON_INTERPRET=1; imports triton and torch, so nothing else imports this module).

Each probe returns (ok, detail): ok False when the platform computes something other than the exact (or,
for a dot, float32-accumulated) answer; detail says what it got and what was expected. Defects known in
Triton 3.9's interpreter (checked 2026-11, the project's toolchain notes): bfloat16 `tl.dot` wrong by ~1e10;
float32 -> bfloat16 conversions truncate (-2.71828 -> -2.703125, not -2.71875); float32 -> float8 can drop
the carry (1.97 -> 1.0, not 2.0) and mis-handles large values (500 -> 256, 464 -> NaN in e4m3fn);
libdevice's `log1p` does not exist there (backends/triton/recurrent/_common.py works around it).
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .canary_values import DOT_SIZE, dot_problem, dot_operands, store_problem, store_values


@triton.jit
def _dot_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i[:, None] * N + i[None, :])
    b = tl.load(b_ptr + i[:, None] * N + i[None, :])
    tl.store(o_ptr + i[:, None] * N + i[None, :], tl.dot(a, b))


@triton.jit
def _store_kernel(x_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.load(x_ptr + i).to(o_ptr.dtype.element_ty))


@triton.jit
def _log1p_kernel(x_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.extra.libdevice.log1p(tl.load(x_ptr + i)))


def _torch_dtype(name: str):
    return getattr(torch, name)


def dot(dtype: str) -> tuple[bool, str]:
    """tl.dot of two DOT_SIZE x DOT_SIZE matrices of exactly representable `dtype` values, float32 out."""
    a, b = dot_operands(dtype)
    ta, tb = (torch.from_numpy(x.astype(np.float32)).to(_torch_dtype(dtype)) for x in (a, b))
    out = torch.empty(DOT_SIZE, DOT_SIZE, dtype=torch.float32)
    _dot_kernel[(1,)](ta, tb, out, DOT_SIZE)
    return dot_problem(out.numpy(), a, b)


def store(dtype: str) -> tuple[bool, str]:
    """float32 values stored into a `dtype` tensor (a conversion inside a kernel)."""
    x = store_values(dtype)
    out = torch.empty(x.shape[0], dtype=_torch_dtype(dtype))
    _store_kernel[(1,)](torch.from_numpy(x), out, x.shape[0])
    return store_problem(out.float().numpy(), x, dtype)


def log1p() -> tuple[bool, str]:
    """libdevice's log1p on float32."""
    x = np.full(16, 1e-3, np.float32)
    out = torch.empty(16, dtype=torch.float32)
    try:
        _log1p_kernel[(1,)](torch.from_numpy(x), out, 16)
    except Exception as exc:   # the interpreter has no libdevice: the kernel cannot run at all
        return False, f"missing: tl.extra.libdevice.log1p raises {type(exc).__name__}: {str(exc)[:100]}"
    got, want = float(out[0]), float(np.log1p(np.float64(1e-3)))
    ok = abs(got - want) <= 4 * np.finfo(np.float32).eps * abs(want)
    return ok, f"log1p(1e-3) = {got!r}" + ("" if ok else f", expected {want!r}")


#: canary name -> probe
PROBES = {
    "bf16_dot": lambda: dot("bfloat16"),
    "fp16_dot": lambda: dot("float16"),
    "fp8_e4m3_dot": lambda: dot("float8_e4m3fn"),
    "fp8_e5m2_dot": lambda: dot("float8_e5m2"),
    "bf16_store": lambda: store("bfloat16"),
    "fp8_e4m3_store": lambda: store("float8_e4m3fn"),
    "fp8_e5m2_store": lambda: store("float8_e5m2"),
    "log1p": log1p,
}
