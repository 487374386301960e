"""Cases at GPU scale (profiles `scale` and `scale-smoke`; conformance/scale.py, spec/numerics.md NU-13).

Each test makes one large call through the backend and judges a sample of it with the op's own checks:
pools past 2**31 elements (KV write, decode attention, 128k-key decode rows, selective state update),
a 128k-token prefill, more than 65535 sequences or rows (the y/z grid limit: attention, selective state
update, causal conv update, gated delta rule update), a 256-row DeepSeek-V3 MLA decode. Every test draws
from a fixed seed: the same cases on every run.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from kvconform.conformance.strategies import scale
from kvconform.conformance.harness import conformance_test


def _sizes(kvc) -> scale.Sizes:
    if kvc.profile.name not in scale.SIZES:
        pytest.skip(f"scale tests run under the profiles {', '.join(scale.SIZES)} (this run: {kvc.profile.name})")
    if kvc.profile.native_only and not kvc.description.get("native"):   # `kvconform run` refuses earlier
        pytest.skip(f"profile {kvc.profile.name} runs natively on a GPU or TPU only: {kvc.backend_name} runs on "
                    f"{kvc.description.get('device') or 'the CPU'} here")
    return scale.sizes_for(kvc.profile.name)


def _rebuild(test: str, profile: str) -> str:
    return f"kvconform run --profile {profile} -- -k {test}"


def _judge(kvc, sampled: scale.Sampled, actual) -> None:
    kvc.expect(sampled.case, sampled.select(actual), kvc.reference(sampled.case), what=sampled.what)


def _kv_geometry(sizes: scale.Sizes):
    """(Hq, Hkv, D), page size, pages of a pool past sizes.pool_elements, first page past the boundary."""
    hq, hkv, d = sizes.heads
    per_page = sizes.page_size * hkv * d
    return sizes.heads, sizes.page_size, -(-sizes.pool_elements // per_page), -(-sizes.boundary // per_page)


@functools.lru_cache(maxsize=1)
def _kv_pools(profile: str, kv_dtype: str):
    """The K and V pools past 2**31 elements, shared by the tests of one process (built once)."""
    heads, page_size, num_pages, _ = _kv_geometry(scale.sizes_for(profile))
    rng = np.random.default_rng(31)
    return tuple(scale.periodic(rng, (num_pages, page_size, heads[1], heads[2]), kv_dtype) for _ in range(2))


def _attention_claims(kvc, op="ragged_paged_attention"):
    claims = kvc.claims(op)
    act, kv = scale.pick_dtypes(claims)
    return claims, act, kv


@conformance_test(op="write_kv", layer="differential", clauses=("PA-41", "PA-43", "PA-44", "PA-45", "NU-13"))
def test_write_kv_pool_past_int32_offsets(kvc):
    """70000 tokens (past 65535 programs of one token each) written to slots all over K/V pools of more
    than 2**31 elements, the last slot of the pool included: written pages as the reference, every
    other page bit for bit (full scan)."""
    sizes = _sizes(kvc)
    claims = kvc.claims("write_kv")
    act, kv = scale.pick_dtypes(claims, acts=("bfloat16", "float16", "float32"))
    heads, page_size, num_pages, boundary_page = _kv_geometry(sizes)
    kvc.require(claims, dtype=act, kv_dtype=kv, page_size=page_size, head_dim=heads[2], num_kv_heads=heads[1])
    rng = np.random.default_rng(1)
    case = scale.write_kv_case(rng, act=act, kv_dtype=kv, heads=heads, page_size=page_size, num_pages=num_pages,
                               tokens=sizes.write_tokens, boundary_page=boundary_page,
                               pools=_kv_pools(kvc.profile.name, kv),
                               rebuild=_rebuild("test_write_kv_pool_past_int32_offsets", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.write_kv_sample(case, actual, rng, sizes.sampled_seqs, boundary_page), actual)


@conformance_test(op="ragged_paged_attention", layer="differential",
                  clauses=("PA-6", "PA-7", "PA-10", "PA-12", "PA-18", "NU-13"))
def test_decode_batch_pool_past_int32_offsets(kvc):
    """A 256-row decode batch (up to 4096 keys per row) whose pages lie all over K/V pools of more than
    2**31 elements, every sequence with a page past the boundary."""
    sizes = _sizes(kvc)
    claims, act, kv = _attention_claims(kvc)
    heads, page_size, num_pages, boundary_page = _kv_geometry(sizes)
    rng = np.random.default_rng(2)
    rows = sizes.decode_rows
    kv_lens = rng.integers(1, sizes.decode_keys + 1, size=rows)
    kv_lens[rng.choice(rows, size=max(1, rows // 4), replace=False)] = sizes.decode_keys
    kvc.require(claims, dtype=act, kv_dtype=kv, page_size=page_size, head_dim=heads[2], num_q_heads=heads[0],
                num_kv_heads=heads[1], q_len=[1], kv_len=kv_lens.tolist(), num_seqs=rows)
    case = scale.attention_case(rng, q_dtype=act, kv_dtype=kv, heads=heads, page_size=page_size,
                                num_pages=num_pages, q_lens=[1] * rows, kv_lens=kv_lens,
                                boundary_page=boundary_page, pools=_kv_pools(kvc.profile.name, kv),
                                rebuild=_rebuild("test_decode_batch_pool_past_int32_offsets", kvc.profile.name))
    actual = kvc.call(case)
    must = scale.touching(case, boundary_page, page_size)[:2] + [int(np.argmax(kv_lens)), 0, rows - 1]
    seqs = scale.sample_indices(rng, rows, must, sizes.sampled_seqs)
    _judge(kvc, scale.attention_sample(case, seqs), actual)


@conformance_test(op="ragged_paged_attention", layer="differential", clauses=("PA-6", "PA-7", "PA-14", "NU-13"))
def test_long_decode_rows_pool_past_int32_offsets(kvc):
    """Two decode rows of 131072 and 65539 keys (split-KV territory) in the same >2**31-element pools."""
    sizes = _sizes(kvc)
    claims, act, kv = _attention_claims(kvc)
    heads, page_size, num_pages, boundary_page = _kv_geometry(sizes)
    kv_lens = [sizes.long_keys, sizes.long_keys // 2 + 3]
    kvc.require(claims, dtype=act, kv_dtype=kv, page_size=page_size, head_dim=heads[2], num_q_heads=heads[0],
                num_kv_heads=heads[1], q_len=[1], kv_len=kv_lens)
    rng = np.random.default_rng(3)
    case = scale.attention_case(rng, q_dtype=act, kv_dtype=kv, heads=heads, page_size=page_size,
                                num_pages=num_pages, q_lens=[1, 1], kv_lens=kv_lens, boundary_page=boundary_page,
                                pools=_kv_pools(kvc.profile.name, kv),
                                rebuild=_rebuild("test_long_decode_rows_pool_past_int32_offsets", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.attention_sample(case, [0, 1]), actual)


def _prefill_rows(q_len: int, rng, k: int) -> list[int]:
    """Row offsets of a long prefill to sample: the first rows, the last, both sides of tile boundaries
    (16 .. 256 tokens), and random rows."""
    edges = [0, 1, q_len - 1, q_len - 2]
    edges += [t + e for t in (16, 32, 64, 128, 256) for e in (-1, 0) if t + e < q_len]
    rest = rng.choice(q_len, size=min(q_len, max(0, k - len(edges))), replace=False).tolist()
    return sorted({int(r) for r in edges + rest if 0 <= r < q_len})


@conformance_test(op="ragged_paged_attention", layer="differential", clauses=("PA-6", "PA-7", "PA-12", "NU-13"))
def test_prefill_128k_tokens(kvc):
    """A fresh causal prefill of 131072 tokens and a chunked prefill of 1000 rows at the end of 131072
    cached keys, in one call: sampled rows (tile edges, first, last, random), each judged as a one-row
    sequence that sees the same keys."""
    sizes = _sizes(kvc)
    claims, act, kv = _attention_claims(kvc)
    hq, hkv, d = sizes.prefill_heads
    page_size = sizes.page_size
    n = sizes.long_keys
    q_lens, kv_lens = [n, min(1000, n // 2)], [n, n]
    kvc.require(claims, dtype=act, kv_dtype=kv, page_size=page_size, head_dim=d, num_q_heads=hq,
                num_kv_heads=hkv, q_len=q_lens, kv_len=kv_lens)
    rng = np.random.default_rng(4)
    num_pages = 2 * -(-n // page_size) + 4
    case = scale.attention_case(rng, q_dtype=act, kv_dtype=kv, heads=(hq, hkv, d), page_size=page_size,
                                num_pages=num_pages, q_lens=q_lens, kv_lens=kv_lens, boundary_page=num_pages,
                                rebuild=_rebuild("test_prefill_128k_tokens", kvc.profile.name))
    actual = kvc.call(case)
    rows = {0: _prefill_rows(q_lens[0], rng, sizes.sampled_rows),
            1: _prefill_rows(q_lens[1], rng, sizes.sampled_rows // 2)}
    _judge(kvc, scale.attention_sample(case, [0, 1], rows), actual)


@conformance_test(op="ragged_paged_attention", layer="differential", clauses=("PA-4", "PA-6", "PA-7", "NU-13"))
def test_sequences_past_the_grid_limit(kvc):
    """2 x 70000 sequences (decode rows and 3-row prefills alternating): more than 65535 of each kind, so
    a kernel that puts sequences on a grid's y or z axis cannot launch."""
    sizes = _sizes(kvc)
    claims, act, kv = _attention_claims(kvc)
    hq, hkv, d = sizes.prefill_heads
    page_size = sizes.page_size
    seqs = 2 * sizes.grid_rows
    rng = np.random.default_rng(5)
    q_lens = np.where(np.arange(seqs) % 2, 3, 1)
    kv_lens = q_lens + rng.integers(0, 2 * page_size, size=seqs)
    kvc.require(claims, dtype=act, kv_dtype=kv, page_size=page_size, head_dim=d, num_q_heads=hq,
                num_kv_heads=hkv, q_len=sorted(set(q_lens.tolist())), kv_len=kv_lens.tolist(), num_seqs=seqs)
    num_pages = int(sum(-(-int(k) // page_size) for k in kv_lens)) + 4
    case = scale.attention_case(rng, q_dtype=act, kv_dtype=kv, heads=(hq, hkv, d), page_size=page_size,
                                num_pages=num_pages, q_lens=q_lens, kv_lens=kv_lens, boundary_page=num_pages,
                                rebuild=_rebuild("test_sequences_past_the_grid_limit", kvc.profile.name))
    actual = kvc.call(case)
    picked = scale.sample_indices(rng, seqs, [0, 1, seqs - 2, seqs - 1, 65535, 65536, 131071], sizes.sampled_seqs)
    _judge(kvc, scale.attention_sample(case, picked), actual)


def _ssu_claims(kvc):
    claims = kvc.claims("selective_state_update", features=("state_indices", "mamba2", "dt_softplus", "skip_d"))
    act, pool = scale.pick_dtypes(claims, kvs=("float32", "float64"))
    return claims, act, pool


@conformance_test(op="selective_state_update", layer="differential", clauses=("RS-4", "RS-6", "RS-16", "NU-13"))
def test_ssu_state_pool_past_int32_offsets(kvc):
    """A 256-row Mamba2 state update into a state pool of more than 2**31 elements, slots all over it
    (the last slot included): sampled rows and every unaddressed row that changed."""
    sizes = _sizes(kvc)
    claims, act, pool = _ssu_claims(kvc)
    H, P, N = sizes.ssu
    num_slots = -(-sizes.pool_elements // (H * P * N))
    kvc.require(claims, dtype=act, kv_dtype=pool, num_seqs=sizes.decode_rows)
    rng = np.random.default_rng(6)
    case = scale.ssu_case(rng, act=act, pool_dtype=pool, shape=(num_slots, H, P, N), rows=sizes.decode_rows,
                          boundary_slot=-(-sizes.boundary // (H * P * N)),
                          rebuild=_rebuild("test_ssu_state_pool_past_int32_offsets", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.ssu_sample(case, actual, rng, sizes.sampled_seqs, -(-sizes.boundary // (H * P * N))), actual)


@conformance_test(op="selective_state_update", layer="differential", clauses=("RS-4", "RS-16", "NU-13"))
def test_ssu_rows_past_the_grid_limit(kvc):
    """70000 rows in one state update (past 65535 programs along any one axis a kernel may put them on)."""
    sizes = _sizes(kvc)
    claims, act, pool = _ssu_claims(kvc)
    rows = sizes.grid_rows
    kvc.require(claims, dtype=act, kv_dtype=pool, num_seqs=rows)
    rng = np.random.default_rng(7)
    case = scale.ssu_case(rng, act=act, pool_dtype=pool, shape=(rows + 16, 2, 4, 16), rows=rows,
                          boundary_slot=rows, rebuild=_rebuild("test_ssu_rows_past_the_grid_limit", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.ssu_sample(case, actual, rng, sizes.sampled_seqs, rows), actual)


@conformance_test(op="causal_conv1d_update", layer="differential", clauses=("RS-4", "RS-10", "RS-12", "NU-13"))
def test_conv1d_rows_past_the_grid_limit(kvc):
    """70000 rows of a one-token causal conv update (past 65535 programs along a y or z grid axis)."""
    sizes = _sizes(kvc)
    claims = kvc.claims("causal_conv1d_update", features=("state_indices", "bias", "silu"))
    act, pool = scale.pick_dtypes(claims, kvs=("float32", "float64", "bfloat16", "float16"))
    rows = sizes.grid_rows
    kvc.require(claims, dtype=act, kv_dtype=pool, num_seqs=rows)
    rng = np.random.default_rng(9)
    case = scale.conv_rows_case(rng, act=act, pool_dtype=pool, rows=rows, channels=64, width=4,
                                rebuild=_rebuild("test_conv1d_rows_past_the_grid_limit", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.rows_sample(case, actual, rng, sizes.sampled_seqs, rows, pool="conv_state", per_row=("x",)),
           actual)


@conformance_test(op="gated_delta_rule_update", layer="differential", clauses=("RS-4", "RS-30", "NU-13"))
def test_gated_delta_update_rows_past_the_grid_limit(kvc):
    """70000 decode rows of the gated delta rule (Hk 2, Hv 4, K = V = 16; L2-normalised q/k)."""
    sizes = _sizes(kvc)
    claims = kvc.claims("gated_delta_rule_update", features=("state_indices", "qk_l2norm"))
    act, pool = scale.pick_dtypes(claims, kvs=("float32", "float64"))
    rows = sizes.grid_rows
    kvc.require(claims, dtype=act, kv_dtype=pool, num_seqs=rows)
    rng = np.random.default_rng(10)
    case = scale.gdn_update_case(rng, act=act, pool_dtype=pool, rows=rows, heads=(2, 4, 16, 16),
                                 rebuild=_rebuild("test_gated_delta_update_rows_past_the_grid_limit", kvc.profile.name))
    actual = kvc.call(case)
    _judge(kvc, scale.rows_sample(case, actual, rng, sizes.sampled_seqs, rows, pool="state",
                                  per_row=("q", "k", "v", "g", "beta")), actual)


@conformance_test(op="mla_paged_attention", layer="differential", clauses=("ML-2", "ML-4", "ML-5", "NU-13"))
def test_mla_decode_batch_deepseek_v3(kvc):
    """256 decode rows of up to 4096 keys at DeepSeek-V3's dims (128 heads, d_c 512, d_r 64, page 64)."""
    sizes = _sizes(kvc)
    claims = kvc.claims("mla_paged_attention")
    act = next((d for d in ("bfloat16", "float16", "float32") if d in claims.dtypes and d in claims.kv_dtypes), None)
    if act is None:
        pytest.skip(f"unsupported: no float dtype claimed for both q and the latent pool ({claims.dtypes})")
    H, d_c, d_r, page_size = sizes.mla
    rng = np.random.default_rng(8)
    rows = sizes.mla_rows
    kv_lens = rng.integers(1, sizes.mla_keys + 1, size=rows)
    kv_lens[: max(1, rows // 4)] = sizes.mla_keys
    kvc.require(claims, dtype=act, kv_dtype=act, page_size=page_size, head_dim=d_c, num_q_heads=H, q_len=[1],
                kv_len=kv_lens.tolist(), num_seqs=rows)
    case = scale.mla_case(rng, dtype=act, dims=sizes.mla, kv_lens=kv_lens,
                          rebuild=_rebuild("test_mla_decode_batch_deepseek_v3", kvc.profile.name))
    actual = kvc.call(case)
    seqs = scale.sample_indices(rng, rows, [0, rows - 1, int(np.argmin(kv_lens))], max(4, sizes.sampled_seqs // 2))
    _judge(kvc, scale.attention_sample(case, seqs, pools=("c_kv_pages", "k_pe_pages"), q_names=("q_nope", "q_pe"),
                                       scale_names=()), actual)
