"""An independent formulation of the gated delta rule, written from the paper's equations (not a test
module): Yang, Kautz and Hatamizadeh, "Gated Delta Networks" (arXiv:2412.06464), which keeps the state
as S^T, shape [V, K], and writes one token as

    S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T,      o_t = S_t q_t

with alpha_t = exp(g_t). Plain Python loops over sequences, tokens and heads, explicit identity matrix
and outer products, the [V, K] layout: it shares no code and no operation order with
kvconform.reference.recurrent.gated_delta (which decays, takes a delta, writes, in [K, V], and uses a
chunked WY form), so agreement between the two checks the reference's equations (spec RS-30, RS-33).
"""
from __future__ import annotations

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.dot(x, x) + 1e-6)


def paper_scan(q, k, v, g, beta, state, cu_seqlens, state_indices, has_initial_state, *, scale=None,
               use_qk_l2norm=False):
    """Token-by-token GDN over packed sequences. Returns (out [T, H, V], {slot: final state [H, K, V]})."""
    q, k, v, g, beta = (np.asarray(a, np.float64) for a in (q, k, v, g, beta))
    tokens, heads, dv = v.shape
    qk_heads, dk = q.shape[1], q.shape[2]
    scale = dk ** -0.5 if scale is None else scale
    eye = np.eye(dk)
    out = np.zeros((tokens, heads, dv))
    finals = {}
    for s, slot in enumerate(state_indices):
        if slot < 0:
            continue
        lo, hi = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        # Paper layout: S^T [V, K] per head.
        St = [np.asarray(state[slot, h], np.float64).T.copy() if has_initial_state[s] else np.zeros((dv, dk))
              for h in range(heads)]
        for t in range(lo, hi):
            for h in range(heads):
                j = h // (heads // qk_heads)
                kt, qt = k[t, j], q[t, j]
                if use_qk_l2norm:
                    kt, qt = _unit(kt), _unit(qt)
                alpha = np.exp(g[t, h])
                transition = alpha * (eye - beta[t, h] * np.outer(kt, kt))
                St[h] = St[h] @ transition + beta[t, h] * np.outer(v[t, h], kt)
                out[t, h] = scale * (St[h] @ qt)
        finals[int(slot)] = np.stack([S.T for S in St])
    return out, finals
