"""Compare one backend output field with the reference under a `Tolerance`, over the specified region.

`compare_field` returns a `FieldResult` with the metrics every report shows: max abs error, max ULP
error (in the precision the case requires), error ratio = worst error / allowed error (<= 1 passes), the
worst index and how many elements failed. Elements outside `mask` are unspecified and never looked at.

Two rules make the verdict independent of what the backend chooses to return:
- the tolerance's `out_dtype` is the precision the *case* requires (from its input dtypes, NU-3); a float
  output narrower than that fails outright (a backend cannot buy tolerance by returning float8);
- NU-7: a non-finite value where the reference is finite fails, a finite value where the reference is
  not fails, and a non-finite reference value must be matched exactly (NaN by NaN, +inf by +inf).
  Allowances are never widened by non-finite inputs: a non-finite bound counts as no allowance.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine.tolerance import Tolerance, ulp


@dataclass
class FieldResult:
    name: str
    ok: bool
    kind: str
    compared: int = 0
    n_bad: int = 0
    max_abs: float = 0.0
    max_ulp: float | None = None
    error_ratio: float = 0.0      # worst error / allowed error (<= 1 passes; inf: none was allowed)
    aggregate: float | None = None
    worst_index: list[int] = field(default_factory=list)
    worst_actual: str = ""
    worst_expected: str = ""
    problem: str = ""          # shape/dtype problems in words (the field was not compared)
    problem_detail: str = ""   # NU-7 non-finite findings, in words (the field was compared)
    tolerance: dict = field(default_factory=dict)
    #: a failed field's error / allowed over its compared elements in C order, at most PROFILE_BINS
    #: values (the max of each bin; inf where non-finite): what report.html plots against the bound 1
    profile: list = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("max_abs", "error_ratio", "aggregate", "max_ulp"):
            value = out[key]
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = str(value)
        out["profile"] = [v if math.isfinite(v) else str(v) for v in self.profile]
        return out

    def summary(self) -> str:
        if self.problem:
            return f"{self.name}: {self.problem}"
        where = "[" + ",".join(map(str, self.worst_index)) + "]"
        text = (f"{self.name}: {self.n_bad}/{self.compared} elements out of tolerance, worst at {where}: "
                f"got {self.worst_actual}, expected {self.worst_expected}, error/allowed {self.error_ratio:.3g}")
        if self.aggregate is not None:
            text += f", aggregate ||err||/||tol|| {self.aggregate:.3g}"
        if self.problem_detail:
            text += f" [{self.problem_detail}]"
        return text


def _bits_equal(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Bitwise equality, NaN equal to NaN whatever the payload."""
    width = a.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    same = a.view(view) == r.view(view)
    if dtypes.is_float_dtype(a.dtype):
        with np.errstate(invalid="ignore"):   # widening a signaling NaN raises "invalid"; the NaN stays NaN
            same |= np.isnan(a.astype(np.float64)) & np.isnan(r.astype(np.float64))
    return same


def compare_field(name: str, actual, expected: np.ndarray, tol: Tolerance,
                  mask: np.ndarray | None = None) -> FieldResult:
    expected = np.asarray(expected)
    if not isinstance(actual, np.ndarray):
        return FieldResult(name, False, tol.kind, problem=f"expected an ndarray, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        return FieldResult(name, False, tol.kind,
                           problem=f"shape {tuple(actual.shape)} differs from the reference {tuple(expected.shape)}")
    if mask is None:
        mask = np.ones(expected.shape, dtype=bool)
    res = _compare(name, actual, expected, tol, mask)
    res.tolerance = tol.to_json()
    return res


