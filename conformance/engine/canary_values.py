"""The inputs and exact answers of the platform canaries (canary_triton.py, canary_pallas.py): NumPy and
ml_dtypes only, so the expected values never come from the platform under test.

Dot operands are halves in [-4, 4]: exact in bfloat16, float16 and both float8 formats, their products and
sums of DOT_SIZE of them exact in float32, so any summation order gives the exact product and a correct
dot has no error at all. Stored values are rounded to nearest, ties to even, and saturated to the largest
finite value (the spec's quantize rule, spec/paged_attention.md PA-44): 1.97 -> 2.0 in float8 (a carry into
the exponent), 464 -> 448 in e4m3fn (a tie to even), 500 -> 448 in e4m3fn (saturated), -2.71828 -> -2.71875
in bfloat16.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

DOT_SIZE = 16      # tl.dot's smallest tile
STORED = (-2.71828, 1.97, 0.1, 464.0, 3.0, -0.3, 1.0e-3)
#: past e4m3fn's largest finite value (448): saturated by the spec's rule; XLA's conversion (Pallas) gives NaN
#: there by its own definition, not by an interpret-mode defect, so only the Triton canary stores it (whether
#: Triton's native conversion saturates was not checked on a GPU here)
PAST_FINITE = 500.0


def dot_operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Two float64 [DOT_SIZE, DOT_SIZE] matrices of halves in [-4, 4] (exact in `dtype`)."""
    rng = np.random.default_rng(37)
    a, b = (rng.integers(-8, 9, (DOT_SIZE, DOT_SIZE)) / 2.0 for _ in range(2))
    narrow = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    assert all(np.array_equal(x.astype(narrow).astype(np.float64), x) for x in (a, b)), dtype
    return a, b


def dot_problem(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[bool, str]:
    """(ok, detail) of a dot's float32 result against the exact product a @ b."""
    want = a @ b
    err = np.abs(np.asarray(got, np.float64) - want)
    err = np.where(np.isnan(err), np.inf, err)
    worst = float(err.max())
    if worst == 0.0:
        return True, f"exact ({DOT_SIZE}x{DOT_SIZE} product of halves)"
    i, j = np.unravel_index(int(np.argmax(err)), err.shape)
    return False, (f"wrong by up to {worst:.3g} on a {DOT_SIZE}x{DOT_SIZE} product of exact halves (got "
                   f"{float(got[i, j])!r}, expected {float(want[i, j])!r})")


def store_values(dtype: str, past_finite: bool = True) -> np.ndarray:
    """float32[16]: STORED (and PAST_FINITE) then zeros (a power-of-two length, as tl.arange needs)."""
    x = np.zeros(16, np.float32)
    values = STORED + ((PAST_FINITE,) if past_finite else ())
    x[:len(values)] = values
    return x


def stored_exactly(x: np.ndarray, dtype: str) -> np.ndarray:
    """x (float32) rounded to nearest even in `dtype`, saturated at its largest finite value, as float64."""
    narrow = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    top = float(ml_dtypes.finfo(narrow).max)
    rounded = np.clip(x.astype(np.float64), -top, top).astype(np.float32).astype(narrow).astype(np.float64)
    # a value past the largest finite one rounds to it only after the clip: 500 in e4m3fn is 448, not NaN
    return rounded


def store_problem(got: np.ndarray, x: np.ndarray, dtype: str) -> tuple[bool, str]:
    """(ok, detail) of float32 values `x` stored as `dtype` (read back as float) against the exact rounding."""
    want = stored_exactly(x, dtype)
    got = np.asarray(got, np.float64)
    wrong = [i for i in range(len(x)) if not (got[i] == want[i] or (np.isnan(got[i]) and np.isnan(want[i])))]
    if not wrong:
        return True, "rounded to nearest even, saturated"
    shown = ", ".join(f"{float(x[i]):g} -> {got[i]:g} (expected {want[i]:g})" for i in wrong[:3])
    return False, f"float32 -> {dtype} stores wrong: {shown}"
