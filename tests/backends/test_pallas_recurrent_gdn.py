"""The Pallas gated delta rule kernels against the reference (RS-28 … RS-33) on tiny packed batches,
judged by the suite's comparison contract (NU-R1 exact for untouched rows and padding outputs, NU-R2g
class R). Float32/float16 activations (the Pallas claims: no float64)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from kvconform.backends.pallas import make_backend  # noqa: E402

from _gdn_cases import assert_conforms, chunked_case, update_case  # noqa: E402

BACKEND = make_backend()


@pytest.mark.parametrize("lengths,chunk,act,norm", [
    ([5, 0, 3], 2, np.float32, False),       # empty sequence, padding, 8-token kernel chunks
    ([19, 2], 8, np.float16, True),          # crosses two 8-token chunk windows: the carry in VMEM
])
def test_gdn_chunked_matches_reference(lengths, chunk, act, norm):
    """RS-32/RS-33 with RS-3 (padding sequence of NaN tokens: zeros, row untouched), RS-5 (fresh row of
    NaN), RS-4 (NaN canary rows bitwise), RS-28 (H = 4 over Hk = 2), RS-29."""
    case = chunked_case(lengths, chunk_size=chunk, act=act, norm=norm, pad_seq=len(lengths) - 1, fresh_seq=0,
                        seed=sum(lengths))
    got = BACKEND.gated_delta_rule_chunked(**case.inputs)
    assert got.out.dtype == np.float32 and got.state.dtype == np.float32
    assert_conforms(case, got)


@pytest.mark.parametrize("norm", [False, True])
def test_gdn_update_matches_reference(norm):
    """RS-28 … RS-31: one token per row, a padding row (NaN inputs: out 0, pool untouched), scale 0.7."""
    case = update_case(3, norm=norm, pad_row=1, seed=5)
    assert_conforms(case, BACKEND.gated_delta_rule_update(**case.inputs))
