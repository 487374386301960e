"""NU-6's aggregate check and NU-8's floor together: a correctly rounded output always passes, a bias fails.

The aggregate (||a - r|| <= f(n) ||tol||) counts each element's error beyond the output's own rounding
(half an ULP of the required precision at |r|): correct rounding to bfloat16 can leave every element half an
ULP off, half of a 1-ULP allowance, which the bare aggregate (0.25 + 1/sqrt(n)) failed past 16 elements.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.compare import compare_field

BF16 = ml_dtypes.bfloat16


def _values_half_an_ulp_from_bfloat16(n: int) -> np.ndarray:
    """n float64 values just above 1 whose correctly rounded bfloat16 is half an ULP (2^-8) away."""
    return 1.0 + 2.0 ** -8 * (1.0 - 1e-6) + np.zeros(n)


def test_a_correctly_rounded_bfloat16_output_passes_even_when_every_element_is_half_an_ulp_off():
    ref = _values_half_an_ulp_from_bfloat16(256)
    got = ref.astype(BF16)
    assert np.all(np.abs(got.astype(np.float64) - ref) > 0.49 * 2.0 ** -7)   # each half a 2^-7 ULP off
    tol = tolerance.reduction("bfloat16", 0.0, 2.0 * tolerance.u("bfloat16"), reason="test")
    res = compare_field("out", got, ref, tol)
    assert res.ok and res.n_bad == 0, res.summary()


def test_a_bias_within_the_elementwise_bound_fails_the_aggregate():
    # float32 output: the rounding term is negligible, and every element is off by 60% of its allowance
    rng = np.random.default_rng(0)
    ref = rng.uniform(1.0, 2.0, 256)
    tol = tolerance.reduction("float32", 1e-4, 2.0 * tolerance.u("float32"), reason="test")
    allowed = 1e-4 + 2.0 * tolerance.u("float32") * ref
    got = (ref + 0.6 * allowed).astype(np.float32)
    res = compare_field("out", got, ref, tol)
    assert res.n_bad == 0 and not res.ok and res.aggregate > 0.5, res.summary()
    # independent errors of a tenth of the allowance, at random signs, pass
    fine = (ref + 0.1 * allowed * rng.choice([-1.0, 1.0], ref.shape)).astype(np.float32)
    assert compare_field("out", fine, ref, tol).ok
