"""Input builders for the paged-attention tests: a ragged batch described densely, then paged.

A `Batch` holds each sequence's keys/values as dense arrays (the logical cache) and the query rows; the
`paged` function scatters it into a page pool through a random page table, optionally poisoning every
location spec/paged_attention.md PA-24 says must not influence the output.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st


@dataclass
class Batch:
    q_lens: list[int]
    kv_lens: list[int]
    keys: list[np.ndarray]      # per sequence float64[kv_len, Hkv, D]
    values: list[np.ndarray]
    q: np.ndarray               # float64[T, Hq, D]; rows past sum(q_lens) are padding
    num_seqs: int               # sequences past num_seqs exist in the metadata but do not count
    page_size: int
    options: dict = field(default_factory=dict)

    @property
    def heads(self) -> tuple[int, int, int]:
        Hq, D = self.q.shape[1:]
        Hkv = self.keys[0].shape[1]
        return Hq, Hkv, D

    @property
    def cu_q_lens(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.q_lens)]).astype(np.int32)


def paged(batch: Batch, rng: np.random.Generator, *, extra_pages: int = 2, extra_table: int = 1,
          poison: bool = False, contiguous: bool = False, dtype=np.float64) -> dict:
    """Keyword arguments of ragged_paged_attention for `batch` (options not included).

    Pages are assigned by a random permutation (or in order when `contiguous`); the pool has
    `extra_pages` unused pages and each table row `extra_table` unused entries. With `poison`, every
    don't-care location holds NaN/Inf: slots past kv_len, unused pages, unused table entries (garbage
    indices), metadata of sequences >= num_seqs, padding rows of q, and keys no row can see (PA-24).
    """
    Hq, Hkv, D = batch.heads
    ps = batch.page_size
    S = len(batch.kv_lens)
    need = [-(-n // ps) for n in batch.kv_lens]
    pages_per_seq = max(need + [0]) + extra_table
    P = sum(need) + extra_pages
    order = np.arange(P) if contiguous else rng.permutation(P)
    fill = np.nan if poison else 0.0
    k_pages = np.full((P, ps, Hkv, D), fill, dtype=np.float64)
    v_pages = np.full((P, ps, Hkv, D), fill, dtype=np.float64)
    if poison:  # some Inf too: 0 * Inf and Inf - Inf are NaN, so they catch multiply-masking
        k_pages[::2] = np.inf
        v_pages[1::3] = -np.inf
    table = np.zeros((S, pages_per_seq), dtype=np.int32)
    if poison:
        table[:] = rng.integers(-(2 ** 31), 2 ** 31 - 1, size=table.shape)
    cursor = 0
    for i in range(S):
        for p in range(need[i]):
            table[i, p] = order[cursor]
            cursor += 1
            n = min(ps, batch.kv_lens[i] - p * ps)
            k_pages[table[i, p], :n] = batch.keys[i][p * ps:p * ps + n]
            v_pages[table[i, p], :n] = batch.values[i][p * ps:p * ps + n]
    q = batch.q.copy()
    kv_lens = np.asarray(batch.kv_lens, dtype=np.int32)
    cu = batch.cu_q_lens
    if poison:
        q[cu[batch.num_seqs]:] = np.nan
        window = batch.options.get("sliding_window")
        for i in range(batch.num_seqs):
            first_pos = batch.kv_lens[i] - batch.q_lens[i]
            hidden = first_pos - window + 1 if window is not None else 0
            if batch.q_lens[i] == 0:
                hidden = batch.kv_lens[i]
            for j in range(max(hidden, 0)):  # keys no row of this call can see
                k_pages[table[i, j // ps], j % ps] = np.nan
                v_pages[table[i, j // ps], j % ps] = np.inf
        kv_lens[batch.num_seqs:] = rng.integers(-5, 10 ** 6, size=S - batch.num_seqs)
        cu = cu.copy()
        cu[batch.num_seqs + 1:] = rng.integers(-5, 10 ** 6, size=S - batch.num_seqs)
        table[batch.num_seqs:] = -7
    return dict(q=q, k_pages=k_pages.astype(dtype), v_pages=v_pages.astype(dtype), kv_lens=kv_lens,
                page_indices=table, cu_q_lens=cu, num_seqs=batch.num_seqs)


@st.composite
def batches(draw, *, max_seqs: int = 4, max_kv: int = 12, options: bool = True,
            max_group: int = 3) -> Batch:
    """A ragged batch with mixed prefill/decode/empty sequences and, optionally, random options."""
    S = draw(st.integers(1, max_seqs))
    num_seqs = draw(st.integers(0, S)) if draw(st.booleans()) else S
    Hkv = draw(st.integers(1, 3))
    group = draw(st.integers(1, max_group))
    D = draw(st.sampled_from([1, 2, 3, 4, 8]))
    page_size = draw(st.sampled_from([1, 2, 3, 4, 8]))
    kv_lens = [draw(st.integers(0, max_kv)) for _ in range(S)]
    q_lens = [draw(st.integers(0, n)) if draw(st.booleans()) else min(n, 1) for n in kv_lens]
    q_lens = [q if i < num_seqs else 0 for i, q in enumerate(q_lens)]
    pad_rows = draw(st.integers(0, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    Hq = Hkv * group
    keys = [rng.standard_normal((n, Hkv, D)) for n in kv_lens]
    values = [rng.standard_normal((n, Hkv, D)) for n in kv_lens]
    q = 1.5 * rng.standard_normal((sum(q_lens) + pad_rows, Hq, D))
    opts = {}
    if options:
        if draw(st.booleans()):
            opts["sliding_window"] = draw(st.integers(1, max_kv + 2))
        if draw(st.booleans()):
            opts["soft_cap"] = draw(st.sampled_from([0.5, 2.0, 30.0]))
        if draw(st.booleans()):
            opts["sinks"] = rng.standard_normal(Hq)
        if draw(st.booleans()):
            opts["sm_scale"] = draw(st.sampled_from([0.1, 1.0, 3.0]))
    return Batch(q_lens, kv_lens, keys, values, q, num_seqs, page_size, opts)


def dense_attention(batch: Batch, *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None):
    """The test's own oracle: head by head, row by row, straight from the formulas of PA-6 .. PA-21.

    Returns (out float64[rows, Hq, D] over the counted rows, scores list of float64[kv_len],
    sink_mass float64 per sequence).
    """
    Hq, Hkv, D = batch.heads
    group = Hq // Hkv
    scale = D ** -0.5 if sm_scale is None else sm_scale
    cu = batch.cu_q_lens
    out = np.zeros((cu[batch.num_seqs], Hq, D))
    scores, sink_mass = [], []
    for i in range(batch.num_seqs):
        kv_len, q_len = batch.kv_lens[i], batch.q_lens[i]
        seq_scores, seq_sink = np.zeros(kv_len), 0.0
        for t in range(q_len):
            pos = kv_len - q_len + t
            for h in range(Hq):
                kh = h // group
                s = np.array([scale * float(np.dot(batch.q[cu[i] + t, h], batch.keys[i][j, kh]))
                              for j in range(kv_len)])
                if soft_cap is not None:
                    s = soft_cap * np.tanh(s / soft_cap)
                ok = [j <= pos and (sliding_window is None or j > pos - sliding_window)
                      for j in range(kv_len)]
                s = np.where(ok, s, -np.inf)
                top = s.max() if sinks is None else max(s.max(), sinks[h])
                e = np.exp(s - top)
                den = e.sum() + (0.0 if sinks is None else np.exp(sinks[h] - top))
                p = e / den
                out[cu[i] + t, h] = p @ batch.values[i][:, kh]
                seq_scores += p
                if sinks is not None:
                    seq_sink += np.exp(sinks[h] - top) / den
        scores.append(seq_scores)
        sink_mass.append(seq_sink)
    return out, scores, sink_mass
