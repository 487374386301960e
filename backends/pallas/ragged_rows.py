"""What the paged attention and MLA kernels share: a block of ragged query rows over a paged cache.

Both kernels take the query rows of the whole ragged batch as one flattened axis [T_pad] (sequence i owns
rows cu_q_lens[i] .. cu_q_lens[i+1] - 1, PA-4) and give each grid step `block_q` consecutive rows, which
may belong to several sequences. For each sequence whose rows meet the block, the step copies the pages
holding keys some of those rows see, page after page through a two-slot VMEM buffer (the DMA of page p+1
in flight while page p is used), and folds them into an online softmax per (row, head). This module holds
the pieces both kernels use in that loop, as plain functions of values and refs inside a kernel body:

- `sequence_in_block`: positions (bottom-right causality, PA-6 / ML-5), the rows of the block that belong
  to a sequence and the range of pages they see (sliding window, PA-15), so pages no row sees are never
  copied;
- `visible_keys`: the mask of one page's keys per row (PA-7, PA-15);
- `walk_pages`: the double-buffered page loop;
- `soft_cap`: PA-16 with the cap as a value (0: none);
- `softmax_start` / `online_softmax_step` / `softmax_finish`: the online softmax with sinks (PA-13, PA-17),
  masking by selection only, so NaN in a slot no row sees never reaches a row (PA-24, ML-7).

Options are values, not compile-time flags, so that one compiled kernel serves every option column (a
compile costs seconds in interpret mode, a call tens of milliseconds): a window of NO_WINDOW keys hides
nothing, a cap of 0 caps nothing, a -inf sink is exactly no sink (PA-17).

Shapes: a block has R = block_q * G rows of the softmax state (G query heads per KV head; the row of query
row t and head g is t * G + g), `token: i32[R, 1]` the flattened query row of each, `s: f32[R, page_size]`
the logits of one page.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

#: the sliding window that stands for "no window": wider than any sequence, so it hides no key
NO_WINDOW = 1 << 30


def sequence_in_block(q_start, q_end, kv_len, row0, block_q: int, token, page_size: int, window=None):
    """Sequence [q_start, q_end) of the flattened rows, with kv_len keys, against the block of rows
    [row0, row0 + block_q): (active, page_lo, page_hi, in_seq, pos).

    active: the sequence has a row in the block; pages [page_lo, page_hi) hold every key a row of it in the
    block sees (PA-6: row t sits at kv_len - q_len + (t - q_start) and sees keys <= its position; with a
    window W, PA-15, keys > position - W); in_seq, pos: bool / i32 [R, 1], whether each state row belongs to
    the sequence, and its position. `window`: a positive traced int (NO_WINDOW: none) or None."""
    first_pos = kv_len - (q_end - q_start)
    lo_row = jnp.maximum(q_start, row0)
    hi_row = jnp.minimum(q_end, row0 + block_q)
    active = lo_row < hi_row
    key_hi = first_pos + (hi_row - 1 - q_start) + 1
    key_lo = jnp.int32(0)
    if window is not None:
        key_lo = jnp.maximum(0, first_pos + (lo_row - q_start) - window + 1)
    in_seq = (token >= q_start) & (token < q_end)
    pos = first_pos + (token - q_start)
    return active, key_lo // page_size, (key_hi + page_size - 1) // page_size, in_seq, pos


def visible_keys(in_seq, pos, page, page_size: int, window=None):
    """bool[R, page_size]: key slot j of logical page `page` is visible to state row r (PA-7, PA-15)."""
    key_pos = page * page_size + lax.broadcasted_iota(jnp.int32, (1, page_size), 1)
    visible = in_seq & (key_pos <= pos)
    if window is not None:
        visible &= key_pos > pos - window
    return visible


def seen_keys(visible, page_size: int):
    """bool[page_size, 1]: the keys some row sees; the others may hold NaN (PA-24) and are selected away
    from the values before the P @ V product, where 0 * NaN would leak."""
    return (jnp.max(visible.astype(jnp.float32), axis=0) > 0.0).reshape(page_size, 1)


def walk_pages(page_lo, page_hi, copies, use):
    """Visit pages [page_lo, page_hi): `copies(page, slot)` lists the DMA descriptors that bring a page into
    buffer slot `slot` (0 or 1); `use(page, slot)` runs once they are done. The next page's copies start
    before the current page is used."""
    @pl.when(page_lo < page_hi)
    def _first():
        for copy in copies(page_lo, 0):
            copy.start()

    def body(page, carry):
        slot = (page - page_lo) % 2

        @pl.when(page + 1 < page_hi)
        def _prefetch():
            for copy in copies(page + 1, 1 - slot):
                copy.start()

        for copy in copies(page, slot):
            copy.wait()
        use(page, slot)
        return carry

    lax.fori_loop(page_lo, page_hi, body, 0)


def soft_cap(s, cap):
    """PA-16 on logits s: cap * tanh(s / cap) for a cap > 0, s unchanged for cap = 0."""
    safe = jnp.where(cap > 0, cap, 1.0)
    return jnp.where(cap > 0, safe * jnp.tanh(s / safe), s)


def softmax_start(sink, rows: int):
    """(m, l) f32[rows, 1] before any key: empty (m = -inf, l = 0), or from the sink as one extra logit
    whose value is 0 (PA-17); a -inf sink is exactly no sink. sink: f32[rows, 1] or None."""
    if sink is None:
        return jnp.full((rows, 1), -jnp.inf, jnp.float32), jnp.zeros((rows, 1), jnp.float32)
    return sink, jnp.where(sink == -jnp.inf, 0.0, 1.0).astype(jnp.float32)


def online_softmax_step(m_old, l_old, acc_old, s, visible, v, p_scale=None):
    """Fold one page into the state: m, l f32[R, 1], acc f32[R, Dp]; s f32[R, page_size] logits,
    v f32[page_size, Dp] values (rows no row sees already zero), p_scale f32[1, page_size] or None: a scale
    per value (per-token V scales, PA-48), applied to the probabilities, selected so that a NaN scale
    beside a hidden slot never leaks. Returns the new (m, l, acc)."""
    m_new = jnp.maximum(m_old, jnp.max(jnp.where(visible, s, -jnp.inf), axis=1, keepdims=True))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    p = jnp.where(visible, jnp.exp(s - m_safe), 0.0)
    alpha = jnp.exp(m_old - m_safe)
    l_new = alpha * l_old + jnp.sum(p, axis=1, keepdims=True)
    if p_scale is not None:
        p = jnp.where(visible, p * p_scale, 0.0)
    acc_new = alpha * acc_old + jnp.dot(p, v, preferred_element_type=jnp.float32, precision=lax.Precision.HIGHEST)
    return m_new, l_new, acc_new


def softmax_finish(acc, l):
    """acc / l per row; rows with no visible key and no sink (l = 0) give 0, never NaN."""
    return acc * jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)


def sequences_in_block(cu_ref, num_seqs, row0, block_q: int):
    """[seq_lo, seq_hi): the sequences with query rows in [row0, row0 + block_q), found by binary search over
    cu_q_lens in SMEM (non-decreasing, PA-4), so a decode batch of hundreds of sequences does not visit
    every sequence in every block (PA-51's long_batch column: 256 sequences, 32 blocks)."""
    def first_from(row):   # the smallest i in [0, num_seqs] with cu_q_lens[i + 1] > row (num_seqs: none)
        def body(bounds):
            lo, hi = bounds
            mid = (lo + hi) // 2
            past = cu_ref[mid + 1] > row
            return jnp.where(past, lo, mid + 1), jnp.where(past, mid, hi)

        lo, _ = lax.while_loop(lambda bounds: bounds[0] < bounds[1], body, (jnp.int32(0), num_seqs))
        return lo

    return first_from(row0), jnp.minimum(first_from(row0 + block_q - 1) + 1, num_seqs)
