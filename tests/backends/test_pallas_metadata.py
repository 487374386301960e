"""The Pallas metadata kernels (Pallas TPU interpret mode on CPU) against the reference.

- `ragged_paged_attention_csr` (spec/metadata.md MD-2 .. MD-4, MD-23): the attention kernel reading page
  ids and kv_len from the CSR arrays in SMEM; judged by the suite's NU-PA1 checks on the equivalent
  block-table case, with NaN in every don't-care slot and page (PA-24);
- `slot_mapping_from_arena` (MD-7, MD-10): the kernel reading the four arrays at their offsets inside the
  scalar-prefetched arena words; class E (exact), garbage elsewhere in the arena; `append_slot_mapping`
  (MD-7) through the same kernel.
Results go through `suite_checks.assert_conforms` (the suite's CHECKS), never a local bound.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402
from kvconform.backends.pallas.metadata import arena_words  # noqa: E402
from kvconform.conformance.strategies import metadata as md  # noqa: E402
from suite_checks import assert_conforms  # noqa: E402

BACKEND = make_backend()
CLAIMS = BACKEND.capabilities()
I32 = np.int32
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- MD-23: attention over the CSR page table ---------------------------------------------------------

def _csr_cache(page_size=4, kv_lens=(9, 0, 8, 5, 3), q_lens=(1, 0, 8, 2, 3), hkv=2, group=2, D=16, seed=5):
    """A CSR cache (MD-2 .. MD-4) with NaN in every slot no sequence owns (PA-24): an empty sequence in the
    middle (last-page length 0), a full last page (last = page_size), partial ones, pages in shuffled
    order with spare pages, and the first page of sequence 0 shared by sequence 3 (MD-2)."""
    rng = np.random.default_rng(seed)
    counts = [-(-n // page_size) for n in kv_lens]
    num_pages = sum(counts) + 3
    pool = list(rng.permutation(num_pages))
    pages = [[int(pool.pop()) for _ in range(c)] for c in counts]
    pages[3][0] = pages[0][0]                     # shared prefix page: sequence 3 reads sequence 0's keys
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(I32)
    indices = np.array([p for row in pages for p in row], I32)
    last = np.array([n - (c - 1) * page_size if c else 0 for n, c in zip(kv_lens, counts)], I32)
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(I32)
    T = int(qo[-1])
    q = rng.standard_normal((T, hkv * group, D)).astype(np.float32)
    shape = (num_pages, page_size, hkv, D)
    k = rng.standard_normal(shape).astype(np.float32)
    v = rng.standard_normal(shape).astype(np.float32)
    live = np.zeros(shape[:2], bool)
    for row, n in zip(pages, kv_lens):
        for pos in range(n):
            live[row[pos // page_size], pos % page_size] = True
    k[~live], v[~live] = np.nan, np.nan
    return dict(q=q, k_pages=k, v_pages=v, qo_indptr=qo, kv_indptr=indptr, kv_indices=indices,
                kv_last_page_len=last)


def test_csr_attention_matches_reference_with_poison():
    """MD-23 with MD-3/MD-4 edge cases; NaN outside the owned slots must not reach an output (PA-24)."""
    x = _csr_cache()
    assert_conforms("ragged_paged_attention_csr", x, BACKEND.ragged_paged_attention_csr(**x))


@pytest.mark.parametrize("opts", [dict(sliding_window=3), dict(soft_cap=5.0, sinks=np.array([0.5, -1.0, 2.0, 0.0]))],
                         ids=["window", "cap_sinks"])
def test_csr_attention_options(opts):
    x = dict(_csr_cache(page_size=2, kv_lens=(7, 4, 0, 6, 2), q_lens=(3, 4, 0, 1, 2), seed=11), **opts)
    assert_conforms("ragged_paged_attention_csr", x, BACKEND.ragged_paged_attention_csr(**x))


def test_csr_attention_equals_block_table_call():
    """The CSR call and the block-table call on the same cache agree within NU-PA1 (MD-5, MD-23)."""
    x = _csr_cache(seed=2)
    plain = md.block_table_inputs(x)
    assert_conforms("ragged_paged_attention_csr", x, BACKEND.ragged_paged_attention_csr(**x),
                    expected=BACKEND.ragged_paged_attention(**plain), what="block-table call")


# --- MD-10: the slot mapping read from a packed arena ---------------------------------------------------

GOLDEN = dict(qo_indptr=np.array([0, 2, 3, 3], I32), kv_indptr=np.array([0, 2, 3, 3], I32),
              kv_indices=np.array([6, 2, 5], I32), kv_last_page_len=np.array([3, 1, 0], I32))


def _golden_arena(alignment=16, start=8, fill=0xAB):
    arrays = [GOLDEN[k] for k in reference.ARENA_ORDER]
    return reference.pack_arena(arrays, alignment, start=start, fill=fill)


def test_slot_mapping_golden():
    """P = 4 (the suite's hand-worked case): seq 0 has pages [6, 2] and kv_len 7, new positions 5, 6 in
    page 2 -> slots 9, 10; seq 1 has page [5] and kv_len 1 -> slot 20; seq 2 is empty. Arrays at byte
    offsets 16, 32, 48, 64 in 0xAB garbage."""
    arena, offsets = _golden_arena()
    inputs = dict(arena=arena, offsets=offsets, num_seqs=3, page_size=4)
    assert_conforms("slot_mapping_from_arena", inputs, BACKEND.slot_mapping_from_arena(**inputs),
                    expected=np.array([9, 10, 20], I32), what="hand-worked value")


def test_slot_mapping_reorders_and_odd_sizes():
    """Arrays placed in another order than ARENA_ORDER (offsets decreasing) and an arena whose length is
    not a multiple of 4: each view is read at its own offset."""
    arrays = [GOLDEN[k] for k in reversed(reference.ARENA_ORDER)]
    arena, offsets = reference.pack_arena(arrays, 4, start=12, fill=0x7F)
    arena = np.concatenate([arena, np.full(3, 0x7F, np.uint8)])
    inputs = dict(arena=arena, offsets=offsets[::-1].copy(), num_seqs=3, page_size=4)
    assert_conforms("slot_mapping_from_arena", inputs, BACKEND.slot_mapping_from_arena(**inputs))


@SETTINGS
@given(md.slot_mapping_from_arena_cases(CLAIMS["slot_mapping_from_arena"]))
def test_slot_mapping_suite_cases(case):
    """The suite's draws: random garbage around the arrays, and 0xFF poison there."""
    for x in (case.inputs, case.with_poison().inputs):
        assert_conforms("slot_mapping_from_arena", x, BACKEND.slot_mapping_from_arena(**x))


def test_append_slot_mapping_golden_and_suite_cases():
    """MD-7 from separate arrays (packed back to back for the same kernel): the hand-worked slots, then
    the suite's draws."""
    x = dict(GOLDEN, page_size=4)
    assert_conforms("append_slot_mapping", x, BACKEND.append_slot_mapping(**x), expected=np.array([9, 10, 20], I32),
                    what="hand-worked value")

    @SETTINGS
    @given(md.append_slot_mapping_cases(CLAIMS["append_slot_mapping"]))
    def drawn(case):
        assert_conforms("append_slot_mapping", case.inputs, BACKEND.append_slot_mapping(**case.inputs))
    drawn()


def test_arena_words_view_the_bytes():
    """Word w of the kernel's operand is bytes 4w .. 4w+3 of the arena, as the reference views them."""
    arena = np.arange(10, dtype=np.uint8)
    words = arena_words(arena)
    assert words.shape[0] >= 3 and words.dtype == np.int32
    assert np.array_equal(words[:2], arena[:8].view(np.int32))
    assert np.array_equal(words[2:3].view(np.uint8)[:2], arena[8:])


# --- errors are the reference's (MD-22) -----------------------------------------------------------------

def _same_error(op, **inputs):
    with pytest.raises((ValueError, TypeError)) as want:
        getattr(reference, op)(**inputs)
    with pytest.raises(want.type) as got:
        getattr(BACKEND, op)(**inputs)
    assert str(got.value) == str(want.value)


def test_rejects_what_the_reference_rejects():
    arena, offsets = _golden_arena()
    _same_error("slot_mapping_from_arena", arena=arena, offsets=offsets + np.array([0, 2, 0, 0]), num_seqs=3,
                page_size=4)
    _same_error("slot_mapping_from_arena", arena=arena[:60], offsets=offsets, num_seqs=3, page_size=4)
    _same_error("slot_mapping_from_arena", arena=arena, offsets=offsets, num_seqs=3, page_size=2)  # last 3 > 2
    _same_error("append_slot_mapping", **dict(GOLDEN, qo_indptr=np.array([0, 2, 4, 4], I32), page_size=4))
    x = _csr_cache()
    _same_error("ragged_paged_attention_csr", **dict(x, kv_last_page_len=x["kv_last_page_len"] + 1))
    _same_error("ragged_paged_attention_csr", **dict(x, kv_indptr=x["kv_indptr"][::-1].copy()))


def test_claims():
    caps = CLAIMS
    assert set(caps["ragged_paged_attention_csr"].features) == {"sliding_window", "soft_cap", "sinks",
                                                                "quantized_kv", "gqa", "per_head_scales",
                                                                "per_token_scales"}
    assert caps["slot_mapping_from_arena"].kv_dtypes == ("uint8",)
    assert "append_slot_mapping" in caps
