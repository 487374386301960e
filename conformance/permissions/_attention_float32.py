"""Paged attention the way a float32 kernel computes it, with each latitude of PA-19 and NU-PA1 a switch.

`attend(call, compute, how)` takes a validated `AttentionCall` (the reference's, so layouts, CSR tables
and MLA's equivalent call arrive canonical) and computes every counted row in float32 arithmetic:

- operands: q in its own dtype (`compute`, the dtype in which a kernel may hold matmul operands, NU-3
  `u_cmp`); K/V dequantized as `fl32(stored * scale)` and, with `how.kv_rounded`, rounded to `compute`
  when the pages are quantized or wider than q (PA-19, NU-PA1 `u_kv`); with `how.fold_scales` the stored
  values are the operands and `fl32(sm_scale * k_scale)` scales the logits, `v_scale` the output (PA-19);
- every product rounded to float32 and every sum a float32 sum in `how.order`: "blas" (float32 matrix
  products, the library's blocked order), "forward" or "reverse" (sequential, one rounding per term: the
  largest error growth a sum of n terms has on average), or
  "split" (split-KV / online softmax over blocks of `how.block` keys: float32 partial maxima, sums and
  outputs, rescaled by float32 `exp` when combined, as flash-decoding kernels do);
- probabilities rounded to `compute` before the PV product with `how.probs_rounded`, the denominator summed
  from the unrounded ones (NU-PA1's `2 * u_cmp * V` term); probabilities below 2^-126 flushed to zero with
  `how.flush` (NU-PA2);
- the output rounded to float32, then to the required precision (q's dtype, NU-3) when `how.narrow_out`.

Returns (out [T, Hq, D] in q's dtype (float64 for float64 q), scores float32[S, slots] or None); padding
rows (PA-25) hold `how.padding` (NaN for the permission that writes garbage there, else 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from kvconform.reference import dtypes
from kvconform.reference.page_pools import scales_of

F32 = np.float32
_TINY = np.finfo(np.float32).tiny     # 2^-126


@dataclass(frozen=True)
class How:
    kv_rounded: bool = False      # K/V in the compute dtype (PA-19)
    fold_scales: bool = False     # k_scale into the logits, v_scale into the output (PA-19)
    probs_rounded: bool = False   # p in the compute dtype before PV (NU-PA1)
    order: str = "blas"           # "blas", "forward", "reverse" or "split"
    block: int = 16               # keys per split ("split")
    flush: bool = False           # probabilities below 2^-126 -> 0 (NU-PA2)
    narrow_out: bool = True       # output in the required precision, q's dtype (NU-3)
    padding: float = 0.0          # value of padding output rows (PA-25)


def _eps(dtype) -> float:
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps)


def _rounded(x: np.ndarray, dtype) -> np.ndarray:
    """float64 values rounded to float32, then to `dtype` (a float32 result stored narrower), as float64."""
    return x.astype(F32).astype(np.dtype(dtype)).astype(np.float64)


def _sum32(x: np.ndarray, axis: int, order: str) -> np.ndarray:
    """float32 sum along `axis`: pairwise ("blas"), or sequential with one rounding per term, first to last
    ("forward") or last to first ("reverse")."""
    x = x.astype(F32)
    if order == "blas":
        return np.sum(x, axis=axis, dtype=F32)
    if order == "reverse":
        x = np.flip(x, axis=axis)
    if x.shape[axis] == 0:
        return np.zeros(np.delete(x.shape, axis), F32)
    return np.take(np.cumsum(x, axis=axis, dtype=F32), -1, axis=axis)


_BLOCK_ELEMENTS = 1 << 22     # products formed at once (32 MiB of float64): real-size calls stay bounded


def _dot32(a: np.ndarray, b: np.ndarray, order: str) -> np.ndarray:
    """a [..., D] . b [L, D] -> [..., L]: products rounded to float32, summed sequentially in float32
    (rows of b in blocks, so that the products of a long sequence never exist all at once)."""
    if order == "blas":     # float32 operands, float32 accumulation in the library's order
        return np.matmul(a.astype(F32), b.T.astype(F32))
    order = "reverse" if order == "reverse" else "forward"
    step = max(1, _BLOCK_ELEMENTS // max(1, a.size))
    out = np.empty(a.shape[:-1] + (b.shape[0],), F32)
    for j in range(0, b.shape[0], step):
        prods = (a[..., None, :] * b[j:j + step]).astype(F32)   # exact float64 products of float32 operands
        out[..., j:j + step] = _sum32(prods, -1, order)
    return out


def attend(call, compute, how: How):
    """call: kvconform.reference.paged_attention.AttentionCall; compute: q's dtype (np.dtype)."""
    compute = np.dtype(compute)
    T, Hq, D = call.q.shape
    Hkv = call.k_pages.shape[2]
    group = Hq // Hkv
    kv_dtype = call.k_pages.dtype
    quantized = dtypes.is_quantized_dtype(kv_dtype)
    wider = not quantized and _eps(kv_dtype) < _eps(compute)
    round_kv = how.kv_rounded and (quantized or wider)
    fold = how.fold_scales and quantized
    out = np.full((T, Hq, D), how.padding, np.float64)
    slots = call.page_indices.shape[1] * call.k_pages.shape[1]
    scores = np.zeros((call.kv_lens.shape[0], slots), F32) if call.return_scores else None
    sm = F32(call.sm_scale)
    for i in range(call.num_seqs):
        r0, r1 = int(call.cu_q_lens[i]), int(call.cu_q_lens[i + 1])
        q_len, kv_len = r1 - r0, int(call.kv_lens[i])
        if q_len == 0:
            continue
        first = kv_len - q_len
        lo = 0 if call.sliding_window is None else max(0, first - call.sliding_window + 1)
        pos = first + np.arange(q_len)
        key_pos = np.arange(lo, kv_len)
        visible = key_pos[None, :] <= pos[:, None]
        if call.sliding_window is not None:
            visible &= key_pos[None, :] > pos[:, None] - call.sliding_window
        row = call.page_indices[i]
        mass = np.zeros(kv_len - lo, F32)
        for h in range(Hkv):
            heads = slice(h * group, (h + 1) * group)
            k_stored, k_scale = _gather(call.k_pages, row, lo, kv_len, call.k_scale, h)
            v_stored, v_scale = _gather(call.v_pages, row, lo, kv_len, call.v_scale, h)
            q = call.q[r0:r1, heads]                                    # [q_len, G, D], q's own values
            if fold:
                logit_scale = (sm * k_scale).astype(F32)                # fl32(sm_scale * k_scale) per key
                keys, values = k_stored, v_stored
            else:
                logit_scale = np.full(kv_len - lo, sm, F32)
                keys = _dequantized(k_stored, k_scale, compute if round_kv else None)
                values = _dequantized(v_stored, v_scale, compute if round_kv else None)
            s = (_dot32(q, keys, how.order) * logit_scale).astype(F32)  # [q_len, G, L]
            if call.soft_cap is not None:
                cap = F32(call.soft_cap)
                s = (cap * np.tanh((s / cap).astype(F32))).astype(F32)
            s = np.where(visible[:, None, :], s, F32(-np.inf))
            sinks = None if call.sinks is None else call.sinks[heads].astype(F32)
            v_weight = v_scale.astype(F32) if fold else None
            o, p = _softmax_pv(s, values, sinks, v_weight, compute, how)
            out[r0:r1, heads] = _rounded(o, compute) if how.narrow_out else o.astype(np.float64)
            if scores is not None:
                mass = (mass + _sum32(_sum32(p, 0, how.order), 0, how.order)).astype(F32)
        if scores is not None:
            scores[i, lo:kv_len] = mass
    if not how.narrow_out:
        return out.astype(F32) if compute.itemsize <= 4 else out, scores
    return out.astype(compute), scores


