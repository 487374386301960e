"""The Pallas KV write's quotient is the IEEE one near the storage format's rounding ties (PA-44).

XLA turns `x / s` for a broadcast scalar `s` into `x * (1/s)`; `div_rn` corrects it. Checked on values
within two float32 ulps of int8 and float8 rounding ties, at scales whose reciprocal is not a float32."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from kvconform.backends.pallas.kv_write import div_rn  # noqa: E402
from kvconform.conformance.strategies.values import quantization_ties  # noqa: E402


@pytest.mark.parametrize("scale", [0.1, 3.0, 0.7, 0.013])
@pytest.mark.parametrize("storage", ["int8", "float8_e4m3fn", "float8_e5m2"])
def test_div_rn_is_the_ieee_quotient_near_ties(scale, storage):
    rng = np.random.default_rng(7)
    x = quantization_ties(rng, np.zeros(20000, np.float32), storage, scale)
    s = np.float32(scale)
    got = np.asarray(jax.jit(div_rn)(x, s))
    assert np.array_equal(got, x / s), int((got != x / s).sum())


@pytest.mark.parametrize("scale", [2.0 ** -126, 1.5 * 2.0 ** -125, 1e-37, 2.0 ** -100])
@pytest.mark.parametrize("storage", ["int8", "float8_e4m3fn", "float8_e5m2"])
def test_div_rn_is_the_ieee_quotient_at_scales_near_the_smallest_normal(scale, storage):
    """PA-52's range column: at scales near 2^-126 the residuals of div_rn were subnormal, flushed to zero by
    XLA on CPU, and every candidate looked exact (stored 120 for 119). Normal inputs only (NU-9)."""
    rng = np.random.default_rng(7)
    s = np.float32(scale)
    x = quantization_ties(rng, np.zeros(20000, np.float32), storage, s)
    x = x[np.abs(x) >= np.finfo(np.float32).tiny]
    got = np.asarray(jax.jit(div_rn)(x, s))
    with np.errstate(over="ignore"):
        assert np.array_equal(got, x / s), int((got != x / s).sum())
