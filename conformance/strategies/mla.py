"""Strategies and comparison contract for latent paged attention (spec/mla.md, op `mla_paged_attention`).

An MLA case is drawn as its equivalent paged-attention case (ML-4): `paged_attention.attention_cases`
with one KV head and head dim `d_c + d_r`, whose query and key split into the latent and RoPE parts
(the values are dropped: MLA's values are the latent keys). So the ragged batch, the shuffled page
table, the options and every poison region (ML-7) come from the paged-attention strategy, and the
tolerance is NU-PA1 of that same call (ML-10).

Claims read: dtypes, kv_dtypes (float pools only), page_sizes, head_dims (the latent dims d_c),
features (sliding_window, soft_cap, sinks) and the limits registered for the op in backends/base.py.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform.backends.base import LIMITS, OpClaims

from kvconform.conformance.engine import strided
from kvconform.conformance.engine.case import Case
from .variations import widened, without
from . import constraints, goldens
from . import dimension_reach as dr
from . import paged_attention as pa
from .paged_attention import Variant
from .values import pick

OP = "mla_paged_attention"
VARIANTS = (
    Variant("base", (), ("ML-1", "ML-2", "ML-3", "ML-4", "ML-5")),
    Variant("sliding_window", ("sliding_window",), ("ML-6",)),
    Variant("soft_cap", ("soft_cap",), ("ML-6",)),
    Variant("sinks", ("sinks",), ("ML-6",)),
    Variant("combined", ("sliding_window", "soft_cap", "sinks"), ("ML-6",)),
    # reach (ML-11): DeepSeek-V3's 128 heads over the one latent head; its latent and RoPE dims (576 in all)
    Variant("long_heads", (), ("ML-2", "ML-11"), reach="heads"),
    Variant("long_latent", (), ("ML-3", "ML-4", "ML-11"), reach="head_dim"),
    # logits of 10^3 .. 10^4 from raw dots past float16's range, Gemma-2's caps, dominating sinks (ML-11)
    Variant("range", (), ("ML-3", "ML-6", "ML-11", "NU-PA5"), values="range"),
) + tuple(Variant(f"reach_{d}", (), ("ML-1", "ML-2", "ML-4", "ML-11", "NU-15"), reach=f"{pa.DIM_REACH}{d}")
          for d in dr.columns("mla_paged_attention")) \
    + pa.crossed_variants(OP, ("ML-1", "ML-4", "ML-6", "ML-11", "NU-15"))   # generated (strategies/dimension_reach.py)
LATENT_DIMS = (4, 8, 6)      # d_c when the backend accepts any; 6 is not a power of two
ROPE_DIMS = (2, 4)           # d_r: DeepSeek's is d_c / 8; small here so interpreters stay fast
#: the long_latent column's (d_c, d_r): DeepSeek-V2/V3's kv_lora_rank 512 and qk_rope_head_dim 64
#: (deepseek-ai/DeepSeek-V3 config.json), 576 per latent token, not a power of two
REACH_LATENT = (goldens.REAL_MLA_LATENT, goldens.REAL_MLA_ROPE)
#: the inputs of the equivalent attention call each MLA input comes from (ML-4)
_SPLIT = {"q": ("q_nope", "q_pe"), "k_pages": ("c_kv_pages", "k_pe_pages")}


def _attention_claims(claims: OpClaims, head_dim: int) -> OpClaims:
    """The claims of the equivalent paged-attention call: one KV head, `head_dim` = d_c + d_r, any number
    of query heads (drawn as GQA groups of the one KV head), float pools only."""
    kv = tuple(d for d in claims.kv_dtypes if d in pa.FLOAT_KV_DTYPES)
    if not kv:
        pytest.skip(f"unsupported: no float KV dtype claimed (kv_dtypes: {list(claims.kv_dtypes)})")
    limits = {k: v for k, v in claims.limits.items() if k in LIMITS[OP]}
    limits["num_kv_heads"] = {"values": [1]}
    return OpClaims(dtypes=claims.dtypes, kv_dtypes=kv, page_sizes=claims.page_sizes, head_dims=(head_dim,),
                    features=tuple(claims.features) + ("gqa",), limits=limits)


def split_case(case: Case, d_c: int) -> Case:
    """The MLA case whose equivalent attention call (ML-4) is the single-KV-head `case`: q and k_pages
    split at `d_c` into (q_nope, q_pe) and (c_kv_pages, k_pe_pages); v_pages dropped. Poison regions on q
    and k_pages are declared on both halves (ML-7); those on v_pages duplicate the k_pages ones."""
    x = dict(case.inputs)
    q, k = x.pop("q"), x.pop("k_pages")[:, :, 0, :]
    x.pop("v_pages")
    inputs = dict(q_nope=np.ascontiguousarray(q[..., :d_c]), q_pe=np.ascontiguousarray(q[..., d_c:]),
                  c_kv_pages=np.ascontiguousarray(k[..., :d_c]), k_pe_pages=np.ascontiguousarray(k[..., d_c:]),
                  **x)
    regions = []
    for r in case.poison:
        if r.input == "v_pages":
            continue
        clause = "ML-7" if r.clause in ("PA-5", "PA-24", "PA-25") else r.clause
        for name in _SPLIT.get(r.input, (r.input,)):
            regions.append(dataclasses.replace(r, input=name, clause=clause))
    d_r = inputs["q_pe"].shape[2]
    params = dict(case.params, op=OP, latent_dim=d_c, rope_dim=d_r, head_dim=d_c)
    params.pop("hkv", None)
    return Case(OP, inputs, params, case.seed, poison=tuple(regions))


@st.composite
def mla_cases(draw, claims: OpClaims, variant: Variant):
    """A valid, clean `mla_paged_attention` call within `claims`, with the options of `variant` on;
    don't-care locations declared as poison regions (ML-7)."""
    dim = variant.reach[len(pa.DIM_REACH):] if variant.reach.startswith(pa.DIM_REACH) else ""
    if dim in ("latent_dim", "rope_dim"):   # a generated reach column of one of the two dims
        claimed = claims.head_dims
        rope = constraints.allowed(claims, "rope_dim", ROPE_DIMS, "RoPE dim d_r")      # ML-12
        d_r = (dr.pick_size(draw, OP, "rope_dim", lambda n: constraints.admits(claims.limits.get("rope_dim"), n))
               if dim == "rope_dim" else rope[0])
        d_c = (dr.pick_size(draw, OP, "latent_dim", lambda n: claimed is None or n + d_r in claimed)
               if dim == "latent_dim" else LATENT_DIMS[0])
    elif variant.reach == "head_dim":    # DeepSeek's latent, or the largest claimed latent dims first
        d_c = pick(draw, tuple(sorted(claims.head_dims, reverse=True)) if claims.head_dims else REACH_LATENT[:1],
                   "latent dim d_c")
        d_r = pick(draw, constraints.allowed(claims, "rope_dim", REACH_LATENT[1:], "RoPE dim d_r"), "RoPE dim d_r")
    else:
        d_c = pick(draw, tuple(claims.head_dims or LATENT_DIMS), "latent dim d_c")
        d_r = pick(draw, constraints.allowed(claims, "rope_dim", ROPE_DIMS, "RoPE dim d_r"), "RoPE dim d_r")
    case = draw(pa.attention_cases(_attention_claims(claims, d_c + d_r), variant, reach_op=OP))
    return split_case(case, d_c)