def _gather(pages, row, lo: int, hi: int, scale, head: int):
    """Stored values of tokens lo .. hi-1 of one KV head as float64 [L, D] (exact) and their float32
    scale per token [L] (1 for float pages)."""
    page_size, D = pages.shape[1], pages.shape[3]
    first, last = lo // page_size, -(-hi // page_size)
    tokens = pages[row[first:last], :, head].reshape(-1, D)
    start = lo - first * page_size
    stored = dtypes.upcast(tokens[start:start + hi - lo])
    if scale is None:
        return stored, np.ones(hi - lo, F32)
    per = scales_of(scale, row, lo, hi, pages.shape[2])
    if np.ndim(per) == 0:
        return stored, np.full(hi - lo, F32(per), F32)
    per = np.broadcast_to(np.asarray(per)[:, head, 0], (hi - lo,))
    return stored, per.astype(F32)


def _dequantized(stored, scale, compute):
    """fl32(stored * scale) [L, D] (PA-19), rounded to `compute` when given."""
    values = (stored * scale.astype(np.float64)[:, None]).astype(F32).astype(np.float64)
    return values if compute is None else values.astype(compute).astype(np.float64)


def _softmax_pv(s, values, sinks, v_weight, compute, how: How):
    """Softmax of float32 logits s [R, G, L] (masked entries -inf) with sinks [G], times values [L, D].

    Returns (out float32 [R, G, D], probabilities float32 [R, G, L] for the scores)."""
    if how.order == "split":
        return _online(s, values, sinks, v_weight, compute, how)
    m = s.max(axis=2, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, sinks[None, :, None])
    e = np.exp((s - m).astype(F32)).astype(F32)
    denom = _sum32(e, 2, how.order)
    if sinks is not None:
        denom = (denom + np.exp((sinks[None, :] - m[..., 0]).astype(F32))).astype(F32)
    w = e if v_weight is None else (e * v_weight).astype(F32)
    pv = _rounded(w, compute) if how.probs_rounded else w.astype(np.float64)
    acc = _dot32(pv, values.T, how.order)                   # [R, G, D]: sum over the keys
    out = (acc / denom[..., None]).astype(F32)
    return out, _probs(e, denom, how)


