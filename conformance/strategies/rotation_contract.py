"""The rotation family's comparison contract (spec/numerics.md, "Rotation"): which regions of the rotated
pool are compared, in which class (U for rotated pairs, E for the rest and for exact identities)."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes


def pair_dims(layout: str, rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """RO-2: the first and second dim of each pair."""
    j = np.arange(rotary_dim // 2)
    if layout == "half":
        return j, j + rotary_dim // 2
    return 2 * j, 2 * j + 1


def rotation_regions(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rotated, comparable, m) over the pool: `rotated` marks elements of listed pages in pairs (RO-1),
    `comparable` everything except rotated pairs holding a non-finite input (NU-RO5), `m` = max(|x|, |y|)
    of each element's pair (NU-RO2)."""
    x = case.inputs
    k = dtypes.upcast(np.asarray(x["k_pages"]))
    head_dim = k.shape[-1]
    rd = x.get("rotary_dim") or head_dim
    first, second = pair_dims(x.get("layout", "half"), rd)
    idx = np.asarray(x["rotated_block_indices"], dtype=np.int64)
    rotated = np.zeros(k.shape, dtype=bool)
    rotated[idx[:, None], :, :, np.concatenate([first, second])[None, :]] = True
    with np.errstate(invalid="ignore"):
        pair_m = np.maximum(np.abs(k[..., first]), np.abs(k[..., second]))
    m = np.zeros(k.shape)
    m[..., first] = pair_m
    m[..., second] = pair_m
    finite = np.isfinite(m)
    comparable = ~rotated | finite
    return rotated, comparable, np.where(finite, m, 0.0)


def required_out_precision(case: Case) -> str:
    """NU-RO2: the rotated cache holds the precision of the cache it was given (the keys' dtype)."""
    return dtypes.dtype_name(np.asarray(case.inputs["k_pages"]).dtype)


def _class_u(case: Case, expected, actual, extra_per_m: np.ndarray | float, reason: str):
    """Class U with a per-element allowance: rotated elements get ulp_O(ref) + extra * m, copied ones
    nothing (class E on values, NU-RO1). The ulp term is folded into atol so that it is zero on copies."""
    out = required_out_precision(case)
    rotated, comparable, m = rotation_regions(case)
    ref = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        allowed = np.where(rotated, tolerance.ulp(np.nan_to_num(ref), out) + extra_per_m * m, 0.0)
    tol = tolerance.Tolerance("ulp", atol=allowed, n_ulp=0.0, out_dtype=out,
                              reason=f"{reason}; copies exact (NU-RO1); out {out}")
    return tol, comparable


def exact_identity(case: Case) -> bool:
    return bool(case.params.get("exact_identity"))


def rotate_checks(case: Case, expected: dict, actual: dict) -> dict:
    """rotate_keys: class U of NU-RO2 on rotated pairs, `ulp_O(ref) + 4 u_c m` (u_c: the arithmetic's unit
    roundoff, float32 at most, tolerance.u_compute); copies exact. Identities that NU-RO1 declares bitwise
    (broadcast, permutation, heads) compare exactly."""
    if exact_identity(case):
        _, comparable, _ = rotation_regions(case)
        return {"out": (tolerance.exact(f"class E: {case.params['exact_identity']} (NU-RO1)"), comparable)}
    u = tolerance.u_compute(required_out_precision(case))
    tol, mask = _class_u(case, expected["out"], actual.get("out"), 4.0 * u,
                         "class U (NU-RO2): ulp_O(ref) + 4 u_c m, m = max(|x|,|y|) of the pair, u_c = "
                         "min(u_O, 2^-24)")
    return {"out": (tol, mask)}


def shift_checks(case: Case, expected: dict, actual: dict) -> dict:
    """shift_keys: class U of NU-RO3 on rotated pairs, `ulp_O(ref) + m (6 u_c + 3 u_c |delta|)`; copies exact."""
    if exact_identity(case):
        _, comparable, _ = rotation_regions(case)
        return {"out": (tolerance.exact(f"class E: {case.params['exact_identity']} (NU-RO1)"), comparable)}
    u = tolerance.u_compute(required_out_precision(case))
    x = case.inputs
    k_shape = np.asarray(x["k_pages"]).shape
    per_token = np.zeros(k_shape[:2])
    d = np.abs(np.asarray(x["position_deltas"], dtype=np.float64))
    idx = np.asarray(x["rotated_block_indices"], dtype=np.int64)
    per_token[idx] = np.broadcast_to(d, (idx.shape[0], k_shape[1]))
    extra = 6.0 * u + 3.0 * u * per_token[:, :, None, None]
    tol, mask = _class_u(case, expected["out"], actual.get("out"), extra,
                         "class U (NU-RO3): ulp_O(ref) + m (6 u_c + 3 u_c |delta|), u_c = min(u_O, 2^-24): "
                         "angle formed in float32 or wider")
    return {"out": (tol, mask)}


