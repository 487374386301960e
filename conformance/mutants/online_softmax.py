"""Online-softmax bugs that need a long key loop AND extreme logits past its first tile (spec/numerics.md NU-15
"crossed"): each is exact on short sequences (one tile) and on long ones with ordinary logits, and overflows
float32 only when a later tile's logits exceed the first tile's by more than exp's range, so only the crossed
columns `reach_keys_crossed_<regime>` (strategies/dimension_reach.py `crossed_columns`) catch it.

A kernel keeps a running max m, a sum l and an accumulator per row and head, and computes p = exp(s - m) in
float32 (FlashAttention's online softmax; vLLM's triton_unified_attention.py, the Triton decode kernels).
Softmax with ANY offset m is exact in real arithmetic; a wrong m only shows when exp(s - m) passes float32's
largest value (s - m > 88.72): the row becomes inf / inf = NaN. These mutants therefore return the
reference's result with NaN in the rows and heads where the buggy kernel's float32 exp overflows (where it
does not, the buggy kernel's output equals the correct one up to rounding).
"""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.paged_attention import AttentionCall, _gather

from . import Mutant, mutant
from .edits import filled

#: the largest x whose float32 exp(x) is finite (log(float32 max) = 88.7228...)
EXP_LIMIT = float(np.log(np.finfo(np.float32).max))
#: the first KV tile of FirstTileMax (Triton BLOCK_N of decode kernels: 16 .. 128)
FIRST_TILE = 64
#: keys per split of a split-KV (flash-decoding) kernel: vLLM's paged_attention_v2 PARTITION_SIZE is 512,
#: the Triton decode kernels split into a few partitions of a long context; 256 keeps the proof cheap
PARTITION = 256


def row_logits(call: AttentionCall, i: int) -> tuple[np.ndarray, int]:
    """(s float64[q_len, Hq, L], lo): the logits of sequence i's query rows over its keys lo .. kv_len - 1
    (lo: the first key any row's window reaches), after sm_scale and the soft cap (PA-14, PA-16), -inf where
    the row cannot see the key (PA-7, PA-15)."""
    row0, row1 = int(call.cu_q_lens[i]), int(call.cu_q_lens[i + 1])
    q_len, kv_len = row1 - row0, int(call.kv_lens[i])
    first_pos = kv_len - q_len
    window = call.sliding_window
    lo = 0 if window is None else max(0, first_pos - window + 1)
    Hq, D = call.q.shape[1:]
    Hkv = call.k_pages.shape[2]
    group = Hq // Hkv
    s = np.empty((q_len, Hq, kv_len - lo))
    for h in range(Hkv):
        keys = _gather(call.k_pages, call.page_indices[i], lo, kv_len, call.k_scale, h, np.empty((kv_len - lo, D)))
        heads = slice(h * group, (h + 1) * group)
        s[:, heads] = np.einsum("thd,jd->thj", call.q[row0:row1, heads] * call.sm_scale, keys)
    if call.soft_cap is not None:
        s = call.soft_cap * np.tanh(s / call.soft_cap)
    pos = first_pos + np.arange(q_len)[:, None]
    key = lo + np.arange(kv_len - lo)[None, :]
    visible = key <= pos
    if window is not None:
        visible &= key > pos - window
    return np.where(visible[:, None, :], s, -np.inf), lo


def overflowing_rows(call: AttentionCall, overflows) -> list[tuple[int, int]]:
    """(row, head) of every counted query row and head for which `overflows(s, key0, sink)` is True: s
    float64[L] the row's logits over keys key0 .. (-inf where hidden), sink the head's sink logit or None."""
    found = []
    for i in range(call.num_seqs):
        row0 = int(call.cu_q_lens[i])
        if int(call.cu_q_lens[i + 1]) == row0:
            continue
        s, lo = row_logits(call, i)
        for t in range(s.shape[0]):
            for h in range(s.shape[1]):
                sink = None if call.sinks is None or not np.isfinite(call.sinks[h]) else float(call.sinks[h])
                if overflows(s[t, h], lo, sink):
                    found.append((row0 + t, h))
    return found


