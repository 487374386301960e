"""The MLA reference (reference/mla.py) against spec/mla.md, independently of the paged-attention code it
reuses: a per-row loop written from ML-3 .. ML-6, and ML-8 in its general form (W_UK, W_UV not square).
Both sides are float64 on identical inputs, so only summation order differs (TIGHT, as in
test_paged_attention_properties.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kvconform.reference import mla_paged_attention, ragged_paged_attention

TIGHT = dict(rtol=1e-12, atol=1e-12)


def _batch(rng, *, H=3, d_c=5, d_r=2, page_size=2):
    """Three sequences (decode, prefill chunk with context, empty) on shuffled pages, NaN in unused slots."""
    kv_lens, q_lens = [5, 6, 3], [1, 3, 0]
    used = [-(-n // page_size) for n in kv_lens]
    P = sum(used) + 1
    perm = rng.permutation(P)
    table = np.zeros((3, max(used)), np.int32)
    c = np.full((P, page_size, d_c), np.nan)
    r = np.full((P, page_size, d_r), np.nan)
    at = 0
    for i, (n, u) in enumerate(zip(kv_lens, used)):
        table[i, :u] = perm[at:at + u]
        at += u
        for j in range(n):
            c[table[i, j // page_size], j % page_size] = rng.standard_normal(d_c)
            r[table[i, j // page_size], j % page_size] = rng.standard_normal(d_r)
    T = sum(q_lens)
    return dict(q_nope=rng.standard_normal((T, H, d_c)), q_pe=rng.standard_normal((T, H, d_r)), c_kv_pages=c,
                k_pe_pages=r, kv_lens=np.array(kv_lens), page_indices=table,
                cu_q_lens=np.concatenate([[0], np.cumsum(q_lens)]), num_seqs=3)


def _loop(x, *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None):
    """ML-3 .. ML-6 written out per row and head."""
    out = np.zeros(x["q_nope"].shape)
    d_c, d_r = x["q_nope"].shape[2], x["q_pe"].shape[2]
    scale = (d_c + d_r) ** -0.5 if sm_scale is None else sm_scale
    ps = x["c_kv_pages"].shape[1]
    for i in range(x["num_seqs"]):
        q0, q1, kv = int(x["cu_q_lens"][i]), int(x["cu_q_lens"][i + 1]), int(x["kv_lens"][i])
        for t in range(q0, q1):
            pos = kv - (q1 - q0) + (t - q0)
            keys = [j for j in range(pos + 1) if sliding_window is None or j > pos - sliding_window]
            for h in range(out.shape[1]):
                logits, latents = [], []
                for j in keys:
                    page, slot = x["page_indices"][i, j // ps], j % ps
                    c, r = x["c_kv_pages"][page, slot], x["k_pe_pages"][page, slot]
                    s = scale * (x["q_nope"][t, h] @ c + x["q_pe"][t, h] @ r)
                    logits.append(s if soft_cap is None else soft_cap * math.tanh(s / soft_cap))
                    latents.append(c)
                top = max(logits + ([sinks[h]] if sinks is not None else []))
                w = [math.exp(s - top) for s in logits]
                denom = sum(w) + (math.exp(sinks[h] - top) if sinks is not None else 0.0)
                out[t, h] = sum(wj * c for wj, c in zip(w, latents)) / denom
    return out


@pytest.mark.parametrize("options", [{}, dict(sm_scale=0.7), dict(sliding_window=2, soft_cap=1.5),
                                     dict(sinks=np.array([0.3, -np.inf, 2.0]), sliding_window=4)])
def test_reference_equals_the_clauses_written_out(options):
    x = _batch(np.random.default_rng(len(options)))
    np.testing.assert_allclose(mla_paged_attention(**x, **options), _loop(x, **options), **TIGHT)


def test_equals_multi_head_attention_after_up_projection():
    """ML-8 with W_UK [d_c, d_n], W_UV [d_c, d_v], d_n = 4 and d_v = 3 both != d_c = 5."""
    rng = np.random.default_rng(8)
    x = _batch(rng)
    T, H, d_c = x["q_nope"].shape
    d_n, d_v, d_r = 4, 3, x["q_pe"].shape[2]
    w_uk, w_uv = rng.standard_normal((H, d_c, d_n)), rng.standard_normal((H, d_c, d_v))
    q_orig = rng.standard_normal((T, H, d_n))
    x["q_nope"] = np.einsum("thn,hcn->thc", q_orig, w_uk)                # q_nope = q_orig W_UK^T
    c, r = x["c_kv_pages"], x["k_pe_pages"]
    keys = np.concatenate([np.einsum("psc,hcn->pshn", c, w_uk), np.repeat(r[:, :, None, :], H, axis=2)], axis=3)
    values = np.einsum("psc,hcv->pshv", c, w_uv)
    values = np.concatenate([values, np.zeros(values.shape[:3] + (d_n + d_r - d_v,))], axis=3)
    opts = dict(sm_scale=(d_n + d_r) ** -0.5, sliding_window=3, soft_cap=4.0, sinks=np.array([0.0, 1.0, -1.0]))
    mha = ragged_paged_attention(np.concatenate([q_orig, x["q_pe"]], axis=2), keys, values, x["kv_lens"],
                                 x["page_indices"], x["cu_q_lens"], x["num_seqs"], **opts)[:, :, :d_v]
    latent = np.einsum("thc,hcv->thv", mla_paged_attention(**x, **opts), w_uv)   # out W_UV
    np.testing.assert_allclose(latent, mha, **TIGHT)


@pytest.mark.parametrize("argument", ["q_nope", "q_pe", "c_kv_pages", "k_pe_pages"])
def test_a_0d_input_is_a_rank_error_naming_it(argument):
    """ML-9: the rank of each float input is checked before it is sliced (a 0-d `q_nope` or `k_pe_pages`
    raised IndexError)."""
    x = dict(_batch(np.random.default_rng(0)), **{argument: np.float32(1.0)})
    with pytest.raises(ValueError, match=rf"^{argument} must have rank 3 \[.*\], got shape \(\)$"):
        mla_paged_attention(**x)