def _compare(name, actual, expected, tol, mask) -> FieldResult:
    compared = int(mask.sum())
    if tol.kind == "exact":
        if actual.dtype != expected.dtype:
            return FieldResult(name, False, tol.kind, compared=compared,
                               problem=f"dtype {dtypes.dtype_name(actual.dtype)} differs from the reference "
                                       f"{dtypes.dtype_name(expected.dtype)} (exact class: same storage dtype)")
        bad = ~_bits_equal(actual, expected) & mask
        res = FieldResult(name, not bad.any(), tol.kind, compared=compared, n_bad=int(bad.sum()),
                          error_ratio=float(bad.any()) * math.inf if bad.any() else 0.0)
        if bad.any():
            res.profile = error_profile(np.where(bad, math.inf, 0.0)[mask])   # allowed error 0: any is inf
            a64, r64 = actual.astype(np.float64), expected.astype(np.float64)
            with np.errstate(invalid="ignore"):
                diff = np.where(bad, np.abs(a64 - r64), 0.0)
            res.max_abs = float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf
            _set_worst(res, bad, np.where(bad, np.nan_to_num(diff, nan=math.inf), -1.0), actual, expected)
        return res
    if not (np.issubdtype(actual.dtype, np.floating) or dtypes.is_float_dtype(actual.dtype)):
        return FieldResult(name, False, tol.kind, compared=compared,
                           problem=f"dtype {dtypes.dtype_name(actual.dtype)} is not a floating dtype")
    narrower = _narrower_than_required(actual.dtype, tol.out_dtype)
    if narrower:
        return FieldResult(name, False, tol.kind, compared=compared, error_ratio=math.inf, problem=narrower)
    a = actual.astype(np.float64)
    r = expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - r)
        r_finite = np.isfinite(r)
        # NU-7: a non-finite reference value is compared exactly; anywhere else a non-finite error
        # (NaN or inf in `a`, or a finite `a` against a non-finite `r`) fails.
        same_special = ~r_finite & ((np.isnan(a) & np.isnan(r)) | (a == r))
        err = np.where(same_special, 0.0, np.where(np.isfinite(err), err, math.inf))
        r0 = np.where(r_finite, r, 0.0)
        ulp_out = ulp(r0, tol.out_dtype)   # the required precision's spacing at each finite |r|
        if tol.kind == "ulp":
            allowed = tol.n_ulp * ulp_out + tol.atol
        else:
            # NU-8: never below half an ULP of the required precision at |r|. rtol >= u_out gives it for
            # normal |r|; below the smallest normal the spacing is fixed (float16: 2^-24), and a correctly
            # rounded float16 output of an SSD case with outputs of 1e-8 (0.0) failed at 1e3x the bound.
            allowed = np.maximum(tol.atol + tol.rtol * np.abs(r0), 0.5 * ulp_out)
        allowed = np.broadcast_to(np.where(np.isfinite(allowed), allowed, 0.0), r.shape)
        # any error where none is allowed is inf times the allowance (not err / 1e-300: reports showed
        # such quotients, 1e+300 and the like, as if they were measured)
        ratio = np.where(err == 0, 0.0, np.where(np.isinf(err) | (allowed == 0), math.inf,
                                                 err / np.where(allowed == 0, 1.0, allowed)))
    ratio = np.where(mask, ratio, 0.0)
    bad = (ratio > 1.0) & mask
    res = FieldResult(name, True, tol.kind, compared=compared, n_bad=int(bad.sum()))
    nonfinite = bad & ~np.isfinite(err)
    if nonfinite.any():
        res.problem_detail = _nonfinite_detail(a, r, nonfinite)
    if compared:
        res.max_abs = float(np.max(np.where(mask, err, 0.0)))
        res.error_ratio = float(np.max(ratio))
        if tol.out_dtype != "float64" and np.isfinite(res.max_abs):
            res.max_ulp = float(np.max(np.where(mask, err / ulp(r, tol.out_dtype), 0.0)))
        if math.isfinite(tol.aggregate):
            # NU-6: ||a - r|| <= aggregate * ||tol|| over the compared elements, each error less the
            # output's own rounding (NU-8: a correctly rounded output passes; bfloat16 outputs of an SSD
            # case, all within half an ULP, failed the aggregate at 1.005x)
            beyond = np.maximum(err - 0.5 * ulp_out, 0.0)
            num = float(np.sqrt(np.sum(np.where(mask, beyond, 0.0) ** 2)))
            den = float(np.sqrt(np.sum(np.where(mask, allowed, 0.0) ** 2)))
            res.aggregate = num / den if den > 0 else (0.0 if num == 0 else math.inf)
            limit = aggregate_limit(tol.aggregate, compared)
            if res.aggregate > limit:
                res.ok = False
                res.error_ratio = max(res.error_ratio, res.aggregate / limit)
    if bad.any():
        res.ok = False
    if not res.ok:
        _set_worst(res, mask, ratio, actual, expected)
        res.profile = error_profile(ratio[mask])
    return res


PROFILE_BINS = 128


def error_profile(ratio: np.ndarray, bins: int = PROFILE_BINS) -> list[float]:
    """error / allowed of the compared elements (C order), reduced to at most `bins` values by taking the
    max of each run of consecutive elements, so a localised error (one row, one page) stays visible."""
    flat = np.asarray(ratio, np.float64).reshape(-1)
    if flat.size == 0:
        return []
    edges = np.linspace(0, flat.size, min(bins, flat.size) + 1).astype(int)
    return [float(np.max(flat[a:b])) for a, b in zip(edges[:-1], edges[1:])]


def _narrower_than_required(dtype, required: str) -> str:
    """Why a float output of `dtype` cannot meet a case that requires `required` precision ('' if it can)."""
    if not required:
        return ""
    got = dtypes.dtype_name(dtype)
    from kvconform.conformance.engine.tolerance import eps
    if got != "float64" and eps(got) > eps(required):
        return (f"returned {got}, narrower than the {required} precision this case requires (NU-3: an output "
                f"holds at least the precision of its activations; tolerance never follows the returned dtype)")
    return ""


def _nonfinite_detail(a: np.ndarray, r: np.ndarray, where: np.ndarray) -> str:
    """NU-7 in words: how many compared elements are non-finite where they must not be, and of which kind."""
    parts = []
    for label, hit in (("NaN where the reference is finite", np.isnan(a) & np.isfinite(r)),
                       ("inf where the reference is finite", np.isinf(a) & np.isfinite(r)),
                       ("finite where the reference is non-finite", np.isfinite(a) & ~np.isfinite(r)),
                       ("NaN against an infinite reference / inf against NaN",
                        ~np.isfinite(a) & ~np.isfinite(r))):
        n = int((hit & where).sum())
        if n:
            parts.append(f"{n} {label}")
    return "NU-7: " + ", ".join(parts)


def aggregate_limit(factor: float, n: int) -> float:
    """NU-6: the aggregate factor for n compared elements, min(1, factor + 1/sqrt(n)).

    A lone element at its full allowance contributes ||tol||/sqrt(n); below ~16 elements the bare factor
    would tighten the elementwise bound instead of catching bias (spec/numerics.md NU-6).
    """
    return min(1.0, factor + 1.0 / math.sqrt(max(n, 1))) if factor < 1.0 else factor


def _set_worst(res: FieldResult, mask, score, actual, expected) -> None:
    flat = int(np.argmax(np.where(mask, score, -1.0)))
    idx = np.unravel_index(flat, expected.shape)
    res.worst_index = [int(i) for i in idx]
    res.worst_actual = repr(float(np.asarray(actual[idx], dtype=np.float64)))
    res.worst_expected = repr(float(np.asarray(expected[idx], dtype=np.float64)))
