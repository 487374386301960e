"""Permissions of the rotation family (NU-RO2, NU-RO3): float32 arithmetic for caches of float32 or narrower.

`rotate_keys`: the LUT converted to float32, each pair's two products and sum in float32, the result
rounded once to the cache's dtype (NU-RO2). `shift_keys`: the angle formed in float32 from a float32 shift
and a float32 frequency, float32 cos/sin and rotation (NU-RO3). A float64 cache keeps float64 arithmetic
(`u_c = 2^-53` there: float32 is not granted). Unrotated elements are the cache's own bits (NU-RO1).
"""
from __future__ import annotations

import numpy as np

from kvconform.reference.rotation import _pair_dims, _per_token, validate_rotate_keys, validate_shift_keys

from . import Permission, permission


def _compute(cache_dtype) -> type:
    return np.float64 if np.dtype(cache_dtype) == np.float64 else np.float32


def _rotated(k_pages, idx, cos, sin, layout: str, rotary_dim: int, ct):
    """k_pages with the pairs of pages `idx` rotated in `ct` (cos, sin: [n, page_size, 1, rotary_dim/2])."""
    k = np.asarray(k_pages)
    out = k.copy()
    first, second = _pair_dims(layout, rotary_dim)
    x = k[idx].astype(ct)
    a, b = x[..., first], x[..., second]
    x[..., first] = (a * cos - b * sin).astype(ct)
    x[..., second] = (a * sin + b * cos).astype(ct)
    out[idx] = x.astype(k.dtype)
    return out


@permission(id="rotation_float32", ops=("rotate_keys", "shift_keys"), clause="NU-RO2, NU-RO3",
            description="LUT converted to float32 and pairs rotated in float32; shift angle formed in float32 "
                        "(float32 shift times float32 frequency), float32 cos/sin; one rounding to the cache")
class RotationFloat32(Permission):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        call = validate_rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, layout=layout,
                                    rotary_dim=rotary_dim)
        ct = _compute(np.asarray(k_pages).dtype)
        half = call.rotary_dim // 2
        coeff = call.trig_lut.astype(ct)[_per_token(call.rotation_deltas, call.k_pages.shape[1])][:, :, None, :]
        return _rotated(k_pages, call.rotated_block_indices, coeff[..., :half], coeff[..., half:], call.layout,
                        call.rotary_dim, ct)

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        call = validate_shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta, layout=layout,
                                   rotary_dim=rotary_dim)
        ct = _compute(np.asarray(k_pages).dtype)
        shifts = _per_token(call.position_deltas, call.k_pages.shape[1]).astype(ct)
        angle = (shifts[..., None] * call.inv_freq.astype(ct)).astype(ct)[:, :, None, :]
        return _rotated(k_pages, call.rotated_block_indices, np.cos(angle).astype(ct), np.sin(angle).astype(ct),
                        call.layout, call.rotary_dim, ct)
