"""Ragged paged attention over a paged KV cache (spec/paged_attention.md, clauses PA-1 .. PA-30).

One call serves a ragged batch mixing prefill chunks and decode rows: the query rows of sequence i are
``q[cu_q_lens[i]:cu_q_lens[i+1]]`` and its keys/values live in pages listed by ``page_indices[i]``.
Everything is computed in float64 from the exact values of the inputs (PA-20, spec/numerics.md NU-2).

The computation gathers, per sequence, only the cache slots some query row of that sequence can see
(PA-11, PA-15). Slots past ``kv_len``, pages past ``cdiv(kv_len, page_size)``, keys before the first
row's window, unused page-table entries and padding rows of ``q`` are never read, so NaN or Inf there
cannot reach the output (PA-24). Inside the gathered range, masked logits are replaced by -inf through
selection, never by multiplying with 0 (0 * Inf = NaN).

Speed (issue 16; benchmarks/reference_attention.py): keys and values are upcast one KV head at a time into
contiguous float64 [L, D] arrays, and the KV heads of a large call run in parallel (head_workers.py). Those
arrays and the logits are written into `buffers.Buffers` that the KV heads of one call hand on to each
other: fresh arrays of tens of MiB cost page faults on every use.
"""
from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import dtypes
from .buffers import Buffers
from .head_workers import head_map
from .kv_layouts import canonical_kv
from .page_pools import check_token_scales, kv_pools, kv_scale, scales_of
from .validation import check_shape, float_input, int_input, int_scalar, positive_float, require

__all__ = ["AttentionCall", "AttentionOutput", "ragged_paged_attention", "validate_ragged_paged_attention"]

_BLOCK_ELEMENTS = 1 << 24  # float64 logits per block: 128 MiB (at 32k keys: 128 rows x 4 query heads)


class AttentionOutput(NamedTuple):
    """Result of ``ragged_paged_attention(..., return_scores=True)``.

    out:    float64[T, Hq, D]  attention output (rows past cu_q_lens[num_seqs]: 0 here, unspecified, PA-25)
    scores: float64[S, pages_per_seq * page_size]  softmax mass per cached token (PA-21 .. PA-23)
    """
    out: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class AttentionCall:
    """The arguments of one ``ragged_paged_attention`` call after validation (PA-26 .. PA-30).

    q:            float64[T, Hq, D]  exact upcast of q (PA-20)
    k_pages:      [P, page_size, Hkv, D] in the storage dtype, the caller's array (not copied)
    v_pages:      same shape and dtype as k_pages
    kv_lens:      int64[S] (PA-3)
    page_indices: int64[S, pages_per_seq] (PA-10); only entries in use by counted sequences were checked
    cu_q_lens:    int64[S+1] (PA-4); only cu_q_lens[:num_seqs + 1] was checked (PA-30)
    num_seqs:     int in [0, S] (PA-5)
    sm_scale:     float > 0, the D ** -0.5 default resolved (PA-14)
    sliding_window: int >= 1 or None (PA-15)
    soft_cap:     float > 0 or None (PA-16)
    sinks:        float64[Hq], finite or -inf, or None (PA-17)
    k_scale, v_scale: np.float32 > 0 for quantized pages, else None (PA-18)
    return_scores: bool (PA-21)
    num_shards:   int >= 1 dividing Hkv (PA-49)
    """
    q: np.ndarray
    k_pages: np.ndarray
    v_pages: np.ndarray
    kv_lens: np.ndarray
    page_indices: np.ndarray
    cu_q_lens: np.ndarray
    num_seqs: int
    sm_scale: float
    sliding_window: int | None
    soft_cap: float | None
    sinks: np.ndarray | None
    k_scale: np.float32 | np.ndarray | None   # scalar, per KV head [Hkv] or per token [P, page_size, Hkv]
    v_scale: np.float32 | np.ndarray | None
    return_scores: bool
    num_shards: int = 1


def ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                           sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                           k_scale=None, v_scale=None, return_scores=False, kv_layout="separate",
                           num_shards=1):
    """Attention of a ragged batch of query rows over a paged KV cache (PA-1 .. PA-25).

    q:            [T, Hq, D] float (any float dtype; upcast exactly)
    k_pages:      [P, page_size, Hkv, D] float, float8_e4m3fn, float8_e5m2 or int8 (PA-2, PA-18)
    v_pages:      same shape and dtype as k_pages
    kv_lens:      int[S]  total cached length of each sequence, new tokens included (PA-3)
    page_indices: int[S, pages_per_seq]  token j of sequence i is in page page_indices[i, j // page_size],
                  slot j % page_size (PA-10)
    cu_q_lens:    int[S+1]  query rows of sequence i are cu_q_lens[i] : cu_q_lens[i+1] (PA-4)
    num_seqs:     int in [0, S]; only sequences i < num_seqs count (PA-5)
    sm_scale:     float > 0, default D ** -0.5 (PA-14)
    sliding_window: int W >= 1; row at position pos sees keys in (pos - W, pos] (PA-15)
    soft_cap:     float > 0; logits become cap * tanh(s / cap) after scaling, before masking (PA-16)
    sinks:        float[Hq]; exp(sinks[h]) joins the denominator of head h only (PA-17)
    k_scale, v_scale: float32 > 0, required for quantized pages and only for them (PA-18, PA-19): a
                  scalar, float32[Hkv] per KV head, or float32[P, page_size, Hkv] per token and head (PA-48)
    return_scores: also return the per-token softmax mass (PA-21 .. PA-23)
    kv_layout:    "separate" (the shapes above), "combined" (k_pages holds kv_pages [P, page_size, 2*Hkv, D],
                  v_pages is None) or "flat" (k_pages, v_pages [P, page_size, Hkv*D]): the same cache in
                  another layout gives the same result (PA-36 .. PA-39)
    num_shards:   int n >= 1 dividing Hkv: run with the KV heads split over n devices, each with Hkv/n KV
                  heads and their query heads; the result is the unsharded one (PA-49), so this reference
                  only validates it

    Returns out: float64[T, Hq, D], or AttentionOutput(out, scores) when return_scores is True.
    Output rows t >= cu_q_lens[num_seqs] are unspecified (PA-25); this reference leaves them 0.
    """
    call = validate_ragged_paged_attention(
        q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
        sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
        return_scores=return_scores, kv_layout=kv_layout, num_shards=num_shards)
    T, Hq, D = call.q.shape
    num_slots = call.page_indices.shape[1] * call.k_pages.shape[1]
    out = np.zeros((T, Hq, D), dtype=np.float64)
    scores = np.zeros((call.kv_lens.shape[0], num_slots), dtype=np.float64) if return_scores else None
    # KV heads are independent (PA-12): a large call runs them on a thread pool with one BLAS thread
    # each (head_workers.py, for speed only: every head computes the same values either way).
    q_lens = np.diff(call.cu_q_lens[:call.num_seqs + 1])
    num_logits = int(np.dot(q_lens, call.kv_lens[:call.num_seqs])) * Hq
    head_buffers = queue.SimpleQueue()   # one Buffers per KV head in flight, reused by the next
    with head_map(num_logits, call.k_pages.shape[2]) as map_heads:
        for i in range(call.num_seqs):
            _attend_sequence(call, i, out, scores, map_heads, head_buffers)
    return AttentionOutput(out, scores) if return_scores else out


