"""Triton MLA kernel (backends/triton/mla.py) against the NumPy reference (spec/mla.md, ML-* clauses).

Shapes the suite's small draws do not reach: many tiles per row (tens of keys), head counts and latent /
RoPE dims that are not powers of two, strided query views, all options together. Judged by the suite's
own checks (ML-10 through `suite_checks.assert_conforms`), never a local tolerance. Runs under the
Triton interpreter on CPU; skipped without torch/triton.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from _mla_cases import mla_call
from suite_checks import assert_conforms, inputs_of

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from kvconform import reference as ref  # noqa: E402

OP = "mla_paged_attention"


@pytest.fixture(scope="module")
def backend():
    b = make_backend()
    assert b.availability().ok
    return b


@pytest.mark.parametrize("page_size", [1, 4, 8])
def test_many_tiles_odd_dims(backend, page_size):
    """ML-1 .. ML-5: decode rows and a prefill chunk over tens of keys on shuffled pages, H = 5, d_c = 12,
    d_r = 3 (padded lanes must stay out of the sums)."""
    args = mla_call(page_size, page_size=page_size, q_lens=[1, 3, 0, 1], kv_lens=[37, 21, 5, 2], H=5, d_c=12, d_r=3)
    assert_conforms(OP, inputs_of(OP, *args), backend.mla_paged_attention(*args))


def test_all_options_long(backend):
    """ML-6: window, soft cap and sinks (one sink -inf) together, windows that start mid-page."""
    args = mla_call(7, page_size=4, q_lens=[2, 1], kv_lens=[30, 19], H=3, d_c=8, d_r=2, dtype="bfloat16")
    opts = dict(sm_scale=0.3, sliding_window=7, soft_cap=2.0,
                sinks=np.array([0.5, -np.inf, -1.0], np.float32))
    assert_conforms(OP, inputs_of(OP, *args, **opts), backend.mla_paged_attention(*args, **opts))


def test_rejects_before_launch_with_the_reference_message(backend):
    """ML-9: a latent pool whose dim is not q_nope's is refused with the reference's own message."""
    q_nope, q_pe, c, r, kv, table, cu, n = mla_call(1, page_size=2, q_lens=[1], kv_lens=[3], H=2, d_c=4, d_r=2)
    bad = np.zeros(c.shape[:2] + (5,), np.float32)
    with pytest.raises(ValueError) as want:
        ref.mla_paged_attention(q_nope, q_pe, bad, r, kv, table, cu, n)
    with pytest.raises(ValueError) as got:
        backend.mla_paged_attention(q_nope, q_pe, bad, r, kv, table, cu, n)
    assert str(got.value) == str(want.value) and "c_kv_pages" in str(got.value)


def test_split_kv_and_sinks_reduced_deepseek(backend):
    """The split path (partials merged by the combine kernel, the sink added once) at a reduced DeepSeek-V3
    shape: 24 heads (two 16-head blocks, the second padded), d_c 64, d_r 16, page 16, rows of 150 and 70
    keys in 3 and 2 splits (the interpreter splits from 64 keys on)."""
    args = mla_call(11, page_size=16, q_lens=[1, 2], kv_lens=[150, 70], H=24, d_c=64, d_r=16, dtype="bfloat16")
    sinks = np.linspace(-1.0, 2.0, 24).astype(np.float32)
    from kvconform.backends.triton import mla
    assert mla.launch_defaults(3, 24, 64, 150, interpret=True)["num_splits"] == 3
    assert_conforms(OP, inputs_of(OP, *args, sinks=sinks), backend.mla_paged_attention(*args, sinks=sinks))


def test_deepseek_v3_dims(backend):
    """DeepSeek-V3's real dims: 128 heads, d_c 512, d_r 64, page 64, bfloat16; a decode row over 80 keys on
    two pages (two 64-head blocks, two splits)."""
    args = mla_call(12, page_size=64, q_lens=[1], kv_lens=[80], H=128, d_c=512, d_r=64, dtype="bfloat16")
    assert_conforms(OP, inputs_of(OP, *args), backend.mla_paged_attention(*args))