def equivalent_inputs(x: dict) -> dict:
    """The keyword inputs of the equivalent `ragged_paged_attention` call (ML-4), in the storage dtypes of
    the MLA inputs, with the ML-3 default scale written out (it equals PA-14's default for D = d_c + d_r)."""
    q = np.concatenate([x["q_nope"], x["q_pe"]], axis=2)
    c, r = x["c_kv_pages"], x["k_pe_pages"]
    k = np.concatenate([c, r], axis=2)[:, :, None, :]
    v = np.concatenate([c, np.zeros_like(r)], axis=2)[:, :, None, :]
    rest = {n: x[n] for n in ("kv_lens", "page_indices", "cu_q_lens", "num_seqs", "sm_scale", "sliding_window",
                              "soft_cap", "sinks") if x.get(n) is not None}
    return dict(q=q, k_pages=k, v_pages=v, **rest)


def mla_checks(case: Case, expected: dict, actual: dict) -> dict:
    """ML-10: NU-PA1 of the equivalent call, on its first d_c columns (valid rows only, ML-7)."""
    eq = equivalent_inputs(case.inputs)
    T, H, D = eq["q"].shape
    checks = pa.attention_checks(Case("ragged_paged_attention", eq), {"out": np.zeros((T, H, D))}, {})
    tol, rows = checks["out"]
    return {"out": (tol, rows[:, :, :case.inputs["q_nope"].shape[2]])}


