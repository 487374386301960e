"""The Pallas MLA kernel (backends/pallas/mla.py) against the reference (spec/mla.md, ML-* clauses).

Batches the suite's small draws do not reach: tens of pages per sequence (many DMA double-buffer turns),
odd head counts and dims (sublane and lane padding), empty sequences beside decode rows, prefill chunks
of more rows than one 8-row query block beside decode rows (a block holding rows of several sequences,
ML-5), all options at once. Judged by the suite's own checks (ML-10 through `suite_checks.assert_conforms`).
Pallas TPU interpret mode on CPU.
"""
from __future__ import annotations

import numpy as np
import pytest
from _mla_cases import mla_call
from suite_checks import assert_conforms, inputs_of

pytest.importorskip("jax")

from kvconform.backends.pallas import make_backend  # noqa: E402

OP = "mla_paged_attention"
BACKEND = make_backend()


@pytest.mark.parametrize("page_size", [1, 4])
def test_decode_over_many_pages(page_size):
    """ML-1 .. ML-5, ML-7: decode rows over up to 37 keys on shuffled pages (NaN elsewhere), an empty
    sequence between them, H = 5, d_c = 12, d_r = 3."""
    args = mla_call(page_size, page_size=page_size, q_lens=[1, 0, 1, 1], kv_lens=[37, 4, 21, 2], H=5, d_c=12, d_r=3)
    assert_conforms(OP, inputs_of(OP, *args), BACKEND.mla_paged_attention(*args))


def test_decode_all_options():
    """ML-6: window starting mid-page, soft cap and sinks (one -inf) together, bfloat16 inputs."""
    args = mla_call(3, page_size=4, q_lens=[1, 1], kv_lens=[30, 19], H=3, d_c=8, d_r=2, dtype="bfloat16")
    opts = dict(sm_scale=0.3, sliding_window=7, soft_cap=2.0, sinks=np.array([0.5, -np.inf, -1.0], np.float32))
    assert_conforms(OP, inputs_of(OP, *args, **opts), BACKEND.mla_paged_attention(*args, **opts))


def test_prefill_chunks_beside_decode_rows():
    """ML-5, ML-6: a chunked prefill of 11 rows over 26 keys (rows in two query blocks, causal within the
    chunk), a full prefill of 3 rows, a decode row and an empty sequence in one call; window, cap, sinks."""
    args = mla_call(7, page_size=4, q_lens=[11, 1, 0, 3], kv_lens=[26, 9, 5, 3], H=3, d_c=6, d_r=2)
    opts = dict(sliding_window=6, soft_cap=3.0, sinks=np.array([0.25, -np.inf, 1.0], np.float32))
    assert_conforms(OP, inputs_of(OP, *args), BACKEND.mla_paged_attention(*args))
    assert_conforms(OP, inputs_of(OP, *args, **opts), BACKEND.mla_paged_attention(*args, **opts))
