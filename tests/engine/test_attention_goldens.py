"""The attention family's goldens run on backends that take only real sizes or only narrow dtypes (issue 31):
spec/paged_attention.md, spec/mla.md and spec/metadata.md MD-23. That every restatement requires exactly
what it uses and agrees with the reference is tests/engine/test_golden_requirements.py's (generic) check."""
from __future__ import annotations

import pytest

from kvconform.backends.base import OpClaims
from kvconform.conformance.strategies import constraints
from kvconform.conformance.strategies import goldens
from kvconform.conformance.suite import test_metadata as md_suite
from kvconform.conformance.suite import test_mla as mla_suite
from kvconform.conformance.suite import test_paged_attention as pa_suite

#: a kernel that takes only real sizes in half precision: head dims multiple of 128, pages of 16 (vLLM's
#: flash-attention backend: bfloat16 / float16, block size a multiple of 16)
REAL_HALF = OpClaims(dtypes=("bfloat16", "float16"), kv_dtypes=("bfloat16", "float16", "float8_e4m3fn"),
                     page_sizes=(16,), features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "gqa"),
                     limits={"head_dim": {"multiple_of": 128}})
#: FlashMLA: bfloat16, DeepSeek-V3's latent dims, pages of 64
FLASH_MLA = OpClaims(dtypes=("bfloat16",), kv_dtypes=("bfloat16",), page_sizes=(64,), head_dims=(512,))


def _runs_on(table, op, claims):
    """The goldens of `op` in `table` a backend with `claims` runs (features claimed, space inside)."""
    runs = []
    for g in table:
        if g.op != op or not set(g.features) <= set(claims.features):
            continue
        options = frozenset(o for o in g.options if o in claims.features)
        case, _ = g.build(options)
        used, space = goldens.uses(case) if op != "write_kv" else goldens.write_uses(case)
        if not constraints.outside(claims, space):
            runs.append(g.name)
    return runs


@pytest.mark.parametrize("op", ["ragged_paged_attention", "write_kv"])
def test_a_real_size_half_precision_kernel_runs_every_golden(op):
    base = {g.name for g in pa_suite.GOLDENS if g.op == op and "_real" not in g.name}
    ran = _runs_on(pa_suite.GOLDENS, op, REAL_HALF)
    assert {n.split("_real")[0] for n in ran} == base, sorted(ran)
    assert all("_real" in n for n in ran)


def test_flash_mla_runs_every_mla_golden_without_features():
    ran = _runs_on(mla_suite.GOLDENS, mla_suite.OP, FLASH_MLA)
    assert {n.split("_real")[0] for n in ran} == {g.name for g in mla_suite.GOLDENS if not g.features
                                                   and "_real" not in g.name}
    case, expected = next(g for g in mla_suite.GOLDENS if g.name == "rope_part_counts_real_bfloat16").build(frozenset())
    assert case.inputs["q_nope"].shape[2] == 512 and case.inputs["q_pe"].shape[2] == 64
    assert case.inputs["c_kv_pages"].shape[1] == 64 and expected.shape[2] == 512


def test_dtype_restatements_only_where_exact():
    names = {g.name for g in pa_suite.GOLDENS}
    # fp8_rounding's v = 3 * 1000 = 0b101110111000 has 9 significant bits: a float16 (11), not a bfloat16 (8)
    assert "fp8_rounding_real_float16" in names and "fp8_rounding_real_bfloat16" not in names
    with pytest.raises(ValueError, match="v is not exact in bfloat16"):
        goldens.cast_exactly(*pa_suite.golden_write_fp8_rounding(frozenset()), "bfloat16")


def test_csr_golden_uses_no_feature_and_its_real_form_no_empty_sequence():
    small = md_suite.csr_golden()
    real = md_suite.csr_golden(goldens.REAL_PAGE_SIZE, goldens.REAL_HEAD_DIM, empty=False)
    assert goldens.features_used(small) == goldens.features_used(real) == ()
    assert goldens.golden_space(small)["q_len"] == [1, 0] and goldens.golden_space(real)["q_len"] == [1]
    assert goldens.golden_space(real)["kv_len"] == [3] and goldens.golden_space(real)["head_dim"] == 128
