"""Goldens of the attention family require every feature they use and state their sizes (issue 31):
spec/paged_attention.md, spec/mla.md and spec/metadata.md MD-23, each golden in every form it runs in."""
from __future__ import annotations

import pytest

from kvconform.backends.base import OpClaims
from kvconform.conformance.strategies import mla as mla_strategies
from kvconform.conformance.strategies import goldens
from kvconform.conformance.suite import test_metadata as md_suite
from kvconform.conformance.suite import test_mla as mla_suite
from kvconform.conformance.suite import test_paged_attention as pa_suite

#: claims of a kernel that takes only real sizes: head dims multiple of 128, pages of 16
REAL_ONLY = OpClaims(dtypes=("float32",), kv_dtypes=("float32", "float8_e4m3fn"), page_sizes=(16,),
                     features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "gqa"),
                     limits={"head_dim": {"multiple_of": 128}})


def _attention_forms(name):
    build = pa_suite.ATTENTION_GOLDENS[name][0]
    case, _ = build()
    return [case, goldens.attention_at_size(case, *goldens.real_sizes(REAL_ONLY))]


@pytest.mark.parametrize("name", sorted(pa_suite.ATTENTION_GOLDENS))
def test_attention_golden_requires_exactly_the_features_it_uses(name):
    declared = set(pa_suite.ATTENTION_GOLDENS[name][2])
    for case in _attention_forms(name):
        assert set(goldens.features_used(case)) == declared, (name, goldens.features_used(case), declared)


@pytest.mark.parametrize("name", sorted(pa_suite.WRITE_GOLDENS))
def test_write_golden_requires_exactly_the_features_it_uses(name):
    build, _, features = pa_suite.WRITE_GOLDENS[name]
    case, expected = build()
    real, _ = pa_suite.write_at_size(case, expected, *goldens.real_sizes(REAL_ONLY))
    for c in (case, real):
        assert set(goldens.features_used(c)) == set(features)
    assert real.inputs["k_pages"].shape[1] == 16 and real.inputs["k_pages"].shape[3] == 128


@pytest.mark.parametrize("name", sorted(mla_suite.GOLDENS))
def test_mla_golden_requires_exactly_the_features_it_uses(name):
    build, _, features = mla_suite.GOLDENS[name]
    case, _ = build()
    real = mla_suite.at_size(case, mla_strategies.REACH_LATENT[0], 16)
    for c in (case, real):
        assert set(goldens.features_used(c)) == set(features)
    assert real.inputs["q_nope"].shape[2] == 512 and real.inputs["q_pe"].shape[2] == 64


def test_csr_golden_uses_no_feature_and_its_real_form_no_empty_sequence():
    small, real = md_suite.csr_golden(), md_suite.csr_golden(128, 16, empty=False)
    assert goldens.features_used(small) == goldens.features_used(real) == ()
    assert goldens.golden_space(small)["q_len"] == [1, 0] and goldens.golden_space(real)["q_len"] == [1]
    assert goldens.golden_space(real)["kv_len"] == [3]


def test_real_sizes_follow_the_claims():
    assert goldens.real_sizes(REAL_ONLY) == (128, 16)
    assert goldens.real_sizes(OpClaims(head_dims=(64, 256), page_sizes=(32, 8))) == (64, 32)
    assert goldens.real_sizes(OpClaims(limits={"max_head_dim": 96, "page_size": {"multiple_of": 64}})) == (64, 64)
    with pytest.raises(pytest.skip.Exception):
        goldens.real_sizes(OpClaims(head_dims=(8,)))
