"""Triton gated delta rule kernels against the reference (RS-28 … RS-33) on tiny packed batches, judged by
the suite's comparison contract (NU-R1 exact for untouched rows and padding outputs, NU-R2g class R)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from _gdn_cases import assert_conforms, chunked_case, update_case  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    return make_backend()


@pytest.mark.parametrize("lengths,chunk,act,norm", [
    ([5, 0, 3], 2, np.float32, False),       # empty sequence, padding, chunks of 16 tokens in the kernel
    ([19, 2], 16, np.float32, True),         # crosses one 16-token kernel chunk: the carry in registers
    ([9, 4, 1], 64, np.float16, False),      # 64-token kernel chunks, float16 activations
])
def test_gdn_chunked_matches_reference(backend, lengths, chunk, act, norm):
    """RS-32/RS-33 with RS-3 (padding sequence of NaN tokens: zeros, row untouched), RS-5 (fresh row of
    NaN), RS-4 (NaN canary rows bitwise), RS-28 (H = 4 over Hk = 2), RS-29, strided metadata."""
    case = chunked_case(lengths, chunk_size=chunk, act=act, norm=norm, pad_seq=len(lengths) - 1, fresh_seq=0,
                        seed=sum(lengths))
    got = backend.gated_delta_rule_chunked(**case.inputs)
    assert got.out.dtype == np.float32 and got.state.dtype == np.float32
    assert_conforms(case, got)


@pytest.mark.parametrize("norm,act", [(False, np.float32), (True, np.float16)])
def test_gdn_update_matches_reference(backend, norm, act):
    """RS-28 … RS-31: one token per row, a padding row (NaN inputs: out 0, pool untouched), scale 0.7."""
    case = update_case(3, norm=norm, act=act, pad_row=1, seed=3)
    got = backend.gated_delta_rule_update(**case.inputs)
    assert_conforms(case, got)


def test_gdn_chunked_equals_update_steps(backend):
    """RS-34(a, b) on the kernels: a 20-token chunked prefill equals 20 update calls through the pool."""
    case = chunked_case([20], heads=2, qk_heads=1, dk=2, dv=2, chunk_size=16, seed=7)
    x = case.inputs
    whole = backend.gated_delta_rule_chunked(**x)
    pool = x["state"]
    idx = np.asarray(x["state_indices"])
    outs = []
    for t in range(20):
        step = backend.gated_delta_rule_update(
            *(x[n][t:t + 1] for n in ("q", "k", "v", "g", "beta")), pool, state_indices=idx)
        outs.append(step.out[0])
        pool = step.state
    from kvconform.reference.recurrent import GatedDeltaScan
    assert_conforms(case, whole)
    assert_conforms(case, GatedDeltaScan(np.stack(outs), pool))
