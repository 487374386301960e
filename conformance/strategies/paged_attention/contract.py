"""The paged-attention family's comparison contract (spec/numerics.md NU-PA*): which fields and rows are\ncompared, in which class."""
from __future__ import annotations

import math

import numpy as np

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from .columns import QUANT_KV_DTYPES
from .inputs import canonical_inputs

#: NU-PA2: scores feed eviction's float64 accumulation; they are sums of float32 probabilities
SCORES_PRECISION = "float32"


def required_out_precision(x: dict) -> str:
    """NU-3 / NU-PA1: `out` must hold at least the precision of q (a wider dtype is allowed, and is
    judged with the same bound: tolerance never follows the returned dtype)."""
    return dtypes.dtype_name(x["q"].dtype)


def _sequence_bounds(x: dict, i: int):
    """(V_i, S_i, n_i) of spec/numerics.md "Paged attention", over the keys some row of sequence i sees."""
    kv_len = int(x["kv_lens"][i])
    q_len = int(x["cu_q_lens"][i + 1] - x["cu_q_lens"][i])
    window = x.get("sliding_window")
    n_i = kv_len if window is None else min(kv_len, int(window))
    if q_len == 0 or kv_len == 0:
        return 0.0, 0.0, n_i
    page_size = x["k_pages"].shape[1]
    first = kv_len - q_len                       # position of row 0 (PA-6)
    lo = 0 if window is None else max(0, first - int(window) + 1)
    tokens = np.arange(lo, kv_len)
    where = (x["page_indices"][i, tokens // page_size], tokens % page_size)
    k = np.abs(dequantized(x["k_pages"], x.get("k_scale"), where))          # [n, Hkv, D]
    v = dequantized(x["v_pages"], x.get("v_scale"), where)
    q = np.abs(dtypes.upcast(x["q"][x["cu_q_lens"][i]:x["cu_q_lens"][i + 1]]))  # [q_len, Hq, D]
    group = q.shape[1] // k.shape[1]
    # sum_d |q||k| per query head h and the KV head h // group, without repeating k per query head (128
    # copies of every key at MLA's one KV head: gigabytes at thousands of keys)
    dots = np.einsum("tkgd,jkd->tkgj", q.reshape(q.shape[0], k.shape[1], group, q.shape[2]), k,
                     optimize=True).reshape(q.shape[0], q.shape[1], k.shape[0])
    pos = first + np.arange(q_len)[:, None]
    visible = (tokens[None, :] <= pos) & (True if window is None else tokens[None, :] > pos - int(window))
    sm = x.get("sm_scale") or x["q"].shape[2] ** -0.5
    S_i = float(sm * np.max(np.where(visible[:, None, :], dots, 0.0)))
    return float(np.max(np.abs(v))), S_i, n_i


def dequantized(pages: np.ndarray, scale, where) -> np.ndarray:
    """float64 values of the tokens at `where` = (pages, slots), with a scalar, per-head or per-token
    scale (PA-19, PA-48)."""
    values = dtypes.upcast(pages[where])
    if scale is None:
        return values
    if np.ndim(scale) == 0:
        return values * np.float64(np.float32(scale))
    scale = np.asarray(scale, np.float64)
    return values * (scale[None, :, None] if scale.ndim == 1 else scale[where][:, :, None])


def attention_checks(case: Case, expected: dict, actual: dict) -> dict:
    """NU-PA1 for `out` (valid rows only, PA-25), NU-PA2 for `scores` (j < kv_len_i, i < num_seqs), and
    exact zeros elsewhere in `scores` (PA-23)."""
    x = canonical_inputs(case.inputs)
    n = int(x["num_seqs"])
    cu = np.asarray(x["cu_q_lens"])
    q_dtype = dtypes.dtype_name(x["q"].dtype)
    kv_dtype = dtypes.dtype_name(x["k_pages"].dtype)
    u_acc, u_cmp = tolerance.U_ACC, tolerance.u(q_dtype)
    wider = kv_dtype not in QUANT_KV_DTYPES and tolerance.eps(kv_dtype) < tolerance.eps(q_dtype)
    u_kv = u_cmp if kv_dtype in QUANT_KV_DTYPES or wider else 0.0
    D = x["q"].shape[2]
    c = 8.0
    out_dtype = required_out_precision(x)
    u_out = tolerance.u(out_dtype)
    atol = np.zeros(expected["out"].shape[0])
    rows = np.zeros(expected["out"].shape, dtype=bool)
    score_rtol = np.zeros(expected["scores"].shape) if "scores" in expected else None
    score_atol = np.zeros_like(score_rtol) if score_rtol is not None else None
    for i in range(n):
        V, S, n_i = _sequence_bounds(x, i)
        E = S * (2 * u_kv + (c * math.sqrt(D) + 2) * u_acc)
        if x.get("soft_cap"):
            E += 4 * u_acc * float(x["soft_cap"])
        atol[cu[i]:cu[i + 1]] = V * (2 * E + 2 * u_cmp + u_kv + c * math.sqrt(n_i) * u_acc + 4 * u_acc)
        rows[cu[i]:cu[i + 1]] = True
        if score_rtol is not None:
            R = x["q"].shape[1] * int(cu[i + 1] - cu[i])
            u_s = tolerance.u(SCORES_PRECISION)
            score_rtol[i] = 2 * E + 2 * u_cmp + c * (math.sqrt(n_i) + math.sqrt(R)) * u_acc + 2 * u_s
            score_atol[i] = R * 2.0 ** -126
    checks = {"out": (tolerance.reduction(out_dtype, atol[:, None, None], 2 * u_out,
                                          f"NU-PA1: out {out_dtype}, q {q_dtype}, KV {kv_dtype}"), rows)}
    if score_rtol is not None:
        mask = np.zeros(expected["scores"].shape, dtype=bool)
        kv_lens = np.asarray(x["kv_lens"])
        for i in range(n):
            if cu[i + 1] > cu[i]:
                mask[i, :kv_lens[i]] = True
        s_dtype = SCORES_PRECISION
        checks["scores"] = (tolerance.reduction(s_dtype, score_atol, score_rtol, "NU-PA2"), mask)
        checks["scores:zeros"] = (tolerance.ulp_bounded(s_dtype, 0, 0.0, "PA-23: exactly 0"), ~mask)
    return checks


def write_kv_checks(case: Case, expected: dict, actual: dict) -> dict:
    """Both pools exact, bit for bit (class E): stored values (PA-43, PA-44) and untouched rest (PA-45)."""
    return {name: (tolerance.exact(), None) for name in expected}