CHECKS = {OP: mla_checks}


def _diagnosis(case: Case) -> list:
    """Each option off; narrow inputs widened exactly."""
    found = [without(case, "sliding_window off", sliding_window=None),
             without(case, "soft_cap off", soft_cap=None),
             without(case, "sinks off", sinks=None),
             widened(case, ("q_nope", "q_pe"), "queries widened to float32"),
             widened(case, ("c_kv_pages", "k_pe_pages"), "latent and RoPE pools widened to float32")]
    return [v for v in found if v is not None]


DIAGNOSIS = {OP: _diagnosis}
HISTORY_INPUTS = {OP: ("q_nope", "q_pe", "c_kv_pages", "k_pe_pages")}


# --- ML-8: the up-projected multi-head problem of a case ------------------------------------------

def orthogonal(rng: np.random.Generator, n: int, heads: int) -> np.ndarray:
    """float64[heads, n, n], each an orthogonal matrix (QR of a Gaussian one): W W^T = I to float64
    rounding, so the ML-8 maps back and forth lose nothing the bound of ML-10 could see."""
    qs = [np.linalg.qr(rng.standard_normal((n, n)))[0] for _ in range(heads)]
    return np.stack(qs)


def up_projected(x: dict, w_uk: np.ndarray, w_uv: np.ndarray) -> dict:
    """The multi-head `ragged_paged_attention` inputs of ML-8 (float64, H KV heads): queries
    [q_nope W_UK | q_pe] (the un-absorbed q_orig), keys [c W_UK[h] | r], values c W_UV[h]; same metadata
    and options, the MLA call's sm_scale written out (ML-3)."""
    q_nope = np.asarray(x["q_nope"], np.float64)
    q_pe = np.asarray(x["q_pe"], np.float64)
    c = np.asarray(x["c_kv_pages"], np.float64)
    r = np.asarray(x["k_pe_pages"], np.float64)
    H = q_nope.shape[1]
    q_orig = np.einsum("thc,hcn->thn", q_nope, w_uk)
    k_nope = np.einsum("psc,hcn->pshn", c, w_uk)
    keys = np.concatenate([k_nope, np.broadcast_to(r[:, :, None, :], r.shape[:2] + (H, r.shape[2]))], axis=3)
    values = np.einsum("psc,hcv->pshv", c, w_uv)
    # values are [.., d_v]; the paged-attention call takes K and V of one head dim: pad V with zeros
    pad = np.zeros(values.shape[:3] + (keys.shape[3] - values.shape[3],))
    rest = {n: x[n] for n in ("kv_lens", "page_indices", "cu_q_lens", "num_seqs", "sliding_window", "soft_cap",
                              "sinks") if x.get(n) is not None}
    d_c, d_r = c.shape[2], r.shape[2]
    sm_scale = x.get("sm_scale") or (d_c + d_r) ** -0.5
    return dict(q=np.concatenate([q_orig, q_pe], axis=2), k_pages=keys,
                v_pages=np.concatenate([values, pad], axis=3), sm_scale=sm_scale, **rest)


#: what a golden's case uses (features, claim space), conformance/goldens.py
USES = {OP: goldens.uses}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: the columns strided cases are drawn from, the first one claimed (the combined options bring sinks)
STRIDED = {OP: strided.columns(mla_cases, *strided.named(VARIANTS, "combined", "base"))}
