"""Pallas parity (issue 29): the Pallas backend claims every op, feature, activation dtype, storage dtype and
layout the Triton backend claims, so a TPU user is checked on everything a GPU user is.

Limits are not compared: they state each kernel's own constraints (Triton's split-KV threshold, Pallas's
VMEM page buffer `max_head_dim`, the shard counts a TPU slice has). Host-side metadata bookkeeping
(`block_table_to_csr`, `csr_to_block_table`, `arena_layout`, `page_table_step`; spec/metadata.md) is
claimed by neither: it is CPU code in a serving stack, not a kernel.
"""
from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("jax")
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("the Triton backend needs torch and triton", allow_module_level=True)

from kvconform.backends.pallas import make_backend as make_pallas  # noqa: E402
from kvconform.backends.triton import make_backend as make_triton  # noqa: E402


def test_pallas_claims_what_triton_claims():
    triton, pallas = make_triton().capabilities(), make_pallas().capabilities()
    missing = sorted(set(triton) - set(pallas))
    assert not missing, f"ops Triton claims and Pallas does not: {missing}"
    narrower = {}
    for op, t in triton.items():
        p = pallas[op]
        for field in ("dtypes", "kv_dtypes", "features", "layouts"):
            lacking = set(getattr(t, field) or ()) - set(getattr(p, field) or ())
            if lacking:
                narrower[f"{op}.{field}"] = sorted(lacking)
        for field in ("page_sizes", "head_dims"):   # None claims any
            if getattr(p, field) is not None and (getattr(t, field) is None
                                                  or set(getattr(t, field)) - set(getattr(p, field))):
                narrower[f"{op}.{field}"] = (getattr(t, field), getattr(p, field))
    assert not narrower, f"Pallas claims less than Triton: {narrower}"
