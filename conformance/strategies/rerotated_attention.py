"""Comparison contract of the evict -> re-rotate -> attend invariant (spec/rotation.md RO-13, numerics NU-RO6).

The backend's attention over its own re-rotated cache is compared with the reference's attention over the
kept pre-RoPE keys encoded directly at their compacted positions (float64). The bound is NU-PA1's for the
backend's call plus the key error the cache may carry: one rounding when the encoded key was written and
the error of each re-rotation it went through (`key_error` below), propagated to the output as NU-PA1
propagates logit errors.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from . import paged_attention as pa
from .rotation_contract import pair_dims

#: NU-RO6 growth of the relative key error per re-rotation: NU-RO2's 6 u per element over a pair (sqrt 2 * 6),
#: the LUT's own rounding (sqrt 2 * u_L), NU-RO3's angle term (sqrt 2 * 3 u |delta|).
PER_ROTATION_U, PER_ROTATION_LUT, PER_SHIFT_TOKEN = 9.0, 2.0, 5.0


def rotation_error(cache_dtype: str, *, lut_dtype: str | None = None, shift: int = 0) -> float:
    """e_i of NU-RO6: the relative (to the pair norm) key error one re-rotation may add; `lut_dtype` for
    rotate_keys, `shift` (tokens) for shift_keys."""
    u = tolerance.u(cache_dtype)
    lut = PER_ROTATION_LUT * tolerance.u(lut_dtype) if lut_dtype else 0.0
    return PER_ROTATION_U * u + lut + PER_SHIFT_TOKEN * u * abs(shift)


def pair_norms(keys: np.ndarray, layout: str, rotary_dim: int) -> np.ndarray:
    """rho of NU-RO6: keys float64[L, Hkv, D] -> float64[L, Hkv, D], each dim the Euclidean norm of its
    pair (RO-2 layout); dims >= rotary_dim their own magnitude."""
    first, second = pair_dims(layout, rotary_dim)
    rho = np.abs(keys).astype(np.float64)
    norm = np.hypot(keys[..., first], keys[..., second])
    rho[..., first] = norm
    rho[..., second] = norm
    return rho


def checks(exact_keys: np.ndarray, key_eps: np.ndarray, *, layout: str, rotary_dim: int):
    """The NU-RO6 contract of one single-sequence attention call (a CHECKS-like callable for kvc.expect).

    exact_keys: float64[L, Hkv, D], the kept keys encoded directly at positions 0 .. L-1 (L = kv_lens[0]);
    key_eps: float64[L], eps_j of NU-RO6 (relative error each cached key may carry). Only `out` is compared
    (reported as the field `out:RO-13`).
    """
    err = key_eps[:, None, None] * pair_norms(exact_keys, layout, rotary_dim)     # [L, Hkv, D]

    def contract(case: Case, expected: dict, actual: dict) -> dict:
        x = pa.canonical_inputs(case.inputs)
        if int(x["num_seqs"]) != 1:
            raise ValueError("NU-RO6 checks one sequence per call (num_seqs must be 1)")
        base, rows = pa.attention_checks(case, {"out": expected["out"]}, actual)["out"]
        q = np.abs(dtypes.upcast(np.asarray(x["q"])))                           # [T, Hq, D]
        T, hq, D = q.shape
        L = int(x["kv_lens"][0])
        group = hq // err.shape[1]
        logit = np.einsum("thd,jhd->thj", q, np.repeat(err[:L], group, axis=1))  # sum_d |q| eps rho
        visible = np.arange(L)[None, :] <= (L - T + np.arange(T))[:, None]      # bottom-right causal (PA-7)
        sm = x.get("sm_scale") or D ** -0.5
        K = float(sm * np.max(np.where(visible[:, None, :], logit, 0.0)))
        V, _, _ = pa._sequence_bounds(x, 0)
        tol = dataclasses.replace(base, atol=base.atol + 2.0 * V * K,
                                  reason=f"NU-RO6: {base.reason} + 2 V K (K = {K:.3g}, key error of writing "
                                         f"and re-rotating)")
        return {"out:RO-13": (tol, rows)}   # its own metrics row in reports, apart from the per-call `out`
    return contract
