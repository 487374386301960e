"""Triton metadata ops against the NumPy reference (spec/metadata.md): attention over a CSR page table
read in place (MD-23), and the append slot mapping from separate arrays (MD-7) or a packed arena (MD-10).

Runs under the Triton interpreter on CPU (the backend selects it); skipped without torch/triton.
Results are judged by the suite's own checks (NU-PA1 for attention, class E for slots) through
`suite_checks.assert_conforms`, never a local tolerance.
"""
from __future__ import annotations

import importlib.util

import numpy as np
from suite_checks import assert_conforms, inputs_of
import pytest

from kvconform.backends.triton import make_backend  # first: decides TRITON_INTERPRET before triton loads

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch/triton not installed", allow_module_level=True)

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from kvconform import reference as ref  # noqa: E402
from kvconform.backends.triton import paged_attention as tpa  # noqa: E402
from kvconform.conformance.strategies import metadata as md  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
I32 = np.int32


@pytest.fixture(scope="module")
def backend():
    b = make_backend()
    assert b.availability().ok
    return b


def _strided(arr: np.ndarray) -> np.ndarray:
    """`arr` as a view at an offset with stride 2, the gaps holding a page id/length far out of range: a
    kernel that ignores the view's offset or stride reads garbage (issue 6)."""
    buf = np.full(3 + 2 * max(arr.size, 1), 2**30 + 7, dtype=arr.dtype)
    view = buf[3::2][: arr.size].reshape(arr.shape)
    view[...] = arr
    return view


