"""Pointwise helpers shared by the recurrent kernels (RS-9), float32 math.

The pinned forms: silu(x) = x / (1 + exp(-x)); softplus(x) = x if x > 20 else log1p(exp(x)).
"""
from .._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def log1p(y):
    """log(1 + y) for y >= 0 without the cancellation of log(1 + y) at tiny y: with w = 1 + y rounded,
    log(w) * y / (w - 1) corrects the rounding of w (w - 1 is exact); w == 1 means log1p(y) = y to
    working precision. libdevice's log1p is not available under the interpreter, hence this form."""
    w = 1.0 + y
    d = w - 1.0
    return tl.where(d == 0.0, y, tl.log(w) * (y / tl.where(d == 0.0, 1.0, d)))


@triton.jit
def softplus(x):
    """RS-9: strict threshold at 20; exp is evaluated on min(x, 20) so the unused branch never overflows."""
    return tl.where(x > 20.0, x, log1p(tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def silu(x):
    """RS-9: x / (1 + exp(-x)); exp(-x) = inf for x << 0 gives the correct limit -0.0."""
    return x / (1.0 + tl.exp(-x))


@triton.jit
def live_mask(offs, slot):
    """bool vector shaped like `offs`: slot >= 0 (RS-3), broadcast explicitly. Combining a scalar bool
    derived from a loaded value with a bool vector (`live & (j < n)`) yields an integer mask under the
    Triton 3.9 interpreter, which tl.load rejects; a vector comparison keeps the mask boolean."""
    return (offs * 0 + slot) >= 0
