"""Hand-built gated delta rule cases for the kernel tests of our backends (not a test module), compared
through the suite's comparison contract (`compare_outputs` with the recurrent family's CHECKS, i.e.
spec/numerics.md NU-R1 / NU-R2g), never a local tolerance."""
from __future__ import annotations

import numpy as np

from kvconform import reference as ref
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import compare_outputs


def _strided(values, dtype=np.int32):
    """An index array viewed with stride 2 (a kernel must honour offsets and strides)."""
    buf = np.full(2 * len(values), 7, dtype)
    buf[::2] = values
    return buf[::2]


def chunked_case(lengths, *, heads=4, qk_heads=2, dk=3, dv=2, act=np.float32, chunk_size=4, norm=False,
                 pad_seq=None, fresh_seq=None, seed=0):
    """Packed sequences with a padding sequence (NaN tokens), a fresh sequence over a NaN row, a NaN
    canary row, strided cu_seqlens / state_indices (RS-3 … RS-5, RS-17, RS-28 … RS-33)."""
    rng = np.random.default_rng(seed)
    seqs = len(lengths)
    cu = _strided(np.concatenate([[0], np.cumsum(lengths)]))
    T = int(cu[-1])
    num_slots = seqs + 2
    slots = rng.permutation(num_slots)[:seqs]
    if pad_seq is not None:
        slots[pad_seq] = -1
    idx = _strided(slots)
    state = rng.standard_normal((num_slots, heads, dk, dv)).astype(np.float32)
    for spare in sorted(set(range(num_slots)) - set(int(s) for s in slots)):
        state[spare] = np.nan                                  # canary (RS-4)
    has_init = np.ones(seqs, dtype=bool)
    if fresh_seq is not None:
        has_init[fresh_seq] = False
        state[slots[fresh_seq]] = np.nan                       # never read (RS-5)
    k = rng.uniform(-1, 1, (T, qk_heads, dk))
    if not norm:
        k = k / np.maximum(1.0, np.linalg.norm(k, axis=-1, keepdims=True))
    x = dict(q=rng.standard_normal((T, qk_heads, dk)).astype(act), k=k.astype(act),
             v=rng.standard_normal((T, heads, dv)).astype(act), g=(-rng.uniform(0, 1.5, (T, heads))).astype(act),
             beta=rng.uniform(0, 1, (T, heads)).astype(act))
    if pad_seq is not None:
        for a in x.values():
            a[cu[pad_seq]:cu[pad_seq + 1]] = np.nan            # padding reads nothing (RS-3)
    return Case("gated_delta_rule_chunked", dict(x, state=state, cu_seqlens=cu, chunk_size=chunk_size,
                                                 use_qk_l2norm=norm, state_indices=idx, has_initial_state=has_init))


def update_case(rows, *, heads=4, qk_heads=2, dk=3, dv=2, act=np.float32, norm=False, pad_row=None, seed=0):
    rng = np.random.default_rng(seed)
    num_slots = rows + 1
    slots = rng.permutation(num_slots)[:rows]
    if pad_row is not None:
        slots[pad_row] = -1
    state = rng.standard_normal((num_slots, heads, dk, dv)).astype(np.float32)
    for spare in sorted(set(range(num_slots)) - set(int(s) for s in slots)):
        state[spare] = np.nan
    k = rng.uniform(-1, 1, (rows, qk_heads, dk))
    if not norm:
        k = k / np.maximum(1.0, np.linalg.norm(k, axis=-1, keepdims=True))
    x = dict(q=rng.standard_normal((rows, qk_heads, dk)).astype(act), k=k.astype(act),
             v=rng.standard_normal((rows, heads, dv)).astype(act), g=(-rng.uniform(0, 1.5, (rows, heads))).astype(act),
             beta=rng.uniform(0, 1, (rows, heads)).astype(act))
    if pad_row is not None:
        for a in x.values():
            a[pad_row] = np.nan
    return Case("gated_delta_rule_update", dict(x, state=state, use_qk_l2norm=norm, state_indices=_strided(slots),
                                                scale=0.7))


def assert_conforms(case: Case, got) -> None:
    """The suite's verdict on `got` for `case` (every field, its tolerance and region from CHECKS)."""
    expected = getattr(ref, case.op)(**case.inputs)
    bad = [r for r in compare_outputs(case, expected, got) if not r.ok]
    assert not bad, [(r.name, r.kind, r.problem, r.max_abs, r.error_ratio) for r in bad]