def first_tile_max_overflows(s: np.ndarray, key0: int, sink) -> bool:
    """The running max is taken from the first KV tile the row's loop visits (the FIRST_TILE-aligned tile
    holding its first visible key; the sink joins it, as kernels that start m at the sink) and never
    updated: exp(s - m) overflows where a later logit exceeds it by more than EXP_LIMIT."""
    seen = np.flatnonzero(np.isfinite(s))
    start = (key0 + int(seen[0])) // FIRST_TILE * FIRST_TILE - key0
    m = np.max(s[max(0, start):start + FIRST_TILE])
    if sink is not None:
        m = max(m, sink)
    return bool(np.max(s) - m > EXP_LIMIT)


def unshifted_combine_overflows(s: np.ndarray, key0: int, sink) -> bool:
    """A split-KV kernel whose combine weighs the partial results of PARTITION-key splits by exp(lse_p) in
    float32 without subtracting the largest lse (and adds exp(sink) the same way): with two or more splits
    holding visible keys the weights overflow past EXP_LIMIT (inf / inf) or all underflow to 0 (0 / 0); one
    split needs no combine."""
    key = key0 + np.arange(s.shape[0])
    lse = []
    for p in np.unique(key // PARTITION):
        part = s[key // PARTITION == p]
        if np.isfinite(part).any():
            top = np.max(part)
            lse.append(top + np.log(np.sum(np.exp(part - top))))
    if len(lse) < 2:
        return False
    with np.errstate(over="ignore"):
        weights = np.exp(np.array(lse + ([sink] if sink is not None else []), dtype=np.float32))
    return bool(not np.isfinite(weights).all() or weights.sum(dtype=np.float32) == 0)


def _poisoned(result, call: AttentionCall, overflows):
    return filled(result, overflowing_rows(call, overflows), np.nan)


def _attention_poisoned(overflows, *args, **kw):
    """ragged_paged_attention's reference result with NaN where `overflows` says the buggy kernel's exp
    overflows (the call validated first, as a kernel's adapter does)."""
    result = reference.ragged_paged_attention(*args, **kw)
    call = reference.validate_ragged_paged_attention(*args, **{k: v for k, v in kw.items() if k != "return_scores"})
    return _poisoned(result, call, overflows)


@mutant(op="ragged_paged_attention", clause="PA-14", only_caught_by="_crossed_", max_size=12,
        description=f"the running max of the online softmax is the first {FIRST_TILE}-key tile's, never updated: "
                    "exp(s - m) overflows float32 once a later tile's logits pass it by more than 88.7")
class FirstTileMax(Mutant):
    def ragged_paged_attention(self, *args, **kw):
        return _attention_poisoned(first_tile_max_overflows, *args, **kw)


@mutant(op="ragged_paged_attention", clause="PA-14", only_caught_by="_crossed_", max_size=12,
        description=f"split-KV over {PARTITION}-key splits whose combine weighs each split by exp(lse) in float32 "
                    "without subtracting the largest lse: inf / inf once a split's logits pass 88.7")
class SplitCombineUnshifted(Mutant):
    def ragged_paged_attention(self, *args, **kw):
        return _attention_poisoned(unshifted_combine_overflows, *args, **kw)


@mutant(op="mla_paged_attention", clause="ML-4", only_caught_by="_crossed_", max_size=12,
        description=f"absorbed MLA whose online softmax takes its running max from the first {FIRST_TILE}-key "
                    "tile only: NaN rows once a later tile's logits pass it by more than 88.7")
class MlaFirstTileMax(Mutant):
    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, *args, **kw):
        result = reference.mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, *args, **kw)
        call = reference.validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, *args, **kw)
        return _poisoned(result, call.attention, first_tile_max_overflows)


@mutant(op="ragged_paged_attention_csr", clause="MD-23", only_caught_by="_crossed_", max_size=12,
        description=f"CSR attention whose online softmax takes its running max from the first {FIRST_TILE}-key "
                    "tile only: NaN rows once a later tile's logits pass it by more than 88.7")
class CsrFirstTileMax(Mutant):
    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   **kw):
        result = reference.ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices,
                                                      kv_last_page_len, **kw)
        P = int(np.shape(k_pages)[1])
        indptr = np.asarray(kv_indptr)
        S = indptr.shape[0] - 1
        table = reference.csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, P,
                                             max(1, int(np.diff(indptr).max()) if S else 1))
        opts = {k: v for k, v in kw.items() if k != "return_scores"}
        call = reference.validate_ragged_paged_attention(q, k_pages, v_pages, table.kv_lens, table.page_indices,
                                                         qo_indptr, S, **opts)
        return _poisoned(result, call, first_tile_max_overflows)