def _probs(e, denom, how: How):
    p = (e / denom[..., None]).astype(F32)
    return np.where(p < _TINY, F32(0), p) if how.flush else p


def _online(s, values, sinks, v_weight, compute, how: How):
    """Split-KV: each block of `how.block` keys gets its own float32 max, sum and output; the blocks are
    combined last to first (flash-decoding's reduction), each rescaled by float32 exp(m_b - m)."""
    R, G, L = s.shape
    D = values.shape[1]
    starts = list(range(0, L, how.block))[::-1]
    m = np.full((R, G), -np.inf, F32) if sinks is None else np.broadcast_to(sinks[None, :], (R, G)).astype(F32)
    l = np.zeros((R, G), F32) if sinks is None else np.ones((R, G), F32)   # exp(sink - sink) = 1
    acc = np.zeros((R, G, D), F32)
    for b0 in starts:
        sb = s[:, :, b0:b0 + how.block]
        mb = sb.max(axis=2)
        new = np.maximum(m, mb)
        live = np.isfinite(new)
        safe = np.where(live, new, F32(0))
        alpha = np.where(np.isfinite(m), np.exp((m - safe).astype(F32)), F32(0)).astype(F32)
        e = np.exp((sb - safe[..., None]).astype(F32)).astype(F32)
        w = e if v_weight is None else (e * v_weight[b0:b0 + how.block]).astype(F32)
        pv = _rounded(w, compute) if how.probs_rounded else w.astype(np.float64)
        l = (l * alpha + _sum32(e, 2, "forward")).astype(F32)
        acc = (acc * alpha[..., None] + _dot32(pv, values[b0:b0 + how.block].T, "forward")).astype(F32)
        m = np.where(live, new, m).astype(F32)
    out = (acc / l[..., None]).astype(F32)
    e_all = np.exp((s - m[..., None]).astype(F32)).astype(F32)
    return out, _probs(e_all, l, how)