def _csr_case(seed: int):
    """A CSR attention call (MD-2 .. MD-4, MD-23): 1-4 sequences of kv_len 0..40 (an empty one has no
    pages and no rows), pages drawn from a shared pool so a page may sit under two sequences (MD-2),
    q_len in [0, kv_len]; every slot no sequence owns holds NaN (PA-24)."""
    rng = np.random.default_rng(seed)
    hkv, group = int(rng.choice([1, 2])), int(rng.choice([1, 2, 4]))
    d, P = int(rng.choice([8, 16])), int(rng.choice([1, 3, 4, 8]))
    S = int(rng.integers(1, 5))
    kv_lens = [0 if rng.random() < 0.2 else int(rng.integers(1, 41)) for _ in range(S)]
    q_lens = [int(rng.integers(0, n + 1)) if rng.random() < 0.5 else min(n, 1) for n in kv_lens]
    num_pages = 2 + sum(-(-n // P) for n in kv_lens)
    bounds = np.cumsum([0] + [-(-n // P) for n in kv_lens])
    perm = rng.permutation(num_pages)                            # pages in no logical order
    owned = [perm[bounds[i]:bounds[i + 1]] for i in range(S)]
    if S > 1 and len(owned[0]) > 1 and kv_lens[1] > P:
        owned[1][0] = owned[0][0]     # a shared prefix page (MD-2), full in both sequences
    indptr = np.concatenate([[0], np.cumsum([len(o) for o in owned])]).astype(I32)
    indices = np.concatenate([o for o in owned] + [np.zeros(0, np.int64)]).astype(I32)
    last = np.array([n - (len(o) - 1) * P if len(o) else 0 for n, o in zip(kv_lens, owned)], I32)
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(I32)
    T = int(qo[-1]) + int(rng.integers(0, 3))                   # padding rows past qo_indptr[S]
    k = rng.standard_normal((num_pages, P, hkv, d)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, hkv, d)).astype(np.float32)
    used = np.zeros((num_pages, P), bool)
    for o, n in zip(owned, kv_lens):
        for j in range(n):
            used[o[j // P], j % P] = True
    k[~used], v[~used] = np.nan, np.nan
    q = rng.standard_normal((T, hkv * group, d)).astype(np.float32)
    q[int(qo[-1]):] = np.nan
    return q, k, v, qo, indptr, indices, last


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), window=st.one_of(st.none(), st.integers(1, 12)),
       cap=st.one_of(st.none(), st.just(5.0)), use_sinks=st.booleans(), split=st.booleans())
def test_csr_attention_matches_reference(backend, seed, window, cap, use_sinks, split):
    """MD-23 through the backend: CSR metadata as strided views, shared pages, empty sequences, window,
    cap, sinks, split-KV and single-pass paths; judged by the suite's CSR attention checks."""
    q, k, v, qo, indptr, indices, last = _csr_case(seed)
    sinks = np.random.default_rng(seed).standard_normal(q.shape[1]) if use_sinks else None
    kw = dict(sliding_window=window, soft_cap=cap, sinks=sinks)
    args = (q, k, v, qo, indptr, indices, last)
    backend.split_min_kv = 0 if split else 10**9
    try:
        got = backend.ragged_paged_attention_csr(q, k, v, *(_strided(a) for a in args[3:]), **kw)
    finally:
        backend.split_min_kv = None
    assert_conforms("ragged_paged_attention_csr", inputs_of("ragged_paged_attention_csr", *args, **kw), got)


@pytest.mark.parametrize("seed", [3, 11, 29])
def test_csr_kernel_reads_the_csr_arrays(seed):
    """The kernel-level entry point takes kv_indptr/kv_indices/kv_last_page_len tensors themselves (no
    block table exists anywhere in the call) and gives the reference's result."""
    import torch
    from kvconform.backends.triton import _runtime
    rt = _runtime.configure()   # CUDA tensors natively (a CPU tensor is refused there), CPU under the interpreter
    q, k, v, qo, indptr, indices, last = _csr_case(seed)
    t = [torch.from_numpy(np.ascontiguousarray(x)).to(rt.device) for x in (q, k, v, qo, indptr, indices, last)]
    out = tpa.ragged_paged_attention_csr(*t, sm_scale=q.shape[2] ** -0.5, interpret=rt.interpret)
    args = (q, k, v, qo, indptr, indices, last)
    assert_conforms("ragged_paged_attention_csr", inputs_of("ragged_paged_attention_csr", *args),
                    out.cpu().numpy())


def test_csr_attention_golden(backend):
    """The suite's hand-worked case (test_attention_csr_golden): keys 0..2 of pages [1, 0] at last-page
    length 1, q = 0: out = mean of v = [2, 2]; slot 1 of page 0 holds 100 and must not be read."""
    k = np.zeros((2, 2, 1, 2), np.float32)
    v = np.zeros((2, 2, 1, 2), np.float32)
    v[1, 0, 0], v[1, 1, 0], v[0, 0, 0], v[0, 1, 0] = (3, 0), (0, 3), (3, 3), (100, 100)
    args = (np.zeros((1, 1, 2), np.float32), k, v, np.array([0, 1, 1], I32), np.array([0, 2, 2], I32),
            np.array([1, 0], I32), np.array([1, 0], I32))
    assert_conforms("ragged_paged_attention_csr", inputs_of("ragged_paged_attention_csr", *args),
                    backend.ragged_paged_attention_csr(*args), np.array([[[2.0, 2.0]]]), what="hand-worked value")


@SETTINGS
@given(data=st.data(), P=st.sampled_from([1, 2, 3, 4, 16]), A=st.sampled_from([4, 8, 16, 256]),
       start=st.integers(1, 64), tail=st.integers(0, 3))
def test_slot_mapping_from_arena_matches_reference(backend, data, P, A, start, tail):
    """MD-10: the four arrays packed at a non-zero, data-dependent offset into random garbage (plus 0..3
    trailing bytes, so the arena need not hold a whole number of int32 words); the same slots as the
    reference (class E), and as append_slot_mapping on the separate arrays as strided views (MD-7)."""
    qo, csr = data.draw(md.append_inputs(P))
    arrays = [qo, csr.kv_indptr, csr.kv_indices, csr.kv_last_page_len]
    rng = np.random.default_rng(start * 7 + tail)
    arena, offsets = ref.pack_arena(arrays, A, start=start, rng=rng)
    arena = np.concatenate([arena, rng.integers(0, 256, tail, dtype=np.uint8)])
    S = int(qo.shape[0] - 1)
    got = backend.slot_mapping_from_arena(arena, offsets, S, P)
    assert_conforms("slot_mapping_from_arena", inputs_of("slot_mapping_from_arena", arena, offsets, S, P), got)
    sep = backend.append_slot_mapping(*(_strided(a) for a in arrays), P)
    assert_conforms("append_slot_mapping", inputs_of("append_slot_mapping", *arrays, P), sep)


def test_slot_mapping_golden(backend):
    """The suite's hand-worked case: P = 4, offsets 16, 32, 48, 64 in 0xAB garbage -> slots 9, 10, 20."""
    x = dict(qo_indptr=np.array([0, 2, 3, 3], I32), kv_indptr=np.array([0, 2, 3, 3], I32),
                         kv_indices=np.array([6, 2, 5], I32), kv_last_page_len=np.array([3, 1, 0], I32))
    arena, offsets = ref.pack_arena(list(x.values()), 16, start=8, fill=0xAB)
    got = backend.slot_mapping_from_arena(arena, offsets, 3, 4)
    assert_conforms("slot_mapping_from_arena", inputs_of("slot_mapping_from_arena", arena, offsets, 3, 4), got,
                    np.array([9, 10, 20], I32), what="hand-worked value")
    assert_conforms("append_slot_mapping", inputs_of("append_slot_mapping", **x, page_size=4),
                    backend.append_slot_mapping(**x, page_size=4), np.array([9, 10, 20], I32),
                    what="hand-worked value")


def _bad_arenas():
    """(name, arena, offsets, num_seqs): each breaks one MD-10 / MD-22 rule."""
    good = [np.array([0, 2, 3, 3], I32), np.array([0, 2, 3, 3], I32), np.array([6, 2, 5], I32),
            np.array([3, 1, 0], I32)]
    arena, offsets = ref.pack_arena(good, 16, start=8, fill=0xAB)
    odd = offsets.copy()
    odd[2] += 2
    past = offsets.copy()
    past[3] = arena.shape[0] - 4
    too_many_rows = [np.array([0, 2, 3, 4], I32)] + good[1:]          # sequence 2: q_len 1 > kv_len 0
    a2, o2 = ref.pack_arena(too_many_rows, 16, start=8, fill=0xAB)
    return [("offset not a multiple of 4", arena, odd, 3), ("array past the arena end", arena, past, 3),
            ("q_len > kv_len", a2, o2, 3), ("arena not uint8", arena.view(np.int32), offsets[:4], 3)]


@pytest.mark.parametrize("name,arena,offsets,num_seqs", _bad_arenas(), ids=[b[0] for b in _bad_arenas()])
def test_slot_mapping_from_arena_rejects_like_the_reference(backend, name, arena, offsets, num_seqs):
    """MD-22: the adapter raises the reference's own error (same type and message) before launching."""
    with pytest.raises((ValueError, TypeError)) as want:
        ref.slot_mapping_from_arena(arena, offsets, num_seqs, 4)
    with pytest.raises(want.type) as got:
        backend.slot_mapping_from_arena(arena, offsets, num_seqs, 4)
    assert str(got.value) == str(want.value)


def test_csr_attention_rejects_like_the_reference(backend):
    """MD-22: a last-page length outside [1, page_size] is the reference's error, raised by the adapter."""
    args = (np.zeros((1, 1, 8), np.float32), np.zeros((2, 4, 1, 8), np.float32), np.zeros((2, 4, 1, 8), np.float32),
            np.array([0, 1], I32), np.array([0, 1], I32), np.array([1], I32), np.array([5], I32))
    with pytest.raises(ValueError) as want:
        ref.ragged_paged_attention_csr(*args)
    with pytest.raises(ValueError) as got:
        backend.ragged_paged_attention_csr(*args)
    assert str(got.value) == str(want.value)
