"""Strategies and comparison contract for the paged-attention family (spec/paged_attention.md).

Ops: `ragged_paged_attention`, `write_kv`. Everything drawn stays inside what the backend claims
(dtypes, KV dtypes, page sizes, head dims, features); a variant whose claimed space is empty skips as
`unsupported`. Every don't-care location holds poison (NaN, or -128 for int8 pages): padding rows of q
(PA-25), slots past kv_len in the last used page, pages no sequence uses, page-table entries past
cdiv(kv_len, page_size) and rows of sequences >= num_seqs (PA-5, PA-24); for `write_kv`, the k/v rows of
skipped tokens (PA-41). Sizes stay small so interpreters run an example in well under a second.
"""
from __future__ import annotations

from kvconform.conformance.engine import strided

from .. import goldens
from .attention import _with_sharded_features, attention_cases  # noqa: F401
from .columns import (ATTENTION_VARIANTS, BOUNDARY_SCALES, DEFAULT_HEAD_DIMS, DEFAULT_PAGE_SIZES,  # noqa: F401
                      DEFAULT_SHARDS, DIM_REACH, DIM_REACH_FEATURES, FLOAT_KV_DTYPES, GROUP_SIZES, KV_HEADS_PER_SHARD,
                      LONG_BUDGET, MANY_HEADS_BUDGET, MANY_KV_HEADS, METADATA_POISON, PADDED_BUDGET, Q_DTYPES,
                      QUANT_KV_DTYPES, RANGE_BUDGET, REACH_BUDGET, SCALES, SHARDED_FEATURES, WRITE_VARIANTS, Variant,
                      _cdiv, _head_counts, crossed_variants, example_share)
from .contract import (SCORES_PRECISION, _sequence_bounds, attention_checks, dequantized,  # noqa: F401
                       required_out_precision, write_kv_checks)
from .diagnosis import _attention_diagnosis, _without_empty_sequences, _write_kv_diagnosis, dict_case  # noqa: F401
from .inputs import (_scale_shape, attention_poison_regions, canonical_inputs, in_layout, token_scales,  # noqa: F401
                     with_scale_regions)
from .kv_write import write_kv_cases  # noqa: F401

CHECKS = {"ragged_paged_attention": attention_checks, "write_kv": write_kv_checks}


DIAGNOSIS = {"ragged_paged_attention": _attention_diagnosis, "write_kv": _write_kv_diagnosis}


#: inputs the history property redraws (same shapes and metadata, other values)
HISTORY_INPUTS = {"ragged_paged_attention": ("q", "k_pages", "v_pages"),
                  "write_kv": ("k", "v", "k_pages", "v_pages")}


#: what a golden's case uses (features, claim space), conformance/goldens.py
USES = {"ragged_paged_attention": goldens.uses, "write_kv": goldens.write_uses}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: per op, the columns its strided cases are drawn from, the first one claimed: the combined options
#: bring a sinks array and quantized pages, per-token scales two [pages, page_size, Hkv] scale arrays
STRIDED = {"ragged_paged_attention": strided.columns(attention_cases,
                                                     *strided.named(ATTENTION_VARIANTS, "combined", "base")),
           "write_kv": strided.columns(write_kv_cases, *strided.named(WRITE_VARIANTS, "per_token_scales", "base"))}