def _attend_sequence(call: AttentionCall, i: int, out: np.ndarray, scores: np.ndarray | None, map_heads,
                     head_buffers: queue.SimpleQueue) -> None:
    """Fill the output rows (and the score row) of sequence i in place; map_heads runs the KV heads, each
    with `Buffers` taken from `head_buffers` (or made) and put back for the next."""
    row0, row1 = int(call.cu_q_lens[i]), int(call.cu_q_lens[i + 1])
    q_len, kv_len = row1 - row0, int(call.kv_lens[i])
    if q_len == 0:  # PA-8: no rows, no output, no score mass
        return
    Hq, D = call.q.shape[1:]
    Hkv = call.k_pages.shape[2]
    group = Hq // Hkv
    first_pos = kv_len - q_len  # PA-6: row t sits at position first_pos + t

    # Keys before the first row's window are visible to no row of this call (PA-15): not gathered.
    lo = 0 if call.sliding_window is None else max(0, first_pos - call.sliding_window + 1)
    positions = first_pos + np.arange(q_len)
    key_pos = np.arange(lo, kv_len)
    visible = key_pos[None, :] <= positions[:, None]  # PA-7: bottom-right causal
    if call.sliding_window is not None:
        visible &= key_pos[None, :] > positions[:, None] - call.sliding_window  # PA-15

    # Row blocks bound the logits to ~_BLOCK_ELEMENTS floats per KV head in flight (one per worker of
    # head_map), so a long prefill needs bounded memory; blocks of 512 query-head rows keep the products
    # near BLAS's full rate. Rows are independent (PA-13): blocking changes no value.
    block = max(1, _BLOCK_ELEMENTS // (group * (kv_len - lo)))
    table_row = call.page_indices[i]

    def attend_kv_head(kv_head: int) -> list[np.ndarray]:
        """Fill the rows of the query heads reading kv_head; return their score mass per row block."""
        try:
            work = head_buffers.get_nowait()
        except queue.Empty:
            work = Buffers()
        # PA-12: query heads kv_head * group .. + group - 1 read this KV head; no KV head is repeated.
        # One KV head is gathered at a time: float64 keys of all heads of a 32k-token sequence would
        # take 256 MiB, and a contiguous [L, D] operand is what the matrix products read fastest.
        keys = _gather(call.k_pages, table_row, lo, kv_len, call.k_scale, kv_head,
                       work.array("keys", (kv_len - lo, D)))
        values = _gather(call.v_pages, table_row, lo, kv_len, call.v_scale, kv_head,
                         work.array("values", (kv_len - lo, D)))
        heads = slice(kv_head * group, (kv_head + 1) * group)
        sinks = None if call.sinks is None else call.sinks[heads]
        masses = []
        for t0 in range(0, q_len, block):
            t1 = min(q_len, t0 + block)
            logits = work.array("logits", (t1 - t0, group, kv_len - lo))
            out[row0 + t0:row0 + t1, heads], probs = _attend_group(
                call.q[row0 + t0:row0 + t1, heads], keys, values, visible[t0:t1],
                sinks, call, scores is not None, logits)
            if scores is not None:
                masses.append(probs.sum(axis=(0, 1)))
        head_buffers.put(work)
        return masses

    for masses in map_heads(attend_kv_head, range(Hkv)):
        for mass in masses:  # PA-21: mass per token, summed over heads and this call's rows (in head order)
            scores[i, lo:kv_len] += mass


def _attend_group(q_group, keys, values, visible, sinks, call: AttentionCall, want_probs: bool, logits):
    """Softmax attention of the query heads sharing one KV head.

    q_group: float64[q_len, G, D]; keys, values: float64[L, D]; visible: bool[q_len, L];
    sinks: float64[G] or None; logits: float64[q_len, G, L], C-contiguous, overwritten (the probabilities).
    Returns (out float64[q_len, G, D], probs float64[q_len, G, L] (= logits) or None).
    """
    q_len, group, D = q_group.shape
    # PA-14: scaling q (q_len * group * D products) instead of the logits saves a pass over them.
    scaled_q = q_group.reshape(q_len * group, D) * call.sm_scale
    np.matmul(scaled_q, keys.T, out=logits.reshape(q_len * group, -1))
    if call.soft_cap is not None:  # PA-16: tanh saturates, so huge logits stay finite
        logits /= call.soft_cap
        np.tanh(logits, out=logits)
        logits *= call.soft_cap

    # Mask by selection (never by multiplying with 0), only over the columns some row cannot see.
    hidden_cols = np.flatnonzero(~visible.all(axis=0))
    if hidden_cols.size:
        span = slice(hidden_cols[0], hidden_cols[-1] + 1)
        np.copyto(logits[:, :, span], -np.inf, where=~visible[:, None, span])

    # Every row sees at least itself (PA-9), so the row maximum is finite.
    row_max = logits.max(axis=2, keepdims=True)  # [q_len, G, 1]
    if sinks is not None:  # PA-17: the sink joins the denominator only
        row_max = np.maximum(row_max, sinks[None, :, None])
    logits -= row_max
    np.exp(logits, out=logits)  # masked entries: exp(-inf) = 0 exactly
    denom = logits.sum(axis=2, keepdims=True)
    if sinks is not None:
        denom += np.exp(sinks[None, :, None] - row_max)

    out = (logits.reshape(q_len * group, -1) @ values).reshape(q_len, group, D)
    out /= denom
    if not want_probs:
        return out, None
    logits /= denom
    return out, logits


def _gather(pages: np.ndarray, table_row: np.ndarray, lo: int, hi: int, scale, head: int, out: np.ndarray
            ) -> np.ndarray:
    """Dequantized tokens lo .. hi-1 of one sequence and one KV head (PA-10, PA-19), written into and
    returned as out: float64[hi - lo, D].

    Only the pages holding those tokens are read, and only this head's slots lo .. hi-1 are upcast.
    """
    page_size, D = pages.shape[1], pages.shape[3]
    first_page, last_page = lo // page_size, -(-hi // page_size)
    tokens = pages[table_row[first_page:last_page], :, head]  # [n, page_size, D] in the storage dtype
    start = lo - first_page * page_size
    tokens = tokens.reshape(-1, D)[start:start + (hi - lo)]
    if isinstance(scale, np.ndarray) and scale.ndim:   # per-head or per-token scales (PA-48)
        values = dtypes.upcast(tokens, out=out)
        values *= scales_of(scale, table_row, lo, hi, pages.shape[2])[:, head]
        return values
    return dtypes.upcast(tokens, scale, out=out)


# --------------------------------------------------------------------------------------------------
# Preconditions (PA-26 .. PA-30)


def _num_seqs(x, S: int) -> int:
    if isinstance(x, np.ndarray) and x.size == 1 and np.issubdtype(x.dtype, np.integer):
        x = x.reshape(())[()]  # accept the [1]-shaped device scalar some kernels take
    return int_scalar("num_seqs", x, minimum=0, maximum=S)


def validate_ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                                    sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                                    k_scale=None, v_scale=None, return_scores=False,
                                    kv_layout="separate", num_shards=1) -> AttentionCall:
    """Check every argument of `ragged_paged_attention` (PA-26 .. PA-30) and return them normalised.

    Takes the op's arguments (see `ragged_paged_attention` for their shapes). Raises ValueError, or
    TypeError for a wrong type or dtype, naming the argument and the broken rule; entries that PA-5 and
    PA-24 declare ignored are not checked (PA-30). Backends call this first, so a malformed call fails
    with the oracle's own message before any launch.
    """
    q = float_input("q", q, 3, "[T, Hq, D]")
    k_pages, v_pages = canonical_kv(k_pages, v_pages, kv_layout, max(q.shape[2], 1))   # PA-39
    k_pages, v_pages = kv_pools(k_pages, v_pages)
    T, Hq, D = q.shape
    P, page_size, Hkv, Dk = k_pages.shape
    require(Hq >= 1, f"q must have at least one head (Hq >= 1), got shape {tuple(q.shape)}")
    require(D >= 1, f"q must have head dim D >= 1, got shape {tuple(q.shape)}")
    require(page_size >= 1, f"k_pages must have page_size >= 1, got shape {tuple(k_pages.shape)}")
    require(Hkv >= 1, f"k_pages must have at least one KV head (Hkv >= 1), got shape {tuple(k_pages.shape)}")
    require(Dk == D, f"k_pages head dim must equal q head dim D={D}, got {Dk}")
    require(Hq % Hkv == 0, f"q heads Hq={Hq} must be a multiple of k_pages KV heads Hkv={Hkv} (Hq % Hkv == 0)")
    shards = int_scalar("num_shards", num_shards, minimum=1)
    require(Hkv % shards == 0, f"num_shards={shards} must divide the KV heads Hkv={Hkv} of k_pages (each shard "
                               f"takes Hkv / num_shards whole KV heads, PA-49)")

    kv_lens = int_input("kv_lens", kv_lens, 1, "[S]")
    S = kv_lens.shape[0]
    page_indices = int_input("page_indices", page_indices, 2, "[S, pages_per_seq]")
    require(page_indices.shape[0] == S,
            f"page_indices must have S={S} rows (one per kv_lens entry), got shape {tuple(page_indices.shape)}")
    cu_q_lens = int_input("cu_q_lens", cu_q_lens, 1, "[S+1]")
    check_shape("cu_q_lens", cu_q_lens, (S + 1,), "[S+1]")
    n = _num_seqs(num_seqs, S)

    # PA-4, PA-5: only the first num_seqs + 1 offsets and num_seqs sequences are read.
    require(cu_q_lens[0] == 0, f"cu_q_lens[0] must be 0, got {int(cu_q_lens[0])}")
    for i in range(n):
        require(cu_q_lens[i + 1] >= cu_q_lens[i],
                f"cu_q_lens must be non-decreasing (cu_q_lens[{i + 1}]={int(cu_q_lens[i + 1])} < "
                f"cu_q_lens[{i}]={int(cu_q_lens[i])})")
    require(cu_q_lens[n] <= T,
            f"cu_q_lens[num_seqs] must be <= T (cu_q_lens[{n}]={int(cu_q_lens[n])} > T={T}, the rows of q)")
    pages_per_seq = page_indices.shape[1]
    capacity = pages_per_seq * page_size
    for i in range(n):
        kv_len, q_len = int(kv_lens[i]), int(cu_q_lens[i + 1] - cu_q_lens[i])
        require(kv_len >= 0, f"kv_lens must be >= 0 (kv_lens[{i}]={kv_len})")
        require(q_len <= kv_len, f"q_len <= kv_len must hold for sequence {i} (q_len={q_len} from "
                                 f"cu_q_lens[{i}:{i + 2}], kv_lens[{i}]={kv_len})")
        require(kv_len <= capacity, f"kv_lens must fit the page table (kv_lens[{i}]={kv_len} > "
                                    f"pages_per_seq * page_size = {pages_per_seq} * {page_size})")
        used = -(-kv_len // page_size)
        bad = np.flatnonzero((page_indices[i, :used] < 0) | (page_indices[i, :used] >= P))
        if bad.size:
            raise ValueError(f"page_indices[{i},{bad[0]}]={int(page_indices[i, bad[0]])} is out of range "
                             f"[0, P={P}) (page {bad[0]} of sequence {i} is in use: kv_lens[{i}]={kv_len})")

    sm = D ** -0.5 if sm_scale is None else positive_float("sm_scale", sm_scale)
    window = None if sliding_window is None else int_scalar("sliding_window", sliding_window, minimum=1)
    cap = None if soft_cap is None else positive_float("soft_cap", soft_cap)
    if sinks is not None:
        sinks = float_input("sinks", sinks)
        check_shape("sinks", sinks, (Hq,), "[Hq]")
        bad = np.flatnonzero(np.isnan(sinks) | (sinks == np.inf))
        if bad.size:
            raise ValueError(f"sinks must be finite or -inf (sinks[{bad[0]}]={sinks[bad[0]]})")
    if not isinstance(return_scores, (bool, np.bool_)):
        raise TypeError(f"return_scores must be a bool, got {type(return_scores).__name__}")
    # PA-18; this op's rejection message also lists the quantized dtypes.
    hint = "; scales apply to float8_e4m3fn, float8_e5m2 and int8 pages only"
    k_scale = kv_scale("k_scale", k_scale, "k_pages", k_pages, hint=hint)
    v_scale = kv_scale("v_scale", v_scale, "v_pages", v_pages, hint=hint)
    for i in range(n):   # PA-48: per-token scales are checked where a counted row's visible key reads them
        kv_len, q_len = int(kv_lens[i]), int(cu_q_lens[i + 1] - cu_q_lens[i])
        if q_len:
            lo = 0 if window is None else max(0, kv_len - q_len - window + 1)
            check_token_scales("k_scale", k_scale, page_indices[i], lo, kv_len)
            check_token_scales("v_scale", v_scale, page_indices[i], lo, kv_len)
    return AttentionCall(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, n, float(sm), window, cap,
                         sinks, k_scale, v_scale, bool(return_scores), shards)

